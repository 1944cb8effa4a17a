"""The ground truth: one JSON line per thing a tool really did, appended (O_APPEND, fsync) to a
file the ledger never reads. The checker compares the ledger with it.

Actions:
- `begin`: the tool's code started (attempt, pid);
- `step`: one step of long work ran; `checked_at` is when its brake check began;
- `spend`: the real-world effect of a spending tool (at most one per job is the promise);
- `done`: the tool returned or raised; `outcome` is what it reported (succeeded, declined,
  partial, retry, crashed, none, halted).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TRUTH_ENV = "NEMESIS_TRUTH_FILE"


def record(job: str, attempt: int, tool: str, action: str, **extra: Any) -> None:
    """Append one line and fsync it before the tool goes on: what is in the file happened."""
    path = os.environ.get(TRUTH_ENV)
    if not path:
        return
    line = {"job": job, "attempt": attempt, "tool": tool, "action": action}
    line |= {"t": time.time(), "pid": os.getpid(), **extra}
    data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)  # one write of a short line with O_APPEND: never interleaved
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Act:
    job: str
    attempt: int
    tool: str
    action: str
    t: float
    pid: int
    outcome: str | None = None
    checked_at: float | None = None


def read(path: Path) -> list[Act]:
    """Every complete line (a line cut by a kill -9 mid-write cannot be fsynced: skipped)."""
    acts: list[Act] = []
    if not path.exists():
        return acts
    for raw in path.read_text().splitlines():
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            continue
        acts.append(
            Act(
                job=line["job"],
                attempt=int(line["attempt"]),
                tool=line["tool"],
                action=line["action"],
                t=float(line["t"]),
                pid=int(line["pid"]),
                outcome=line.get("outcome"),
                checked_at=line.get("checked_at"),
            )
        )
    return acts
