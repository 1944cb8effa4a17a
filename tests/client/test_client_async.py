"""`AsyncClient` against the same real `outcomes serve`: the same flows, awaited."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx
import pytest
from outcomes_client import AsyncClient, AuthenticationError, NotCancellable, NotFound

from ledger.settings import DEFAULT_HOME, default_database_url
from tests.cancelling import jobs_to_cancel
from tests.plugins.client import Served


class DroppingTransport(httpx.AsyncBaseTransport):
    """Drops the first long-polls, then lets them through; opens `gate` before the n-th."""

    def __init__(self, drops: int, gate: Path, open_at: int) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self._drops = drops
        self._gate = gate
        self._open_at = open_at
        self.polls = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if "wait" in request.url.params:
            self.polls += 1
            if self.polls == self._open_at:
                self._gate.touch()
            if self.polls <= self._drops:
                raise httpx.ConnectError("dropped by the test", request=request)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def test_async_run_refusal_failure_and_events(client_server: Served) -> None:
    async def scenario() -> None:
        async with AsyncClient(client_server.base_url, client_server.token) as client:
            ok, refused, failed = await asyncio.gather(
                client.run("apitest.echo", {"text": "a"}, timeout_s=60),
                client.run("apitest.off", {"text": "a"}, timeout_s=60),
                client.run("canary.crash", {"secret": "async-secret"}, timeout_s=60),
            )
            assert (ok.status, ok.result) == ("succeeded", {"text": "a"})
            assert (refused.status, refused.next_action) == ("refused", "satisfy_precondition")
            assert refused.error is not None and refused.error.code == "CAPABILITY_UNAVAILABLE"
            assert failed.error is not None
            assert (failed.status, failed.error.code) == ("failed", "TOOL_CRASHED")
            events = await client.events(ok.job_id)
            assert [e.type for e in events.events][-1] == "work.succeeded"
            submission = await client.submit("apitest.off", {"text": "b"})
            assert submission.refused and submission.error is not None

    asyncio.run(scenario())


def test_async_wait_reconnects(client_server: Served, tmp_path: Path) -> None:
    gate = tmp_path / "gate"

    async def scenario() -> None:
        transport = DroppingTransport(drops=2, gate=gate, open_at=4)
        async with AsyncClient(
            client_server.base_url, client_server.token, transport=transport
        ) as client:
            submission = await client.submit("matrix.gated_read", {"gate": str(gate)})
            job = await client.wait(submission.job_id, timeout_s=90, poll_s=0.3)
        assert job.status == "succeeded" and transport.polls >= 4

    asyncio.run(scenario())


def test_async_changes_feed(client_server: Served) -> None:
    async def scenario() -> None:
        async with AsyncClient(
            client_server.base_url, client_server.tokens["feed-async"]
        ) as client:
            jobs = [
                await client.run("apitest.echo", {"text": f"n{i}"}, timeout_s=60) for i in range(3)
            ]
            seen = [change async for change in client.changes(limit=2)]
            assert [c.job.job_id for c in seen] == [j.job_id for j in jobs]
            assert [c async for c in client.changes(after=seen[-1].cursor)] == []

    asyncio.run(scenario())


def test_async_http_problems_are_typed(client_server: Served) -> None:
    async def scenario() -> None:
        async with AsyncClient(client_server.base_url, "not-a-token") as client:
            with pytest.raises(AuthenticationError) as denied:
                await client.get(str(uuid.uuid4()))
            assert (denied.value.status, denied.value.code) == (401, "ACCESS_DENIED")
        async with AsyncClient(client_server.base_url, client_server.token) as client:
            with pytest.raises(NotFound):
                await client.get(str(uuid.uuid4()))

    asyncio.run(scenario())


def test_async_cancel(client_server: Served) -> None:
    jobs = jobs_to_cancel(default_database_url(client_server.home / DEFAULT_HOME))

    async def scenario() -> None:
        async with AsyncClient(client_server.base_url, client_server.token) as client:
            cancelled = await client.cancel(jobs.queued[0])
            assert (cancelled.status, cancelled.next_action) == ("declined", "accept")
            assert await client.cancel(jobs.queued[0]) == cancelled
            with pytest.raises(NotCancellable) as refused:
                await client.cancel(jobs.running, reason="too late")
            assert refused.value.envelope.job_id == jobs.running

    asyncio.run(scenario())
