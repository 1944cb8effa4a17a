"""Canaries on a real `outcomes worker` (contract §3): a job's argument that its tool repeats in
every text it writes is in no broker message (what `workers/dispatch.py` publishes: the job id,
now or with a countdown) and in no line the worker process writes."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

import orjson
import pytest
from kombu.connection import Connection

import tests.tools  # noqa: F401  (the canary tools, in this process too)
from ledger.codes import Code
from tests.plugins.deployments import BROKER_URLS, Deployment, deployments, wait_terminal

TOOLS = {
    "canary.crash": Code.TOOL_CRASHED,
    "canary.refuse": Code.ACCESS_DENIED,
    "canary.flaky": Code.SOURCE_UNRELIABLE,
    "canary.decline": None,
    "canary.halt": Code.BRAKE_ENGAGED,
}


def canary() -> str:
    return f"p@ss;word hunter2 {uuid.uuid4().hex[:16]}"


def pieces(secret: str) -> tuple[str, ...]:
    return (secret, *secret.split(" "))


def broker_messages(dep: Deployment) -> list[str]:
    """Every message waiting in the deployment's queue, left there (RabbitMQ: read without
    acknowledging, then the channel closes and the broker requeues them; embedded: the files)."""
    if dep.broker == "embedded":
        folder = Path(dep.home) / ".outcomes" / "broker" / "queue"
        return [_decoded(path.read_bytes()) for path in sorted(folder.glob("*.msg"))]
    seen = []
    url = BROKER_URLS[dep.broker]
    with Connection(url, connect_timeout=5) as conn:  # type: ignore[no-untyped-call]
        channel = conn.channel()
        while (message := channel.basic_get(queue=dep.queue, no_ack=False)) is not None:
            seen.append(f"{message.body!r} {message.headers!r} {message.properties!r}")
        channel.close()
    return seen


def _decoded(file: bytes) -> str:
    """A filesystem-transport message: its envelope, and its body decoded (kombu base64s it)."""
    message = orjson.loads(file)
    body = message.get("body", "")
    if message.get("properties", {}).get("body_encoding") == "base64":
        body = base64.b64decode(body).decode(errors="replace")
    return f"{file.decode(errors='replace')} {body}"


@pytest.mark.parametrize(
    "deployment", deployments("rabbitmq/postgres", "embedded/sqlite"), indirect=True
)
def test_a_worker_publishes_and_logs_no_secret(deployment: Deployment) -> None:
    dep = deployment
    secret = canary()
    jobs = {tool: dep.submit(tool, {"secret": secret}).job_id for tool in TOOLS}
    dep.dispatcher.dispatch(jobs["canary.flaky"], delay_s=1)  # a retry's message (countdown)
    messages = broker_messages(dep)
    assert len(messages) == len(TOOLS) + 1
    assert all(any(job_id in m for job_id in jobs.values()) for m in messages)
    assert [m for m in messages if any(p in m for p in pieces(secret))] == []

    dep.start_workers(count=1, concurrency=2)
    done = wait_terminal(dep.store, jobs.values())
    assert {tool: done[job_id].code for tool, job_id in jobs.items()} == TOOLS
    assert done[jobs["canary.flaky"]].attempts == 2  # the worker dispatched its retry
    logs = dep.worker_logs()
    assert " ready." in logs
    assert [line for line in logs.splitlines() if any(p in line for p in pieces(secret))] == []
