"""bench.fairness: B's waits are read from the events, the report states the goal (B's p95
behind A's backlog <= 5x B's on an idle ledger), and a small run goes end to end (real
workers, Postgres, RabbitMQ) with A's backlog ahead of B's jobs."""

from __future__ import annotations

import argparse
import json

import pytest

from bench.fairness import Waits, main, report
from tests.databases import require_postgres
from tests.plugins.deployments import require_broker


def test_the_report_states_the_ratio_of_the_p95s(capsys: pytest.CaptureFixture[str]) -> None:
    results = {"idle": Waits([0.01] * 19 + [0.02]), "loaded, fair": Waits([0.05] * 19 + [0.1])}
    report(results, argparse.Namespace(jobs=10, window=4, json=False))
    out = capsys.readouterr().out
    assert "5.0x -> met" in out
    results["loaded, fair"] = Waits([0.2] * 20)
    report(results, argparse.Namespace(jobs=10, window=4, json=True))
    answer = json.loads(capsys.readouterr().out)
    assert answer["ratio_p95"] == pytest.approx(10.0) and answer["met"] is False


@pytest.mark.postgres
def test_a_small_run_measures_b_behind_as_backlog(capsys: pytest.CaptureFixture[str]) -> None:
    require_postgres()
    require_broker("rabbitmq")
    assert main(["--jobs", "60", "--window", "8", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(answer["rounds"]) == {"idle", "loaded, fair"}
    assert all(r["p95_s"] > 0 for r in answer["rounds"].values())
