"""bench.poll's figures and report: one round of reads (ReadRun), the percentile it takes, and
the run's result (medians, the ratio ours / bare, the wake-ups) judged against the goals, as a
dict for the JSON line or printed as a table."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from bench._common import render_table

READ_GOAL, WAKE_GOAL_MS = 0.8, 20.0
OURS, BARE = "GET /v1/jobs/{id}", "bare SELECT endpoint"


@dataclass(frozen=True)
class ReadRun:
    rate: float  # requests per second
    p99_ms: float


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered)) - 1))]


def report(reads: dict[str, list[ReadRun]], wakes: list[float]) -> dict[str, object]:
    rate = {v: statistics.median(r.rate for r in runs) for v, runs in reads.items()}
    p99 = {v: statistics.median(r.p99_ms for r in runs) for v, runs in reads.items()}
    ratio = statistics.median(
        o.rate / b.rate for o, b in zip(reads[OURS], reads[BARE], strict=True)
    )
    wake_p99 = percentile(wakes, 99)
    return {
        "reads": {v: {"rps": round(rate[v]), "p99_ms": round(p99[v], 2)} for v in rate},
        "ratio": round(ratio, 3),
        "ratio_goal_met": ratio >= READ_GOAL,
        "waiters": len(wakes),
        "wake_ms": {
            "p50": round(percentile(wakes, 50), 2),
            "p99": round(wake_p99, 2),
            "max": round(max(wakes), 2),
        },
        "wake_goal_met": wake_p99 <= WAKE_GOAL_MS,
    }


def print_table(result: dict[str, object]) -> None:
    reads = result["reads"]
    assert isinstance(reads, dict)
    rows = [[v, f"{m['rps']}", f"{m['p99_ms']:.2f}"] for v, m in reads.items()]
    print(render_table(["endpoint", "requests/s (median)", "p99 ms (median)"], rows))
    goal = "met" if result["ratio_goal_met"] else "NOT met"
    print(f"\nratio ours/bare, median of rounds: {result['ratio']}x (goal >= {READ_GOAL}x: {goal})")
    wake = result["wake_ms"]
    assert isinstance(wake, dict)
    goal = "met" if result["wake_goal_met"] else "NOT met"
    print(
        f"long-poll wake-up, {result['waiters']} waiters: p50 {wake['p50']} ms, "
        f"p99 {wake['p99']} ms, max {wake['max']} ms (goal p99 <= {WAKE_GOAL_MS} ms: {goal})"
    )
