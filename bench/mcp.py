"""MCP benchmark: one MCP tool call round trip next to the same job over plain HTTP.

Run:  .venv/bin/python -m bench.mcp [--calls 30] [--rounds 3] [--json]

A real `outcomes serve` on embedded defaults runs in a scratch folder (SQLite ledger,
filesystem broker, its worker and reconciler), loading `bench.mcp_tools` (a tool that does
nothing). One client in this process measures sequential round trips of that tool:

- ours: an MCP `tools/call` of `bench__noop` over streamable HTTP (`/mcp`, one SDK
  `ClientSession`, initialized once): submit, wait for the outcome, the envelope back;
- baseline: the same job over plain HTTP on one keep-alive connection: `POST /v1/jobs`, then
  `GET /v1/jobs/{id}?wait=30` until the envelope is terminal.

The variants alternate by round (the baseline first in even rounds) so a shared machine's
drift cancels out of the ratio. Reported: median and p90 milliseconds per round trip, and
ours / baseline (a ratio above 1 is the MCP layer's cost). Measured, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from bench._common import render_table
from bench.mcp_tools import NOOP
from ledger.runtime.ledger import open_ledger
from ledger.services import admin, tokens
from ledger.tools import load_tool_modules

ROOT = Path(__file__).resolve().parents[1]
OURS, BASE = "MCP tools/call (streamable HTTP)", "POST /v1/jobs + GET ?wait"
READY_S = 60.0


@dataclass(frozen=True)
class Server:
    base_url: str
    token: str


@contextmanager
def served(home: Path) -> Iterator[Server]:
    """`outcomes serve` on embedded defaults in `home`, and an agent token of its ledger."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTCOMES_")}
    env |= {
        "PYTHONPATH": str(ROOT),
        "OUTCOMES_TOOLS": "bench.mcp_tools",
        "OUTCOMES_DATABASE_URL": f"sqlite:///{home / 'ledger.db'}",
    }
    load_tool_modules(["bench.mcp_tools"])
    with open_ledger(env["OUTCOMES_DATABASE_URL"]) as ledger:
        admin.migrate(ledger)
        token = tokens.create(ledger, "bench", "agent", [NOOP], actor="bench").token
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with (home / "serve.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "cli", "serve", "--port", str(port)],
            cwd=home,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_S
        while not _healthy(base):
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"outcomes serve did not start: see {home / 'serve.log'}")
            time.sleep(0.05)  # polling /healthz until the server answers
        yield Server(base, token)
    finally:
        process.send_signal(signal.SIGTERM)  # serve stops its worker and reconciler
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _healthy(base: str) -> bool:
    try:
        with urllib.request.urlopen(base + "/healthz", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


async def mcp_round_trips(server: Server, calls: int) -> list[float]:
    headers = {"Authorization": f"Bearer {server.token}"}
    times: list[float] = []
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http,
        streamable_http_client(server.base_url + "/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        await session.list_tools()  # the client validates results against the output schema
        name = NOOP.replace(".", "__")
        for _ in range(calls):
            started = time.perf_counter()
            result = await session.call_tool(name, {})
            times.append(time.perf_counter() - started)
            status = (result.structured_content or {}).get("status")
            if status != "succeeded":
                raise SystemExit(f"MCP call answered {status}: {result.content}")
    return times


async def http_round_trips(server: Server, calls: int) -> list[float]:
    headers = {"Authorization": f"Bearer {server.token}"}
    times: list[float] = []
    async with httpx2.AsyncClient(
        base_url=server.base_url, headers=headers, timeout=httpx2.Timeout(30, read=120)
    ) as http:
        for _ in range(calls):
            started = time.perf_counter()
            accepted = await http.post("/v1/jobs", json={"tool": NOOP, "args": {}})
            job: dict[str, Any] = accepted.json()
            while not job.get("terminal"):
                job = (await http.get(f"/v1/jobs/{job['job_id']}", params={"wait": 30})).json()
            times.append(time.perf_counter() - started)
            if job["status"] != "succeeded":
                raise SystemExit(f"HTTP job answered {job['status']}")
    return times


def measure(server: Server, calls: int, rounds: int) -> dict[str, list[float]]:
    variants: dict[str, Callable[[Server, int], Awaitable[list[float]]]] = {
        OURS: mcp_round_trips,
        BASE: http_round_trips,
    }
    for run in variants.values():  # warm up: imports, connections, the worker's first job
        anyio.run(run, server, 3)
    found: dict[str, list[float]] = {OURS: [], BASE: []}
    for index in range(rounds):
        order = [BASE, OURS] if index % 2 == 0 else [OURS, BASE]
        for name in order:
            found[name] += anyio.run(variants[name], server, calls)
    return found


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1] if len(values) >= 2 else values[0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.mcp", description=__doc__)
    parser.add_argument("--calls", type=int, default=30, help="round trips per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per variant")
    parser.add_argument("--json", action="store_true", help="print one JSON line, no table")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-mcp-") as folder, served(Path(folder)) as srv:
        found = measure(srv, args.calls, args.rounds)
    ours, base = statistics.median(found[OURS]), statistics.median(found[BASE])
    if args.json:
        report = {
            name: {"median_ms": statistics.median(v) * 1e3, "p90_ms": p90(v) * 1e3, "n": len(v)}
            for name, v in found.items()
        }
        print(json.dumps(report | {"ratio": ours / base}))
        return
    rows = [
        [name, f"{statistics.median(v) * 1e3:.1f}", f"{p90(v) * 1e3:.1f}", str(len(v))]
        for name, v in found.items()
    ]
    print("round trip of a no-op tool on `outcomes serve` (embedded: SQLite, filesystem broker)")
    print(render_table(["variant", "median ms", "p90 ms", "calls"], rows))
    print(f"ratio ours / baseline (median): {ours / base:.2f}x; measured, not asserted")


if __name__ == "__main__":
    main()
