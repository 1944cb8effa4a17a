"""bench.growth judges its goals from the figures it printed: each goal reads the right stage
and the right figure, and one figure over its goal is reported as not met."""

from __future__ import annotations

import copy
import os
import uuid
from typing import Any

import psycopg
import pytest

from bench._common import ADMIN_URL, libpq_url, scratch_database
from bench.growth_report import judge, render


def _figures(p99: float, readyz: float, writes: float) -> dict[str, Any]:
    ran = {"exit": 0, "seconds": 1.0, "peak_mb": 100.0, "error": None}
    return {
        "agent_p50_ms": 8.0,
        "agent_p99_ms": p99,
        "readyz_ms": [readyz, readyz],
        "metrics_ms": [20.0],
        "summary_ms": [5.0],
        "console_jobs_ms": [8.0],
        "console_audit_ms": [30.0],
        "status_exit": 0,
        "status_s": 1.0,
        "verify": ran,
        "digest": ran | {"bytes": 1000},
        "rebuild": ran,
        "idle_p99_ms": 10.0,
        "rebuild_p99_ms": 20.0,
        "three_writes_ms": writes,
        "db_bytes": 10_000_000,
        "tables": {"events": 5_000_000, "jobs": 4_000_000},
    }


def _result(last: dict[str, Any]) -> dict[str, Any]:
    first = _figures(p99=10.0, readyz=2.0, writes=50.0)
    stages = [{"jobs": 0, "figures": first}, {"jobs": 1000, "figures": last}]
    return {"stages": stages}


def _met(result: dict[str, Any]) -> dict[str, bool | None]:
    return {g["goal"]: g["met"] for g in judge(result)}


def test_every_goal_is_met_by_figures_within_them() -> None:
    result = _result(_figures(p99=14.0, readyz=40.0, writes=60.0))
    met = _met(result)
    assert met and all(met.values()), met


def test_each_figure_past_its_goal_is_not_met() -> None:
    base = _figures(p99=14.0, readyz=40.0, writes=60.0)
    for key, value, goal in [
        ("agent_p99_ms", 16.0, "agent p99 <= 1.5x empty"),
        ("readyz_ms", [10.0, 51.0], "/readyz <= 50 ms"),
        ("three_writes_ms", 66.0, "100 jobs' writes <= 1.3x empty"),
        ("rebuild_p99_ms", 31.0, "agent p99 during rebuild <= 3x idle"),
        ("status_exit", 3, "status exits 0"),
    ]:
        figures = copy.deepcopy(base)
        figures[key] = value
        met = _met(_result(figures))
        assert met[goal] is False, (key, met)
        assert sum(1 for m in met.values() if m is False) == 1, (key, met)


def test_the_archive_goal_needs_four_fifths_smaller_and_both_verifies() -> None:
    ok = {"exit": 0, "seconds": 1.0, "peak_mb": 50.0, "error": None}
    result = _result(_figures(p99=14.0, readyz=40.0, writes=60.0))
    result["archive"] = {
        "db_bytes_before": 1000,
        "db_bytes_after": 150,
        "archive_bytes": 300,
        "archive": ok,
        "verify_db": ok,
        "verify_archive": ok | {"exit": 1},
    }
    met = _met(result)
    assert met["archiving 90% makes the database >= 80% smaller"] is True
    assert met["both verifies pass after the archive"] is False
    result["archive"]["db_bytes_after"] = 250
    assert _met(result)["archiving 90% makes the database >= 80% smaller"] is False
    assert "archive of the oldest 90%" in render(result | {"goals": judge(result)})


def test_a_fill_and_archive_alone_is_judged_on_the_archive_and_shows_each_table() -> None:
    """`--no-probes`: no probe figures, so only the archive's goals; the report shows the
    database's and each table's size before and after, and how much smaller."""
    ok = {"exit": 0, "seconds": 1.0, "peak_mb": 50.0, "error": None}
    sizes = {"db_bytes": 1000, "tables": {"jobs": 600, "events": 300}}
    result: dict[str, Any] = {"stages": [{"jobs": 1000, "figures": sizes}]}
    result["archive"] = {
        "db_bytes_before": 1000,
        "db_bytes_after": 150,
        "smaller": 0.85,
        "jobs_partitions_before": 12,
        "jobs_partitions_after": 4,
        "tables_before": {"jobs": 600 * 2**20, "events": 300 * 2**20},
        "tables_after": {"jobs": 60 * 2**20, "events": 30 * 2**20},
        "archive_bytes": 300,
        "archive": ok,
        "verify_db": ok,
        "verify_archive": ok,
    }
    met = _met(result)
    assert met == {
        "archiving 90% makes the database >= 80% smaller": True,
        "both verifies pass after the archive": True,
    }
    shown = render(result | {"goals": judge(result)})
    assert "85.0%" in shown and "12 -> 4" in shown
    assert "600.0" in shown and "60.0" in shown


def _exists(name: str) -> bool:
    with psycopg.connect(libpq_url(ADMIN_URL)) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    return found is not None


def test_a_kept_ledger_outlives_a_run_that_ended_well_and_no_other(pg_database: str) -> None:
    # `bench.growth --keep`: the filled ledger is left to study after a good run; a failed
    # run's is dropped as always.
    prefix = f"outcomes_keep_{uuid.uuid4().hex[:6]}"
    name = f"{prefix}_{os.getpid()}"
    with pytest.raises(RuntimeError), scratch_database(prefix, keep=True):
        raise RuntimeError("the run failed")
    assert not _exists(name)
    try:
        with scratch_database(prefix, keep=True) as url:
            assert name in url
        assert _exists(name)
    finally:
        with psycopg.connect(libpq_url(ADMIN_URL), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    with scratch_database(prefix):
        pass
    assert not _exists(name)
