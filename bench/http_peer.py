"""bench.http's HTTP peer: what a team would put in front of Celery without a ledger.

FastAPI on uvicorn (the same server and loop as ours). `POST /jobs` sends the no-op task
(bench/throughput_tasks.py) and answers 202 with a poll URL; `GET /jobs/{id}?wait=S` long-polls
until Celery's Redis result backend holds the task's result. Nothing is recorded for an audit,
nothing is checked against a brake, and the result lives in Redis only: it stands for the least
an HTTP service that reports each job's end must do, so it favours the peer.

How a waiting request learns of its result, without polling: Celery's Redis backend publishes
each result on a channel named after the result's key. One subscriber connection per process
(a pattern subscription on every result key) wakes the requests waiting on that task; a request
registers first and reads the key second, so a result stored in between is not missed.

Run by bench.http as `python -m uvicorn bench.http_peer:app`, with the environment the baseline
worker reads (THROUGHPUT_BROKER_URL, THROUGHPUT_QUEUE, THROUGHPUT_RESULT_BACKEND).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
import redis.asyncio as aioredis
from fastapi import FastAPI, Request, Response
from starlette.concurrency import run_in_threadpool

from bench.throughput_tasks import BACKEND_ENV, BROKER_ENV, NOOP_TASK, QUEUE_ENV, make_app

KEY_PREFIX = "celery-task-meta-"  # Celery's Redis backend: key and channel of a task's result
MAX_WAIT_S = 60.0

_celery = make_app(
    os.environ.get(BROKER_ENV) or "amqp://guest:guest@127.0.0.1:5672//",
    os.environ.get(QUEUE_ENV) or "throughput",
    os.environ.get(BACKEND_ENV) or "redis://127.0.0.1:6379/0",
)
_redis_url = str(_celery.conf.result_backend)
_waiting: dict[str, set[asyncio.Future[None]]] = {}


def _wake(task_id: str) -> None:
    for future in _waiting.pop(task_id, ()):
        if not future.done():
            future.set_result(None)


async def _subscribe(client: aioredis.Redis, ready: asyncio.Event) -> None:
    async with client.pubsub() as pubsub:
        await pubsub.psubscribe(f"{KEY_PREFIX}*")
        ready.set()
        async for message in pubsub.listen():
            if message["type"] == "pmessage":
                _wake(message["channel"].decode()[len(KEY_PREFIX) :])


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    client = aioredis.from_url(_redis_url)
    ready = asyncio.Event()
    subscriber = asyncio.create_task(_subscribe(client, ready))
    await asyncio.wait_for(ready.wait(), 10)
    app.state.redis = client
    try:
        yield
    finally:
        subscriber.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await subscriber
        await client.aclose()


app = FastAPI(lifespan=lifespan)


@app.get("/readyz")
async def readyz() -> dict[str, bool]:
    return {"ok": True}


@app.post("/jobs", status_code=202)
async def submit(request: Request) -> Response:
    body: dict[str, Any] = orjson.loads(await request.body())
    task_id = str(uuid.uuid4())
    # Blocking (kombu): in the thread pool, as ours hands its submit to the thread pool.
    await run_in_threadpool(
        _celery.send_task, NOOP_TASK, args=[body["args"]["seq"]], task_id=task_id
    )
    document = {"job_id": task_id, "status": "queued", "poll_url": f"/jobs/{task_id}"}
    return Response(orjson.dumps(document), 202, media_type="application/json")


@app.get("/jobs/{task_id}")
async def read(request: Request, task_id: str, wait: float = 0) -> Response:
    client: aioredis.Redis = request.app.state.redis
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    _waiting.setdefault(task_id, set()).add(future)  # registered before the read: no lost wake
    try:
        stored = await client.get(KEY_PREFIX + task_id)
        if stored is None and wait > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(future, min(wait, MAX_WAIT_S))
            stored = await client.get(KEY_PREFIX + task_id)
    finally:
        mine = _waiting.get(task_id)
        if mine is not None:
            mine.discard(future)
            if not mine:
                del _waiting[task_id]
    status = "queued" if stored is None else str(orjson.loads(stored)["status"]).lower()
    terminal = status in ("success", "failure")
    document = {"job_id": task_id, "status": status, "terminal": terminal}
    return Response(orjson.dumps(document), media_type="application/json")
