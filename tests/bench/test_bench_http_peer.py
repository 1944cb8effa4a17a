"""bench.http's HTTP peer (bench/http_peer.py) does what its figures claim: a POST puts the task
on the queue, and a long-poll is woken by the result's publication in Redis, not by its own
timeout (a peer that only woke at its timeout would make the published comparison meaningless).

Real RabbitMQ and Redis; the result is stored the way a Celery worker stores it, so no worker
process is needed."""

from __future__ import annotations

import importlib
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType

import pytest
from celery import Celery
from starlette.testclient import TestClient

from bench.throughput_tasks import BACKEND_ENV, BROKER_ENV, QUEUE_ENV
from tests.plugins.deployments import drop_queue, require_broker, wait_until

WOKEN_WITHIN_S = 10.0  # the long-poll below asks for 30 s: only a wake-up answers sooner


@pytest.fixture
def peer(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    amqp, redis_url = require_broker("rabbitmq"), require_broker("redis")
    assert amqp is not None and redis_url is not None
    queue = f"test-http-peer-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(BROKER_ENV, amqp)
    monkeypatch.setenv(QUEUE_ENV, queue)
    monkeypatch.setenv(BACKEND_ENV, redis_url)
    sys.modules.pop("bench.http_peer", None)  # it reads its settings when imported
    module = importlib.import_module("bench.http_peer")
    try:
        yield module
    finally:
        sys.modules.pop("bench.http_peer", None)
        drop_queue(module._celery, amqp, queue)
        module._celery.close()


def queued_messages(app: Celery, queue: str) -> int:
    with app.connection_for_write() as conn:
        channel = conn.channel()
        try:
            return int(channel.queue_declare(queue, passive=True).message_count)
        finally:
            channel.close()


def test_a_submit_queues_the_task_and_a_long_poll_wakes_on_its_result(peer: ModuleType) -> None:
    app: Celery = peer._celery
    with TestClient(peer.app) as client, ThreadPoolExecutor(1) as pool:
        answer = client.post("/jobs", json={"tool": "noop", "args": {"seq": 7}})
        assert answer.status_code == 202
        task_id = answer.json()["job_id"]
        assert answer.json()["poll_url"] == f"/jobs/{task_id}"
        assert queued_messages(app, app.conf.task_default_queue) == 1

        assert client.get(f"/jobs/{task_id}").json() == {
            "job_id": task_id,
            "status": "queued",
            "terminal": False,
        }

        waiting = pool.submit(lambda: client.get(f"/jobs/{task_id}", params={"wait": 30}).json())
        # Registered before the result is stored: the wake-up is what must answer it.
        wait_until(lambda: task_id in peer._waiting, WOKEN_WITHIN_S, "the long-poll waiting")
        assert not waiting.done()
        app.backend.store_result(task_id, None, "SUCCESS")  # as a worker stores it
        envelope = waiting.result(timeout=WOKEN_WITHIN_S)
        assert envelope == {"job_id": task_id, "status": "success", "terminal": True}
        assert task_id not in peer._waiting
        app.backend.forget(task_id)
