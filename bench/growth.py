"""Growth benchmark: the product measured as a ledger grows, every figure at each size in one
run, and the goals judged at the largest size against the empty ledger.

Run:  .venv/bin/python -m bench.growth --stages 0,1000000 [--calls 400] [--archive] [--json]
      [--keep]  (make bench-growth STAGES=0,1000000)

`--keep` leaves the filled ledger's database after a run that ended well (its URL is printed
first), to study what a figure measured; drop it when done.

1. Fill: a scratch Postgres database (dropped afterwards) grows to each stage's number of jobs
   through the product's write path (bench/growth_fill.py: each job's decision, claim and
   outcome as three batched appends, sequenced as it goes, as the reconciler would).
2. At each stage, with a deployment running (`outcomes serve --api-only`, two `outcomes
   worker`s on RabbitMQ, `outcomes reconcile`):
   - 100 jobs' three writes (median of 7, in this process, before the deployment starts),
     right after the fill and again after a CHECKPOINT (the goal judges the second: the
     fill's pages are still being written out, and every commit waits behind them);
   - where an agent's call goes (bench.agents_phases), its median call's and slowest 1%'s;
   - one agent's closed loop (submit a no-op, long-poll its outcome): p50 and p99;
   - `GET /readyz`, a `/metrics` scrape, `GET /v1/audit/summary`, the console's jobs and
     audit pages (median ms);
   - `outcomes status` (its exit code: 0 ready, 3 "API not ready"), `outcomes audit verify`
     and `outcomes audit digest` (seconds, peak RSS, the digest's size), `outcomes rebuild`
     (seconds, peak RSS) with the agent's loop running meanwhile (its p99 against idle);
   - the database's size and its bytes per job, by table.
3. With `--archive`, after the last stage: `outcomes archive --before T --to DIR`, T the time
   90% of the jobs were written by; the database's size (and each table's) before and after,
   how much smaller, `audit verify` of the database and `audit verify --archive DIR`.
   `--no-probes` skips step 2 (fill, then archive: the archive's figures alone, in minutes).
   An archive ends at a boundary of the events' ranges that no job straddles (all of an
   archived job's events are in the archive); the fill keeps ~500 jobs in flight, so at 90% of
   the last stage it pads the ledger to the next boundary with refused jobs (one event each,
   `padding_jobs`, at most one range's worth) and archives what was written before.

The scratch ledger's partitions are sized to the run, so that an archive of 90% can take about
90% (an archive takes whole ranges of the events and drops whole windows of the jobs):
OUTCOMES_PARTITION_SIZE is a thirtieth of the events the largest stage writes
(`--partition-size`), and OUTCOMES_JOBS_PARTITION_HOURS (`--jobs-partition-hours`, 0.01 by
default: 36 s, a thirtieth of a 100k fill here) makes a window of `jobs` a few thousand jobs.
A deployment keeps the defaults (a million positions, a day).

Speed is measured, not asserted: it prints each goal as met or not and exits 0 either way.
Goals at the largest stage: agent p99 <= 1.5x the empty ledger's; /readyz <= 50 ms; a scrape
<= 100 ms; summary and both console pages <= 200 ms; status exits 0; verify's peak RSS <= 512 MB;
agents' p99 during a rebuild <= 3x idle; 100 jobs' writes <= 1.3x the empty ledger's; archiving
90% makes the database >= 80% smaller and both verifies pass.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bench._common import libpq_url, migrate, scratch_database, sqlalchemy_url
from bench.agents_phases import TAIL, Timed, phases
from bench.growth_fill import Filled, align, autovacuum_on, fill, time_three_writes, vacuum
from bench.growth_probes import (
    Ran,
    agent_latencies,
    agent_latencies_while,
    console_client,
    deployment,
    p50_p99,
    request_ms,
    run_command,
    say,
)
from bench.growth_report import judge, render
from bench.http import BROKER
from bench.throughput_workers import delete_queues
from ledger.runtime.ledger import open_ledger
from ledger.services import tokens


@dataclass
class Stage:
    jobs: int
    figures: dict[str, Any] = field(default_factory=dict)


def table_bytes(url: str) -> tuple[int, dict[str, int]]:
    """The database's size, and each table's (with its indexes and TOAST)."""
    with psycopg.connect(libpq_url(url)) as conn:
        size = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        rows = conn.execute(
            "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c"
            " WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p')"
            " AND NOT c.relispartition"
        ).fetchall()
        # A partitioned table's size is its partitions' (their indexes inside it: the
        # partitioned indexes are not listed apart).
        parts = conn.execute(
            "SELECT p.relname, sum(pg_total_relation_size(i.inhrelid)) FROM pg_inherits i"
            " JOIN pg_class p ON p.oid = i.inhparent WHERE p.relkind = 'p' GROUP BY p.relname"
        ).fetchall()
    found = {str(name): int(n) for name, n in rows}
    for name, n in parts:
        found[str(name)] = found.get(str(name), 0) + int(n)
    return int(size[0]) if size else 0, found


def measure(stage: Stage, url: str, env: dict[str, str], logs: Path, calls: int) -> None:
    f = stage.figures
    with open_ledger(url, pool_size=2) as ledger:
        # Right after the fill and its VACUUM, the database is still writing their pages out
        # (gigabytes at 1M: a checkpoint spread over minutes), and each commit's flush waits
        # behind them. Timed then, and again once a CHECKPOINT has written them, as a ledger
        # grown at its own pace would be; the goals judge the second, and every later figure
        # is measured after it.
        f["three_writes_after_fill_ms"] = time_three_writes(ledger)
        f["checkpoint_s"] = checkpoint(url)
        f["three_writes_ms"] = time_three_writes(ledger)
        agent = tokens.create(ledger, "acct-0", "agent", None, "bench-growth").token
        auditor = tokens.create(ledger, "*", "auditor", None, "bench-growth").token
        operator = tokens.create(ledger, "*", "operator", None, "bench-growth").token
    with deployment(env, logs) as (base, _pid):
        timed: list[Timed] = []
        f["agent_p50_ms"], f["agent_p99_ms"] = p50_p99(agent_latencies(base, agent, calls, timed))
        # Where an agent's time goes at this size: the median call's phases and the slowest 1%'s.
        f["agent_phases_ms"] = phases(url, timed)
        f["agent_tail_phases_ms"] = phases(url, timed, slowest=TAIL)
        with httpx.Client(base_url=base, timeout=600) as client:
            f["readyz_ms"] = request_ms(client, "/readyz", 20)
            client.headers["Authorization"] = f"Bearer {operator}"
            f["metrics_ms"] = request_ms(client, "/metrics", 10)
            client.headers["Authorization"] = f"Bearer {auditor}"
            f["summary_ms"] = request_ms(client, "/v1/audit/summary", 10)
        with console_client(base, auditor) as console:
            f["console_jobs_ms"] = request_ms(console, "/console/jobs", 10)
            f["console_audit_ms"] = request_ms(console, "/console/audit", 5)
        status = run_command(["status", "--json"], env | {"OUTCOMES_API_URL": base}, 120)
        f["status_exit"] = status.code
        f["status_s"] = status.seconds
        verify = run_command(["audit", "verify", "--json"], env)
        f["verify"] = _ran(verify)
        digest = run_command(["audit", "digest", "--streams"], env)
        f["digest"] = _ran(digest) | {"bytes": len(digest.stdout.encode())}
        f["idle_p99_ms"] = p50_p99(agent_latencies(base, agent, calls))[1]
        f["rebuild"], f["rebuild_p99_ms"] = _rebuild_under_load(base, agent, env)
    f["db_bytes"], f["tables"] = table_bytes(url)


def checkpoint(url: str) -> float:
    """A CHECKPOINT (the scratch database's superuser): its seconds."""
    begun = time.perf_counter()
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    return time.perf_counter() - begun


def _rebuild_under_load(base: str, token: str, env: dict[str, str]) -> tuple[dict[str, Any], float]:
    done = threading.Event()
    ran: list[Ran] = []

    def rebuild() -> None:
        try:
            ran.append(run_command(["rebuild", "--json"], env))
        finally:
            done.set()

    thread = threading.Thread(target=rebuild)
    thread.start()
    latencies = agent_latencies_while(base, token, lambda: not done.is_set())
    thread.join()
    p99 = p50_p99(latencies)[1] if latencies else 0.0
    return _ran(ran[0]) | {"calls_meanwhile": len(latencies)}, p99


def _ran(ran: Ran) -> dict[str, Any]:
    return {
        "exit": ran.code,
        "seconds": round(ran.seconds, 2),
        "peak_mb": round(ran.peak_mb, 1),
        "error": ran.stderr.strip().splitlines()[-1] if ran.code and ran.stderr.strip() else None,
    }


def jobs_partitions(url: str) -> int:
    with psycopg.connect(libpq_url(url)) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_inherits i WHERE i.inhparent = 'jobs'::regclass"
        ).fetchone()
    return int(row[0]) if row else 0


def archive(url: str, env: dict[str, str], filled: Filled, share: float) -> dict[str, Any]:
    """Archive the jobs written before `share` of the fill, and what that did."""
    before_at = filled.cut or next(at for jobs, at in filled.marks if jobs >= share * filled.jobs)
    settle = ("SELECT outcomes_compact_counts()", "VACUUM")  # as the leader and autovacuum would
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        for statement in settle:
            conn.execute(statement)
    size_before, tables_before = table_bytes(url)
    parts_before = jobs_partitions(url)
    with tempfile.TemporaryDirectory(prefix="bench-growth-archive-") as folder:
        ran = run_command(["archive", "--before", before_at.isoformat(), "--to", folder], env)
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            for statement in settle:
                conn.execute(statement)
        size_after, tables = table_bytes(url)
        verify_db = run_command(["audit", "verify", "--json"], env)
        verify_files = run_command(["audit", "verify", "--archive", folder, "--json"], env)
        files = sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())
    return {
        "before": before_at.isoformat(),
        "padding_jobs": filled.padding,
        "archive": _ran(ran),
        "db_bytes_before": size_before,
        "db_bytes_after": size_after,
        "smaller": round(1 - size_after / size_before, 4) if size_before else None,
        "archive_bytes": files,
        "jobs_partitions_before": parts_before,
        "jobs_partitions_after": jobs_partitions(url),
        "tables_before": tables_before,
        "tables_after": tables,
        "verify_db": _ran(verify_db),
        "verify_archive": _ran(verify_files),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.growth", description=__doc__)
    parser.add_argument("--stages", default="0,100000", help="jobs at each stage, ascending")
    parser.add_argument("--calls", type=int, default=400, help="agent calls timed per stage")
    parser.add_argument("--archive", action="store_true", help="archive 90%% at the end")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--no-probes", action="store_true", help="fill (and archive) only: no deployment"
    )
    parser.add_argument(
        "--partition-size", type=int, default=0, help="positions a partition (0: 1/30 of the run)"
    )
    parser.add_argument(
        "--jobs-partition-hours", type=float, default=0.01, help="a window of jobs, in hours"
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the filled ledger's database after a run that ended well (to study it)",
    )
    options = parser.parse_args(argv)
    stages = [Stage(int(part)) for part in options.stages.split(",") if part.strip()]
    largest = max((s.jobs for s in stages), default=0)
    size = options.partition_size or max(1000, largest * 3 // 30)
    # Fixed at the scratch ledger's first migration (below), in this process.
    os.environ["OUTCOMES_PARTITION_SIZE"] = str(size)
    os.environ["OUTCOMES_JOBS_PARTITION_HOURS"] = str(options.jobs_partition_hours)
    result: dict[str, Any] = {
        "partition_size": size,
        "jobs_partition_hours": options.jobs_partition_hours,
    }
    queue = f"bench-growth-{uuid.uuid4().hex[:8]}"
    with ExitStack() as stack:
        stack.callback(delete_queues, BROKER, [queue])
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-growth-")))
        kept = scratch_database("outcomes_growth", keep=options.keep)
        url = sqlalchemy_url(stack.enter_context(kept))
        if options.keep:
            say(f"the ledger is kept after the run: {url} (drop it when done)")
        migrate(url)
        env = {
            "OUTCOMES_DATABASE_URL": url,
            "OUTCOMES_BROKER_URL": BROKER,
            "OUTCOMES_TOOLS": "bench.throughput_tools",
            "OUTCOMES_QUEUE": queue,
        }
        filled = Filled()
        for n, stage in enumerate(stages):
            with open_ledger(url, pool_size=2) as ledger:
                if options.archive and n == len(stages) - 1 and stage.jobs:
                    # The archive's cut: 90% of the jobs, then a clean boundary (`align`).
                    fill(
                        ledger, filled.jobs + (stage.jobs - filled.jobs) * 9 // 10, filled, say=say
                    )
                    align(ledger, filled)
                    say(f"aligned to a range boundary with {filled.padding} one-event jobs")
                fill(ledger, stage.jobs, filled, say=say)
                if not autovacuum_on(ledger):  # settled as autovacuum would be by now
                    filled.vacuum_s += vacuum(ledger)
            stage.figures["fill_s"] = round(filled.seconds, 1)
            stage.figures["vacuum_s"] = round(filled.vacuum_s, 1)
            if options.no_probes:
                stage.figures["db_bytes"], stage.figures["tables"] = table_bytes(url)
                continue
            say(f"measuring at {stage.jobs} jobs")
            measure(stage, url, env, logs, options.calls)
        if options.archive and stages[-1].jobs:
            say("archiving 90%")
            result["archive"] = archive(url, env, filled, 0.9)
    result["stages"] = [asdict(s) for s in stages]
    result["goals"] = judge(result)
    if options.json:
        print(json.dumps(result, default=str))
    else:
        print(render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
