"""What an auditor keeps and checks offline: signed tree heads, inclusion receipts of a job's
outcome, and consistency proofs between two heads (docs/integrity.md, "Proofs").

- A **tree head** (`SignedHead`, format `outcome-ledger-tree-head/1`): the tree's size and
  root, the ledger position of its last leaf, when it was taken, and its frontier (so that
  anyone holding it can extend it with later events: `audit verify --since`). At most 53
  frontier hashes: under 4 KB at any size. Signed with Ed25519 when the ledger has a signing
  key (`OUTCOMES_SIGNING_KEY`): the signature covers the head's canonical JSON (keys sorted,
  no whitespace, UTF-8) without its `signature` member.
- An **inclusion receipt** (`outcome-ledger-inclusion/1`): a job's terminal event as leaf
  `leaf_index` of the tree of `tree_size` leaves with root `root_hash`: `leaf_data` (base64)
  is the 32 bytes of the event's `hash`, `leaf_hash` = SHA-256(0x00 || leaf_data), and
  `event` (base64) the event's canonical bytes, whose SHA-256 is `leaf_data`
  (`ledger.chain.canonical_bytes`): so the receipt shows the outcome itself. `audit_path` is
  RFC 9162's inclusion path, deepest sibling first.
- A **consistency proof** (`outcome-ledger-consistency/1`): RFC 9162's proof that the tree of
  `first_size` leaves (root `first_root`) is the start of the tree of `second_size` leaves.

`check_document` checks either with nothing but this module (no database): every hash is
recomputed; a changed byte anywhere is refused.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ledger.clock import format_time
from ledger.errors import ConfigurationError, ProofError
from ledger.merkle import Frontier, TreeHead, check_size, leaf_hash, parse_hash
from ledger.merkle_verify import ConsistencyProof, InclusionProof

HEAD_FORMAT = "outcome-ledger-tree-head/1"
INCLUSION_FORMAT = "outcome-ledger-inclusion/1"
CONSISTENCY_FORMAT = "outcome-ledger-consistency/1"
MAX_HEAD_BYTES = 4096
_HEAD_KEYS = {"format", "tree_size", "root_hash", "position", "recorded_at", "frontier"}


# --- signing ----------------------------------------------------------------------------------


def configured_signing_key(text: str | None) -> Ed25519PrivateKey | None:
    """The key `OUTCOMES_SIGNING_KEY` names, or None when it is not set (heads go unsigned)."""
    return signing_key_from(text) if text else None


def signing_key_from(text: str) -> Ed25519PrivateKey:
    """`OUTCOMES_SIGNING_KEY`: a PEM private key (PKCS#8), or the 32-byte Ed25519 seed in
    base64 or in hex."""
    text = text.strip()
    try:
        if text.startswith("-----BEGIN"):
            key = serialization.load_pem_private_key(text.encode(), password=None)
            if not isinstance(key, Ed25519PrivateKey):
                raise ConfigurationError("OUTCOMES_SIGNING_KEY is not an Ed25519 key")
            return key
        seed = bytes.fromhex(text) if len(text) == 64 else base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error, TypeError):
        raise ConfigurationError(
            "OUTCOMES_SIGNING_KEY must be an Ed25519 PEM private key, or its 32-byte seed "
            "in base64 or hex"
        ) from None
    if len(seed) != 32:
        raise ConfigurationError("OUTCOMES_SIGNING_KEY's seed must be 32 bytes")
    return Ed25519PrivateKey.from_private_bytes(seed)


def public_key_text(key: Ed25519PublicKey) -> str:
    """The public key as base64 of its 32 raw bytes (what `--public-key` takes)."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def key_id(key: Ed25519PublicKey) -> str:
    """The first 16 hex digits of SHA-256 over the raw public key."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def public_key_from(text: str) -> Ed25519PublicKey:
    """A public key as `public_key_text` writes it, or PEM."""
    text = text.strip()
    try:
        if text.startswith("-----BEGIN"):
            key = serialization.load_pem_public_key(text.encode())
            if not isinstance(key, Ed25519PublicKey):
                raise ProofError("the public key is not an Ed25519 key")
            return key
        return Ed25519PublicKey.from_public_bytes(base64.b64decode(text, validate=True))
    except (ValueError, binascii.Error):
        raise ProofError("the public key is neither base64 of 32 bytes nor PEM") from None


def canonical(doc: dict[str, Any]) -> bytes:
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)


# --- tree heads -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SignedHead:
    """A tree head as published: the tree, the position of its last leaf (None: empty), when
    it was taken, and the signature over the rest (None: the ledger has no signing key)."""

    frontier: Frontier
    position: int | None
    recorded_at: datetime | str
    signature: dict[str, str] | None = None

    @property
    def head(self) -> TreeHead:
        return self.frontier.head()

    def body(self) -> dict[str, Any]:
        when = self.recorded_at
        return {
            "format": HEAD_FORMAT,
            **self.frontier.to_json(),
            "position": self.position,
            "recorded_at": format_time(when) if isinstance(when, datetime) else when,
        }

    def signed(self, key: Ed25519PrivateKey) -> SignedHead:
        public = key.public_key()
        signature = {
            "alg": "Ed25519",
            "key_id": key_id(public),
            "sig": base64.b64encode(key.sign(canonical(self.body()))).decode(),
        }
        return SignedHead(self.frontier, self.position, self.recorded_at, signature)

    def to_json(self) -> dict[str, Any]:
        doc = self.body()
        if self.signature is not None:
            doc["signature"] = self.signature
        return doc

    def check_signature(self, public: Ed25519PublicKey) -> None:
        """Raise `ProofError` unless the head is signed by this key."""
        if self.signature is None:
            raise ProofError("the tree head is not signed")
        try:
            sig = base64.b64decode(self.signature.get("sig", ""), validate=True)
            public.verify(sig, canonical(self.body()))
        except (InvalidSignature, ValueError, binascii.Error):
            raise ProofError("the tree head's signature does not verify with this key") from None

    @classmethod
    def from_json(cls, doc: object) -> SignedHead:
        if not isinstance(doc, dict) or doc.get("format") != HEAD_FORMAT:
            raise ProofError(f"not a tree head (format {HEAD_FORMAT})")
        keys = set(doc) - {"signature"}
        if keys != _HEAD_KEYS:
            raise ProofError(f"a tree head is an object of exactly {sorted(_HEAD_KEYS)}")
        frontier = Frontier.from_json({k: doc[k] for k in ("tree_size", "root_hash", "frontier")})
        position = doc["position"]
        if position is not None:
            check_size(position, "position", minimum=1)
        if not isinstance(doc["recorded_at"], str):
            raise ProofError("recorded_at is not a time")
        signature = doc.get("signature")
        if signature is not None and not (
            isinstance(signature, dict) and all(isinstance(v, str) for v in signature.values())
        ):
            raise ProofError("signature is not an object of strings")
        return cls(frontier, position, doc["recorded_at"], signature)

    @classmethod
    def loads(cls, raw: bytes) -> SignedHead:
        if len(raw) > MAX_HEAD_BYTES:
            raise ProofError(f"a tree head is at most {MAX_HEAD_BYTES} bytes")
        try:
            return cls.from_json(orjson.loads(raw))
        except orjson.JSONDecodeError:
            raise ProofError("a tree head is JSON") from None


# --- receipts ---------------------------------------------------------------------------------


def inclusion_receipt(
    job_id: str, event_bytes: bytes, proof: InclusionProof, head: TreeHead
) -> dict[str, Any]:
    data = hashlib.sha256(event_bytes).digest()
    return {
        "format": INCLUSION_FORMAT,
        "job_id": job_id,
        "leaf_index": proof.leaf_index,
        "leaf_data": base64.b64encode(data).decode(),
        "leaf_hash": leaf_hash(data).hex(),
        "event": base64.b64encode(event_bytes).decode(),
        "tree_size": proof.tree_size,
        "root_hash": head.root_hash.hex(),
        "audit_path": [h.hex() for h in proof.path],
    }


def consistency_document(proof: ConsistencyProof, old: TreeHead, new: TreeHead) -> dict[str, Any]:
    return {
        "format": CONSISTENCY_FORMAT,
        "first_size": old.tree_size,
        "first_root": old.root_hash.hex(),
        "second_size": new.tree_size,
        "second_root": new.root_hash.hex(),
        "proof": [h.hex() for h in proof.path],
    }


@dataclass(frozen=True)
class Checked:
    """What a checked document proved: its kind, the head it is against, and what it says."""

    kind: str
    head: TreeHead
    summary: str


def _b64(value: object, what: str) -> bytes:
    if not isinstance(value, str):
        raise ProofError(f"{what} is not base64")
    try:
        return base64.b64decode(value, validate=True)
    except (ValueError, binascii.Error):
        raise ProofError(f"{what} is not base64") from None


def check_inclusion(doc: dict[str, Any]) -> Checked:
    """An inclusion receipt, checked against its own root: raises `ProofError` if any byte of
    it does not add up."""
    expected = {
        "format",
        "job_id",
        "leaf_index",
        "leaf_data",
        "leaf_hash",
        "event",
        "tree_size",
        "root_hash",
        "audit_path",
    }
    if set(doc) != expected:
        raise ProofError(f"an inclusion receipt is an object of exactly {sorted(expected)}")
    data = _b64(doc["leaf_data"], "leaf_data")
    event = _b64(doc["event"], "event")
    if not hmac.compare_digest(hashlib.sha256(event).digest(), data):
        raise ProofError("the event's canonical bytes do not hash to leaf_data")
    try:
        content = orjson.loads(event)
    except orjson.JSONDecodeError:
        raise ProofError("the event is not JSON") from None
    if not isinstance(content, dict) or content.get("stream_id") != f"job-{doc['job_id']}":
        raise ProofError("the event is not of the receipt's job")
    leaf = leaf_hash(data)
    if leaf != parse_hash(doc["leaf_hash"], "leaf_hash"):
        raise ProofError("leaf_hash is not SHA-256(0x00 || leaf_data)")
    proof = InclusionProof.from_json(
        {
            "leaf_index": doc["leaf_index"],
            "tree_size": doc["tree_size"],
            "inclusion_path": doc["audit_path"],
        }
    )
    head = TreeHead(proof.tree_size, parse_hash(doc["root_hash"], "root_hash"))
    if not proof.verify(leaf, head):
        raise ProofError("the audit path does not lead from the leaf to root_hash")
    summary = (
        f"job {doc['job_id']}: {content.get('type')} is leaf {proof.leaf_index} "
        f"of the tree of {proof.tree_size} leaves"
    )
    return Checked("inclusion", head, summary)


def check_consistency(doc: dict[str, Any]) -> tuple[Checked, TreeHead]:
    expected = {"format", "first_size", "first_root", "second_size", "second_root", "proof"}
    if set(doc) != expected:
        raise ProofError(f"a consistency proof is an object of exactly {sorted(expected)}")
    old = TreeHead(check_size(doc["first_size"], "first_size"), parse_hash(doc["first_root"]))
    new = TreeHead(check_size(doc["second_size"], "second_size"), parse_hash(doc["second_root"]))
    proof = ConsistencyProof.from_json(
        {
            "tree_size_1": old.tree_size,
            "tree_size_2": new.tree_size,
            "consistency_path": doc["proof"],
        }
    )
    if not proof.verify(old, new):
        raise ProofError("the proof does not show the first tree as the start of the second")
    summary = f"the tree of {old.tree_size} leaves is the start of the tree of {new.tree_size}"
    return Checked("consistency", new, summary), old


def check_document(
    doc: object,
    digest: SignedHead | None = None,
    public_key: Ed25519PublicKey | None = None,
) -> Checked:
    """Check a receipt, a consistency proof or a tree head offline. With `digest` (a head
    kept out of the writers' reach), the document must be against that very head (a
    consistency proof: from or to it); with `public_key`, the digest (or the head checked)
    must be signed by it. Raises `ProofError` on anything that does not add up."""
    if not isinstance(doc, dict):
        raise ProofError("a proof is a JSON object")
    kind = doc.get("format")
    if kind == HEAD_FORMAT:
        head_doc = SignedHead.from_json(doc)
        if public_key is not None:
            head_doc.check_signature(public_key)
        checked = Checked("head", head_doc.head, f"tree head of {head_doc.head.tree_size} leaves")
        heads = [head_doc.head]
    elif kind == INCLUSION_FORMAT:
        checked = check_inclusion(doc)
        heads = [checked.head]
    elif kind == CONSISTENCY_FORMAT:
        checked, old = check_consistency(doc)
        heads = [checked.head, old]
    else:
        raise ProofError(f"unknown proof format {kind!r}")
    if digest is not None:
        if public_key is not None:
            digest.check_signature(public_key)
        if digest.head not in heads:
            raise ProofError(
                f"the proof is against the tree of {checked.head.tree_size} leaves, not the "
                f"digest's ({digest.head.tree_size} leaves, root {digest.head.root_hash.hex()})"
            )
    return checked
