"""bench.throughput --tree-ab's report: each arm's events pooled over its turns, the ratio with
/ without, the goal's verdict, and the JSON line."""

from __future__ import annotations

import json

from bench.throughput_lag import LagSamples
from bench.throughput_treeab import WITH, WITHOUT, Report, Turn, report_json, report_lines


def _turn(arm: str, number: int, commit_ms: list[float]) -> Turn:
    return Turn(arm, number, 100.0, LagSamples([ms + 10 for ms in commit_ms], commit_ms))


def test_the_arms_are_pooled_and_compared() -> None:
    turns = [
        _turn(WITH, 1, [1.0] * 97 + [30.0] * 3),
        _turn(WITHOUT, 1, [1.0] * 100),
        _turn(WITHOUT, 2, [1.0] * 97 + [20.0] * 3),
        _turn(WITH, 2, [2.0] * 100),
    ]
    report = Report(100, 2, {"fsync": "on"}, turns, (1.0, 2.0))
    assert report.pooled(WITH).events == 200 and report.pooled(WITH).commit_p99_ms == 30.0
    assert report.pooled(WITHOUT).commit_p99_ms == 20.0
    assert report.ratios()["commit_p99"] == 1.5 and not report.goal_met()
    text = "\n".join(report_lines(report))
    assert "round 2 without_tree" in text and "p99 1.50x" in text and "-> NOT met" in text
    document = json.loads(report_json(report))
    assert document["pooled"][WITHOUT]["events"] == 200
    assert document["ratio_with_vs_without"]["commit_p99"] == 1.5
    assert [t["arm"] for t in document["turns"]] == [WITH, WITHOUT, WITHOUT, WITH]
