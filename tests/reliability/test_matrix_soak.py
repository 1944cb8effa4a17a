"""Reliability matrix, the soak (scenario 14): jobs at a fixed rate through the real API to real
workers for 10 minutes, with the reconciler running; then no job may be lost, and the API's and
the workers' memory must be flat.

Not in the default run: `make soak` (`pytest -m soak`) selects it. MATRIX_SOAK_S sets the
duration (default 600 s; `MATRIX_SOAK_S=60 pytest -m soak` checks the harness), MATRIX_SOAK_RATE
the submit rate (jobs per second, default 5).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

import tests.tools  # noqa: F401  (the API accepts jobs for these tools)
from ledger.reconcile_rules import ReconcilePolicy
from ledger.services.ledger import Ledger
from ledger.services.reconcile import reconcile_once
from ledger.services.tokens import create as create_token
from tests.factories import open_sql
from tests.plugins.api import bearer
from tests.plugins.deployments import Deployment, deployments, wait_terminal
from tests.plugins.matrix import api_server, deployment_verdict, group_rss_kib, prepare, rss_kib

SOAK_S = float(os.environ.get("MATRIX_SOAK_S", "600"))
RATE = float(os.environ.get("MATRIX_SOAK_RATE", "5"))
SAMPLE_EVERY_S = 5.0
WARM_UP = 0.25  # the first quarter warms caches and pools; memory is judged after it
# Flat: between the first samples after warm-up and the last ones, each process may grow by
# this much. A leak of 8 KiB per job (at 5 jobs/s for the 450 s judged) would be ~17 MiB.
GROWTH_BOUND_KIB = 12 * 1024

MIX: list[tuple[str, dict[str, Any]]] = [
    ("matrix.charge", {"note": "soak"}),  # spends: succeeded
    ("matrix.read", {"note": "soak"}),  # succeeded
    ("tracker.read_issue", {"issue_ref": "T-1"}),  # succeeded
    ("tracker.read_issue", {"issue_ref": "T-404"}),  # failed, REFERENCE_UNRESOLVED
    ("social.draw_card", {"post_id": "p", "has_cover": True}),  # declined
    ("debug.crash", {"secret": "x"}),  # failed, TOOL_CRASHED
]


def soak_selected(config: pytest.Config) -> bool:
    expression = str(config.getoption("markexpr") or "")
    return "soak" in expression and "not soak" not in expression


@dataclass
class Samples:
    api: list[int] = field(default_factory=list)
    workers: dict[int, list[int]] = field(default_factory=dict)

    def take(self, pids: list[int]) -> None:
        self.api.append(rss_kib())
        for pid in pids:
            self.workers.setdefault(pid, []).append(group_rss_kib(pid))


def growth_kib(series: list[int]) -> int:
    """Median of the last 3 samples minus median of the first 3 after the warm-up."""
    judged = series[int(len(series) * WARM_UP) :]
    return int(statistics.median(judged[-3:]) - statistics.median(judged[:3]))


class Reconciler(threading.Thread):
    """`outcomes reconcile --interval 1`, in a thread of this process."""

    def __init__(self, dep: Deployment) -> None:
        super().__init__(name="reconciler", daemon=True)
        self.dep = dep
        self.stopping = threading.Event()
        self.passes = 0

    def run(self) -> None:
        policy = ReconcilePolicy(dispatch_timeout_s=15.0)
        while not self.stopping.wait(1.0):  # the reconciler's interval
            reconcile_once(Ledger(self.dep.store), self.dep.dispatcher, policy)
            self.passes += 1


@pytest.mark.soak
@pytest.mark.timeout(SOAK_S + 600)
@pytest.mark.parametrize("deployment", deployments("rabbitmq/postgres"), indirect=True)
def test_soak_at_a_fixed_rate(deployment: Deployment, request: pytest.FixtureRequest) -> None:
    if not soak_selected(request.config):
        pytest.skip("a soak: run it with `make soak` (pytest -m soak)")
    dep = deployment
    prepare(dep)
    workers = dep.start_workers(count=2, concurrency=2)
    pids = [w.process.pid for w in workers]
    api_store = open_sql(dep.database_url)  # the API's own engine and pool
    token = bearer(create_token(Ledger(dep.store), "acme", "agent", None, "soak").token)
    reconciler = Reconciler(dep)
    samples = Samples()
    ids: list[str] = []
    statuses: dict[int, int] = {}
    reconciler.start()
    try:
        with api_server(api_store, dep.dispatcher) as url, httpx.Client(base_url=url) as http:
            began = time.monotonic()
            next_sample = began
            while time.monotonic() - began < SOAK_S:
                due = began + len(ids) / RATE
                # Pacing to a fixed rate (a schedule, not a wait for a condition).
                reconciler.stopping.wait(max(0.0, due - time.monotonic()))
                tool, args = MIX[len(ids) % len(MIX)]
                answer = http.post("/v1/jobs", headers=token, json={"tool": tool, "args": args})
                statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
                assert answer.status_code == 202, answer.text
                ids.append(answer.json()["job_id"])
                if len(ids) % 10 == 0:  # agents poll their outcomes too
                    assert http.get(f"/v1/jobs/{ids[-10]}", headers=token).status_code == 200
                if time.monotonic() >= next_sample:
                    samples.take(pids)
                    next_sample += SAMPLE_EVERY_S
            samples.take(pids)
            elapsed = time.monotonic() - began
        wait_terminal(dep.store, ids, timeout_s=120)
    finally:
        reconciler.stopping.set()
        reconciler.join(timeout=30)
        api_store.close()
    counters = deployment_verdict(dep, f"14 soak {SOAK_S:.0f}s at {RATE:g}/s")

    grown = {"api": growth_kib(samples.api)}
    grown |= {f"worker {pid}": growth_kib(s) for pid, s in samples.workers.items()}
    print(
        f"[reliability] 14: {len(ids)} jobs in {elapsed:.0f}s ({len(ids) / elapsed:.2f}/s), "
        f"{reconciler.passes} reconcile passes, RSS growth KiB after warm-up {grown}, "
        f"API RSS {samples.api[0]}..{samples.api[-1]} KiB, "
        f"workers {[(s[0], s[-1]) for s in samples.workers.values()]} KiB"
    )
    assert counters.lost == 0 and counters.accepted == len(ids)
    assert len(ids) >= 0.95 * SOAK_S * RATE, "the submitter fell behind its rate"
    assert {k: v for k, v in grown.items() if v > GROWTH_BOUND_KIB} == {}, grown
