"""`AsyncClient`: the asyncio twin of `Client` (one `httpx.AsyncClient`; `async with` it)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, Self

import httpx

from outcomes_client import _protocol as p
from outcomes_client.errors import TransportError, WaitTimeout
from outcomes_client.models import Change, Envelope, JobEvents, JobPage, Submission, Turn


class AsyncClient:
    """`Client`'s methods, awaitable; `changes` is an async iterator."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout_s,
            transport=transport,
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def submit(
        self,
        tool: str,
        args: dict[str, Any],
        *,
        idempotency_key: str | None = None,
        start_within_s: float | None = None,
        budget_bytes: int | None = None,
        turn: str | None = None,
        halt_on_failure: bool = False,
    ) -> Submission:
        """Ask for a job: `queued`, or `refused` naming what is missing (not an exception).
        With an idempotency key, the same key and body replay the first answer. With
        `start_within_s`, a job no worker starts within that many seconds is closed as never
        started (capped by the tool's own), and a backlog that would not start it in time is
        refused now (`QUOTA_EXCEEDED`, cause `backlog`, `retry_after_s`). `budget_bytes` asks
        for a smaller answer than the tool's `max_result_bytes` (the envelope's `budget` then
        says what was left out); `SecretStr` values in `args` are sent as their value."""
        body = p.submit_document(tool, args, idempotency_key, start_within_s, budget_bytes)
        headers = p.turn_headers(turn, halt_on_failure)  # docs/turns.md
        sent = await self._send("POST", "/v1/jobs", json=body, headers=headers)
        return p.read_submission(sent)

    async def get(self, job_id: str) -> Envelope:
        return p.read(await self._send("GET", f"/v1/jobs/{job_id}"), Envelope)

    async def wait(
        self, job_id: str, *, timeout_s: float = 300.0, poll_s: float = 30.0
    ) -> Envelope:
        """Long-poll until the job is terminal; through dropped connections, timeouts and 503s
        it reconnects until `timeout_s`, then raises `WaitTimeout` with the last envelope."""
        deadline = time.monotonic() + timeout_s
        last: Envelope | None = None
        failure: BaseException | None = None
        failures = 0
        while (remaining := deadline - time.monotonic()) > 0:
            wait = min(poll_s, remaining, p.MAX_SERVER_WAIT_S)
            try:
                response = await self._http.get(
                    f"/v1/jobs/{job_id}",
                    params={"wait": f"{wait:.3f}", "until": "terminal"},
                    timeout=wait + p.ANSWER_MARGIN_S,
                )
                last = p.read(response, Envelope)
            except Exception as exc:
                if not p.retryable(exc):
                    raise
                failure = exc
                await asyncio.sleep(min(p.backoff(failures), max(0.0, deadline - time.monotonic())))
                failures += 1
                continue
            failure, failures = None, 0
            if last.terminal:
                return last
        raise WaitTimeout(job_id, last) from failure

    async def run(
        self,
        tool: str,
        args: dict[str, Any],
        *,
        idempotency_key: str | None = None,
        start_within_s: float | None = None,
        budget_bytes: int | None = None,
        turn: str | None = None,
        halt_on_failure: bool = False,
        timeout_s: float = 300.0,
        poll_s: float = 30.0,
    ) -> Envelope:
        """Submit and wait for the outcome. Without a key one is made, so a submit whose answer
        was lost is sent again safely (the API replays it) until the deadline."""
        deadline = time.monotonic() + timeout_s
        key = idempotency_key or f"run-{uuid.uuid4()}"
        failures = 0
        while True:
            try:
                submission = await self.submit(
                    tool,
                    args,
                    idempotency_key=key,
                    start_within_s=start_within_s,
                    budget_bytes=budget_bytes,
                    turn=turn,
                    halt_on_failure=halt_on_failure,
                )
                break
            except Exception as exc:
                left = deadline - time.monotonic()
                if not p.retryable(exc) or left <= 0:
                    raise
                await asyncio.sleep(min(p.backoff(failures), left))
                failures += 1
        if submission.refused:
            return await self.get(submission.job_id)  # the recorded refusal, as its envelope
        left = max(0.0, deadline - time.monotonic())
        return await self.wait(submission.job_id, timeout_s=left, poll_s=poll_s)

    async def cancel(self, job_id: str, *, reason: str | None = None) -> Envelope:
        """Cancel a job no worker has started (queued, or waiting for its retry): it ends
        `declined` (`next_action` `accept`), nothing runs. A job already running or ended is
        left as it is: `NotCancellable`, with `.envelope`. A second cancel answers as the
        first. `reason` (at most 500 characters, one line) is quoted in `declined_reason`."""
        body = p.cancel_document(reason)
        sent = await self._send("POST", f"/v1/jobs/{job_id}/cancel", json=body)
        return p.read(sent, Envelope)

    async def turn(self, turn_id: str) -> Turn:
        """`Client.turn`, awaited."""
        return p.read(await self._send("GET", f"/v1/turns/{turn_id}"), Turn)

    async def events(self, job_id: str) -> JobEvents:
        return p.read(await self._send("GET", f"/v1/jobs/{job_id}/events"), JobEvents)

    async def page(self, after: str | None = None, limit: int = 100) -> JobPage:
        """One page of the changes feed."""
        params: dict[str, Any] = {"limit": limit}
        if after is not None:
            params["after"] = after
        return p.read(await self._send("GET", "/v1/jobs", params=params), JobPage)

    async def changes(
        self,
        after: str | None = None,
        *,
        limit: int = 100,
        follow: bool = False,
        poll_s: float = 1.0,
    ) -> AsyncIterator[Change]:
        """Every job changed after the cursor, page by page, each with a resume cursor. Ends
        when the feed is read to its end, unless `follow`: then it polls every `poll_s`."""
        while True:
            page = await self.page(after, limit)
            for change in p.changes_of(page, after):
                yield change
            after = page.next_cursor
            if not page.truncated:
                if not follow:
                    return
                await asyncio.sleep(poll_s)  # the feed has no long-poll: a client-side pace

    async def _send(self, method: str, url: str, **options: Any) -> httpx.Response:
        try:
            return await self._http.request(method, url, **options)
        except httpx.TransportError as exc:
            raise TransportError(f"{method} {url}: {type(exc).__name__}: {exc}") from exc
