"""`reconciler.json`: the heartbeat a looping reconciler keeps in its home folder (the one
inside `outcomes serve`, or `outcomes reconcile`), and how `outcomes status` reads it: running,
stalled, stopped, gone, or never started (`cli.home_records`)."""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from cli.home_files import RECONCILER_BEAT, process_alive, read_record, seconds_since, write_record
from ledger.clock import format_time, now, utc
from ledger.dispatch import Dispatcher
from ledger.reconcile_rules import ReconcilePolicy
from ledger.runtime.ledger import Ledger
from ledger.runtime.outbox import Outbox
from ledger.services.reconcile import INTERVAL_S, Pass, ReconcileRunner
from ledger.settings import DEFAULT_HOME

log = logging.getLogger(__name__)


def stall_after_s(interval_s: float) -> float:
    """No sign of life for this long and a reconciler whose process is there counts as stalled."""
    return max(3 * interval_s, 30.0)


class Heartbeat:
    """A looping reconciler's record of itself: written as it starts, after each pass (or
    failed pass), and marked stopped as it stops. A write that fails is logged, never raised:
    the heartbeat must not stop the reconciler."""

    def __init__(self, by: str, interval_s: float, home: Path = DEFAULT_HOME) -> None:
        self.path = home / RECONCILER_BEAT
        self._lock = threading.Lock()
        self._stopped = False
        self._state: dict[str, Any] = {
            "by": by,
            "pid": os.getpid(),
            "hostname": socket.gethostname(),
            "interval_s": interval_s,
            "started_at": format_time(now()),
            "last_pass_at": None,
            "last_error": None,
            "last_error_at": None,
            "stopped_at": None,
        }

    def start(self) -> None:
        self._write()

    def passed(self) -> None:
        self._write(last_pass_at=format_time(now()), last_error=None, last_error_at=None)

    def failed(self, exc: Exception) -> None:
        error = f"{type(exc).__name__}: {exc}"[:300]
        self._write(last_error=error, last_error_at=format_time(now()))

    def stop(self) -> None:
        """Marked stopped, if the record is still this process's."""
        with self._lock:
            self._stopped = True
            try:
                current = read_record(self.path)
            except (OSError, ValueError):
                current = None
            if current is None or current.get("pid") != self._state["pid"]:
                return
            self._state["stopped_at"] = format_time(now())
            self._save()

    def _write(self, **changes: Any) -> None:
        with self._lock:
            if self._stopped:
                return  # a pass that ended after stop(): the record says stopped
            self._state.update(changes)
            self._save()

    def _save(self) -> None:
        try:
            write_record(self.path, self._state)
        except OSError as exc:
            log.warning("reconciler heartbeat not written to %s: %s", self.path, exc)


class BeatingRunner(ReconcileRunner):
    """A `ReconcileRunner` that keeps a heartbeat of its passes (relays in between are not
    passes)."""

    def __init__(
        self,
        ledger: Ledger,
        dispatcher: Dispatcher | Outbox | None,
        policy: ReconcilePolicy,
        heartbeat: Heartbeat,
        interval_s: float = INTERVAL_S,
    ) -> None:
        super().__init__(ledger, dispatcher, policy, interval_s)
        self.heartbeat = heartbeat

    def run_once(self) -> Pass:
        try:
            result = super().run_once()
        except Exception as exc:
            self.heartbeat.failed(exc)
            raise
        self.heartbeat.passed()
        return result


@dataclass(frozen=True)
class Liveness:
    """Whether a reconciler runs, from its heartbeat in the home folder."""

    state: str  # running | stalled | stopped | gone | never | unknown
    detail: dict[str, Any]  # the heartbeat as recorded (empty: none)
    quiet_s: float | None = None  # seconds since its last sign of life
    last_pass_s: float | None = None  # seconds since its last completed pass

    @property
    def running(self) -> bool | None:
        return None if self.state == "unknown" else self.state == "running"

    def to_json(self) -> dict[str, Any]:
        return {
            "running": self.running,
            "state": self.state,
            "by": self.detail.get("by"),
            "pid": self.detail.get("pid"),
            "last_pass_at": self.detail.get("last_pass_at"),
            "last_pass_s_ago": self.last_pass_s,
            "last_error": self.detail.get("last_error"),
            "quiet_s": self.quiet_s,
        }

    def describe(self, home: Path = DEFAULT_HOME) -> str:
        who = f"{self.detail.get('by', 'reconciler')} pid {self.detail.get('pid')}"
        last = "no pass yet" if self.last_pass_s is None else f"last pass {self.last_pass_s} s ago"
        error = self.detail.get("last_error")
        if self.state == "running":
            failing = f", then a failed pass ({error})" if error else ""
            return f"running ({who}), {last}{failing}"
        if self.state == "unknown":
            return f"unknown here (a heartbeat is kept in {home}/ on embedded defaults only)"
        if self.state == "never":
            return f"NOT RUNNING (none has recorded a pass in {home}/)"
        why = {"stalled": "is there but silent", "stopped": "stopped", "gone": "is gone"}
        silent = self.quiet_s if self.last_pass_s is None else self.last_pass_s
        return f"NOT RUNNING (no pass for {silent} s; {who} {why[self.state]})"


def reconciler_liveness(
    embedded: bool, home: Path = DEFAULT_HOME, at: datetime | None = None
) -> Liveness:
    if not embedded:
        return Liveness("unknown", {})
    try:
        beat = read_record(home / RECONCILER_BEAT)
    except (OSError, ValueError):
        beat = None
    if beat is None:
        return Liveness("never", {})
    moment = at or now()
    try:
        marks = [beat.get(k) for k in ("started_at", "last_pass_at", "last_error_at")]
        latest = max(utc(datetime.fromisoformat(m)) for m in marks if m)
        quiet = round((moment - latest).total_seconds(), 1)
        last_pass = seconds_since(beat.get("last_pass_at"), moment)
        stopped = beat.get("stopped_at") is not None
        alive = process_alive(int(beat["pid"]), str(beat["hostname"]))
        interval = float(beat["interval_s"])
    except (KeyError, TypeError, ValueError):  # a heartbeat it cannot read: none to trust
        return Liveness("never", {})
    if stopped:
        state = "stopped"
    elif not alive:
        state = "gone"
    elif quiet > stall_after_s(interval):
        state = "stalled"
    else:
        state = "running"
    return Liveness(state, beat, quiet, last_pass)
