"""The report of bench.throughput: medians, ratios against the goals, CPU per job; as a table
or as one JSON line."""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from bench._common import Summary, render_table
from bench.throughput_lag import Lag, lag_json
from bench.throughput_variants import BACKEND, BARE, OURS, Round
from bench.throughput_workers import Pool

GOALS = {BARE: 0.5, BACKEND: 2.0}  # ours / variant, at least
STRETCH = {BARE: 0.8}  # ours / variant: the stretch goal beyond GOALS
RATE_GOAL = 1000.0  # recorded jobs per second, at least


@dataclass(frozen=True)
class RunInfo:
    n: int
    rounds: int
    pool: Pool
    broker_url: str
    server: dict[str, str]
    producers: int = 1


@dataclass(frozen=True)
class Result:
    rates: dict[str, Summary]
    send_rates: dict[str, Summary]
    worker_cpu_ms: dict[str, float | None]  # per job, median over rounds
    producer_cpu_ms: dict[str, float | None]
    database_cpu_ms: dict[str, float | None]
    load: tuple[float, float]  # the 1-minute load average before and after the rounds

    def ratio(self, baseline: str) -> float:
        return self.rates[OURS].median / self.rates[baseline].median


def _per_job_ms(values: Sequence[float | None], n: int) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) * 1e3 / n if known else None


def summarize(results: dict[str, list[Round]], n: int, load: tuple[float, float]) -> Result:
    return Result(
        rates={v: Summary(tuple(r.rate(n) for r in rounds)) for v, rounds in results.items()},
        send_rates={
            v: Summary(tuple(r.send_rate(n) for r in rounds)) for v, rounds in results.items()
        },
        worker_cpu_ms={
            v: _per_job_ms([r.worker_cpu_s for r in rounds], n) for v, rounds in results.items()
        },
        producer_cpu_ms={
            v: _per_job_ms([r.producer_cpu_s for r in rounds], n) for v, rounds in results.items()
        },
        database_cpu_ms={
            v: _per_job_ms([r.database_cpu_s for r in rounds], n) for v, rounds in results.items()
        },
        load=load,
    )


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _load_note(load: tuple[float, float]) -> str:
    cpus = os.cpu_count() or 1
    note = f"1-min load average {load[0]:.1f} before the rounds, {load[1]:.1f} after"
    if max(load) > cpus:
        note += f": more than {cpus} CPUs' worth, other work shared this machine"
    return note


def load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def _broker_label(url: str) -> str:
    """The broker's address without credentials."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.rpartition('@')[2]}"


def report_json(
    run: RunInfo, result: Result, lag: tuple[Lag, tuple[Lag, Lag] | None, float] | None = None
) -> str:
    """One JSON line; with `lag` (the rounds', the spells' and --hold-open-s), the lag too."""
    document = (
        {}
        if lag is None
        else {
            "sequencing_lag": {
                "rounds": lag_json(lag[0]),
                "spell": lag_json(lag[1][0] if lag[1] else None),
                "spell_held_open": lag_json(lag[1][1] if lag[1] else None),
            },
            "hold_open_s": lag[2],
        }
    )
    return json.dumps(
        {
            "bench": "throughput",
            "n": run.n,
            "rounds": run.rounds,
            "pool": run.pool.kind,
            "concurrency": run.pool.concurrency,
            "producers": run.producers,
            "broker": _broker_label(run.broker_url),
            "server": run.server,
            "median_jobs_per_s": {v: round(s.median, 1) for v, s in result.rates.items()},
            "rates_jobs_per_s": {
                v: [round(r, 1) for r in s.rates] for v, s in result.rates.items()
            },
            "send_phase_jobs_per_s": {v: round(s.median, 1) for v, s in result.send_rates.items()},
            "worker_cpu_ms_per_job": {
                v: None if c is None else round(c, 3) for v, c in result.worker_cpu_ms.items()
            },
            "producer_cpu_ms_per_job": {
                v: None if c is None else round(c, 3) for v, c in result.producer_cpu_ms.items()
            },
            "postgres_cpu_ms_per_job": {
                v: None if c is None else round(c, 3) for v, c in result.database_cpu_ms.items()
            },
            "load_average_1m": {
                "before": round(result.load[0], 2),
                "after": round(result.load[1], 2),
            },
            "ratio": {f"ours_vs_{v}": round(result.ratio(v), 3) for v in GOALS},
            "goal_ratio": {f"ours_vs_{v}": goal for v, goal in GOALS.items()},
            "goal_met": {f"ours_vs_{v}": result.ratio(v) >= goal for v, goal in GOALS.items()},
            "stretch_ratio": {f"ours_vs_{v}": goal for v, goal in STRETCH.items()},
            "stretch_met": {f"ours_vs_{v}": result.ratio(v) >= goal for v, goal in STRETCH.items()},
            "goal_jobs_per_s": RATE_GOAL,
            "goal_jobs_per_s_met": result.rates[OURS].median >= RATE_GOAL,
            **document,
        }
    )


def report_table(run: RunInfo, result: Result) -> str:
    ours = result.rates[OURS].median
    rows = [
        [
            v,
            f"{s.median:,.0f}",
            f"{s.low:,.0f}",
            f"{s.high:,.0f}",
            f"{1e3 / s.median:.2f}",
            f"{result.send_rates[v].median:,.0f}",
            _ms(result.worker_cpu_ms[v]),
            _ms(result.producer_cpu_ms[v]),
            _ms(result.database_cpu_ms[v]),
            "1.00x" if v == OURS else f"{ours / s.median:.2f}x",
        ]
        for v, s in result.rates.items()
    ]
    headers = [
        "variant",
        "jobs/s",
        "min",
        "max",
        "ms/job",
        "send/s",
        "worker CPU",
        "sender CPU",
        "postgres CPU",
        "ours / it",
    ]
    settings = ", ".join(f"{k}={v}" for k, v in run.server.items())
    pool = run.pool
    return "\n".join(
        [
            f"throughput benchmark: {run.rounds} rounds x {run.n} no-op jobs per variant;"
            f" {run.producers} producer thread(s); 1 worker process each, pool={pool.kind},"
            f" concurrency={pool.concurrency};",
            f"broker {_broker_label(run.broker_url)}; postgres {settings}",
            "",
            render_table(headers, rows),
            "",
            "jobs/s: first send -> last job done (median of rounds, with min and max); send/s:",
            "the sends alone; CPU in ms per job: the worker's processes, this (sending) process,",
            "the Postgres backends connected to the variant's database (RabbitMQ's not counted);",
            _load_note(result.load),
            "goals:",
            *verdicts(result),
        ]
    )


def verdicts(result: Result) -> list[str]:
    """One line per goal: the ratio to each baseline (and the stretch goal where there is
    one), then the recorded jobs per second."""
    lines = []
    for v, goal in GOALS.items():
        ratio = result.ratio(v)
        line = f"  ours / {v}: {ratio:.2f}x (goal >= {goal:.1f}x) -> " + _met(ratio >= goal)
        if v in STRETCH:
            line += f"; stretch >= {STRETCH[v]:.1f}x -> " + _met(ratio >= STRETCH[v])
        lines.append(line)
    rate = result.rates[OURS].median
    lines.append(
        f"  ours: {rate:,.0f} recorded jobs/s (goal >= {RATE_GOAL:,.0f}) -> "
        + _met(rate >= RATE_GOAL)
    )
    return lines


def _met(met: bool) -> str:
    return "met" if met else "NOT met"
