"""Scrub benchmark: what scrubbing a tool's text costs on hostile input, and what a 256 KiB
echo costs a worker end to end.

Run:  .venv/bin/python -m bench.scrub [--rounds 5] [--postgres | --database-url URL] [--json]

Part 1, `scrub` on 256 KiB inputs built to make backtracking patterns quadratic (`a-a-a-…`
made the old URL pattern take 2.8 s on 80 KiB), on a 256 KiB echo of a known secret, and with
thousands of known secrets. Baseline: a plain copy of the same string (UTF-8 round trip), i.e.
touching every character once.

Part 2, end to end on the worker's own path (`submit`, then `Executor.execute`: claim, run,
classify, scrub, record) on a real ledger: a scratch SQLite file, or with --postgres a
scratch Postgres database `outcomes_bench_scrub_<pid>` (dropped at the end), or with
--database-url a throwaway database of yours (migrated; its events stay). A tool that crashes
echoing its 256 KiB secret argument (a `SecretStr`, sealed at submit) in its exception text,
against a tool that gets the same argument and crashes with a short message. Each run checks
that the job was recorded TOOL_CRASHED and that the recorded detail holds no piece of the
argument.

The median of `--rounds` runs is reported with the ratio ours / baseline. Measured, not
asserted: the goal is that no input brings the scrub near a lease (30 s by default); the script
says whether every case stayed under a second.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, SecretStr

from bench._common import exit_cleanly_on_sigterm, render_table, scratch_database, sqlalchemy_url
from ledger.codes import Code
from ledger.decisions import Caller, JobRequest
from ledger.events import job_stream
from ledger.keyring import new_key_line, parse_keys
from ledger.runtime.ledger import Ledger, open_ledger
from ledger.scrub import known_secrets, scrub
from ledger.services.admin import migrate
from ledger.services.execute import Executor
from ledger.services.submit import submit
from ledger.tools import ToolContext, tool

SIZE = 256 * 1024
GOAL_S = 1.0
ECHO_TOOL, SHORT_TOOL = "bench.echo_crash", "bench.short_crash"


class Echo(BaseModel):
    text: SecretStr  # declared secret: what the scrub looks for


@tool(ECHO_TOOL, spends=False, max_attempts=1)
def echo_crash(args: Echo, ctx: ToolContext) -> None:
    raise RuntimeError(f"the upstream answered: {args.text.get_secret_value()}")


@tool(SHORT_TOOL, spends=False, max_attempts=1)
def short_crash(args: Echo, ctx: ToolContext) -> None:
    raise RuntimeError("the upstream failed")


def hostile(unit: str) -> str:
    return (unit * (SIZE // len(unit) + 1))[:SIZE]


def secret_argument() -> str:
    tail = uuid.uuid4().hex
    return hostile("a-")[: SIZE - len(tail)] + tail


@dataclass(frozen=True)
class Case:
    name: str
    text: str
    secrets: tuple[str, ...] = ()


def cases() -> list[Case]:
    echoed = secret_argument()
    many = [f"value-{n:05d}" for n in range(20_000)]
    found = [
        Case(f"{unit!r} x {SIZE // len(unit)}", hostile(unit))
        for unit in ("a-", "a", "://", "@", "password=", "-eyJ", "token ", "http://a ", "x:")
    ]
    found.append(Case("256 KiB echo of a known secret", echoed, known_secrets({"k": echoed})))
    found.append(Case("20,000 known secrets", hostile(" ".join(many)), known_secrets(many)))
    return found


def median_s(run: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def bench_scrub(rounds: int) -> list[tuple[str, float, float]]:
    rows = []
    for case in cases():
        ours = median_s(lambda c=case: scrub(c.text, c.secrets), rounds)  # type: ignore[misc]
        base = median_s(lambda c=case: c.text.encode().decode(), rounds)  # type: ignore[misc]
        rows.append((case.name, ours, base))
    return rows


def crash_once(ledger: Ledger, tool_name: str, argument: str) -> float:
    job = submit(ledger, Caller("bench", "tok-bench"), JobRequest(tool_name, {"text": argument}))
    started = time.perf_counter()
    Executor(ledger, "bench-worker").execute(job.view.job_id)
    took = time.perf_counter() - started
    recorded = ledger.store.read_stream(job_stream(job.view.job_id))
    last = recorded[-1]
    if last.code is not Code.TOOL_CRASHED:
        raise SystemExit(f"{tool_name}: recorded {last.type} {last.code}, not TOOL_CRASHED")
    if argument[-32:] in str(last.data) or "a-a-a-a-a-a-a-a-" in str(last.data):
        raise SystemExit(f"{tool_name}: the recorded detail holds the argument")
    return took


def with_keys(ledger: Ledger) -> Ledger:
    """The ledger with the keys that seal the secret arguments: its own (OUTCOMES_SECRETS_KEY,
    or the SQLite ledger's key file), else a throwaway one for this run (a Postgres ledger has
    no key file beside it, and without a key a secret argument is refused at submit)."""
    if ledger.secrets is not None:
        return ledger
    return Ledger(ledger.store, parse_keys(new_key_line("bench"), "the bench's throwaway key"))


def bench_end_to_end(url: str, rounds: int) -> tuple[float, float]:
    with open_ledger(url) as opened:
        migrate(opened)
        ledger = with_keys(opened)
        ours = statistics.median(
            crash_once(ledger, ECHO_TOOL, secret_argument()) for _ in range(rounds)
        )
        base = statistics.median(
            crash_once(ledger, SHORT_TOOL, secret_argument()) for _ in range(rounds)
        )
    return ours, base


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.scrub", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="runs per case (median reported)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--postgres", action="store_true", help="a scratch Postgres database")
    where.add_argument("--database-url", help="a throwaway ledger (default: scratch SQLite)")
    parser.add_argument("--json", action="store_true", help="print one JSON line, no table")
    args = parser.parse_args(argv)
    rows = bench_scrub(args.rounds)
    with ExitStack() as stack:
        if args.postgres:
            stack.enter_context(exit_cleanly_on_sigterm())
            url = sqlalchemy_url(stack.enter_context(scratch_database("outcomes_bench_scrub")))
        elif args.database_url:
            url = args.database_url
        else:
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-scrub-"))
            url = f"sqlite:///{Path(folder) / 'ledger.db'}"
        e2e = bench_end_to_end(url, args.rounds)
    ledger_name = (
        "Postgres" if args.postgres else "the given ledger" if args.database_url else "SQLite"
    )
    met = all(ours < GOAL_S for _, ours, _ in rows) and e2e[0] < GOAL_S
    if args.json:
        report = {
            "scrub": [{"case": n, "ours_s": o, "baseline_s": b} for n, o, b in rows],
            "end_to_end": {"ours_s": e2e[0], "baseline_s": e2e[1]},
            "goal_met": met,
        }
        print(json.dumps(report))
        return
    table = [[n, f"{o * 1e3:.2f}", f"{b * 1e3:.2f}", f"{o / b:.1f}x"] for n, o, b in rows]
    print("scrub of 256 KiB inputs (baseline: a plain copy of the string)")
    print(render_table(["input", "ours ms", "baseline ms", "ratio"], table))
    print()
    print("end to end, submit + execute on", ledger_name)
    e2e_row = [
        "crash echoing a 256 KiB argument (baseline: a short message)",
        f"{e2e[0] * 1e3:.1f}",
        f"{e2e[1] * 1e3:.1f}",
        f"{e2e[0] / e2e[1]:.2f}x",
    ]
    print(render_table(["case", "ours ms", "baseline ms", "ratio"], [e2e_row]))
    print(
        f"\ngoal (every case under {GOAL_S:g} s, far below a lease): {'met' if met else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
