"""bench.growth's table and its goals: each figure at each stage, the goals judged at the
largest stage against the empty ledger (the first stage)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from bench._common import render_table
from bench.agents_phases import PHASES

MB = 1024 * 1024


def _median(values: Any) -> float:
    return float(statistics.median(values)) if values else float("nan")


def _ms(key: str) -> Callable[[dict[str, Any]], str]:
    return lambda f: f"{_median(f[key]):.1f}" if key in f else "-"


def _ran(key: str) -> Callable[[dict[str, Any]], str]:
    def show(f: dict[str, Any]) -> str:
        ran = f.get(key)
        if not ran:
            return "-"
        text = f"{ran['seconds']:.1f} s / {ran['peak_mb']:.0f} MB"
        return text if ran["exit"] == 0 else f"{text} (exit {ran['exit']})"

    return show


def _phase(name: str) -> Callable[[dict[str, Any]], str]:
    """A phase of the agent's timed calls (bench.agents_phases.PHASES): the median call's, the
    slowest 1%'s ("-" where a call had no moment for it, e.g. its dispatch record pruned)."""

    def shown(f: dict[str, Any]) -> str:
        found = [f[k].get(name) for k in ("agent_phases_ms", "agent_tail_phases_ms")]
        return " / ".join("-" if v is None else f"{v:.1f}" for v in found)

    return shown


ROWS: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    ("agent call p50 / p99 (ms)", lambda f: f"{f['agent_p50_ms']:.1f} / {f['agent_p99_ms']:.1f}"),
    (
        "GET /readyz (ms, median / max)",
        lambda f: f"{_median(f['readyz_ms']):.1f} / {max(f['readyz_ms']):.1f}",
    ),
    ("one /metrics scrape (ms)", _ms("metrics_ms")),
    ("GET /v1/audit/summary (ms)", _ms("summary_ms")),
    ("console jobs page (ms)", _ms("console_jobs_ms")),
    ("console audit page (ms)", _ms("console_audit_ms")),
    ("outcomes status (exit, s)", lambda f: f"{f['status_exit']}, {f['status_s']:.1f} s"),
    ("audit verify (s / peak RSS)", _ran("verify")),
    ("audit digest (s / peak RSS)", _ran("digest")),
    ("audit digest file (MB)", lambda f: f"{f['digest']['bytes'] / MB:.2f}"),
    ("rebuild (s / peak RSS)", _ran("rebuild")),
    (
        "agent p99 idle / during rebuild (ms)",
        lambda f: f"{f['idle_p99_ms']:.0f} / {f['rebuild_p99_ms']:.0f}",
    ),
    *((f"  phase, median / slowest 1% (ms): {name}", _phase(name)) for name, _, _ in PHASES),
    ("100 jobs' three writes (ms)", lambda f: f"{f['three_writes_ms']:.1f}"),
    (
        "  the same right after the fill, before a CHECKPOINT (ms; s it took)",
        lambda f: f"{f['three_writes_after_fill_ms']:.1f}; {f['checkpoint_s']:.1f} s",
    ),
    ("database (MB)", lambda f: f"{f['db_bytes'] / MB:.0f}"),
    ("time to fill so far (s)", lambda f: f"{f.get('fill_s', 0):.0f}"),
    ("of which VACUUM (s; autovacuum off)", lambda f: f"{f.get('vacuum_s', 0):.0f}"),
]


def judge(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Each goal: what it asks, the figure, whether it was met (None: not measured)."""
    stages = result["stages"]
    if not stages:
        return []
    first, last = stages[0]["figures"], stages[-1]["figures"]
    goals: list[dict[str, Any]] = []

    def goal(what: str, value: float | None, met: bool | None) -> None:
        goals.append({"goal": what, "value": value, "met": met})

    if "agent_p99_ms" in last:  # measured (not --no-probes)
        _judge_probes(first, last, goal)
    archived = result.get("archive")
    if archived:
        smaller = 1 - archived["db_bytes_after"] / archived["db_bytes_before"]
        verified = archived["verify_db"]["exit"] == 0 and archived["verify_archive"]["exit"] == 0
        goal(
            "archiving 90% makes the database >= 80% smaller",
            smaller,
            smaller >= 0.8 and archived["archive"]["exit"] == 0,
        )
        goal("both verifies pass after the archive", None, verified)
    return goals


def _judge_probes(
    first: dict[str, Any],
    last: dict[str, Any],
    goal: Callable[[str, float | None, bool | None], None],
) -> None:
    goal(
        "agent p99 <= 1.5x empty",
        last["agent_p99_ms"] / first["agent_p99_ms"],
        last["agent_p99_ms"] <= 1.5 * first["agent_p99_ms"],
    )
    goal("/readyz <= 50 ms", _median(last["readyz_ms"]), max(last["readyz_ms"]) <= 50)
    goal("/metrics <= 100 ms", _median(last["metrics_ms"]), _median(last["metrics_ms"]) <= 100)
    for key in ("summary_ms", "console_jobs_ms", "console_audit_ms"):
        goal(f"{key[:-3]} <= 200 ms", _median(last[key]), _median(last[key]) <= 200)
    goal("status exits 0", last["status_exit"], last["status_exit"] == 0)
    goal(
        "verify peak RSS <= 512 MB",
        last["verify"]["peak_mb"],
        last["verify"]["peak_mb"] <= 512 and last["verify"]["exit"] == 0,
    )
    ratio = last["rebuild_p99_ms"] / last["idle_p99_ms"]
    goal("agent p99 during rebuild <= 3x idle", ratio, ratio <= 3 and last["rebuild"]["exit"] == 0)
    writes = last["three_writes_ms"] / first["three_writes_ms"]
    goal("100 jobs' writes <= 1.3x empty", writes, writes <= 1.3)


def render(result: dict[str, Any]) -> str:
    stages = result["stages"]
    headers = ["figure", *(f"{s['jobs']:,} jobs" for s in stages)]
    rows = []
    for label, show in ROWS:
        cells = []
        for stage in stages:
            try:
                cells.append(show(stage["figures"]))
            except (KeyError, TypeError, ValueError):
                cells.append("-")
        rows.append([label, *cells])
    lines = [render_table(headers, rows)]
    if stages and stages[-1]["jobs"]:
        last = stages[-1]
        tables = sorted(last["figures"].get("tables", {}).items(), key=lambda kv: -kv[1])
        per_job = [[name, f"{size / last['jobs']:.0f}"] for name, size in tables[:8]]
        lines += ["", f"bytes a job by table at {last['jobs']:,} jobs:"]
        lines.append(render_table(["table", "bytes a job"], per_job))
    archived = result.get("archive")
    if archived:
        lines += ["", "archive of the oldest 90%:"]
        before, after = archived.get("tables_before", {}), archived.get("tables_after", {})
        biggest = sorted(before, key=lambda name: -before[name])[:8]
        lines.append(
            render_table(
                ["table", "MB before", "MB after"],
                [
                    [name, f"{before[name] / MB:.1f}", f"{after.get(name, 0) / MB:.1f}"]
                    for name in biggest
                ],
            )
        )
        lines.append(
            render_table(
                [
                    "database before",
                    "after",
                    "smaller",
                    "jobs partitions",
                    "archive files",
                    "archive",
                    "verify db",
                    "verify files",
                ],
                [
                    [
                        f"{archived['db_bytes_before'] / MB:.0f} MB",
                        f"{archived['db_bytes_after'] / MB:.0f} MB",
                        f"{100 * archived.get('smaller', 0):.1f}%",
                        f"{archived.get('jobs_partitions_before', '-')} -> "
                        f"{archived.get('jobs_partitions_after', '-')}",
                        f"{archived['archive_bytes'] / MB:.0f} MB",
                        _ran("archive")(archived),
                        _ran("verify_db")(archived),
                        _ran("verify_archive")(archived),
                    ]
                ],
            )
        )
    lines += ["", "goals at the largest stage:"]
    lines.append(
        render_table(
            ["goal", "figure", "met"],
            [
                [
                    g["goal"],
                    "-" if g["value"] is None else f"{g['value']:.2f}",
                    {True: "yes", False: "NO", None: "-"}[g["met"]],
                ]
                for g in result["goals"]
            ],
        )
    )
    return "\n".join(lines)
