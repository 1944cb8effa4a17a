"""The report of bench.reconcile: each scan's times on ledger A and ledger B, the ratio B / A
against the goals, and the EXPLAIN plans asked for; as a table or as one JSON line."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import psycopg

from bench._common import libpq_url, render_table, server_settings
from bench.reconcile_ledgers import FilledLedger
from bench.reconcile_plan import LARGE, SMALL, Options
from bench.reconcile_scans import GOAL_SCANS, Timings, uses_open_index

GOAL_RATIO = 1.5
GOAL_LARGE_MS = 50.0


def postgres_settings(url: str) -> dict[str, str]:
    names = ("server_version", "shared_buffers", "work_mem", "random_page_cost", "jit")
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        return server_settings(conn, names)


def verdicts(timings: Timings) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = {}
    for scan in timings:
        small, large = timings[scan][SMALL].median, timings[scan][LARGE].median
        ratio = large / small
        result[scan] = {
            "ratio": ratio,
            "ratio_met": ratio <= GOAL_RATIO,
            "large_met": large <= GOAL_LARGE_MS,
        }
    return result


@dataclass(frozen=True)
class Report:
    options: Options
    ledgers: dict[str, FilledLedger]
    timings: Timings
    server: dict[str, str]
    plans: dict[str, list[str]]  # "<ledger> <clock>" -> EXPLAIN lines (with --explain)


def report_json(report: Report) -> str:
    judged = verdicts(report.timings)
    explained = {
        key: {"uses_open_index": uses_open_index(lines), "plan": lines}
        for key, lines in report.plans.items()
    }
    return json.dumps(
        {
            "bench": "reconcile",
            "open_jobs": report.options.open_jobs,
            "running": report.options.running,
            "reps": report.options.reps,
            "server": report.server,
            "ledgers": {
                name: {
                    "events": filled.check.events,
                    "jobs": filled.check.jobs,
                    "open_jobs": filled.check.open_jobs,
                    "leases": filled.check.leases,
                    "events_verified": filled.check.events_verified,
                    "streams_verified": filled.check.streams_verified,
                    "fill_s": round(filled.check.fill_s, 1),
                    "churned_jobs": filled.churned,
                }
                for name, filled in report.ledgers.items()
            },
            "scans_ms": {
                scan: {
                    name: {
                        "median": round(t.median, 3),
                        "p95": round(t.p95, 3),
                        "min": round(t.low, 3),
                        "cpu_median": round(t.cpu_median, 3),
                    }
                    for name, t in by.items()
                }
                for scan, by in report.timings.items()
            },
            "ratio": {scan: round(v["ratio"], 3) for scan, v in judged.items()},
            "goal": {"ratio_max": GOAL_RATIO, "large_ms_max": GOAL_LARGE_MS},
            "goal_met": {
                scan: judged[scan]["ratio_met"] and judged[scan]["large_met"]
                for scan in GOAL_SCANS
                if scan in judged
            },
            "explain": explained,
        }
    )


def report_table(report: Report) -> str:
    judged = verdicts(report.timings)
    rows = []
    for scan, by in report.timings.items():
        for name, t in by.items():
            filled = report.ledgers[name]
            rows.append(
                [
                    f"{scan} ({name})",
                    f"{filled.check.events:,}",
                    f"{filled.check.jobs:,}",
                    f"{t.median:.2f}",
                    f"{t.p95:.2f}",
                    f"{t.low:.2f}",
                    f"{t.cpu_median:.2f}",
                    f"{judged[scan]['ratio']:.2f}x" if name == LARGE else "",
                ]
            )
    headers = ["scan (ledger)", "events", "jobs", "median ms", "p95 ms", "min ms", "cpu ms"]
    headers.append("B / A")
    lines = [
        f"reconcile benchmark: {report.options.reps} scans per ledger, "
        f"{report.options.open_jobs:,} open jobs ({report.options.running:,} running) in each "
        f"({', '.join(f'{k}={v}' for k, v in report.server.items())})",
        "fill: "
        + "; ".join(
            f"{n}: {lg.check.events:,} events in {lg.check.fill_s:.0f} s, "
            f"{lg.check.events_verified:,} events / {lg.check.streams_verified:,} streams "
            f"verified, {lg.churned:,} churned"
            for n, lg in report.ledgers.items()
        ),
        "",
        render_table(headers, rows),
        "",
        f"goals (median): B / A <= {GOAL_RATIO}, B <= {GOAL_LARGE_MS:.0f} ms",
    ]
    for scan in (s for s in GOAL_SCANS if s in judged):
        v = judged[scan]
        large = report.timings[scan][LARGE].median
        lines.append(
            f"  {scan}: ratio {v['ratio']:.2f}x -> {'met' if v['ratio_met'] else 'NOT met'}; "
            f"B {large:.2f} ms -> {'met' if v['large_met'] else 'NOT met'}"
        )
    for key, plan in report.plans.items():
        verdict = "uses ix_jobs_open" if uses_open_index(plan) else "does NOT use ix_jobs_open"
        lines += ["", f"EXPLAIN (ANALYZE, BUFFERS), {key}: {verdict}", *plan]
    return "\n".join(lines)
