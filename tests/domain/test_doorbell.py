"""Doorbells (ledger/doorbell.py): a ring wakes every bell of a folder, once; a bell whose
process is gone is forgotten by the next ring; without bells, nothing fails."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest

from ledger import doorbell

pytestmark = pytest.mark.skipif(not doorbell.supported(), reason="bells need Linux")


def test_a_ring_wakes_every_bell_of_the_folder(tmp_path: Path) -> None:
    first, second = doorbell.Bell(tmp_path), doorbell.Bell(tmp_path)
    try:
        assert sorted(os.listdir(tmp_path)) == sorted([first.name, second.name])
        assert not first.wait(0)  # nothing rang yet
        doorbell.ring(tmp_path)
        doorbell.ring(tmp_path)
        assert first.wait(5) and second.wait(5)
        assert not first.wait(0)  # both rings were taken by the one wait
    finally:
        first.close()
        second.close()
    assert os.listdir(tmp_path) == []


def test_a_waiting_bell_wakes_when_another_thread_rings(tmp_path: Path) -> None:
    bell = doorbell.Bell(tmp_path)
    ringer = threading.Timer(0.05, doorbell.ring, args=(tmp_path,))
    try:
        ringer.start()
        assert bell.wait(60)  # a wake-up; without the ring this would wait the whole minute
    finally:
        ringer.cancel()
        bell.close()


def test_a_bell_nobody_listens_on_is_removed_by_the_next_ring(tmp_path: Path) -> None:
    live = doorbell.Bell(tmp_path)
    (tmp_path / "0123456789abcdef").touch()  # a bell whose process died without closing it
    try:
        doorbell.ring(tmp_path)
        assert os.listdir(tmp_path) == [live.name]
        assert live.wait(5)
    finally:
        live.close()


def test_ringing_no_folder_or_a_missing_one_does_nothing(tmp_path: Path) -> None:
    doorbell.ring(None)
    doorbell.ring(tmp_path / "absent")
    assert doorbell.listen(None) is None


def test_a_bell_that_cannot_be_made_is_none_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(self: socket.socket, address: object) -> None:
        raise PermissionError("no")

    monkeypatch.setattr(socket.socket, "bind", refused)
    assert doorbell.listen(tmp_path) is None
    assert os.listdir(tmp_path) == []
