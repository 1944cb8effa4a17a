"""Worker processes and queues for bench.throughput: start `celery worker` OS processes by
subprocess, stop them by pid (the whole process group they lead, prefork children included),
and delete the benchmark's queues from the broker afterwards."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from celery import Celery

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
WORKER_FLAGS = ("--without-heartbeat", "--without-gossip", "--without-mingle")


class WorkerDiedError(RuntimeError):
    """A benchmark worker exited while the benchmark still needed it."""


@dataclass(frozen=True)
class Pool:
    kind: str  # prefork | threads | solo
    concurrency: int
    loglevel: str


@dataclass
class WorkerProcess:
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def check_alive(self) -> None:
        code = self.proc.poll()
        if code is not None:
            raise WorkerDiedError(f"{self.name} worker exited with {code}:\n{self.tail()}")

    def cpu_seconds(self) -> float | None:
        """CPU time (user + system) of the worker and its pool processes so far (Linux)."""
        return process_tree_cpu(self.proc.pid)

    def tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM (Celery's warm shutdown), then SIGKILL the group if anything is left."""
        pid = self.proc.pid
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=grace_s)
        # The worker leads its own process group (start_new_session): its pool children too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)


def _stat(pid: str) -> tuple[int, float] | None:
    """(parent pid, utime + stime in seconds) from /proc/<pid>/stat."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICKS


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_tree_cpu(root: int) -> float | None:
    """CPU seconds of `root` and its living descendants; None where /proc is missing."""
    if not Path("/proc/self/stat").exists():
        return None
    stats = {int(p): s for p in os.listdir("/proc") if p.isdigit() and (s := _stat(p))}
    total, frontier = 0.0, {root}
    while frontier:
        total += sum(stats[p][1] for p in frontier if p in stats)
        frontier = {p for p, (parent, _) in stats.items() if parent in frontier}
    return total


def pids_cpu(pids: Sequence[int]) -> float | None:
    """CPU seconds of these processes; None unless every one of them is visible here."""
    stats = [_stat(str(pid)) for pid in pids]
    if not stats or any(s is None for s in stats):
        return None
    return sum(s[1] for s in stats if s is not None)


class CpuMeter:
    """The CPU one process spends inside `with meter.timing():` blocks, summed over them: what
    a bench's timed rounds cost a server. None once any block could not see the process."""

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self.seconds: float | None = 0.0

    @contextmanager
    def timing(self) -> Iterator[None]:
        before = pids_cpu([self._pid])
        yield
        after = pids_cpu([self._pid])
        if before is None or after is None or self.seconds is None:
            self.seconds = None
        else:
            self.seconds += after - before

    def ms_per(self, jobs: int) -> float | None:
        """Milliseconds of CPU per job over `jobs` jobs; None where it was not seen."""
        return None if self.seconds is None else 1000 * self.seconds / jobs


def worker_env(extra: Mapping[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{path}" if path else str(REPO)
    env.update(extra)
    return env


def _outcomes() -> list[str]:
    outcomes = BIN / "outcomes"
    if outcomes.exists():
        return [str(outcomes)]
    return [sys.executable, "-c", "from cli.main import main; main()"]


def ledger_reconcile_argv() -> list[str]:
    """`outcomes reconcile`: the passes, the relays and, on Postgres, the sequencer."""
    return [*_outcomes(), "reconcile"]


def ledger_worker_argv(pool: Pool) -> list[str]:
    """The real `outcomes worker` entry point (it adds the same WORKER_FLAGS itself)."""
    return [
        *_outcomes(),
        "worker",
        f"--pool={pool.kind}",
        f"--concurrency={pool.concurrency}",
        f"--loglevel={pool.loglevel}",
    ]


def baseline_worker_argv(pool: Pool, queue: str, nodename: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "bench.throughput_tasks",
        "worker",
        f"--loglevel={pool.loglevel}",
        "-Q",
        queue,
        f"--pool={pool.kind}",
        f"--concurrency={pool.concurrency}",
        "-n",
        f"{nodename}@%h",
        *WORKER_FLAGS,
    ]


@contextmanager
def running_worker(
    name: str, argv: Sequence[str], env: Mapping[str, str], log_dir: Path
) -> Iterator[WorkerProcess]:
    log_path = log_dir / f"{name}.log"
    log: IO[bytes]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            list(argv),
            cwd=REPO,
            env=worker_env(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    worker = WorkerProcess(name, proc, log_path)
    try:
        yield worker
    finally:
        worker.stop()


def delete_queues(broker_url: str, queues: Sequence[str]) -> None:
    """Delete the benchmark's queues (and the direct exchanges Celery named after them)."""
    app = Celery("bench-throughput-cleanup", broker=broker_url, set_as_current=False)
    with app.connection_for_write() as conn:
        for queue in queues:
            channel = conn.channel()
            try:
                channel.queue_delete(queue)
                channel.exchange_delete(queue)
            except Exception as exc:  # best effort: report, keep deleting the others
                print(f"warning: could not delete queue {queue}: {exc}", file=sys.stderr)
            finally:
                with contextlib.suppress(Exception):
                    channel.close()
    app.close()


def wait_until(
    done: Callable[[], bool], deadline: float, workers: Sequence[WorkerProcess], poll_s: float
) -> None:
    """Poll `done` until it holds; fail when the deadline passes or a worker died.

    `deadline` is on the time.perf_counter() clock."""
    while not done():
        if time.perf_counter() > deadline:
            names = ", ".join(w.name for w in workers)
            raise TimeoutError(f"{names}: the round did not finish before its deadline")
        for worker in workers:
            worker.check_alive()
        time.sleep(poll_s)
