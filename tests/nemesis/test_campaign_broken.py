"""The checker can fail: the same short campaign on a build whose claim skips the brake
re-check (tests/nemesis/broken_build.py, injected through OUTCOMES_TOOLS, never a switch in the
product) must be found out as work started after a brake pull committed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.nemesis.campaigns import SHORT, campaign

pytestmark = pytest.mark.timeout(300)


def test_a_claim_without_the_brake_recheck_fails_the_campaign(tmp_path: Path) -> None:
    broken = replace(SHORT.shape, tools="nemesis.tools,tests.nemesis.broken_build")
    result = campaign(
        tmp_path,
        shape=broken,
        kinds=("brake", "worker_pause"),  # pauses let prefetched jobs meet a pulled brake
        mean_fault_gap_s=1.5,
        rate_share=0.8,
    )
    assert result.verdict.counts["started_after_brake"] > 0, result.verdict.counts
    assert not result.verdict.clean
