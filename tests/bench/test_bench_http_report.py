"""bench.http's report states each goal (ours >= 0.4x bare Celery, >= 0.6x the HTTP peer, the
API's CPU <= 1.6 ms a job) from the figures it is given, and says when the CPU was not seen."""

from __future__ import annotations

import argparse
import json

import pytest

from bench.http import BARE, OURS, PEER, report


def options(as_json: bool = False) -> argparse.Namespace:
    return argparse.Namespace(n=100, rounds=2, clients=16, json=as_json)


def test_each_goal_is_judged_from_the_figures(capsys: pytest.CaptureFixture[str]) -> None:
    # ours 100 jobs/s (median of 1.0 and 1.0 s), bare 200, the peer 125: 0.5x and 0.8x.
    seconds = {OURS: [1.0, 1.0], BARE: [0.5, 0.5], PEER: [0.8, 0.8]}
    assert report(seconds, {OURS: 2.5, PEER: 1.25, BARE: None}, options()) == 0
    out = capsys.readouterr().out
    assert "ours / bare_celery: 0.50x (goal >= 0.4x) -> met" in out
    assert "(goal >= 0.6x) -> met" in out and "0.80x" in out
    assert "ours' API CPU per job: 2.50 ms (goal <= 1.6 ms) -> NOT met" in out
    assert "1.25 ms" in out  # the peer's server, in its row


def test_a_slow_ours_misses_the_peer_goal(capsys: pytest.CaptureFixture[str]) -> None:
    seconds = {OURS: [2.0], BARE: [0.5], PEER: [0.5]}
    report(seconds, {OURS: 1.2, PEER: 1.0}, options())
    out = capsys.readouterr().out
    assert "0.25x (goal >= 0.6x) -> NOT met" in out
    assert "1.20 ms (goal <= 1.6 ms) -> met" in out


def test_cpu_not_seen_is_said_so(capsys: pytest.CaptureFixture[str]) -> None:
    report({OURS: [1.0], BARE: [1.0], PEER: [1.0]}, {OURS: None, PEER: None}, options())
    assert "ours' API CPU per job: not measured" in capsys.readouterr().out


def test_the_json_line_carries_the_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    seconds = {OURS: [1.0], BARE: [0.5], PEER: [0.8]}
    report(seconds, {OURS: 2.0, PEER: 1.0}, options(as_json=True))
    document = json.loads(capsys.readouterr().out)
    assert document["server_cpu_ms_per_job"] == {OURS: 2.0, PEER: 1.0}
    assert document["ratio"] == pytest.approx(0.5)
    assert document["ours_to_peer"] == pytest.approx(0.8)
