"""The nemesis: a fault schedule drawn from a seed, and the runner that injects it.

The schedule (times, kinds, targets, durations) depends only on the seed, the duration and the
lease, so a failing campaign is replayed with the same arguments. Faults may overlap, as real
outages do; two faults on one target take turns (a per-target lock). Every fault is logged
with the wall-clock moments it began and ended (the checker judges silence by these windows).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

# kind: weight. The worker's faults weigh most: workers are what the claim and the reconciler
# must survive; every kind appears in a campaign of a few minutes.
KINDS: dict[str, int] = {
    "worker_kill": 5,  # kill -9 of a worker, restarted after a pause
    "worker_pause": 3,  # SIGSTOP shorter than the lease, then SIGCONT
    "worker_freeze": 3,  # SIGSTOP past the lease (a clock jump, as the ledger sees it)
    "api_kill": 2,
    "api_pause": 2,
    "reconciler_kill": 1,
    "reconciler_pause": 1,
    "pg_restart": 2,  # kill -9 of the postmaster, started again
    "rabbit_restart": 1,  # kill -9 of the node, started again
    "pg_cut": 2,  # every live database connection reset
    "amqp_cut": 2,  # every live broker connection reset
    "pg_stall": 1,  # database bytes held, no connection closed
    "amqp_stall": 1,
    "brake": 3,  # a global brake pulled, held, released
}
# The faults that a worker's outcome write can suffer from: they explain silence on any job.
DATABASE_FAULTS = frozenset({"pg_restart", "pg_cut", "pg_stall"})
WORKER_FAULTS = frozenset({"worker_kill", "worker_pause", "worker_freeze"})


@dataclass(frozen=True)
class Planned:
    seq: int
    at_s: float  # seconds after the nemesis starts
    kind: str
    target: int  # which worker (for worker faults); 0 otherwise
    hold_s: float  # how long the fault lasts (pause, freeze, brake held, stall, down time)


def schedule(
    seed: int,
    duration_s: float,
    mean_gap_s: float,
    lease_s: float,
    workers: int,
    kinds: tuple[str, ...] = tuple(KINDS),
) -> list[Planned]:
    """Faults at exponential gaps (mean `mean_gap_s`) over `duration_s`: first every kind once
    in a shuffled order (a short campaign covers them all), then kinds drawn by weight."""
    rng = random.Random(f"nemesis-{seed}")
    weights = [KINDS[k] for k in kinds]
    cover = list(kinds)
    rng.shuffle(cover)
    planned: list[Planned] = []
    at = rng.expovariate(1 / mean_gap_s) / 2
    while at < duration_s:
        kind = cover.pop() if cover else rng.choices(kinds, weights=weights)[0]
        target = rng.randrange(workers) if kind in WORKER_FAULTS else 0
        planned.append(Planned(len(planned), round(at, 3), kind, target, _hold(kind, rng, lease_s)))
        at += rng.expovariate(1 / mean_gap_s)
    return planned


def _hold(kind: str, rng: random.Random, lease_s: float) -> float:
    if kind == "worker_freeze":
        return round(lease_s + rng.uniform(1.5, 2 * lease_s), 2)
    if kind == "worker_pause":
        return round(rng.uniform(0.3, lease_s * 0.5), 2)
    if kind in ("api_pause", "reconciler_pause", "brake"):
        return round(rng.uniform(1.0, 5.0), 2)
    if kind in ("pg_stall", "amqp_stall"):
        return round(rng.uniform(0.5, 3.0), 2)
    return round(rng.uniform(0.2, 2.0), 2)  # down time before a restart


@dataclass
class Logged:
    seq: int
    kind: str
    target: str
    scheduled_s: float
    hold_s: float
    started: float = 0.0  # unix time
    ended: float = 0.0
    pids: list[int] = field(default_factory=list)  # processes it hit
    pulled_at: float | None = None  # brake: the pull had committed by then
    released_at: float | None = None  # brake: the release began then
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Target(Protocol):
    """What the nemesis may do to the product (implemented by the campaign's cluster)."""

    def worker_pid(self, index: int) -> int: ...
    def kill_worker(self, index: int, down_s: float) -> None: ...
    def freeze_worker(self, index: int, hold_s: float) -> None: ...
    def kill_api(self, down_s: float) -> int: ...
    def freeze_api(self, hold_s: float) -> int: ...
    def kill_reconciler(self, down_s: float) -> int: ...
    def freeze_reconciler(self, hold_s: float) -> int: ...
    def restart_postgres(self) -> float: ...
    def restart_rabbit(self) -> float: ...
    def cut(self, service: str) -> int: ...
    def stall(self, service: str, hold_s: float) -> None: ...
    def pull_brake(self) -> str: ...
    def release_brake(self, brake_id: str) -> None: ...


class Nemesis:
    """Runs a schedule against a target; each fault on a thread of its own."""

    def __init__(self, target: Target, planned: list[Planned], log_path: Path) -> None:
        self.target = target
        self.planned = planned
        self.log_path = log_path
        self.logged: list[Logged] = []
        self.errors: list[str] = []
        self._locks: dict[str, threading.Lock] = {}
        self._write = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()

    def run(self, began: float) -> None:
        """Inject every fault at its time (monotonic `began` + at_s); returns when all ended."""
        for fault in self.planned:
            if self._stopping.wait(max(0.0, began + fault.at_s - time.monotonic())):
                break
            thread = threading.Thread(target=self._inject, args=(fault,), name=f"fault-{fault.seq}")
            thread.start()
            self._threads.append(thread)
        for thread in self._threads:
            thread.join()

    def stop(self) -> None:
        self._stopping.set()

    def _lock(self, name: str) -> threading.Lock:
        with self._write:
            return self._locks.setdefault(name, threading.Lock())

    def _inject(self, fault: Planned) -> None:
        name = _target_name(fault)
        entry = Logged(fault.seq, fault.kind, name, fault.at_s, fault.hold_s)
        with self._lock(name):
            entry.started = time.time()
            try:
                self._apply(fault, entry)
            except Exception as exc:  # logged: a fault that could not be made is not silent
                entry.note = f"failed: {type(exc).__name__}: {exc}"[:500]
                self.errors.append(f"fault {fault.seq} {fault.kind}: {entry.note}")
            entry.ended = time.time()
        with self._write:
            self.logged.append(entry)
            with self.log_path.open("a") as out:
                out.write(json.dumps(entry.to_json()) + "\n")

    def _apply(self, fault: Planned, entry: Logged) -> None:
        t, hold = self.target, fault.hold_s
        actions: dict[str, Callable[[], None]] = {
            "worker_kill": lambda: self._worker(entry, fault.target, t.kill_worker, hold),
            "worker_pause": lambda: self._worker(entry, fault.target, t.freeze_worker, hold),
            "worker_freeze": lambda: self._worker(entry, fault.target, t.freeze_worker, hold),
            "api_kill": lambda: entry.pids.append(t.kill_api(hold)),
            "api_pause": lambda: entry.pids.append(t.freeze_api(hold)),
            "reconciler_kill": lambda: entry.pids.append(t.kill_reconciler(hold)),
            "reconciler_pause": lambda: entry.pids.append(t.freeze_reconciler(hold)),
            "pg_restart": lambda: _note(entry, f"away {t.restart_postgres():.2f} s"),
            "rabbit_restart": lambda: _note(entry, f"away {t.restart_rabbit():.2f} s"),
            "pg_cut": lambda: _note(entry, f"{t.cut('postgres')} connections cut"),
            "amqp_cut": lambda: _note(entry, f"{t.cut('rabbitmq')} connections cut"),
            "pg_stall": lambda: t.stall("postgres", hold),
            "amqp_stall": lambda: t.stall("rabbitmq", hold),
            "brake": lambda: self._brake(entry, hold),
        }
        actions[fault.kind]()

    def _worker(
        self, entry: Logged, index: int, action: Callable[[int, float], None], hold: float
    ) -> None:
        entry.pids.append(self.target.worker_pid(index))
        action(index, hold)

    def _brake(self, entry: Logged, hold: float) -> None:
        brake_id = self.target.pull_brake()
        entry.pulled_at = time.time()
        entry.note = f"brake {brake_id}"
        time.sleep(hold)  # the brake is held this long (the schedule's choice)
        entry.released_at = time.time()
        self.target.release_brake(brake_id)


def _note(entry: Logged, text: str) -> None:
    entry.note = text


def _target_name(fault: Planned) -> str:
    """The lock a fault takes: one worker, or pg, amqp (the proxy), rabbit (the node), api,
    reconciler, brake."""
    if fault.kind in WORKER_FAULTS:
        return f"worker-{fault.target}"
    return fault.kind.split("_")[0]


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
