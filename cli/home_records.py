"""What `outcomes serve` leaves in its home folder (`./.outcomes/`, on embedded defaults) for the
commands of a second terminal in the same folder:

- `serve.json`: the URL it serves, its pid, the tools modules it loaded (its OUTCOMES_TOOLS);
  written as it starts, removed as it stops. `outcomes status` asks that URL and
  `outcomes tools list` (and `tokens create --tools`) loads those modules, unless
  OUTCOMES_API_URL / OUTCOMES_TOOLS (or `--api-url`) say otherwise.
- `reconciler.json`: the heartbeat of a looping reconciler (the one inside `outcomes serve`, or
  `outcomes reconcile`): rewritten after every pass, marked stopped when it stops. It is how
  `outcomes status` tells a running reconciler from none.

The files are written and read by `cli.home_files`; the heartbeat is `cli.reconciler_beat`
(both importable from here). Each file is written whole (a temporary file renamed over it): a
reader never sees half of one. A record whose process is gone (its pid, on this host) is stale:
ignored, and said so.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli.home_files import (
    RECONCILER_BEAT,
    SERVE_RECORD,
    process_alive,
    read_record,
    write_record,
)
from cli.reconciler_beat import (
    BeatingRunner,
    Heartbeat,
    Liveness,
    reconciler_liveness,
    stall_after_s,
)
from ledger.errors import ConfigurationError
from ledger.settings import DEFAULT_HOME
from ledger.tools import load_tool_modules

__all__ = [
    "RECONCILER_BEAT",
    "SERVE_RECORD",
    "TOOLS_ENV",
    "BeatingRunner",
    "Heartbeat",
    "Liveness",
    "ServeRecord",
    "Served",
    "ToolModules",
    "clear_serve",
    "client_url",
    "find_served",
    "load_served_tools",
    "process_alive",
    "read_record",
    "reconciler_liveness",
    "record_serve",
    "stall_after_s",
    "tool_modules",
    "write_record",
]

log = logging.getLogger(__name__)
TOOLS_ENV = "OUTCOMES_TOOLS"


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
