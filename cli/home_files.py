"""The record files of a home folder (`./.outcomes/`): written whole, read back, and whether the
process that wrote one is still there (`cli.home_records` tells what each record holds)."""

from __future__ import annotations

import os
import socket
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from ledger.clock import utc

SERVE_RECORD = "serve.json"
RECONCILER_BEAT = "reconciler.json"


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


def seconds_since(moment: str | None, at: datetime) -> float | None:
    if moment is None:
        return None
    return round((at - utc(datetime.fromisoformat(moment))).total_seconds(), 1)
