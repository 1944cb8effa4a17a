"""Reliability matrix, the soak (scenario 14): the nemesis workload without faults, at half the
measured maximum throughput, for 10 minutes, through the real API (HTTP and MCP) to real
workers with the reconciler running; then the checker's verdict must be clean (nothing lost,
duplicated, unexpected, falsely told) and the API's and the workers' memory flat.

It runs on the campaign's private PostgreSQL and RabbitMQ (nemesis/services.py), so it stops
no shared service. Not in the default run: `make soak` (`pytest -m soak`) selects it.
MATRIX_SOAK_S sets the duration (default 600 s; `MATRIX_SOAK_S=60 pytest -m soak` checks the
harness), MATRIX_SOAK_SHARE the share of the maximum throughput (default 0.5).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nemesis.cluster import Shape
from tests.nemesis.campaigns import campaign

SOAK_S = float(os.environ.get("MATRIX_SOAK_S", "600"))
SHARE = float(os.environ.get("MATRIX_SOAK_SHARE", "0.5"))
# Flat: between the first samples after the warm-up quarter and the last ones, each process
# may grow by this much. A leak of 1 KiB per job (about 11 000 jobs are judged at 25 jobs/s)
# would be ~11 MiB.
GROWTH_BOUND_KIB = 12 * 1024


def soak_selected(config: pytest.Config) -> bool:
    expression = str(config.getoption("markexpr") or "")
    return "soak" in expression and "not soak" not in expression


@pytest.mark.soak
@pytest.mark.timeout(SOAK_S + 600)
def test_soak_at_half_the_maximum_throughput(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if not soak_selected(request.config):
        pytest.skip("a soak: run it with `make soak` (pytest -m soak)")
    result = campaign(
        tmp_path,
        seed=14,
        duration_s=SOAK_S,
        rate_share=SHARE,
        calibrate_s=10.0,
        faults=False,
        settle_timeout_s=180.0,
        shape=Shape(),  # the campaign's defaults: 2 workers of 8 threads, a 4 s lease
    )
    verdict, info = result.verdict, result.info
    grown = info["memory_growth_kib"]
    print(
        f"[reliability] 14: {verdict.accepted} jobs in {SOAK_S:.0f} s at {info['achieved_rate']}"
        f"/s ({SHARE} x max {info['max_rate']}/s); RSS growth KiB after warm-up {grown}; "
        f"first..last KiB { {k: (s[0], s[-1]) for k, s in result.memory.items()} }"
    )
    assert info["fixed_point"] and verdict.clean, verdict.counts
    assert verdict.counts["false_silence"] == 0
    assert info["achieved_rate"] >= 0.95 * SHARE * info["max_rate"], "the workload fell behind"
    assert grown and {k: v for k, v in grown.items() if v > GROWTH_BOUND_KIB} == {}, grown
