"""The silence chart as SVG geometry, computed here so the template only places rectangles: a
stacked bar per time bucket, one colour and one pattern per cause (colour is never the only
signal: the table beside it says the same in text)."""

from __future__ import annotations

from dataclasses import dataclass

from ledger.services.silence import SilenceReport

WIDTH, HEIGHT = 720, 220
LEFT, BOTTOM, TOP = 40, 28, 10
# Dark enough on white for 3:1 (WCAG non-text contrast), told apart by hue and by pattern.
COLOURS = {"worker_lost": "#b3261e", "never_started": "#1f5fa8", "no_outcome_returned": "#6b4f00"}
FALLBACK = "#444444"


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    cause: str
    count: int
    label: str  # for the <title>: read by screen readers and shown on hover


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    bars: list[Bar]
    peak: int
    ticks: list[tuple[float, str]]  # x, label (UTC)
    baseline: float
    left: int


def chart(report: SilenceReport) -> Chart:
    plot_w, plot_h = WIDTH - LEFT - 10, HEIGHT - BOTTOM - TOP
    slot = plot_w / max(len(report.buckets), 1)
    peak = max((b.total for b in report.buckets), default=0) or 1
    bars: list[Bar] = []
    fmt = "%H:%M" if (report.until - report.since).total_seconds() <= 2 * 86400 else "%m-%d"
    for i, bucket in enumerate(report.buckets):
        stacked = 0.0
        for cause in report.causes:
            count = bucket.by_cause.get(cause, 0)
            if not count:
                continue
            height = count / peak * plot_h
            y = TOP + plot_h - stacked - height
            stacked += height
            label = f"{bucket.start.strftime('%Y-%m-%d %H:%M')} UTC: {count} {cause}"
            bars.append(Bar(LEFT + i * slot + 1, y, max(slot - 2, 1), height, cause, count, label))
    step = max(len(report.buckets) // 6, 1)
    ticks = [
        (LEFT + i * slot, report.buckets[i].start.strftime(fmt))
        for i in range(0, len(report.buckets), step)
    ]
    return Chart(WIDTH, HEIGHT, bars, peak, ticks, TOP + plot_h, LEFT)


def colour(cause: str) -> str:
    return COLOURS.get(cause, FALLBACK)
