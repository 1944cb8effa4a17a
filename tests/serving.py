"""`outcomes …` as real processes, for the tests that need the real thing: the command line, a
clean environment on embedded defaults, a free port, and `outcomes serve` started in a session
of its own, used once it answers /healthz, stopped by pid (SIGTERM, then SIGKILL) with the
worker it started checked gone by the pid it logged."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from tests.plugins.deployments import wait_until

ROOT = Path(__file__).resolve().parents[1]


def outcomes_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "cli", *args]


def embedded_env(**extra: str) -> dict[str, str]:
    """This environment without any OUTCOMES_ setting (embedded defaults), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTCOMES_")}
    env["PYTHONPATH"] = str(ROOT)
    return env | extra


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def serving(home: Path, env: dict[str, str], *, api_only: bool = False) -> Iterator[str]:
    """`outcomes serve` in `home` on a free port; yields its base URL once it is healthy.
    With `api_only`, the API alone (`--api-only`: no worker, no reconciler of its own)."""
    port = free_port()
    log_path = home / "serve.log"
    extra = ["--api-only"] if api_only else []
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            outcomes_argv("serve", "--port", str(port), *extra),
            cwd=home,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        if server.poll() is not None:
            pytest.fail(f"serve exited: {log_path.read_text(errors='replace')[-2000:]}")
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    try:
        wait_until(healthy, 60, "outcomes serve to answer /healthz")
        yield base
    finally:
        stop_serve(server, log_path, with_worker=not api_only)


def stop_serve(
    server: subprocess.Popen[bytes], log_path: Path, *, with_worker: bool = True
) -> None:
    """SIGTERM to serve's process group, SIGKILL if it lingers; then its worker (in a session of
    its own, which serve stops on SIGTERM) must be gone too: an orphan fails the test."""
    with suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=10)
    if not with_worker:
        return
    found = re.search(r"worker pid (\d+)", log_path.read_text(errors="replace"))
    assert found, "serve did not report its worker's pid"
    pid = int(found.group(1))

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    try:
        wait_until(gone, 30, f"serve's worker (pid {pid}) to stop with serve")
    except BaseException:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # its own session: pgid == pid
        raise
