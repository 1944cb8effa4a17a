"""Child processes the CLI starts (a worker for `serve` and `demo`), stopped by pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


def start_worker(
    concurrency: int = 2, pool: str = "threads", log: Path | None = None
) -> subprocess.Popen[bytes]:
    """`outcomes worker` as a child process with this process's environment."""
    command = [sys.executable, "-m", "cli", "worker", "--pool", pool, "-c", str(concurrency)]
    output = log.open("ab") if log else subprocess.DEVNULL
    return subprocess.Popen(
        command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
    )


def stop(process: subprocess.Popen[bytes], timeout_s: float = 15.0) -> None:
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=timeout_s)


def exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so `finally` blocks stop our children.

    uvicorn re-raises the signal it handled once it has shut down; with the default handler
    the process would die on the spot and leave its worker child running."""

    def handler(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
