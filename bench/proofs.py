"""Proofs benchmark: what checking the ledger against a tree head costs, against a full check.

Run:  .venv/bin/python -m bench.proofs [--jobs 100000] [--more 10000] [--proofs 200] [--json]
      (make bench-proofs JOBS=100000 MORE=10000)

1. A scratch Postgres database (dropped afterwards) filled through the product's write path
   (bench/growth_fill.py `fill`: each job's decision, claim and outcome, sequenced as it goes)
   to `--jobs` jobs; then `outcomes audit digest -o HEAD` (the tree head: its size in bytes);
   then `--more` jobs more.
2. Each a command in a process of its own, its wall time and peak RSS (wait4):
   `outcomes audit verify` (the whole ledger), `outcomes audit verify --since HEAD` (the events
   after the head and the streams they touch) and `outcomes audit verify --sample 100`.
3. `audit prove`: the receipt of `--proofs` random jobs' outcomes, in this process
   (`ledger.services.proofs.prove`, p50 and p99: what the command and
   `GET /v1/audit/proofs/{job_id}` spend beyond starting up), and one `outcomes audit prove`
   command, start-up included.

Goals (issue 45; printed, never asserted): --since at most 0.2x the full verification's time
and within 256 MB, the head at most 4 KB, a proof within 100 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import text

from bench._common import migrate, percentile, scratch_database, sqlalchemy_url
from bench.growth_fill import Filled, fill
from bench.growth_probes import Ran, run_command, say
from ledger.runtime.ledger import open_ledger
from ledger.services import proofs

GOAL_RATIO = 0.2
GOAL_MB = 256
GOAL_HEAD_BYTES = 4096
GOAL_PROOF_MS = 100


def _ran(ran: Ran) -> dict[str, Any]:
    if ran.code != 0:
        say(f"  exit {ran.code}: {ran.stderr.strip()[-400:]}")
    return {"exit": ran.code, "seconds": round(ran.seconds, 2), "peak_mb": round(ran.peak_mb, 1)}


def prove_ms(url: str, count: int, seed: int = 45) -> list[float]:
    """Milliseconds for each of `count` receipts of random ended jobs, in this process."""
    with open_ledger(url, pool_size=2) as ledger:
        with ledger.store.connection() as conn:  # type: ignore[attr-defined]
            ended = conn.execute(
                text("SELECT job_id FROM jobs WHERE terminal ORDER BY job_id")
            ).scalars()
            job_ids = [str(j) for j in ended]
        picked = random.Random(seed).sample(job_ids, min(count, len(job_ids)))
        proofs.prove(ledger, picked[0])  # a warm connection and caches
        found = []
        for job_id in picked:
            begun = time.perf_counter()
            proofs.prove(ledger, job_id)
            found.append(1000 * (time.perf_counter() - begun))
    return found


def run(jobs: int, more: int, count: int) -> dict[str, Any]:
    # Partitions sized to the run, as bench.growth does (fixed at the ledger's first migration).
    os.environ.setdefault("OUTCOMES_PARTITION_SIZE", str(max(1000, (jobs + more) * 3 // 30)))
    result: dict[str, Any] = {"jobs": jobs, "more": more}
    with (
        scratch_database("outcomes_proofs") as raw_url,
        tempfile.TemporaryDirectory(prefix="bench-proofs-") as folder,
    ):
        url = sqlalchemy_url(raw_url)
        migrate(url)
        env = {"OUTCOMES_DATABASE_URL": url}
        head = Path(folder) / "head.json"
        filled = Filled()
        with open_ledger(url, pool_size=2) as ledger:
            fill(ledger, jobs, filled, say=say)
        digest = run_command(["audit", "digest", "-o", str(head)], env)
        result["digest"] = _ran(digest)
        result["head_bytes"] = head.stat().st_size
        result["head_tree_size"] = json.loads(head.read_bytes())["tree_size"]
        with open_ledger(url, pool_size=2) as ledger:
            fill(ledger, jobs + more, filled, say=say)
        result["fill_s"] = round(filled.seconds, 1)
        say("timing audit verify (whole ledger)")
        full = run_command(["audit", "verify", "--json", "--by", "bench"], env)
        result["verify"] = _ran(full)
        say("timing audit verify --since HEAD")
        since = run_command(
            ["audit", "verify", "--since", str(head), "--json", "--by", "bench"], env
        )
        result["verify_since"] = _ran(since)
        if since.code == 0:
            found = json.loads(since.stdout)
            result["since_events"] = found["events_checked"]
            result["since_streams"] = found["streams_checked"]
        if full.code == 0:
            result["tree_size"] = json.loads(full.stdout)["events_checked"]
        result["ratio"] = round(since.seconds / full.seconds, 3) if full.seconds else None
        say("timing audit verify --sample 100")
        sample = run_command(["audit", "verify", "--sample", "100", "--json", "--by", "bench"], env)
        result["verify_sample_100"] = _ran(sample)
        say(f"timing {count} receipts")
        times = prove_ms(url, count)
        result["prove_ms"] = {
            "n": len(times),
            "p50": round(percentile(times, 0.5), 1),
            "p99": round(percentile(times, 0.99), 1),
        }
        with open_ledger(url, pool_size=1) as ledger, ledger.store.connection() as conn:  # type: ignore[attr-defined]
            job_id = conn.execute(
                text("SELECT job_id FROM jobs WHERE terminal LIMIT 1")
            ).scalar_one()
        result["prove_command"] = _ran(run_command(["audit", "prove", str(job_id)], env))
    return result


def render(result: dict[str, Any]) -> str:
    full, since = result["verify"], result["verify_since"]
    ratio = result["ratio"]
    lines = [
        f"ledger: {result['jobs']} jobs, head taken, then {result['more']} more "
        f"({result.get('tree_size', '?')} events; {result.get('since_events', '?')} after the "
        f"head, in {result.get('since_streams', '?')} streams); fill {result['fill_s']} s",
        f"audit verify            {full['seconds']:>8.2f} s  {full['peak_mb']:>7.1f} MB  "
        f"exit {full['exit']}",
        f"audit verify --since    {since['seconds']:>8.2f} s  {since['peak_mb']:>7.1f} MB  "
        f"exit {since['exit']}   ratio {ratio}x (goal <= {GOAL_RATIO}x, <= {GOAL_MB} MB)",
        f"audit verify --sample 100 {result['verify_sample_100']['seconds']:>6.2f} s  "
        f"{result['verify_sample_100']['peak_mb']:>7.1f} MB  "
        f"exit {result['verify_sample_100']['exit']}",
        f"tree head               {result['head_bytes']} bytes (goal <= {GOAL_HEAD_BYTES})",
        f"audit prove (in-process, n={result['prove_ms']['n']})  p50 "
        f"{result['prove_ms']['p50']} ms  p99 {result['prove_ms']['p99']} ms "
        f"(goal <= {GOAL_PROOF_MS} ms); the command, start-up included: "
        f"{result['prove_command']['seconds']} s",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.proofs", description=__doc__)
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs before the head")
    parser.add_argument("--more", type=int, default=10_000, help="jobs after the head")
    parser.add_argument("--proofs", type=int, default=200, help="receipts timed")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    options = parser.parse_args(argv)
    result = run(options.jobs, options.more, options.proofs)
    print(json.dumps(result) if options.json else render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
