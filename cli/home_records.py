"""What `outcomes serve` leaves in its home folder (`./.outcomes/`, on embedded defaults) for the
commands of a second terminal in the same folder:

- `serve.json`: the URL it serves, its pid, the tools modules it loaded (its OUTCOMES_TOOLS);
  written as it starts, removed as it stops. `outcomes status` asks that URL and
  `outcomes tools list` (and `tokens create --tools`) loads those modules, unless
  OUTCOMES_API_URL / OUTCOMES_TOOLS (or `--api-url`) say otherwise.
- `reconciler.json`: the heartbeat of a looping reconciler (the one inside `outcomes serve`, or
  `outcomes reconcile`): rewritten after every pass, marked stopped when it stops. It is how
  `outcomes status` tells a running reconciler from none.

Each file is written whole (a temporary file renamed over it): a reader never sees half of one.
A record whose process is gone (its pid, on this host) is stale: ignored, and said so.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from ledger.clock import format_time, now, utc
from ledger.dispatch import Dispatcher
from ledger.errors import ConfigurationError
from ledger.reconcile_rules import ReconcilePolicy
from ledger.services.ledger import Ledger
from ledger.services.outbox import Outbox
from ledger.services.reconcile import INTERVAL_S, Pass, ReconcileRunner
from ledger.settings import DEFAULT_HOME
from ledger.tools import load_tool_modules

log = logging.getLogger(__name__)
SERVE_RECORD = "serve.json"
RECONCILER_BEAT = "reconciler.json"
TOOLS_ENV = "OUTCOMES_TOOLS"


def write_record(path: Path, value: dict[str, Any]) -> None:
    """`value` as JSON at `path`, whole or not at all (a temporary file renamed over it)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    os.replace(partial, path)


def read_record(path: Path) -> dict[str, Any] | None:
    """The JSON object at `path`; None when there is none. ValueError when it is no object."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    value = orjson.loads(raw)  # orjson.JSONDecodeError is a ValueError
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


def process_alive(pid: int, hostname: str) -> bool:
    """Whether `pid` runs (a zombie does not). On another host it cannot be told: taken as
    alive, so a folder shared between hosts is not called stale on a guess."""
    if hostname != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: it exists
    try:  # Linux: a process that exited and was not reaped yet is no server
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def _seconds_since(moment: str | None, at: datetime) -> float | None:
    if moment is None:
        return None
    return round((at - utc(datetime.fromisoformat(moment))).total_seconds(), 1)


# -- serve.json ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServeRecord:
    url: str
    pid: int
    hostname: str
    tool_modules: tuple[str, ...]  # the OUTCOMES_TOOLS it loaded
    tools: tuple[str, ...]  # the tools those modules registered
    started_at: str
    worker_pid: int | None  # the embedded worker (None: serve runs the API alone)
    reconciler: bool  # whether the embedded reconciler runs beside the API

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "pid": self.pid,
            "hostname": self.hostname,
            "tool_modules": list(self.tool_modules),
            "tools": list(self.tools),
            "started_at": self.started_at,
            "worker_pid": self.worker_pid,
            "reconciler": self.reconciler,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> ServeRecord:
        """Raises KeyError, TypeError or ValueError on a record it cannot read."""
        worker_pid = value["worker_pid"]
        return cls(
            url=str(value["url"]),
            pid=int(value["pid"]),
            hostname=str(value["hostname"]),
            tool_modules=tuple(str(m) for m in value["tool_modules"]),
            tools=tuple(str(t) for t in value["tools"]),
            started_at=str(value["started_at"]),
            worker_pid=None if worker_pid is None else int(worker_pid),
            reconciler=bool(value["reconciler"]),
        )


@dataclass(frozen=True)
class Served:
    """What the home folder says about a running `outcomes serve`."""

    path: Path
    record: ServeRecord | None  # a running serve's record (None: no record, or not usable)
    stale: ServeRecord | None = None  # a record whose serve is gone
    unreadable: str | None = None  # why a record there could not be read

    @property
    def state(self) -> str:
        if self.record is not None:
            return "running"
        if self.stale is not None:
            return "stale"
        return "unreadable" if self.unreadable else "none"

    def source(self) -> str:
        """Where a value taken from the record came from, briefly."""
        assert self.record is not None
        return f"{self.path} (outcomes serve pid {self.record.pid})"

    def note(self) -> str | None:
        """Why a record there was ignored, or None."""
        if self.stale is not None:
            return f"ignored stale {self.path} (outcomes serve pid {self.stale.pid} is gone)"
        if self.unreadable is not None:
            return f"ignored unreadable {self.path} ({self.unreadable})"
        return None

    def to_json(self) -> dict[str, Any]:
        found = self.record or self.stale
        return {
            "path": str(self.path),
            "state": self.state,
            "note": self.note(),
            **({"record": found.to_json()} if found else {}),
        }


def find_served(home: Path = DEFAULT_HOME) -> Served:
    path = home / SERVE_RECORD
    try:
        raw = read_record(path)
        record = None if raw is None else ServeRecord.from_json(raw)
    except (OSError, KeyError, TypeError, ValueError) as exc:
        return Served(path, None, unreadable=_unreadable(exc))
    if record is None:
        return Served(path, None)
    if not process_alive(record.pid, record.hostname):
        return Served(path, None, stale=record)
    return Served(path, record)


def _unreadable(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"no {exc.args[0]!r} in it"
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}"
    return f"not a record: {str(exc).splitlines()[0] if str(exc) else 'bad JSON'}"


def record_serve(record: ServeRecord, home: Path = DEFAULT_HOME) -> Path:
    path = home / SERVE_RECORD
    write_record(path, record.to_json())
    return path


def clear_serve(pid: int, home: Path = DEFAULT_HOME) -> bool:
    """Remove the record if it is still `pid`'s (another serve may have replaced it since);
    whether it was removed."""
    path = home / SERVE_RECORD
    try:
        raw = read_record(path)
        if raw is not None and int(raw.get("pid", -1)) == pid:
            path.unlink()
            return True
    except (OSError, TypeError, ValueError) as exc:
        log.warning("could not remove %s: %s", path, exc)
    return False


def client_url(host: str, port: int) -> str:
    """Where a client on this host reaches a server listening on `host`."""
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


@dataclass(frozen=True)
class ToolModules:
    modules: tuple[str, ...]
    served: Served | None = None  # set when the modules are the record's
    note: str | None = None  # a record ignored on the way

    def origin(self) -> str | None:
        """Where the modules came from: the record, OUTCOMES_TOOLS, or None (nowhere)."""
        if self.served is not None:
            return self.served.source()
        return TOOLS_ENV if TOOLS_ENV in os.environ else None

    def source(self) -> str | None:
        """Where the modules came from when it is the record, briefly."""
        if self.served is None:
            return None
        return f"tools of {', '.join(self.modules) or 'no module'}, from {self.origin()}"

    def to_json(self) -> dict[str, Any]:
        return {"modules": list(self.modules), "from": self.origin(), "note": self.note}


def tool_modules(configured: tuple[str, ...], home: Path = DEFAULT_HOME) -> ToolModules:
    """The tools modules a command loads: OUTCOMES_TOOLS when it is set (even empty), else
    those of the `outcomes serve` running in this folder, else none."""
    if TOOLS_ENV in os.environ:
        return ToolModules(configured)
    served = find_served(home)
    if served.record is not None:
        return ToolModules(served.record.tool_modules, served=served)
    return ToolModules(configured, note=served.note())


def load_served_tools(configured: tuple[str, ...], home: Path = DEFAULT_HOME) -> ToolModules:
    """`tool_modules`, imported (their `@tool`s registered)."""
    found = tool_modules(configured, home)
    try:
        load_tool_modules(found.modules)
    except ConfigurationError as exc:
        if found.served is None:
            raise
        raise ConfigurationError(f"{exc} (the tools of {found.served.source()})") from None
    return found


# -- reconciler.json -------------------------------------------------------------------------


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
        last_pass = _seconds_since(beat.get("last_pass_at"), moment)
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
