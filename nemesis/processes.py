"""The product as real processes, run through its own CLI (`outcomes serve --api-only`,
`outcomes worker`, `outcomes reconcile`), each in a session of its own so that a kill takes it
whole; the nemesis kills, freezes and restarts them by pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from contextlib import suppress
from pathlib import Path

from nemesis.services import READY_S, ServiceError, free_port, kill_group, wait_for

ROOT = Path(__file__).resolve().parents[1]


def outcomes_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "cli", *args]


def run_cli(env: dict[str, str], *args: str, timeout_s: float = 60.0) -> str:
    """One `outcomes …` command to its end; its stdout. A failure raises with its stderr."""
    try:
        done = subprocess.run(
            outcomes_argv(*args),
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"outcomes {' '.join(args)} ran past {timeout_s:g} s") from exc
    if done.returncode != 0:
        raise RuntimeError(f"outcomes {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return done.stdout


class ProductProcess:
    """One `outcomes` process; `restart()` starts a new one with the same command."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], logs: Path) -> None:
        self.name = name
        self.args = args
        self.env = env
        self.logs = logs
        self.log_path = logs / f"{name}-0.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.stopped = False  # SIGSTOPped and not yet continued
        self.pids: list[int] = []  # every pid it had, for the checker's fault windows

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> None:
        self.log_path = self.logs / f"{self.name}-{len(self.pids)}.log"
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                outcomes_argv(*self.args),
                env=self.env,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.stopped = False
        self.pids.append(self.process.pid)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """kill -9, then reap it: a worker killed mid-tool leaves its message unacked."""
        if self.process is None:
            return
        kill_group(self.process.pid)
        with suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        self.stopped = False

    def freeze(self) -> None:
        if self.alive():
            kill_group(self.pid, signal.SIGSTOP)
            self.stopped = True

    def thaw(self) -> None:
        if self.process is not None:
            kill_group(self.pid, signal.SIGCONT)
        self.stopped = False

    def restart(self) -> None:
        self.kill()
        self.start()

    def terminate(self) -> None:
        """SIGCONT (a frozen process cannot handle SIGTERM), then SIGTERM; `stop` waits."""
        if self.process is not None:
            kill_group(self.process.pid, signal.SIGCONT)
            kill_group(self.process.pid, signal.SIGTERM)

    def stop(self, grace_s: float = 5.0) -> None:
        """`terminate`, then SIGKILL if it lingers past `grace_s`."""
        if self.process is None:
            return
        self.terminate()
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            kill_group(self.process.pid)
            self.process.wait(timeout=10)


class Api(ProductProcess):
    """`outcomes serve --api-only` on a port it keeps across restarts (clients reconnect)."""

    def __init__(self, env: dict[str, str], logs: Path, name: str = "api") -> None:
        self.port = free_port()
        super().__init__(name, ["serve", "--api-only", "--port", str(self.port)], env, logs)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def healthy(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise ServiceError(f"{self.name} exited: {self.log_path.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(self.url + "/healthz", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def wait_healthy(self) -> float:
        return wait_for(self.healthy, READY_S, f"{self.name} /healthz")


def wait_worker_ready(worker: ProductProcess, timeout_s: float = READY_S) -> None:
    """Celery logs `ready.` once it consumes; before that it takes no job."""

    def ready() -> bool:
        if not worker.alive():
            raise ServiceError(f"{worker.name} exited: {worker.log_path.read_text()[-2000:]}")
        return b" ready." in worker.log_path.read_bytes()

    wait_for(ready, timeout_s, f"{worker.name} ready")


def environ_for(
    database_url: str, broker_url: str, queue: str, extra: dict[str, str]
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTCOMES_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return (
        env
        | {
            "OUTCOMES_DATABASE_URL": database_url,
            "OUTCOMES_BROKER_URL": broker_url,
            "OUTCOMES_QUEUE": queue,
        }
        | extra
    )
