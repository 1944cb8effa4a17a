"""Resident memory of the product's processes, sampled while a campaign runs (the soak's
"memory flat"): the API's and each worker's RSS every few seconds, keyed by process name."""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from nemesis.processes import ProductProcess

EVERY_S = 5.0
WARM_UP = 0.25  # the first quarter warms caches and pools; growth is judged after it


def rss_kib(pid: int) -> int:
    with suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def growth_kib(series: list[int]) -> int:
    """Median of the last 3 samples minus median of the first 3 after the warm-up."""
    judged = series[int(len(series) * WARM_UP) :]
    if len(judged) < 2:
        return 0
    return int(statistics.median(judged[-3:]) - statistics.median(judged[:3]))


class Sampler(threading.Thread):
    """Samples every `EVERY_S`; a process restarted by the nemesis starts a new series (its
    name and pid), so a restart never reads as growth or shrinkage."""

    def __init__(self, processes: Callable[[], list[ProductProcess]]) -> None:
        super().__init__(name="rss-sampler", daemon=True)
        self.processes = processes
        self.samples: dict[str, list[int]] = {}
        self._stopping = threading.Event()

    def run(self) -> None:
        while True:
            self.take()
            if self._stopping.wait(EVERY_S):
                return

    def take(self) -> None:
        for process in self.processes():
            if process.name == "reconciler" or not process.alive():
                continue
            kib = rss_kib(process.pid)
            if kib:
                self.samples.setdefault(f"{process.name}:{process.pid}", []).append(kib)

    def stop(self) -> None:
        self._stopping.set()
        self.join(timeout=30)

    def series(self) -> dict[str, list[int]]:
        return dict(self.samples)

    def growth_kib(self) -> dict[str, int]:
        """Per process that lived through at least 8 samples (shorter ones judge nothing)."""
        return {name: growth_kib(s) for name, s in self.samples.items() if len(s) >= 8}
