"""Digests published into a directory: one new read-only file per digest, never overwritten,
named so that names sort by time; and the whole directory read back for `audit verify`.

The directory must be one the ledger's writers cannot change (another OS user's, a write-once
bucket mount): then a history rewritten after a digest was published cannot hide.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, TypeVar

import orjson

from ledger.chain import Checkpoint
from ledger.digest import Digest
from ledger.errors import DigestError, ProofError, TreeHeadError
from ledger.receipts import HEAD_FORMAT, MAX_HEAD_BYTES, SignedHead

PREFIX = "digest-"
SUFFIX = ".json"
READ_ONLY = 0o444


T = TypeVar("T")


@dataclass(frozen=True)
class Published:
    """A published digest, known intact, without its heads (a directory of them, each as
    large as the ledger's streams, is never held at once): `load` reads it again in full."""

    path: Path
    position: int
    events: int
    ledger_hash: str | None

    @property
    def span(self) -> Checkpoint:
        """Its span alone (the ledger-order pass checks it; the heads are checked apart)."""
        return Checkpoint({}, self.position, self.events, self.ledger_hash)

    def load(self) -> Digest:
        return _load(self.path)


def digest_name(created_at: datetime, position: int) -> str:
    """`digest-20261130T214501.123456Z-p1234.json`: UTC time first, so names sort by time."""
    stamp = created_at.strftime("%Y%m%dT%H%M%S.%fZ")
    return f"{PREFIX}{stamp}-p{position}{SUFFIX}"


def publish(directory: Path, name: str, write: Callable[[IO[bytes]], T]) -> tuple[Path, T]:
    """Write a new read-only file `name` in `directory` with `write`; an existing name is an
    error. Returns its path and what `write` answered.

    Written under a hidden name first, then linked to its own (a link never replaces a file),
    so a reader never sees half a digest and a crash leaves only a hidden leftover."""
    final = directory / name
    partial = directory / f".{final.name}.{os.getpid()}.partial"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, READ_ONLY)
    try:
        with os.fdopen(fd, "wb") as out:
            written = write(out)
            out.flush()
            os.fsync(out.fileno())
        os.link(partial, final)  # FileExistsError rather than overwrite
    finally:
        partial.unlink(missing_ok=True)
    _sync_directory(directory)
    return final, written


def check_all(directory: Path) -> list[Published]:
    """Every digest in `directory` (hidden files aside), oldest name first, each read whole
    once to know it intact and then let go; a file that is not an intact digest is an error
    naming it."""
    if not directory.is_dir():
        raise DigestError(f"{directory}: not a directory")
    found: list[Published] = []
    for path in sorted(p for p in directory.iterdir() if not p.name.startswith(".")):
        if not path.is_file():
            continue
        digest = _load(path)
        found.append(Published(path, digest.position, digest.events, digest.ledger_hash))
    if not found:
        raise DigestError(f"{directory}: holds no digest")
    return found


@dataclass(frozen=True)
class PublishedDir:
    """What a directory of published digests holds: tree heads (`audit digest`, `audit head
    --json`: checked by consistency proofs) and per-stream digests (`audit digest --streams`,
    `--to`: checked by a read of the events each), oldest name first."""

    heads: list[tuple[Path, SignedHead]]
    digests: list[Published]


def read_dir(directory: Path) -> PublishedDir:
    """Every tree head and per-stream digest in `directory` (hidden files aside), each known
    intact; a file that is neither, or one that is broken, is an error naming it."""
    if not directory.is_dir():
        raise DigestError(f"{directory}: not a directory")
    heads: list[tuple[Path, SignedHead]] = []
    digests: list[Published] = []
    for path in sorted(p for p in directory.iterdir() if not p.name.startswith(".")):
        if not path.is_file():
            continue
        head = load_head(path)
        if head is not None:
            heads.append((path, head))
            continue
        digest = _load(path)
        digests.append(Published(path, digest.position, digest.events, digest.ledger_hash))
    if not heads and not digests:
        raise DigestError(f"{directory}: holds no digest")
    return PublishedDir(heads, digests)


def read_head(path: Path) -> SignedHead:
    """The tree head in `path` (`audit verify --since`): anything else is a `TreeHeadError`
    naming it."""
    head = load_head(path)
    if head is None:
        raise TreeHeadError(
            f"{path}: not a tree head (format {HEAD_FORMAT}, as `audit digest` and `audit head "
            "--json` write it); a per-stream digest goes with --digest"
        )
    return head


def load_head(path: Path) -> SignedHead | None:
    """The tree head in `path`, or None if the file is not one (a per-stream digest, say):
    a file that says it is a tree head but is not a sound one is a `TreeHeadError` naming
    it."""
    try:
        if path.stat().st_size > MAX_HEAD_BYTES:
            return None
        raw = path.read_bytes()
    except OSError as exc:
        raise DigestError(f"{path}: {exc.strerror or exc}") from None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict) or doc.get("format") != HEAD_FORMAT:
        return None
    try:
        return SignedHead.from_json(doc)
    except ProofError as exc:
        raise TreeHeadError(f"{path}: {exc}") from None


def _load(path: Path) -> Digest:
    try:
        return Digest.loads(path.read_bytes())
    except DigestError as exc:
        raise DigestError(f"{path}: {exc}") from None
    except OSError as exc:
        raise DigestError(f"{path}: {exc.strerror or exc}") from None


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
