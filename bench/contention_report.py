"""bench.contention's report: each variant's figures over its rounds (Figures), a run's sides
and its A/B ratios and goals (Run), as one JSON line or as a table with its goal lines."""

from __future__ import annotations

import json
import statistics
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench._common import render_table
from bench.contention_round import (
    BASELINE,
    LEDGER,
    SAMPLE_INTERVAL_S,
    VARIANTS,
    WARMUP_CALLS,
    Options,
    Phase,
    Round,
)

GOAL_AB = 1.5  # appends/s, ours / theirs (main): at least
GOAL_LOCK = 0.05  # advisory-lock waits per job, ours / theirs (main): at most
OURS, THEIRS = "ours", "theirs"


def commit_of(code: str) -> str:
    """The checkout's commit, "+ changes" when its work tree differs from it."""

    def git(*args: str) -> str:
        try:
            answer = subprocess.run(["git", *args], cwd=code, capture_output=True, text=True)
        except OSError:  # no git, or no such directory
            return ""
        return answer.stdout.strip() if answer.returncode == 0 else ""

    head = git("rev-parse", "--short=12", "HEAD") or "unknown"
    return f"{head} + changes" if git("status", "--porcelain", "--untracked-files=no") else head


# --- figures, goals and the report ---------------------------------------------------------------


@dataclass(frozen=True)
class Figures:
    """One variant of one side over its rounds."""

    rates: tuple[float, ...]
    p50_ms: float  # median over rounds of each round's p50
    p99_ms: float
    jobs: int
    advisory_per_job: float  # sampled: sum of waiting backends over samples / jobs
    advisory_ms_per_job: float  # sampled: that sum x the mean period / jobs
    lock_per_job: float  # the same as advisory_per_job, for any lock wait

    @classmethod
    def of(cls, phases: Sequence[Phase]) -> Figures:
        jobs = sum(p.jobs for p in phases) or 1
        advisory_s = sum(p.samples.advisory * p.samples.period_s for p in phases)
        return cls(
            tuple(p.rate for p in phases),
            statistics.median(p.p50_ms for p in phases),
            statistics.median(p.p99_ms for p in phases),
            sum(p.jobs for p in phases),
            sum(p.samples.advisory for p in phases) / jobs,
            1000 * advisory_s / jobs,
            sum(p.samples.lock for p in phases) / jobs,
        )

    @property
    def median(self) -> float:
        return statistics.median(self.rates)


def ratio(ours: float, theirs: float) -> float | None:
    return ours / theirs if theirs else None


def rate_goal_met(ab: float) -> bool:
    return ab >= GOAL_AB


def lock_goal_met(ours: float, theirs: float) -> bool:
    """Ours <= GOAL_LOCK x theirs; with no wait seen on theirs, met only with none on ours."""
    lock_ratio = ratio(ours, theirs)
    return ours == 0 if lock_ratio is None else lock_ratio <= GOAL_LOCK


@dataclass(frozen=True)
class Run:
    options: Options
    load: tuple[float, float]  # 1-minute load average before and after: noise indicator
    rounds: dict[str, list[Round]]  # per side: ours, and with --vs theirs

    def figures(self, side: str) -> dict[str, Figures]:
        return {v: Figures.of([r.phases[v] for r in self.rounds[side]]) for v in VARIANTS}

    def vs_baseline(self, side: str) -> float:
        figures = self.figures(side)
        return figures[LEDGER].median / figures[BASELINE].median

    @property
    def versus(self) -> bool:
        return THEIRS in self.rounds

    def ab_rate(self) -> float:
        return self.figures(OURS)[LEDGER].median / self.figures(THEIRS)[LEDGER].median

    def lock_waits(self) -> tuple[float, float]:
        """Advisory-lock waits per job, ours and theirs (the ledger variant)."""
        ours, theirs = (self.figures(s)[LEDGER].advisory_per_job for s in (OURS, THEIRS))
        return ours, theirs

    def goals(self) -> dict[str, bool] | None:
        if not self.versus:
            return None
        return {
            "ab_rate": rate_goal_met(self.ab_rate()),
            "lock_waits": lock_goal_met(*self.lock_waits()),
        }


def figures_json(figures: Figures) -> dict[str, Any]:
    return {
        "median_per_s": round(figures.median, 1),
        "rates_per_s": [round(r, 1) for r in figures.rates],
        "p50_ms": round(figures.p50_ms, 3),
        "p99_ms": round(figures.p99_ms, 3),
        "jobs": figures.jobs,
        "advisory_waits_per_job": round(figures.advisory_per_job, 4),
        "advisory_wait_ms_per_job": round(figures.advisory_ms_per_job, 4),
        "lock_waits_per_job": round(figures.lock_per_job, 4),
    }


def side_json(run: Run, side: str) -> dict[str, Any]:
    rounds = run.rounds[side]
    return {
        "code": rounds[0].code,
        "commit": commit_of(rounds[0].code),
        "appended": sum(r.appended for r in rounds),
        "baseline_rows": sum(
            WARMUP_CALLS * run.options.threads + r.phases[BASELINE].jobs for r in rounds
        ),
        "variants": {v: figures_json(f) for v, f in run.figures(side).items()},
        "ledger_vs_baseline": round(run.vs_baseline(side), 3),
        "samples": sum(r.phases[v].samples.count for r in rounds for v in VARIANTS),
    }


def report_json(run: Run) -> str:
    answer: dict[str, Any] = {
        "bench": "contention",
        "threads": run.options.threads,
        "seconds": run.options.seconds,
        "rounds": run.options.rounds,
        "server": run.rounds[OURS][0].server,
        "load_avg_1m": [round(x, 2) for x in run.load],
        "sides": {side: side_json(run, side) for side in run.rounds},
        "goal_ab_rate": GOAL_AB,
        "goal_lock_waits_ratio": GOAL_LOCK,
        "goals_met": run.goals(),
    }
    if run.versus:
        ours, theirs = run.lock_waits()
        lock_ratio = ratio(ours, theirs)
        answer["ab_rate"] = round(run.ab_rate(), 3)
        answer["lock_waits_ratio"] = None if lock_ratio is None else round(lock_ratio, 4)
    return json.dumps(answer)


def table_row(label: str, figures: Figures, vs_raw: str) -> list[str]:
    return [
        label,
        f"{figures.median:,.0f}",
        f"{min(figures.rates):,.0f}",
        f"{max(figures.rates):,.0f}",
        f"{figures.p50_ms:.2f}",
        f"{figures.p99_ms:.2f}",
        f"{figures.advisory_per_job:.3f}",
        f"{figures.advisory_ms_per_job:.3f}",
        f"{figures.lock_per_job:.3f}",
        vs_raw,
    ]


def table_rows(run: Run) -> list[list[str]]:
    rows = []
    for side in run.rounds:
        figures = run.figures(side)
        rows.append(
            table_row(f"{side}: {LEDGER}", figures[LEDGER], f"{run.vs_baseline(side):.2f}x")
        )
        rows.append(table_row(f"{side}: {BASELINE}", figures[BASELINE], "1.00x"))
    return rows


HEADERS = [
    "side: variant",
    "median appends/s",
    "min",
    "max",
    "p50 ms",
    "p99 ms",
    "advisory waits/job",
    "est. advisory ms/job",
    "any-lock waits/job",
    "vs raw",
]


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def goal_lines(run: Run) -> list[str]:
    if not run.versus:
        return [
            f"goals (A/B >= {GOAL_AB:.1f}x; lock waits per job <= {GOAL_LOCK:.2f}x main's):"
            " not measured, they need --vs PATH (a checkout of main)"
        ]
    ab = run.ab_rate()
    ours, theirs = run.lock_waits()
    lock_ratio = ratio(ours, theirs)
    shown = "n/a (theirs: none seen)" if lock_ratio is None else f"{lock_ratio:.3f}x"
    return [
        f"A/B, appends/s ours / theirs: {ab:.2f}x",
        f"advisory-lock waits per job, ours / theirs: {ours:.3f} / {theirs:.3f} = {shown}",
        f"goal: A/B >= {GOAL_AB:.1f}x -> {verdict(rate_goal_met(ab))}",
        f"goal: lock waits per job ours / theirs <= {GOAL_LOCK:.2f}x"
        f" -> {verdict(lock_goal_met(ours, theirs))}",
    ]


def header_lines(run: Run) -> list[str]:
    options = run.options
    periods = [
        p.samples.period_s for rs in run.rounds.values() for r in rs for p in r.phases.values()
    ]
    settings = ", ".join(f"{k}={v}" for k, v in run.rounds[OURS][0].server.items())
    return [
        f"contention: {options.rounds} round(s) x {options.seconds:g} s per variant,"
        f" {options.threads} threads, one single-event append (or INSERT) per transaction;"
        " medians over rounds",
        *(f"{side}: {r[0].code} ({commit_of(r[0].code)})" for side, r in run.rounds.items()),
        f"postgres: {settings}",
        f"load average (1 min) before/after: {run.load[0]:.2f} / {run.load[1]:.2f}",
        f"lock waits sampled in pg_stat_activity every ~{SAMPLE_INTERVAL_S * 1000:.0f} ms"
        f" (mean period {1000 * statistics.mean(periods):.1f} ms): estimates",
    ]


def report_table(run: Run) -> str:
    return "\n".join(
        [
            *header_lines(run),
            "",
            render_table(HEADERS, table_rows(run)),
            "",
            *goal_lines(run),
            "(measured, not asserted: the exit status is 0 either way)",
        ]
    )
