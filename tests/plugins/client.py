"""A real `outcomes serve` on embedded defaults in a scratch folder, for the client's tests (one
per session, started when a test first asks for `client_server`):
the test tools loaded through OUTCOMES_TOOLS, one agent token per account the tests need,
stopped by pid (its process group: serve's worker is in its own session, serve stops it)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from tests.serving import embedded_env, outcomes_argv, serving

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
    with serving(home, env) as base:
        yield Served(base, tokens, home)
