"""A real `outcomes serve` on embedded defaults in a scratch folder (SQLite ledger, filesystem
broker, a worker and the reconciler), and `outcomes mcp` processes beside it: every process
runs in the same folder, so they share the ledger and the broker. Tokens are made in-process
on the same ledger. Processes are stopped by pid (and serve's worker checked gone)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import examples.seed_tools  # noqa: F401  (the tools the served tokens are granted)
import tests.tools  # noqa: F401
from ledger.runtime.ledger import open_ledger
from ledger.services import admin
from ledger.services.tokens import create as create_token
from tests.serving import ROOT, serving

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


def prepare(home: Path) -> Served:
    """The ledger in `home`, migrated, with its tokens; nothing served yet (`base_url` empty:
    `serving(home, prepared.env)` serves it, as often as a test restarts it)."""
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
    return Served(home, "", env, operator=operator, **issued)


@contextmanager
def served(home: Path) -> Iterator[Served]:
    prepared = prepare(home)
    with serving(home, prepared.env) as base:
        yield replace(prepared, base_url=base)
