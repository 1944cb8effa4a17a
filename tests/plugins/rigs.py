"""The reliability rig: the `rig` fixture and its helpers, for scenarios with real processes.

`rig` wraps the `deployment` fixture (tests/plugins/deployments.py: real `outcomes worker`
processes on a real broker and a Postgres ledger, with a queue of their own): it gives the
workers short leases and the test tools, starts real `outcomes reconcile` processes, freezes
and thaws workers, and after each scenario settles the ledger and runs the total-queue check.
Every process it starts or stops is handled by pid, on failure too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import select, text

import tests.tools  # noqa: F401  (registers the test tools in this process too)
from ledger.dispatch import Dispatcher
from ledger.job_view import JobView
from ledger.persistence.schema import jobs
from ledger.persistence.sql_store import SqlStore
from ledger.reconcile_rules import ReconcilePolicy
from ledger.runtime.ledger import Ledger
from ledger.services.reconcile import reconcile_once
from tests.plugins.deployments import (
    OUTCOMES,
    STOP_TIMEOUT_S,
    Deployment,
    WorkerProcess,
    wait_until,
)
from tests.reliability.checker import Counters, check, fast_policy, settle

LEASE_S = 2.0  # the workers' OUTCOMES_LEASE_S: renewed every LEASE_S / 3 while a tool runs
SETTLE_TIMEOUT_S = 30.0


# --- what the tools and the processes left behind ---------------------------------------------


@dataclass(frozen=True)
class Effect:
    """One line of the side-effects file, written by the tool before it does anything else."""

    job_id: str
    attempt: int
    at: float
    pid: int


def queue_depth(dep: Deployment) -> int:
    """Messages ready in the deployment's queue, as the broker counts them (a delivered,
    unacked message is not ready: it counts again once its consumer is gone)."""
    with dep.app.connection_for_write() as conn:
        _, count, _ = conn.default_channel.queue_declare(queue=dep.queue, passive=True)
        return int(count)


def child_pids(parent: int) -> list[int]:
    """Live processes whose parent is `parent` (Celery's prefork pool processes)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited while we looked
        # "pid (comm) state ppid ...": comm may hold spaces, so split after the last ')'.
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == parent and fields[0] != "Z":
            found.append(int(entry.name))
    return sorted(found)


def load_view(store: SqlStore, job_id: str) -> JobView:
    with store.connection() as conn:
        row = conn.execute(select(jobs.c.view).where(jobs.c.job_id == job_id)).one()
    return JobView.model_validate(row.view)


def claims_waiting_on_the_brake_lock(store: SqlStore) -> set[int]:
    """Postgres backends (of this ledger) queued on an advisory lock: with the brake lock held
    exclusively by the test, these are workers inside `claim`, before anything is recorded."""
    query = text(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock' AND wait_event = 'advisory'"
    )
    with store.connection() as conn:
        return {int(row.pid) for row in conn.execute(query)}


def reconcile_until(
    store: SqlStore,
    dispatcher: Dispatcher | None,
    policy: ReconcilePolicy,
    condition: Callable[[], bool],
    timeout_s: float,
    what: str,
) -> None:
    """Run reconcile passes (in this process) until `condition` holds."""

    def one_pass_then_check() -> bool:
        reconcile_once(Ledger(store), dispatcher, policy)
        return condition()

    wait_until(one_pass_then_check, timeout_s, what)


# --- real `outcomes reconcile` processes --------------------------------------------------------


@dataclass
class ReconcilerProcess:
    process: subprocess.Popen[bytes]
    out_path: Path
    err_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def passes(self) -> list[dict[str, Any]]:
        """The JSON line each pass printed (`--json`)."""
        lines = self.out_path.read_bytes().splitlines() if self.out_path.exists() else []
        found = []
        for line in lines:
            with suppress(orjson.JSONDecodeError):
                value = orjson.loads(line)
                if isinstance(value, dict):
                    found.append(value)
        return found

    def wait_looping(self, timeout_s: float = 60.0) -> None:
        def looping() -> bool:
            if self.process.poll() is not None:
                pytest.fail(f"reconciler exited with {self.process.returncode}: {self.errors()}")
            return len(self.passes()) >= 2

        wait_until(looping, timeout_s, f"reconciler {self.pid} to run its passes")

    def errors(self) -> str:
        return self.err_path.read_text(errors="replace")[-3000:] if self.err_path.exists() else ""

    def stop(self) -> None:
        """SIGINT (the loop returns cleanly), then SIGKILL whatever is left of its group."""
        if self.process.poll() is None:
            with suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGINT)
        with suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=STOP_TIMEOUT_S)
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)  # its own session: pgid == pid
        self.process.wait(timeout=STOP_TIMEOUT_S)


# --- the rig ----------------------------------------------------------------------------------


@dataclass
class Rig:
    dep: Deployment
    reconcilers: list[ReconcilerProcess] = field(default_factory=list)
    frozen: set[int] = field(default_factory=set)  # process groups stopped with SIGSTOP

    @property
    def store(self) -> SqlStore:
        return self.dep.store

    def effects(self, job_id: str | None = None) -> list[Effect]:
        if not self.dep.side_effects.exists():
            return []
        found = []
        for line in self.dep.side_effects.read_text().splitlines():
            parts = line.split()
            if len(parts) == 4 and (job_id is None or parts[0] == job_id):
                found.append(Effect(parts[0], int(parts[1]), float(parts[2]), int(parts[3])))
        return found

    def start_reconciler(
        self, interval_s: float, dispatch_timeout_s: float, name: str = "reconciler"
    ) -> ReconcilerProcess:
        """`outcomes reconcile --interval S --json`, as an operator would run it."""
        index = len(self.reconcilers)
        out_path = self.dep.home / f"{name}-{index}.out"
        err_path = self.dep.home / f"{name}-{index}.err"
        env = dict(self.dep.env)
        env["OUTCOMES_DISPATCH_TIMEOUT_S"] = str(dispatch_timeout_s)
        env["PYTHONUNBUFFERED"] = "1"  # one JSON line per pass, visible at once
        argv = [str(OUTCOMES), "reconcile", "--interval", str(interval_s), "--json"]
        with out_path.open("wb") as out, err_path.open("wb") as err:
            process = subprocess.Popen(
                argv,
                cwd=self.dep.home,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        reconciler = ReconcilerProcess(process, out_path, err_path)
        self.reconcilers.append(reconciler)
        return reconciler

    def freeze(self, worker: WorkerProcess) -> None:
        """SIGSTOP the whole worker (main process and pool): a frozen VM, a long GC pause."""
        self.frozen.add(worker.process.pid)
        os.killpg(worker.process.pid, signal.SIGSTOP)

    def thaw(self, worker: WorkerProcess) -> None:
        os.killpg(worker.process.pid, signal.SIGCONT)
        self.frozen.discard(worker.process.pid)

    def settle_and_check(self, scenario: str, timeout_s: float = SETTLE_TIMEOUT_S) -> Counters:
        """Drain to a fixed point with the reconciler, then count the ledger's promises."""
        settle(self.store, self.dep.dispatcher, fast_policy(), timeout_s)
        with self.store.connection() as conn:
            views = [JobView.model_validate(row.view) for row in conn.execute(select(jobs.c.view))]
        spending = [v.job_id for v in views if v.spends]
        counters = check(self.store, scenario, spending, self.dep.side_effect_jobs())
        assert counters.clean, f"{counters.line()} {counters.notes}"
        return counters

    def close(self) -> None:
        for pgid in list(self.frozen):
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGCONT)  # a stopped process cannot act on SIGTERM
        self.frozen.clear()
        for reconciler in self.reconcilers:
            reconciler.stop()


@pytest.fixture
def rig(deployment: Deployment) -> Iterator[Rig]:
    """A deployment whose workers lease for LEASE_S and load this package's tools."""
    deployment.env["OUTCOMES_LEASE_S"] = str(LEASE_S)
    rig = Rig(deployment)
    try:
        yield rig
    finally:
        rig.close()  # before the deployment stops its workers (thawed first)


def elapsed_since(start: float) -> float:
    return time.monotonic() - start
