"""Ledger digests: the head (version, hash) of every stream at a moment.

Saved somewhere the ledger's writers cannot reach, a digest later proves that the ledger still
extends it: every stream it names must still hold that version with that hash.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from ledger.chain import Checkpoint
from ledger.clock import format_time, utc
from ledger.errors import DigestError

DIGEST_FORMAT = "outcome-ledger-digest/1"


@dataclass(frozen=True)
class Digest:
    created_at: datetime
    position: int  # the highest position the digest covers
    events: int
    heads: dict[str, tuple[int, str]]
    # The ledger-wide link at `position`: binds every event up to it, in order. Digests taken
    # before the ledger-wide chain existed have none, and prove the stream heads alone.
    ledger_hash: str | None = None

    @property
    def root(self) -> str:
        """One hash over everything the digest states, so a damaged file is detectable.
        (Unkeyed: it catches damage; keeping the file out of writers' reach stops forgers.)"""
        stated: dict[str, Any] = {
            "created_at": format_time(self.created_at),
            "position": self.position,
            "events": self.events,
            "heads": {s: [v, h] for s, (v, h) in self.heads.items()},
        }
        if self.ledger_hash is not None:
            stated["ledger_hash"] = self.ledger_hash
        canonical = orjson.dumps(stated, option=orjson.OPT_SORT_KEYS)
        return hashlib.sha256(canonical).hexdigest()

    @property
    def checkpoint(self) -> Checkpoint:
        return Checkpoint(
            heads=self.heads,
            position=self.position,
            events=self.events,
            ledger_hash=self.ledger_hash,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "format": DIGEST_FORMAT,
            "created_at": format_time(self.created_at),
            "position": self.position,
            "events": self.events,
            "streams": len(self.heads),
            "root": self.root,
            "ledger_hash": self.ledger_hash,
            "heads": {s: [v, h] for s, (v, h) in sorted(self.heads.items())},
        }

    def dumps(self) -> bytes:
        return orjson.dumps(self.to_json(), option=orjson.OPT_INDENT_2)

    @classmethod
    def loads(cls, raw: bytes | str) -> Digest:
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise DigestError(f"digest is not JSON: {exc}") from None
        if not isinstance(doc, dict) or doc.get("format") != DIGEST_FORMAT:
            raise DigestError(f"not a ledger digest (expected format {DIGEST_FORMAT!r})")
        try:
            heads = {str(s): (int(v), str(h)) for s, (v, h) in doc["heads"].items()}
            digest = cls(
                created_at=utc(datetime.fromisoformat(doc["created_at"])),
                position=int(doc["position"]),
                events=int(doc["events"]),
                heads=heads,
                ledger_hash=doc.get("ledger_hash"),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise DigestError(f"malformed digest: {exc!r}") from None
        if digest.root != doc.get("root"):
            raise DigestError("digest root does not match its heads: the digest was altered")
        return digest
