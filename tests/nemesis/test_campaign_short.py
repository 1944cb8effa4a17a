"""A short nemesis campaign (fixed seed, every fault kind, about a minute): the checker's
verdict must be clean. `make chaos` runs long ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.nemesis.campaigns import campaign

pytestmark = pytest.mark.timeout(300)


def test_a_short_campaign_breaks_no_promise(tmp_path: Path) -> None:
    result = campaign(tmp_path)
    verdict, info = result.verdict, result.info
    assert info["fixed_point"], "the reconciler did not reach a fixed point"
    assert info["fault_errors"] == []
    assert verdict.faults >= 8 and verdict.accepted >= 200
    assert len(info["faults_by_kind"]) >= 6, info["faults_by_kind"]
    assert verdict.clean, [c for c in verdict.cases if c.category != "explained_silence"]
