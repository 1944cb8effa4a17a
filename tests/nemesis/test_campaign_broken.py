"""The checker can fail: the same short campaign on a build whose claim skips the brake
re-check (tests/nemesis/broken_build.py, injected through OUTCOMES_TOOLS, never a switch in the
product) must be found out as work started after a brake pull committed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.nemesis.campaigns import SHORT, campaign

pytestmark = pytest.mark.timeout(600)  # up to three short campaigns


def test_a_claim_without_the_brake_recheck_fails_the_campaign(tmp_path: Path) -> None:
    """Up to three seeds: a campaign finds the broken claim only when a job accepted before a
    pull is claimed after it, which a loaded machine (few jobs a second) can miss in 20 s."""
    broken = replace(SHORT.shape, tools="nemesis.tools,tests.nemesis.broken_build")
    counts: list[dict[str, int]] = []
    for seed in (SHORT.seed, SHORT.seed + 1, SHORT.seed + 2):
        out = tmp_path / f"seed-{seed}"
        out.mkdir()
        result = campaign(
            out,
            seed=seed,
            shape=broken,
            kinds=("brake", "worker_pause"),  # pauses let prefetched jobs meet a pulled brake
            mean_fault_gap_s=1.5,
            rate_share=0.8,
        )
        counts.append(dict(result.verdict.counts))
        if result.verdict.counts["started_after_brake"] > 0:
            assert not result.verdict.clean
            return
    pytest.fail(f"no campaign found the claim that skips the brake re-check: {counts}")
