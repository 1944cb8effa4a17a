"""A real `outcomes worker` (prefork, two pool processes) with OUTCOMES_METRICS_PORT,
PROMETHEUS_MULTIPROC_DIR and OUTCOMES_LOG_FORMAT=json: its own /metrics counts the jobs its
pool ran, and its stderr has one JSON line per outcome, without the canary argument."""

from __future__ import annotations

import urllib.request
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

import tests.tools  # noqa: F401  (the canary tools, in this process too)
from tests.plugins.deployments import Deployment, deployments, wait_terminal, wait_until
from tests.serving import free_port
from tests.tools import ECHO

# tool -> (status, code) of its one outcome
JOBS = {
    ECHO: ("succeeded", None),
    "canary.crash": ("failed", "TOOL_CRASHED"),
    "canary.refuse": ("failed", "ACCESS_DENIED"),
    "canary.decline": ("declined", None),
    "canary.halt": ("refused", "BRAKE_ENGAGED"),
}


def histogram_counts(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.endswith("_count")
    }


def json_lines(log: str) -> list[dict[str, Any]]:
    found = []
    for line in log.splitlines():
        if line.startswith("{"):  # Celery prints its banner itself, not through logging
            found.append(orjson.loads(line))
    return found


@pytest.mark.parametrize(
    "deployment", deployments("embedded/sqlite", "rabbitmq/postgres"), indirect=True
)
def test_a_worker_serves_its_pools_metrics_and_logs_json(
    deployment: Deployment, tmp_path: Path
) -> None:
    dep = deployment
    port = free_port()
    multiproc = tmp_path / "metrics"
    multiproc.mkdir()
    dep.env |= {
        "OUTCOMES_METRICS_PORT": str(port),
        "PROMETHEUS_MULTIPROC_DIR": str(multiproc),
        "OUTCOMES_LOG_FORMAT": "json",
    }
    secret = f"sk-live-{uuid.uuid4().hex}"
    dep.start_workers(count=1, concurrency=2, pool="prefork")  # metrics summed over processes
    submitted = {tool: dep.submit(tool, {"secret": secret}) for tool in JOBS if tool != ECHO}
    echoes = [dep.submit(ECHO, {"text": secret}) for _ in range(3)]
    views = wait_terminal(dep.store, [v.job_id for v in [*submitted.values(), *echoes]])
    assert {
        t: (views[v.job_id].status.value, views[v.job_id].code) for t, v in submitted.items()
    } == {t: expected for t, expected in JOBS.items() if t != ECHO}

    # The histograms of both pool processes, summed by the worker's main process.
    url = f"http://127.0.0.1:{port}/metrics"
    name = "outcomes_submit_to_outcome_seconds_count"
    expected = Counter({(ECHO, "succeeded"): 3.0})
    for tool, (status, _) in JOBS.items():
        if tool != ECHO:
            expected[(tool, status)] += 1

    def counted() -> Counter[tuple[str, str]]:
        found: Counter[tuple[str, str]] = Counter()
        for (metric, labels), value in histogram_counts(url).items():
            if metric == name and value:
                found[(dict(labels)["tool"], dict(labels)["status"])] += value
        return found

    # Observed just after each outcome is durable: the jobs can be terminal a moment before.
    wait_until(lambda: counted() == expected, 30, "the worker's histograms to count its jobs")
    waited = histogram_counts(url)[("outcomes_queue_wait_seconds_count", ())]
    assert waited == len(views)
    assert len(list(multiproc.glob("*.db"))) >= 2  # the pool processes' files, summed

    # One JSON line per outcome, with the fields, never the argument.
    log = dep.worker_logs()
    assert secret not in log and secret[8:] not in log
    outcomes = [line for line in json_lines(log) if line.get("event") == "outcome"]
    assert len(outcomes) == len(views)
    for line in outcomes:
        view = views[line["job_id"]]
        assert (line["tool"], line["account"], line["status"]) == (
            view.tool,
            view.account,
            view.status.value,
        )
        assert line.get("code") == (view.code.value if view.code else None)
        assert line["worker"].count(":") == 1 and line["level"] == "INFO"
    assert any(" ready." in line["message"] for line in json_lines(log))
