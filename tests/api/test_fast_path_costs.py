"""A tripwire on the agents' fast path: what one submit and one read cost in database
statements and thread hops.

The agents' two calls are the product's hottest path; a read or a hop added to them costs
every call (a hop alone is ~80 us of CPU, a statement a round trip). These counts are pinned
so that such an addition shows up here, on purpose, rather than in a benchmark weeks later.
When a change means to add one, update the figure below and say why in its commit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

import api.jobs_read
import api.jobs_submit
import ledger.services.jobs
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.backlog import BacklogGauge
from tests.plugins.api import Tokens, bearer
from tests.tools import ECHO


@dataclass
class Costs:
    statements: list[str] = field(default_factory=list)
    hops: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def statement(self, text: str) -> None:
        with self.lock:
            self.statements.append(" ".join(text.split())[:80])


@contextmanager
def counted(store: SqlStore) -> Iterator[Costs]:
    """Every statement on the store's engine and on the loop's own connections, and every
    hop to a thread, while the block runs."""
    costs = Costs()

    def on_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        costs.statement(statement)

    engine = store.engine
    # SQLite's statements all pass the engine; Postgres's also go by psycopg directly (the
    # write lane's and the loop's connections), so there psycopg's cursors are counted.
    sqlite = engine.dialect.name == "sqlite"
    with pytest.MonkeyPatch.context() as patch:
        if sqlite:
            event.listen(engine, "before_cursor_execute", on_execute)
        real_execute = psycopg.AsyncCursor.execute

        async def loop_execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            costs.statement(str(query))
            return await real_execute(self, query, *args, **kwargs)

        patch.setattr(psycopg.AsyncCursor, "execute", loop_execute)
        real_sync = psycopg.Cursor.execute

        def sync_execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            costs.statement(str(query))
            return real_sync(self, query, *args, **kwargs)

        patch.setattr(psycopg.Cursor, "execute", sync_execute)
        real_many = psycopg.Cursor.executemany

        def sync_many(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            costs.statement(str(query))
            return real_many(self, query, *args, **kwargs)

        patch.setattr(psycopg.Cursor, "executemany", sync_many)
        # The backlog gauge is sampled once a second on the outbox recorder's thread, off the
        # agents' path (so no call waits for it); a sample landing inside the block would be
        # counted as the call's, so none is taken while it runs.
        patch.setattr(BacklogGauge, "_sample", lambda self: None)
        for module in (api.jobs_read, api.jobs_submit, ledger.services.jobs):
            real_hop: Callable[..., Any] = module.in_thread

            async def hop(
                call: Callable[..., Any], *args: Any, _real: Any = real_hop, **kw: Any
            ) -> Any:
                with costs.lock:
                    costs.hops.append(getattr(call, "__name__", repr(call)))
                return await _real(call, *args, **kw)

            patch.setattr(module, "in_thread", hop)
        try:
            yield costs
        finally:
            if sqlite:
                event.remove(engine, "before_cursor_execute", on_execute)


# What each call costs, by backend: (hops to a thread, statements). The submit's block holds
# its decision's append and the outbox's confirmation of the dispatch (the agent's answer waits
# for the first; the second is the broker's bookkeeping, batched across submits in service).
# On Postgres the read takes no hop to read the job (`loop_reads`); a job not yet terminal
# takes one to say what it waits on.
COSTS = {
    "postgresql": {"submit": (["_submit"], 3), "read": (["waiting_of"], 2)},
    "sqlite": {"submit": (["_submit"], 14), "read": (["get_admitted", "waiting_of"], 5)},
}


def test_an_agents_submit_and_read_cost_what_they_did(
    client: TestClient, tokens: Tokens, store: SqlStore
) -> None:
    acme = bearer(tokens.acme)
    body = {"tool": ECHO, "args": {"text": "x"}}
    outbox = client.app.state.api.outbox  # type: ignore[attr-defined]
    for _ in range(2):  # warm: the token's and the tools' caches fill on the first calls
        job = client.post("/v1/jobs", headers=acme, json=body).json()["job_id"]
        assert outbox.flush()
        assert client.get(f"/v1/jobs/{job}?wait=0", headers=acme).status_code == 200
    with counted(store) as submit:
        answer = client.post("/v1/jobs", headers=acme, json=body)
        assert outbox.flush()
    assert answer.status_code == 202
    with counted(store) as read:
        got = client.get(f"/v1/jobs/{answer.json()['job_id']}?wait=0", headers=acme)
    assert got.status_code == 200
    assert got.json()["status"] == "queued"  # not terminal: the read says what it waits on
    expected = COSTS[store.engine.dialect.name]
    for name, costs in (("submit", submit), ("read", read)):
        hops, statements = expected[name]
        assert (costs.hops, len(costs.statements)) == (hops, statements), (
            f"the agents' {name} now costs {costs.hops} hops and these statements: "
            f"{costs.statements}"
        )
