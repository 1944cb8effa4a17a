"""bench.contention: options, the threads' counting, the figures, ratios and goal verdicts on
given numbers, and two short real runs on Postgres: one whose reported jobs are counted back in
the tables, one with --vs against this same checkout."""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bench._common import libpq_url, percentile
from bench.contention import ROOT, main, parse_options, side_turns
from bench.contention_report import (
    GOAL_AB,
    GOAL_LOCK,
    OURS,
    THEIRS,
    Figures,
    Run,
    goal_lines,
    lock_goal_met,
    rate_goal_met,
    report_json,
    report_table,
)
from bench.contention_round import (
    BASELINE,
    LEDGER,
    Budget,
    Call,
    Options,
    Phase,
    Round,
    Samples,
    drive,
)
from tests.databases import require_postgres

# --- options -------------------------------------------------------------------------------------


def test_the_defaults_are_sixteen_threads_five_seconds_three_rounds() -> None:
    options = parse_options([])
    assert (options.threads, options.seconds, options.rounds) == (16, 5.0, 3)
    assert options.vs is None and options.database_url is None and not options.as_json
    assert not options.worker


def test_the_options_are_read() -> None:
    options = parse_options(["--threads", "2", "--seconds", "0.5", "--rounds", "1", "--json"])
    assert (options.threads, options.seconds, options.rounds, options.as_json) == (2, 0.5, 1, True)
    assert parse_options(["--vs", str(ROOT)]).vs == ROOT.resolve()
    url = "postgresql://postgres@127.0.0.1/x"
    assert parse_options(["--database-url", url]).database_url == url


@pytest.mark.parametrize(
    "argv",
    [
        ["--threads", "0"],
        ["--rounds", "0"],
        ["--seconds", "0"],
        ["--database-url", "sqlite:///ledger.db"],
        ["--vs", "/nonexistent/checkout"],
        ["--vs", str(ROOT), "--database-url", "postgresql://postgres@127.0.0.1/x"],
    ],
)
def test_bad_options_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_options(argv)
    assert exit_.value.code == 2


def test_a_directory_that_is_no_checkout_is_refused_for_vs(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        parse_options(["--vs", str(tmp_path)])


# --- the threads ---------------------------------------------------------------------------------


def counting_calls(made: list[int], lock: threading.Lock) -> Any:
    def next_call() -> Call:
        def call() -> None:
            with lock:
                made.append(1)

        return call

    return next_call


def test_every_call_made_is_counted_once_by_count_and_by_duration() -> None:
    made: list[int] = []
    lock = threading.Lock()
    driven = drive([counting_calls(made, lock) for _ in range(3)], Budget(calls=7))
    assert len(driven.latencies) == len(made) == 21 and driven.wall_s > 0
    made.clear()
    driven = drive([counting_calls(made, lock) for _ in range(3)], Budget(seconds=0.05))
    assert len(driven.latencies) == len(made) > 0 and driven.wall_s >= 0.05


def test_a_failing_call_fails_the_phase() -> None:
    counter = itertools.count()

    def next_call() -> Call:
        def call() -> None:
            if next(counter) == 5:
                raise RuntimeError("append 5 failed")

        return call

    with pytest.raises(RuntimeError, match="append 5"):
        drive([next_call, next_call], Budget(calls=10))


def test_budgets_and_percentiles() -> None:
    assert Budget(calls=2).more(1, 100.0) and not Budget(calls=2).more(2, 0.0)
    assert Budget(seconds=1.0).more(10**6, 0.99) and not Budget(seconds=1.0).more(0, 1.0)
    latencies = [i / 1000 for i in range(1, 101)]
    assert percentile(latencies, 0.50) == 0.051 and percentile(latencies, 0.99) == 0.1
    assert percentile([], 0.5) == 0.0


def test_sides_take_turns_in_alternating_order() -> None:
    assert list(side_turns(3)) == [(0, (OURS, THEIRS)), (1, (THEIRS, OURS)), (2, (OURS, THEIRS))]


# --- figures, ratios and verdicts on given numbers ------------------------------------------------


def phase(jobs: int, wall_s: float = 1.0, advisory: int = 0, lock: int = 0) -> Phase:
    return Phase(jobs, wall_s, 1.0, 4.0, Samples(200, advisory, lock, min(advisory, 16), 0.005))


def one_round(ledger: Phase, baseline: Phase, code: str = "/checkout") -> Round:
    return Round(
        code, {"server_version": "15"}, ledger.jobs + 40, {LEDGER: ledger, BASELINE: baseline}
    )


def versus(ours: Phase, theirs: Phase) -> Run:
    options = Options(2, 1.0, 1, None, ROOT, as_json=False)
    rounds = {OURS: [one_round(ours, phase(4000))], THEIRS: [one_round(theirs, phase(4000))]}
    return Run(options, (0.5, 0.7), rounds)


def test_the_figures_of_a_variant_over_its_rounds() -> None:
    figures = Figures.of([phase(100, 1.0, advisory=50, lock=60), phase(300, 1.0, advisory=30)])
    assert figures.median == 200.0 and figures.jobs == 400
    assert figures.advisory_per_job == pytest.approx(80 / 400)
    assert figures.lock_per_job == pytest.approx(60 / 400)
    # Estimated wait per job: the waiting backends summed over samples x the period, per job.
    assert figures.advisory_ms_per_job == pytest.approx(1000 * 80 * 0.005 / 400)


def test_the_ab_ratio_is_rendered_and_its_verdict_flips_at_the_line() -> None:
    met = versus(phase(1500), phase(1000))
    assert met.ab_rate() == pytest.approx(GOAL_AB)
    lines = goal_lines(met)
    assert "A/B, appends/s ours / theirs: 1.50x" in lines
    assert f"goal: A/B >= {GOAL_AB:.1f}x -> met" in lines
    missed = goal_lines(versus(phase(1490), phase(1000)))
    assert "A/B, appends/s ours / theirs: 1.49x" in missed
    assert f"goal: A/B >= {GOAL_AB:.1f}x -> NOT met" in missed
    assert rate_goal_met(1.5) and not rate_goal_met(1.4999)


def test_the_lock_wait_ratio_is_ours_over_theirs_and_flips_at_the_line() -> None:
    met = versus(phase(1000, advisory=50), phase(1000, advisory=1000))  # 0.05 vs 1.0 per job
    ours, theirs = met.lock_waits()
    assert ours == pytest.approx(0.05) and theirs == pytest.approx(1.0)
    lines = goal_lines(met)
    assert "advisory-lock waits per job, ours / theirs: 0.050 / 1.000 = 0.050x" in lines
    assert lines[-1].endswith("<= 0.05x -> met")
    missed = goal_lines(versus(phase(1000, advisory=51), phase(1000, advisory=1000)))
    assert missed[-1].endswith("<= 0.05x -> NOT met")
    assert lock_goal_met(0.05, 1.0) and not lock_goal_met(0.0501, 1.0)
    # No wait seen on theirs: no ratio; met only if none was seen on ours either.
    assert lock_goal_met(0.0, 0.0) and not lock_goal_met(0.01, 0.0)
    assert "= n/a (theirs: none seen)" in goal_lines(versus(phase(1000), phase(1000)))[1]


def test_the_reports_carry_the_ratios_and_verdicts() -> None:
    run = versus(phase(1500, advisory=10), phase(1000, advisory=1000))
    answer = json.loads(report_json(run))
    assert answer["ab_rate"] == 1.5 and answer["lock_waits_ratio"] == 0.0067
    assert answer["goals_met"] == {"ab_rate": True, "lock_waits": True}
    assert answer["goal_ab_rate"] == GOAL_AB and answer["goal_lock_waits_ratio"] == GOAL_LOCK
    ours = answer["sides"][OURS]
    assert ours["ledger_vs_baseline"] == pytest.approx(1500 / 4000, abs=1e-3)
    assert ours["variants"][LEDGER]["median_per_s"] == 1500.0
    table = report_table(run)
    assert "ours: ledger" in table and "theirs: raw psycopg" in table and "0.38x" in table
    assert "load average (1 min) before/after: 0.50 / 0.70" in table


def test_without_vs_the_goals_are_said_to_be_unmeasured() -> None:
    run = Run(
        parse_options(["--rounds", "1"]), (0.1, 0.1), {OURS: [one_round(phase(10), phase(20))]}
    )
    assert json.loads(report_json(run))["goals_met"] is None
    assert "not measured, they need --vs PATH" in report_table(run)


def test_a_round_goes_through_json_unchanged() -> None:
    done = one_round(phase(12, 0.5, advisory=3, lock=4), phase(40))
    assert Round.from_json(done.to_json()) == done


# --- real runs -----------------------------------------------------------------------------------


def counts(url: str) -> tuple[int, int]:
    with psycopg.connect(libpq_url(url)) as conn:
        events = conn.execute("SELECT count(*) FROM events").fetchall()[0][0]
        rows = conn.execute("SELECT to_regclass('bench_contention_rows') IS NOT NULL").fetchall()
        baseline = 0
        if rows[0][0]:
            baseline = conn.execute("SELECT count(*) FROM bench_contention_rows").fetchall()[0][0]
    return int(events), int(baseline)


def last_json(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    answer: dict[str, Any] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    return answer


@pytest.mark.postgres
def test_a_short_run_reports_the_jobs_it_appended(
    pg_database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    events_before, _ = counts(pg_database)
    argv = ["--threads", "2", "--seconds", "0.3", "--rounds", "2", "--json"]
    assert main([*argv, "--database-url", pg_database]) == 0
    answer = last_json(capsys)
    assert {"threads", "seconds", "rounds", "server", "load_avg_1m", "sides"} <= set(answer)
    ours = answer["sides"][OURS]
    assert Path(ours["code"]) == ROOT and set(ours["variants"]) == {LEDGER, BASELINE}
    figures = ours["variants"][LEDGER]
    assert figures["jobs"] > 0 and figures["median_per_s"] > 0 and figures["p99_ms"] > 0
    assert {"advisory_waits_per_job", "advisory_wait_ms_per_job", "lock_waits_per_job"} <= set(
        figures
    )
    assert ours["samples"] > 0 and answer["goals_met"] is None
    events_after, baseline_rows = counts(pg_database)
    # What the bench says it appended (warm-up included) is what the tables hold.
    assert events_after - events_before == ours["appended"]
    assert ours["appended"] == figures["jobs"] + 2 * 2 * 20  # rounds x threads x warm-up calls
    assert baseline_rows == ours["baseline_rows"] == ours["variants"][BASELINE]["jobs"] + 2 * 2 * 20


@pytest.mark.postgres
def test_vs_runs_both_checkouts_in_subprocesses(capsys: pytest.CaptureFixture[str]) -> None:
    require_postgres()
    argv = ["--threads", "2", "--seconds", "0.2", "--rounds", "1", "--json", "--vs", str(ROOT)]
    assert main(argv) == 0
    answer = last_json(capsys)
    assert set(answer["sides"]) == {OURS, THEIRS}
    for side in answer["sides"].values():
        assert Path(side["code"]) == ROOT and side["appended"] > 0
        assert side["variants"][LEDGER]["jobs"] > 0 and side["variants"][BASELINE]["jobs"] > 0
    assert answer["ab_rate"] > 0 and set(answer["goals_met"]) == {"ab_rate", "lock_waits"}
