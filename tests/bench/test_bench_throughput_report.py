"""bench.throughput says each goal as the speed issue states it: at least 0.5x bare Celery
(0.8x a stretch), 2x Celery with its DB result backend, 1,000 recorded jobs per second; met or
not, in the table and in the JSON line."""

from __future__ import annotations

import json

from bench._common import Summary
from bench.throughput_report import Result, RunInfo, report_json, verdicts
from bench.throughput_variants import BACKEND, BARE, OURS
from bench.throughput_workers import Pool


def result(ours: float, bare: float, backend: float) -> Result:
    rates = {OURS: ours, BARE: bare, BACKEND: backend}
    return Result(
        rates={v: Summary((r * 0.9, r, r * 1.1)) for v, r in rates.items()},
        send_rates={v: Summary((r,)) for v, r in rates.items()},
        worker_cpu_ms={v: 0.5 for v in rates},
        producer_cpu_ms={v: 0.3 for v in rates},
        database_cpu_ms={v: None for v in rates},
        load=(1.0, 1.0),
    )


def test_half_of_bare_celery_meets_the_goal_but_not_the_stretch() -> None:
    lines = verdicts(result(ours=1100, bare=2000, backend=150))
    assert lines == [
        "  ours / bare_celery: 0.55x (goal >= 0.5x) -> met; stretch >= 0.8x -> NOT met",
        "  ours / celery_db_backend: 7.33x (goal >= 2.0x) -> met",
        "  ours: 1,100 recorded jobs/s (goal >= 1,000) -> met",
    ]


def test_each_goal_missed_is_said_so() -> None:
    lines = verdicts(result(ours=900, bare=2000, backend=600))
    assert lines == [
        "  ours / bare_celery: 0.45x (goal >= 0.5x) -> NOT met; stretch >= 0.8x -> NOT met",
        "  ours / celery_db_backend: 1.50x (goal >= 2.0x) -> NOT met",
        "  ours: 900 recorded jobs/s (goal >= 1,000) -> NOT met",
    ]


def test_the_json_line_carries_the_same_verdicts() -> None:
    run = RunInfo(600, 3, Pool("threads", 16, "WARNING"), "amqp://guest:guest@host:5672//", {}, 16)
    line = json.loads(report_json(run, result(ours=1700, bare=2000, backend=150)))
    assert line["goal_ratio"] == {"ours_vs_bare_celery": 0.5, "ours_vs_celery_db_backend": 2.0}
    assert line["goal_met"] == {"ours_vs_bare_celery": True, "ours_vs_celery_db_backend": True}
    assert line["stretch_met"] == {"ours_vs_bare_celery": True}
    assert (line["goal_jobs_per_s"], line["goal_jobs_per_s_met"]) == (1000.0, True)
    assert line["broker"] == "amqp://host:5672//"  # no credentials in the report
