"""Digests published into a directory: one new read-only file per digest, never overwritten,
named so that names sort by time; and the whole directory read back for `audit verify`.

The directory must be one the ledger's writers cannot change (another OS user's, a write-once
bucket mount): then a history rewritten after a digest was published cannot hide.
"""

from __future__ import annotations

import os
from pathlib import Path

from ledger.digest import Digest
from ledger.errors import DigestError

PREFIX = "digest-"
SUFFIX = ".json"
READ_ONLY = 0o444


def digest_name(digest: Digest) -> str:
    """`digest-20261130T214501.123456Z-p1234.json`: UTC time first, so names sort by time."""
    stamp = digest.created_at.strftime("%Y%m%dT%H%M%S.%fZ")
    return f"{PREFIX}{stamp}-p{digest.position}{SUFFIX}"


def publish(directory: Path, digest: Digest) -> Path:
    """Write `digest` as a new read-only file in `directory`; an existing name is an error.

    Written under a hidden name first, then linked to its own (a link never replaces a file),
    so a reader never sees half a digest and a crash leaves only a hidden leftover."""
    final = directory / digest_name(digest)
    partial = directory / f".{final.name}.{os.getpid()}.partial"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, READ_ONLY)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(digest.dumps())
            out.flush()
            os.fsync(out.fileno())
        os.link(partial, final)  # FileExistsError rather than overwrite
    finally:
        partial.unlink(missing_ok=True)
    _sync_directory(directory)
    return final


def load_all(directory: Path) -> list[tuple[Path, Digest]]:
    """Every digest in `directory` (hidden files aside), oldest name first; a file that is not
    an intact digest is an error naming it."""
    if not directory.is_dir():
        raise DigestError(f"{directory}: not a directory")
    found: list[tuple[Path, Digest]] = []
    for path in sorted(p for p in directory.iterdir() if not p.name.startswith(".")):
        if not path.is_file():
            continue
        try:
            found.append((path, Digest.loads(path.read_bytes())))
        except DigestError as exc:
            raise DigestError(f"{path}: {exc}") from None
    if not found:
        raise DigestError(f"{directory}: holds no digest")
    return found


def _sync_directory(directory: Path) -> None:
    """The new name itself survives a crash (POSIX; elsewhere there is nothing to sync)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
