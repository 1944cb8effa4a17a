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
    # Work for the faults to meet: the workload kept the rate it was set (half the maximum
    # this machine measured just before). No count proportional to the machine's speed: a
    # loaded machine (make test runs three files at once) measures a far smaller maximum
    # (1.7 to 4.2 jobs/s and 17 to 61 submissions were seen in CI, all clean; 300 and more
    # alone). The long campaigns (`make chaos`) are where volume is judged.
    assert verdict.faults >= 8
    assert info["achieved_rate"] >= 0.8 * info["rate"], info
    assert info["submitted"] >= 10, info
    assert len(info["faults_by_kind"]) >= 6, info["faults_by_kind"]
    assert verdict.clean, [c for c in verdict.cases if c.category != "explained_silence"]
