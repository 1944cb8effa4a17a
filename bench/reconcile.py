"""Reconcile benchmark: one scan with 1,000 open jobs, in a ledger of 10k events and of 1M events.

Run:  .venv/bin/python -m bench.reconcile [--small 10000] [--large 1000000]
                          [--open 1000] [--running 500] [--reps 50] [--explain] [--json]
                          [--verify-large] [--no-churn]

Two scratch Postgres databases, ledger A (--small) and ledger B (--large), named
`outcomes_bench_reconcile_{small,large}_<pid>` (admin URL from
OUTCOMES_BENCH_PG_ADMIN, default postgres@127.0.0.1:5432) are created, migrated to head, filled,
and dropped at the end, on error and SIGTERM too. Each ledger holds exactly `--open` open jobs
(`--running` of them running with a valid lease, the others queued) among closed jobs, so that
the two ledgers differ only in how much closed history they carry.

Filling (bench/reconcile_history.py, bench/reconcile_ledgers.py). The closed history
(job.accepted -> work.started -> work.succeeded per job; one job.refused per leftover event so
that the event count is exact) is built with the store's own code: each event sealed by
`ledger.chain.event_rows` as an append seals it (payload dumped and normalized, per-stream hash
chain), the job read model folded by `ledger.job_fold.evolve` and shaped by the jobs
`ViewProjection.row`; it is bulk-loaded with COPY, the position sequence is moved past it, and
then the open jobs go through the real `ledger.services.submit.submit` (and
`ledger.services.work.claim` for the running ones). Ledger A is then verified in full
(`ledger.services.audit.verify` and a rebuild of the jobs read model compared row by row;
bench/reconcile_checks.py); ledger B by counts and the same two checks on a random sample of
job streams (all of it with --verify-large). Both get VACUUM (ANALYZE), the state autovacuum
leaves a ledger in.

Measured (bench/reconcile_scans.py), `--reps` times per ledger after a warm-up, A and B
interleaved to cancel drift, first on the vacuumed ledgers:

- steady    `reconcile_once(ledger, None, policy, at=now)` where nothing is overdue (the common
            case: the scan finds nothing, appends nothing).
- overdue   the reconciler's read, `Reads.overdue_jobs(now, dispatch_cutoff(now, policy))`,
            + `findings(...)` at a `now` where all open jobs are overdue (every one yields a
            finding); nothing is appended, so it repeats.
- overdue_sql  the SQL statement that read sends, run on the same pool and fetched, without
            building views (to tell the database's share from Python's).

then (unless --no-churn) after `churn` (bench/reconcile_churn.py): the jobs closed since
autovacuum last ran leave dead row versions, and their entries in ix_jobs_open, until a VACUUM
removes them; each ledger gets as many as make autovacuum's default trigger fire on its jobs
table (20% of its rows), the worst moment of a live ledger's steady state, and the same two
scans are measured again:

- steady_churned, overdue_churned   as steady and overdue.

Goals (issue 4), on the median of each scan: B / A <= 1.5 and B <= 50 ms. The script reports
whether they were met and exits 0 either way: speed is measured here, not asserted.
--explain prints EXPLAIN (ANALYZE, BUFFERS) of the scan query on B (vacuumed at both clocks;
churned at the steady clock) and whether it uses the open-jobs partial index (ix_jobs_open)
rather than scanning the jobs table.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from bench._common import exit_cleanly_on_sigterm
from bench.reconcile_churn import churn
from bench.reconcile_ledgers import ledgers
from bench.reconcile_plan import LARGE, Options, Plan
from bench.reconcile_report import Report, postgres_settings, report_json, report_table
from bench.reconcile_scans import CHURNED_SCANS, VACUUMED_SCANS, Scanner, explain, measure


def parse_options(argv: Sequence[str] | None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m bench.reconcile", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--small", type=int, default=10_000, help="events in ledger A")
    parser.add_argument("--large", type=int, default=1_000_000, help="events in ledger B")
    parser.add_argument("--open", type=int, default=1000, help="open jobs in each ledger")
    parser.add_argument("--running", type=int, default=500, help="of them, running (leased)")
    parser.add_argument("--reps", type=int, default=50, help="timed scans per ledger and kind")
    parser.add_argument("--explain", action="store_true", help="EXPLAIN ANALYZE the scan on B")
    parser.add_argument("--json", action="store_true", help="print one JSON line, no table")
    parser.add_argument(
        "--verify-large", action="store_true", help="verify all of B, not a sample (slow)"
    )
    parser.add_argument(
        "--no-churn", action="store_true", help="skip the scans after churn (see `churn`)"
    )
    args = parser.parse_args(argv)
    if args.reps < 1 or args.open < 1 or not 0 <= args.running <= args.open:
        parser.error("--reps and --open must be at least 1, and 0 <= --running <= --open")
    options = Options(
        args.small,
        args.large,
        args.open,
        args.running,
        args.reps,
        args.explain,
        args.json,
        args.verify_large,
        not args.no_churn,
    )
    for size in (options.small, options.large):
        if size < Plan(size, options.open_jobs, options.running).open_events:
            parser.error(f"a ledger of {size} events cannot hold {options.open_jobs} open jobs")
    return options


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(argv)
    with exit_cleanly_on_sigterm(), ledgers(options) as built:
        scanners = {name: Scanner(filled) for name, filled in built.items()}
        large = scanners[LARGE]
        timings = measure(scanners, options.reps, VACUUMED_SCANS)
        plans: dict[str, list[str]] = {}
        if options.explain:
            plans["B vacuumed, steady clock"] = explain(large, large.filled.steady_now)
            plans["B vacuumed, overdue clock"] = explain(large, large.overdue_now)
        if options.churn:
            for filled in built.values():
                churn(filled)
            timings |= measure(scanners, options.reps, CHURNED_SCANS)
            if options.explain:
                plans["B churned, steady clock"] = explain(large, large.filled.steady_now)
        server = postgres_settings(built[LARGE].url)
    report = Report(options, built, timings, server, plans)
    print(report_json(report) if options.as_json else report_table(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
