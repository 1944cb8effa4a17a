"""`python -m nemesis`: one campaign; see --help."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from nemesis.campaign import Options, run
from nemesis.cluster import Shape
from nemesis.faults import KINDS

HELP = """\
Run a Jepsen-style campaign against Outcome Ledger: a private PostgreSQL and RabbitMQ (on
free ports, in a temporary folder), the API, workers and reconciler as `outcomes` processes
behind fault proxies; a workload of mixed tools over HTTP and MCP at a share of the measured
maximum throughput; a nemesis that kills (-9), freezes (SIGSTOP past the lease) and restarts
workers, the API, the reconciler, PostgreSQL and RabbitMQ, cuts and stalls connections and
pulls the brake, on a schedule drawn from the seed (the same seed replays the same schedule).

Afterwards the reconciler runs to a fixed point and the checker compares the ledger's export
with the ground truth the tools wrote (a file the ledger never reads): lost, duplicated,
unexpected, spend over once, false success, false silence, untold spend, started after the
brake, chains and read models. It prints the table and writes everything (verdict.json,
table.txt, faults.jsonl, truth.jsonl, events.jsonl, ...) to --out. Exit 0 when the verdict is
clean, 1 when a promise was broken, 2 when the campaign itself could not run.
"""


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m nemesis", description=HELP, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=1, help="fault schedule and workload seed")
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of workload")
    parser.add_argument(
        "--rate-share", type=float, default=0.5, help="share of the maximum throughput to submit"
    )
    parser.add_argument(
        "--max-rate", type=float, help="maximum throughput in jobs/s (default: measured first)"
    )
    parser.add_argument("--calibrate", type=float, default=10.0, help="seconds of calibration")
    parser.add_argument(
        "--fault-gap", type=float, default=8.0, help="mean seconds between faults (exponential)"
    )
    parser.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help=f"comma-separated fault kinds (default all: {', '.join(KINDS)})",
    )
    parser.add_argument("--no-faults", action="store_true", help="the workload alone (a soak)")
    parser.add_argument("--workers", type=int, default=2, help="`outcomes worker` processes")
    parser.add_argument("--threads", type=int, default=8, help="each worker's threads")
    parser.add_argument("--lease", type=float, default=4.0, help="OUTCOMES_LEASE_S")
    parser.add_argument("--mcp-share", type=float, default=0.2, help="share submitted over MCP")
    parser.add_argument(
        "--tools", default="nemesis.tools", help="OUTCOMES_TOOLS for the product processes"
    )
    parser.add_argument("--out", type=Path, help="results folder (default .outcomes/chaos/SEED)")
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        print(f"unknown fault kinds: {unknown}", file=sys.stderr)
        return 2
    shape = Shape(
        workers=args.workers, worker_threads=args.threads, lease_s=args.lease, tools=args.tools
    )
    options = Options(
        seed=args.seed,
        duration_s=args.duration,
        rate_share=args.rate_share,
        max_rate=args.max_rate,
        calibrate_s=args.calibrate,
        mean_fault_gap_s=args.fault_gap,
        mcp_share=args.mcp_share,
        kinds=kinds,
        faults=not args.no_faults,
        shape=shape,
    )
    out = args.out or Path(".outcomes") / "chaos" / str(args.seed)
    command = "python -m nemesis " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    try:
        result = run(options, out, command)
    except Exception as exc:
        print(f"nemesis: the campaign could not run: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.verdict.to_json(), indent=2))
    else:
        print((result.out / "table.txt").read_text(), end="")
        print(f"results in {result.out}")
    return 0 if result.verdict.clean else 1


if __name__ == "__main__":
    sys.exit(main())
