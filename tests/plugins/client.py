"""A real `outcomes serve` on embedded defaults in a scratch folder, for the client's tests (one
per session, started when a test first asks for `client_server`):
the test tools loaded through OUTCOMES_TOOLS, one agent token per account the tests need,
stopped by pid (its process group: serve's worker is in its own session, serve stops it)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from tests.cli.test_processes import embedded_env, free_port, outcomes_argv
from tests.plugins.deployments import wait_until

ACCOUNTS = ("acme", "feed-sync", "feed-async", "replay")


@dataclass(frozen=True)
class Served:
    base_url: str
    tokens: dict[str, str]  # account -> agent token
    home: Path

    @property
    def token(self) -> str:
        return self.tokens["acme"]


def _create_token(home: Path, env: dict[str, str], account: str) -> str:
    argv = outcomes_argv("tokens", "create", "--account", account, "--role", "agent", "--json")
    run = subprocess.run(argv, cwd=home, env=env, capture_output=True, timeout=120, check=True)
    return str(orjson.loads(run.stdout)["token"])


@pytest.fixture(scope="session")
def client_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("client_server")
    env = embedded_env(OUTCOMES_TOOLS="examples.seed_tools,tests.tools")
    subprocess.run(outcomes_argv("migrate"), cwd=home, env=env, check=True, timeout=120)
    tokens = {account: _create_token(home, env, account) for account in ACCOUNTS}
    port = free_port()
    log_path = home / "serve.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            outcomes_argv("serve", "--port", str(port)),
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
        yield Served(base, tokens, home)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
        _stop_worker(log_path)


def _stop_worker(log_path: Path) -> None:
    """serve stops its worker; should it not have, stop it by the pid serve reported."""
    found = re.search(r"worker pid (\d+)", log_path.read_text(errors="replace"))
    if found is None:
        return
    pid = int(found.group(1))

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    try:
        wait_until(gone, 30, f"serve's worker (pid {pid}) to stop")
    except BaseException:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # its own session: pgid == pid
        raise
