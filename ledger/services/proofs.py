"""Merkle proofs of the ledger (docs/integrity.md, "Proofs"): the signed tree head, an
inclusion receipt of a job's outcome, a consistency proof between two heads. Each reads O(log n)
stored hashes (`ledger.merkle_store`), never the ledger."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ledger import digest_files
from ledger.chain import recomputed_hash, recorded_canonical_bytes
from ledger.clock import now
from ledger.errors import (
    JobNotEndedError,
    JobNotFoundError,
    ProofError,
    SubtreeMissingError,
    TamperedLeafError,
)
from ledger.events import TERMINAL_EVENT_TYPES, RecordedEvent, job_stream
from ledger.merkle import event_leaf_hash
from ledger.merkle_store import (
    consistency_proof,
    frontier_at,
    inclusion_proof,
    inclusion_proof_and_leaf,
)
from ledger.merkle_verify import InclusionProof
from ledger.persistence.tree_contract import TreeState
from ledger.receipts import (
    SignedHead,
    canonical,
    configured_signing_key,
    consistency_document,
    inclusion_receipt,
    key_id,
    public_key_text,
)
from ledger.runtime.ledger import Ledger
from ledger.settings import load_settings


def signing_key() -> Ed25519PrivateKey | None:
    """The ledger's Ed25519 signing key (`OUTCOMES_SIGNING_KEY`), if it has one, for a command
    that holds no ledger (`audit public-key`); a ledger reads it once (`Ledger.signing_key`)."""
    return configured_signing_key(load_settings().signing_key)


def public_key() -> str | None:
    key = signing_key()
    return public_key_text(key.public_key()) if key is not None else None


def public_key_id() -> str | None:
    key = signing_key()
    return key_id(key.public_key()) if key is not None else None


def signed_head(state: TreeState, key: Ed25519PrivateKey | None) -> SignedHead:
    head = SignedHead(state.frontier, state.last_position, now())
    return head.signed(key) if key is not None else head


def head(ledger: Ledger) -> SignedHead:
    """The tree head now (what committed before the call is sequenced first): O(1)."""
    with ledger.store.in_order() as reads:
        return signed_head(reads.tree_state(), ledger.signing_key)


def publish_head(ledger: Ledger, directory: Path) -> tuple[Path, SignedHead]:
    """The tree head now, written as a new read-only file in `directory` (never overwriting
    one), named `head-<UTC time>-p<position>.json` so that names sort by time: what `audit
    verify --against DIR` checks by consistency proofs."""
    found = head(ledger)
    taken = now()
    stamp = taken.strftime("%Y%m%dT%H%M%S.%fZ")
    name = f"head-{stamp}-p{found.position or 0}.json"
    raw = canonical(found.to_json()) + b"\n"
    path, _ = digest_files.publish(directory, name, lambda out: out.write(raw))
    return path, found


@dataclass(frozen=True)
class Receipt:
    receipt: dict[str, object]
    head: SignedHead


def prove(ledger: Ledger, job_id: str) -> Receipt:
    """An inclusion receipt of the job's terminal event against the current head (the tree as
    last sequenced; an outcome not sequenced yet is sequenced first). The event is read from
    its row and hashed again: a row changed after its leaf was hashed is refused
    (`TamperedLeafError`), never proven."""
    found = _read_proof(ledger, job_id)
    if found is None:  # committed, not sequenced yet: what committed before the call goes first
        ledger.store.sequence()
        found = _read_proof(ledger, job_id)
    if found is None:
        raise JobNotEndedError(job_id, "its outcome is not in the tree yet")
    event, position, state, proof, stored = found
    if recomputed_hash(event) != event.hash:
        raise TamperedLeafError(job_id, position, "the event's content no longer makes its hash")
    if stored != event_leaf_hash(event.hash):
        raise TamperedLeafError(job_id, position, "the event is not the tree's leaf")
    tree = state.frontier.head()
    if not proof.verify(event_leaf_hash(event.hash), tree):
        raise TamperedLeafError(job_id, position, "the stored tree does not add up to its head")
    receipt = inclusion_receipt(job_id, recorded_canonical_bytes(event), proof, tree)
    return Receipt(receipt, signed_head(state, ledger.signing_key))


_Found = tuple[RecordedEvent, int, TreeState, InclusionProof, bytes]


def _read_proof(ledger: Ledger, job_id: str) -> _Found | None:
    """The job's terminal event, its position, the tree's state, the proof and the stored leaf;
    None while that event has no leaf yet. Each read in autocommit (`quick_read`): on Postgres a
    read-committed transaction gave each statement its own snapshot all the same, and cost a
    BEGIN and a COMMIT round trip more; the proof is checked against the state it read."""
    stream = job_stream(job_id)
    with ledger.store.quick_read() as reads:
        events = reads.read_stream(stream)
        if not events:
            raise JobNotFoundError(job_id)
        at = next((i for i, e in enumerate(events) if e.type in TERMINAL_EVENT_TYPES), None)
        if at is None:
            raise JobNotEndedError(job_id)
        positions = reads.stream_ledger_positions(stream)
        event, position = events[at], positions[at] if at < len(positions) else None
        if position is None:
            return None
        state = reads.tree_state()
        leaf = reads.tree_leaf_index(position, state)
        if leaf is None:
            return None
        hashes = reads.tree_hashes(state)
        try:  # the leaf itself with the proof's hashes, which read its 16-wide block anyway
            proof, stored = inclusion_proof_and_leaf(hashes, leaf, state.tree_size)
        except SubtreeMissingError:  # judged as ever: the leaf apart, then the proof's hashes
            alone = hashes.read(0, leaf, leaf + 1)
            proof = inclusion_proof(hashes, leaf, state.tree_size)
            stored = alone[0] if alone else b""
    return event, position, state, proof, stored


def consistency(
    ledger: Ledger, old: SignedHead, new: SignedHead | None = None
) -> dict[str, object]:
    """A consistency proof from `old` to `new` (None: the current head). Refused if either
    head is not one this ledger's tree had (its root at that size differs)."""
    with ledger.store.in_order() as reads:
        state = reads.tree_state()
        hashes = reads.tree_hashes()
        second = new.head if new is not None else state.frontier.head()
        first = old.head
        for wanted in (first, second):
            if wanted.tree_size > state.tree_size:
                raise ProofError(f"the tree has {state.tree_size} leaves, not {wanted.tree_size}")
            if (
                wanted.tree_size
                and frontier_at(hashes, wanted.tree_size).root() != wanted.root_hash
            ):
                raise ProofError(
                    f"the head of {wanted.tree_size} leaves is not this ledger's tree at that "
                    "size (its root differs): a history rewritten, or another ledger's head"
                )
        if first.tree_size == 0:
            raise ProofError("an empty tree is the start of every tree: nothing to prove")
        proof = consistency_proof(hashes, first.tree_size, second.tree_size)
    return consistency_document(proof, first, second)
