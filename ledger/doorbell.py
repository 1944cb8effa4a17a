"""Doorbells: a wake-up from one process to the others of one machine, instead of a poll.

On the embedded defaults (a SQLite ledger, a queue in a folder) nothing pushes a change: the
worker polled its queue folder and the API polled the ledger for the jobs it waits on, every
0.05 s each, which was most of one agent's wait for a no-op. Here a process that waits
listens on a bell; one that writes rings every bell of the folder they share.

A bell is a Unix datagram socket in Linux's abstract namespace (no socket file, gone with its
process) whose name is also an empty file in the folder, so ringers find the listeners by
listing it. A ring carries nothing: it is only a hint to look now, and every waiter keeps a
slower poll, so a ring lost (a full socket buffer, a process not yet listening) only costs
the old delay. Any local process can ring a bell (abstract names are listed in
/proc/net/unix): all it can do is make a waiter look early. Where abstract sockets do not
exist (not Linux) there are no bells and the polls run as before.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import sys
import uuid
from pathlib import Path

_PREFIX = "\0outcomes-bell-"


def supported() -> bool:
    return sys.platform.startswith("linux")


class Bell:
    """One listener's bell, named by a file in `folder` while it is open."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.name = uuid.uuid4().hex
        self._file = folder / self.name
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self._socket.bind(_PREFIX + self.name)
            self._socket.setblocking(False)
            self._file.touch(mode=0o600)
        except OSError:
            self._socket.close()
            raise

    def fileno(self) -> int:
        return self._socket.fileno()

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for a ring; True if one came (all pending are taken)."""
        ready, _, _ = select.select([self._socket], [], [], max(timeout, 0.0))
        return self.clear() or bool(ready)

    def clear(self) -> bool:
        """Take every pending ring; True if there was one."""
        rung = False
        while True:
            try:
                self._socket.recv(16)
            except (BlockingIOError, InterruptedError):
                return rung
            except OSError:  # closed meanwhile
                return rung
            rung = True

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._file.unlink()
        self._socket.close()


def listen(folder: Path | None) -> Bell | None:
    """A bell in `folder`; None where bells do not work (the caller keeps polling)."""
    if folder is None or not supported():
        return None
    try:
        return Bell(folder)
    except OSError:
        return None


def ring(folder: Path | None) -> None:
    """Ring every bell in `folder`. Never raises: a ring is a hint. A name nobody listens on
    any more (its process is gone) is removed."""
    if folder is None or not supported():
        return
    try:
        names = os.listdir(folder)
    except OSError:
        return
    if not names:
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        sender.setblocking(False)
        for name in names:
            try:
                sender.sendto(b"!", _PREFIX + name)
            except (ConnectionRefusedError, FileNotFoundError):
                with contextlib.suppress(OSError):
                    os.unlink(folder / name)
            except OSError:  # a full buffer: that listener has a ring pending already
                continue
