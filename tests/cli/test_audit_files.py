"""`audit export -o FILE` and `audit events -o FILE` write what job arguments the ledger holds:
the file is its owner's alone (0600), whatever the umask, and a file that was there before is
narrowed before anything is written into it (issue 47, Lows)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.test_operator_commands import accepted_job
from tests.plugins.cli import Invoke


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that lets every file be world-readable (and writable) unless asked otherwise."""
    before = os.umask(0)
    try:
        yield
    finally:
        os.umask(before)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("command", [["audit", "export"], ["audit", "events", "--format", "csv"]])
def test_an_audit_file_is_written_0600(
    outcomes: Invoke, database_url: str, tmp_path: Path, open_umask: None, command: list[str]
) -> None:
    accepted_job(database_url)
    new = tmp_path / "new.jsonl"
    outcomes(*command, "-o", str(new))
    assert mode(new) == 0o600 and new.read_text().count("\n") >= 1
    there = tmp_path / "there.jsonl"
    there.write_text("old")
    there.chmod(0o644)
    outcomes(*command, "-o", str(there))
    assert mode(there) == 0o600 and there.read_text() == new.read_text()
