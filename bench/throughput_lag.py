"""bench.throughput's sequencing lag: how long ours' events waited for their ledger order.

Writers commit without a ledger-wide lock and the sequencer (run by `outcomes reconcile`,
started beside ours' worker) gives committed events their dense positions afterwards. Two
measures of that wait, per event:

- commit -> position: a probe (its own session) asks every PROBE_S which events are committed
  and still without a position; an event's lag is from the first probe that saw it so to its
  order row's `sequenced_at` (both the database's clock). It committed at most one probe
  interval before that probe; an event no probe saw waited less than one interval (0 here).
- recorded -> position: `sequenced_at` minus the event's own `recorded_at`, stamped by the
  writer before its commit: the write's own wait for its commit is in it.

With `--hold-open-s S`, ours then runs rounds back to back for S seconds twice: once as is,
once while this process holds one transaction open (it has a transaction id, as a writer's
stalled transaction would). PgQ-style ticks must not wait for it: the two spells' lags should
be the same.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from bench._common import libpq_url, percentile

LAG_GOAL_MS = 20.0  # issue 25: commit -> position, p99
SETTLE_S = 30.0  # the longest the events of a round may wait for their positions here
PROBE_S = 0.005
COMMITTED_UNSEQUENCED = (
    "SELECT statement_timestamp(), u.event_position FROM outcomes_sequencer_at() a,"
    " outcomes_unsequenced(a.snapshot, pg_current_snapshot(), a.unsequenced_above) u"
)


class SequencingStalledError(RuntimeError):
    """Events stayed unsequenced after the rounds: the sequencer is not running."""


@dataclass(frozen=True)
class Lag:
    events: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    # commit -> position, from the probe (see the module's docstring)
    commit_p50_ms: float = 0.0
    commit_p99_ms: float = 0.0
    commit_max_ms: float = 0.0


@dataclass
class Probe:
    """Which events each probe saw committed and unsequenced, first: position -> when."""

    url: str
    first_seen: dict[int, datetime] = field(default_factory=dict)
    failures: list[BaseException] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        try:
            with psycopg.connect(libpq_url(self.url), autocommit=True) as conn:
                while not self._stop.wait(PROBE_S):
                    for at, position in conn.execute(COMMITTED_UNSEQUENCED).fetchall():
                        self.first_seen.setdefault(int(position), at)
        except BaseException as exc:  # reported by `probing`, not lost in a thread
            self.failures.append(exc)


@contextmanager
def probing(url: str) -> Iterator[Probe]:
    probe = Probe(url)
    thread = threading.Thread(target=probe.run, name="lag-probe", daemon=True)
    thread.start()
    try:
        yield probe
    finally:
        probe._stop.set()
        thread.join(timeout=10)
    if probe.failures:
        raise probe.failures[0]


def write_head(conn: psycopg.Connection[Any]) -> int:
    """The highest write position so far: the rounds after it are measured."""
    row = conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()
    return int(row[0]) if row else 0


@dataclass(frozen=True)
class LagSamples:
    """Each event's two waits, in ms (see the module's docstring): what `Lag` summarizes, kept
    so that rounds can be pooled."""

    recorded_ms: list[float]
    commit_ms: list[float]

    def lag(self) -> Lag:
        recorded, committed = self.recorded_ms, self.commit_ms
        return Lag(
            len(recorded),
            percentile(recorded, 0.5),
            percentile(recorded, 0.99),
            max(recorded, default=0.0),
            percentile(committed, 0.5),
            percentile(committed, 0.99),
            max(committed, default=0.0),
        )

    @staticmethod
    def pooled(samples: list[LagSamples]) -> LagSamples:
        return LagSamples(
            [ms for s in samples for ms in s.recorded_ms],
            [ms for s in samples for ms in s.commit_ms],
        )


def lag_after(
    conn: psycopg.Connection[Any], after: int, probe: Probe, settle_s: float = SETTLE_S
) -> Lag:
    """The lag of every event written after `after`, once each has its position."""
    return lag_samples(conn, after, probe, settle_s).lag()


def lag_samples(
    conn: psycopg.Connection[Any], after: int, probe: Probe, settle_s: float = SETTLE_S
) -> LagSamples:
    """The waits of every event written after `after`, once each has its position."""
    unsequenced = (
        "SELECT count(*) FROM events e WHERE e.position > %s"
        " AND NOT EXISTS (SELECT 1 FROM ledger_order o WHERE o.event_position = e.position)"
    )
    deadline = time.monotonic() + settle_s
    while True:
        row = conn.execute(unsequenced, (after,)).fetchone()
        left = int(row[0]) if row else 0
        if left == 0:
            break
        if time.monotonic() > deadline:
            raise SequencingStalledError(f"{left} events unsequenced after {settle_s:.0f} s")
        time.sleep(0.05)
    rows = conn.execute(
        "SELECT e.position, e.recorded_at, o.sequenced_at"
        "  FROM events e JOIN ledger_order o ON o.event_position = e.position"
        " WHERE e.position > %s",
        (after,),
    ).fetchall()
    recorded = [(done - at).total_seconds() * 1e3 for _, at, done in rows]
    committed = [
        max(0.0, (done - probe.first_seen[p]).total_seconds() * 1e3)
        if p in probe.first_seen
        else 0.0
        for p, _, done in rows
    ]
    return LagSamples(recorded, committed)


@contextmanager
def held_open(url: str) -> Iterator[None]:
    """One transaction open (with its own transaction id) for as long as the block runs."""
    with psycopg.connect(libpq_url(url)) as conn:
        conn.execute("SELECT pg_current_xact_id()")  # a writer's stalled transaction
        try:
            yield
        finally:
            conn.rollback()


def lag_lines(plain: Lag, spells: tuple[Lag, Lag] | None, held_s: float) -> list[str]:
    lines = []
    labelled = [("the rounds above", plain)]
    if spells is not None:
        labelled += [
            (f"{held_s:.0f} s of rounds back to back", spells[0]),
            ("the same, one transaction held open throughout", spells[1]),
        ]
    for label, lag in labelled:
        lines.append(
            f"  {label}, {lag.events:,} events: commit -> position p50"
            f" {lag.commit_p50_ms:.1f}, p99 {lag.commit_p99_ms:.1f}, max"
            f" {lag.commit_max_ms:.1f} ms; recorded -> position p50 {lag.p50_ms:.1f},"
            f" p99 {lag.p99_ms:.1f}, max {lag.max_ms:.1f} ms"
        )
    p99 = plain.commit_p99_ms
    met = "met" if p99 <= LAG_GOAL_MS + PROBE_S * 1e3 else "NOT met"
    verdict = [
        f"  commit -> position p99 {p99:.1f} ms (+ up to {PROBE_S * 1e3:.0f} ms, the"
        f" probe's interval; goal <= {LAG_GOAL_MS:.0f} ms) -> {met}"
    ]
    if spells is not None:
        alone, held = spells
        verdict.append(
            f"  held open / not, commit -> position p50 {held.commit_p50_ms:.1f} vs"
            f" {alone.commit_p50_ms:.1f} ms, p99 {held.commit_p99_ms:.1f} vs"
            f" {alone.commit_p99_ms:.1f} ms (goal: unchanged)"
        )
    return [
        "sequencing lag (ours), bench/throughput_lag.py:",
        *lines,
        *verdict,
    ]


def lag_json(lag: Lag | None) -> dict[str, float] | None:
    if lag is None:
        return None
    return {
        "events": lag.events,
        "commit_p50_ms": round(lag.commit_p50_ms, 2),
        "commit_p99_ms": round(lag.commit_p99_ms, 2),
        "commit_max_ms": round(lag.commit_max_ms, 2),
        "recorded_p50_ms": round(lag.p50_ms, 2),
        "recorded_p99_ms": round(lag.p99_ms, 2),
        "recorded_max_ms": round(lag.max_ms, 2),
        "probe_interval_ms": PROBE_S * 1e3,
    }
