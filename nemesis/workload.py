"""The workload: jobs of a fixed tool mix, submitted at a set rate (open loop: a schedule, not
a reaction to answers) by concurrent clients over HTTP (`outcomes_client`) and MCP (the SDK's
streamable HTTP client at /mcp). Every job has an idempotency key; a client that times out or
loses its connection asks again with the same key, as a real agent should.

What each client was told is kept (`Submission`): the checker's independent record of which
jobs the ledger accepted."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack, suppress
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from outcomes_client import AsyncClient
from outcomes_client.errors import AuthenticationError, InvalidRequest, PermissionDenied

from nemesis import tools

# The SDK logs every dropped transport at ERROR with a traceback; the nemesis drops many.
logging.getLogger("mcp").setLevel(logging.CRITICAL)

# tool, weight: mostly quick jobs, every behaviour present.
MIX: list[tuple[str, int]] = [
    (tools.QUICK, 8),
    (tools.SLOW, 2),
    (tools.SPEND, 3),
    (tools.FLAKY, 2),
    (tools.CRASH, 1),
    (tools.SILENT, 1),
    (tools.DECLINE, 1),
    (tools.PARTIAL, 1),
]
SUBMIT_TIMEOUT_S = 3.0  # a client gives up on one answer after this and asks again
RETRY_FOR_S = 90.0  # and keeps asking (same key) this long before it calls the job unknown
# HTTP submissions waiting for an answer; past it the schedule slips, and the open loop catches
# up once answers come back. One connection each: requests queued inside the client's pool
# would time out there and be sent again, a retry storm of the harness's own making.
MAX_IN_FLIGHT = 256
MCP_SESSIONS = 8
PROGRESS_EVERY_S = 60.0
MCP_WAIT_S = 0.2  # each MCP call waits this long for the outcome (the watcher's path too)


McpQueue = asyncio.Queue[tuple["Submission", dict[str, Any]] | None]


@dataclass
class Submission:
    n: int
    key: str
    tool: str
    via: str  # "http" or "mcp"
    scheduled: float  # unix time it was due
    job_ids: list[str] = field(default_factory=list)  # every job id an answer named
    status: str = "pending"  # queued | refused | error | unknown
    tries: int = 0
    answered_at: float | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def pick_tool(rng: random.Random) -> str:
    names = [name for name, _ in MIX]
    return rng.choices(names, weights=[w for _, w in MIX])[0]


def args_for(tool: str, n: int, rng: random.Random) -> dict[str, Any]:
    if tool == tools.SLOW:
        return {"n": n, "steps": rng.randint(3, 6), "step_s": 0.25}
    return {"n": n}


class Workload:
    def __init__(self, api_url: str, token: str, seed: int, mcp_share: float, prefix: str) -> None:
        self.api_url = api_url
        self.token = token
        self.rng = random.Random(seed)
        self.mcp_share = mcp_share
        self.prefix = prefix  # idempotency keys unique to this campaign phase
        self.submissions: list[Submission] = []
        self.late_s = 0.0  # the most the schedule slipped behind

    async def run(
        self,
        rate: float,
        duration_s: float,
        count_from: int = 0,
        in_flight_max: int = MAX_IN_FLIGHT,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        """Submit `rate` jobs per second for `duration_s` (rate 0: as fast as answers come,
        `in_flight_max` at a time: the calibration)."""
        began = time.monotonic()
        in_flight = asyncio.Semaphore(in_flight_max)
        mcp_queue: McpQueue = asyncio.Queue()
        tasks: set[asyncio.Task[None]] = set()
        pool = httpx.Limits(max_connections=in_flight_max, max_keepalive_connections=64)
        transport = httpx.AsyncHTTPTransport(limits=pool)
        async with AsyncClient(
            self.api_url, self.token, timeout_s=SUBMIT_TIMEOUT_S, transport=transport
        ) as http:
            sessions = [
                asyncio.create_task(self._mcp_session(mcp_queue)) for _ in range(MCP_SESSIONS)
            ]
            n = count_from
            next_report = began + PROGRESS_EVERY_S
            while (elapsed := time.monotonic() - began) < duration_s:
                if progress is not None and time.monotonic() >= next_report:
                    next_report += PROGRESS_EVERY_S
                    progress(
                        f"{elapsed:.0f} s: {n - count_from} submitted, {len(tasks)} HTTP and "
                        f"{mcp_queue.qsize()} MCP waiting, slip {self.late_s:.1f} s"
                    )
                if rate > 0:
                    due = (n - count_from) / rate
                    if due > elapsed:
                        await asyncio.sleep(due - elapsed)  # the schedule's pace
                    self.late_s = max(self.late_s, time.monotonic() - began - due)
                await in_flight.acquire()
                sub, args = self._next(n)
                n += 1
                if sub.via == "mcp":
                    await mcp_queue.put((sub, args))
                    in_flight.release()  # the MCP sessions pace themselves
                    continue
                task = asyncio.create_task(self._submit_http(http, sub, args))
                task.add_done_callback(lambda _t: in_flight.release())
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            await asyncio.gather(*tasks)
            for _ in sessions:
                await mcp_queue.put(None)
            await asyncio.gather(*sessions)

    def _next(self, n: int) -> tuple[Submission, dict[str, Any]]:
        tool = pick_tool(self.rng)
        via = "mcp" if self.rng.random() < self.mcp_share else "http"
        sub = Submission(n, f"{self.prefix}-{n}", tool, via, time.time())
        self.submissions.append(sub)
        return sub, args_for(tool, n, self.rng)

    async def _submit_http(self, http: AsyncClient, sub: Submission, args: dict[str, Any]) -> None:
        async def once() -> tuple[str, str]:
            answer = await http.submit(sub.tool, args, idempotency_key=sub.key)
            return answer.job_id, answer.status

        await _with_retries(sub, once)

    async def _mcp_session(self, queue: McpQueue) -> None:
        await McpClient(self.api_url, self.token, queue).run()


class Refused(Exception):
    """An answer that recorded no job (the client's request was wrong): not retried."""


async def _with_retries(sub: Submission, once: Callable[[], Awaitable[tuple[str, str]]]) -> None:
    deadline = time.monotonic() + RETRY_FOR_S
    delay = 0.2
    while True:
        sub.tries += 1
        try:
            async with asyncio.timeout(SUBMIT_TIMEOUT_S + 2):
                job_id, status = await once()
        except (InvalidRequest, AuthenticationError, PermissionDenied, Refused) as exc:
            sub.status, sub.error = "error", f"{type(exc).__name__}: {exc}"
            return
        except Exception as exc:  # no answer, or a 5xx: it may have been recorded; ask again
            sub.error = f"{type(exc).__name__}: {exc}"[:300]
            if time.monotonic() + delay > deadline:
                sub.status = "unknown"
                return
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))  # jitter: no synchronized storm
            delay = min(delay * 2, 5.0)
            continue
        _answered(sub, job_id, status)
        return


class McpClient:
    """One MCP agent: a session at a time, each living in a task of its own. A transport that
    dies cancels its session's task group, hence that task: never the workload's."""

    def __init__(self, api_url: str, token: str, queue: McpQueue) -> None:
        self.api_url = api_url
        self.token = token
        self.queue = queue
        self.pending: tuple[Submission, dict[str, Any]] | None = None  # retried in the next life
        self.first_try: float = 0.0

    async def run(self) -> None:
        delay = 0.2
        while True:
            life = asyncio.create_task(self._life())
            await asyncio.wait([life])
            if not life.cancelled() and life.exception() is None:
                return  # the queue is drained
            failure = "cancelled" if life.cancelled() else repr(life.exception())
            if self.pending is not None:
                sub = self.pending[0]
                sub.error = f"session lost: {failure}"[:300]
                if time.monotonic() - self.first_try > RETRY_FOR_S:
                    sub.status, self.pending = "unknown", None
            await asyncio.sleep(delay)  # a client's pause before it reconnects
            delay = min(delay * 2, 3.0)

    async def _life(self) -> None:
        session = await McpSession.open(self.api_url, self.token)
        try:
            while True:
                if self.pending is None:
                    item = await self.queue.get()
                    if item is None:
                        return
                    self.pending, self.first_try = item, time.monotonic()
                sub, args = self.pending
                sub.tries += 1
                arguments = {**args, "_idempotency_key": sub.key, "_wait_s": MCP_WAIT_S}
                try:
                    async with asyncio.timeout(SUBMIT_TIMEOUT_S + 2):
                        job_id, status = await session.call(sub.tool, arguments)
                except Refused as exc:
                    sub.status, sub.error, self.pending = "error", str(exc), None
                    continue
                _answered(sub, job_id, status)
                self.pending = None
        finally:
            await session.close()


def _answered(sub: Submission, job_id: str, status: str) -> None:
    if job_id not in sub.job_ids:
        sub.job_ids.append(job_id)
    sub.status = "refused" if status == "refused" else "queued"
    sub.answered_at = time.time()


class McpSession:
    """An MCP client session over streamable HTTP with the agent's token."""

    def __init__(self, stack: AsyncExitStack, session: ClientSession) -> None:
        self.stack = stack
        self.session = session

    @classmethod
    async def open(cls, api_url: str, token: str) -> McpSession:
        stack = AsyncExitStack()
        try:
            async with asyncio.timeout(SUBMIT_TIMEOUT_S + 2):
                http = await stack.enter_async_context(
                    httpx2.AsyncClient(
                        headers={"Authorization": f"Bearer {token}"},
                        timeout=httpx2.Timeout(SUBMIT_TIMEOUT_S),
                    )
                )
                read, write = await stack.enter_async_context(
                    streamable_http_client(api_url + "/mcp", http_client=http)
                )
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
        except BaseException:
            await _close(stack)
            raise
        return cls(stack, session)

    async def call(self, tool: str, arguments: dict[str, Any]) -> tuple[str, str]:
        name = tool.replace(".", "__")
        result = await self.session.call_tool(name, arguments)
        content = getattr(result, "structured_content", None)
        if not isinstance(content, dict):
            raise RuntimeError(f"MCP answer without structure: {result!r}"[:300])
        if "job_id" not in content:  # an error that recorded no job
            raise Refused(str(content.get("error")))
        return str(content["job_id"]), str(content["status"])

    async def close(self) -> None:
        await _close(self.stack)


async def _close(stack: AsyncExitStack) -> None:
    """Closing a session whose server was killed may hang or raise: neither matters here."""
    with suppress(BaseException):
        async with asyncio.timeout(3):
            await stack.aclose()
