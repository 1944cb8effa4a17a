"""A real `outcomes serve` on embedded defaults in a scratch folder (SQLite ledger, filesystem
broker, a worker and the reconciler), and `outcomes mcp` processes beside it: every process
runs in the same folder, so they share the ledger and the broker. Tokens are made in-process
on the same ledger. Processes are stopped by pid (and serve's worker checked gone)."""

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
from dataclasses import dataclass
from pathlib import Path

import pytest

import examples.seed_tools  # noqa: F401  (the tools the served tokens are granted)
import tests.tools  # noqa: F401
from ledger.services import admin
from ledger.services.ledger import open_ledger
from ledger.services.tokens import create as create_token
from tests.plugins.deployments import wait_until

ROOT = Path(__file__).resolve().parents[2]
TOOLS = "examples.seed_tools,tests.tools"
READ_ISSUE = "tracker.read_issue"


@dataclass(frozen=True)
class Served:
    home: Path
    base_url: str
    env: dict[str, str]  # what every process of this ledger runs with
    agent: str  # acme agent, every tool
    read_only: str  # acme agent, tracker.read_issue only
    operator: str  # operator of every account
    revoked: str  # acme agent, revoked

    def mcp_argv(self) -> list[str]:
        return [sys.executable, "-m", "cli", "mcp"]


def embedded_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTCOMES_")}
    return env | {
        "PYTHONPATH": str(ROOT),
        "OUTCOMES_TOOLS": TOOLS,
        "OUTCOMES_DATABASE_URL": f"sqlite:///{home / '.outcomes' / 'ledger.db'}",
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def served(home: Path) -> Iterator[Served]:
    env = embedded_env(home)
    (home / ".outcomes").mkdir(parents=True, exist_ok=True)
    ledger = open_ledger(env["OUTCOMES_DATABASE_URL"])
    try:
        admin.migrate(ledger)
        issued = {
            name: create_token(ledger, "acme", role, tools, actor="tests").token
            for name, role, tools in (
                ("agent", "agent", None),
                ("read_only", "agent", [READ_ISSUE]),
                ("revoked", "agent", None),
            )
        }
        operator = create_token(ledger, "*", "operator", None, actor="tests").token
        from ledger.services.tokens import authenticate, revoke

        revoke(ledger, authenticate(ledger, issued["revoked"]).token_id, actor="tests")
    finally:
        ledger.close()
    port = _free_port()
    log_path = home / "serve.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "cli", "serve", "--port", str(port)],
            cwd=home,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        if server.poll() is not None:
            pytest.fail(f"serve exited: {log_path.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    try:
        wait_until(healthy, 60, "outcomes serve to answer /healthz")
        yield Served(home, base, env, operator=operator, **issued)
    finally:
        _stop(server, log_path)


def _stop(server: subprocess.Popen[bytes], log_path: Path) -> None:
    with suppress(ProcessLookupError):
        os.kill(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=10)
    found = re.search(r"worker pid (\d+)", log_path.read_text())
    if found:  # serve starts its worker in a session of its own and stops it on SIGTERM
        pid = int(found.group(1))

        def gone() -> bool:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            return False

        try:
            wait_until(gone, 30, f"serve's worker (pid {pid}) to stop with serve")
        finally:
            if not gone():
                os.killpg(pid, signal.SIGKILL)
