"""The benches' CpuMeter sums a process's CPU over the timed blocks only, and says None once
the process cannot be seen (rather than reporting what it could not measure as zero)."""

from __future__ import annotations

import os
import time

import pytest

from bench.throughput_workers import CpuMeter, pids_cpu


def burn(seconds: float) -> None:
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass


@pytest.mark.skipif(pids_cpu([os.getpid()]) is None, reason="no /proc here")
def test_only_the_timed_blocks_count() -> None:
    meter = CpuMeter(os.getpid())
    with meter.timing():
        burn(0.1)
    burn(0.3)  # outside any block: not counted
    with meter.timing():
        burn(0.1)
    assert meter.seconds is not None and 0.15 <= meter.seconds < 0.35
    per_job = meter.ms_per(100)
    assert per_job is not None and per_job == pytest.approx(1000 * meter.seconds / 100)


def test_a_process_not_seen_is_none() -> None:
    meter = CpuMeter(2**22 + 12345)  # above Linux's largest pid_max: never a live process
    with meter.timing():
        pass
    assert meter.seconds is None and meter.ms_per(10) is None
