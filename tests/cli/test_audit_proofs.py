"""`outcomes audit head | prove | consistency | check-proof | public-key` on both SQL stores:
receipts verify offline, with this project's checker and independently (pymerkle's tree over
the exported events, and the RFC 9162 recursion written out here); a changed byte of a leaf, a
path or a root is refused; a row edited after it was hashed is refused by `prove`."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from pymerkle import InmemoryTree

from cli.errors import EXIT_PROBLEM
from tests.plugins.cli import Invoke
from tests.plugins.tampering import Seeded, rehash, tamper_set

SEED = base64.b64encode(bytes(range(32))).decode()


def _json(outcomes: Invoke, *args: str) -> Any:
    return json.loads(outcomes(*args).stdout)


def _h(*parts: bytes) -> bytes:
    return hashlib.sha256(b"".join(parts)).digest()


def rfc_root(index: int, size: int, leaf: bytes, path: list[bytes]) -> bytes:
    """RFC 9162 §2.1.3 by its recursive definition: PATH(m, D[n]) ends with the sibling at the
    top split (k the largest power of two below n), so it is peeled from the end."""
    if size == 1:
        assert not path
        return leaf
    k = 1 << ((size - 1).bit_length() - 1)
    if index < k:
        return _h(b"\x01", rfc_root(index, k, leaf, path[:-1]), path[-1])
    return _h(b"\x01", path[-1], rfc_root(index - k, size - k, leaf, path[:-1]))


def check(outcomes: Invoke, path: Path, *args: str) -> Any:
    return outcomes("audit", "check-proof", str(path), *args, ok=False)


def test_a_receipt_verifies_here_and_independently(
    outcomes: Invoke, seeded: Seeded, tmp_path: Path
) -> None:
    job_id = seeded.streams["charge"].removeprefix("job-")
    receipt = _json(outcomes, "audit", "prove", job_id, "--json")
    assert receipt["job_id"] == job_id and receipt["tree_size"] == 17
    saved = tmp_path / "receipt.json"
    saved.write_text(json.dumps(receipt))
    assert check(outcomes, saved).exit_code == 0

    # The leaf from the exported event: its canonical bytes hash to leaf_data.
    event = base64.b64decode(receipt["event"])
    data = base64.b64decode(receipt["leaf_data"])
    assert hashlib.sha256(event).digest() == data
    assert json.loads(event)["type"] == "work.succeeded"
    leaf = _h(b"\x00", data)
    path = [bytes.fromhex(h) for h in receipt["audit_path"]]
    root = rfc_root(receipt["leaf_index"], receipt["tree_size"], leaf, path)
    assert root.hex() == receipt["root_hash"]

    # pymerkle's own tree over every event's hash, in ledger order.
    theirs = InmemoryTree(algorithm="sha256")
    for e in seeded.store.iter_events():
        theirs.append_entry(bytes.fromhex(e.hash))
    assert theirs.get_root(17).hex() == receipt["root_hash"]
    their_path = theirs.prove_inclusion(receipt["leaf_index"] + 1, 17).path
    assert their_path[1:] == path

    head = _json(outcomes, "audit", "head", "--json")
    assert head["root_hash"] == receipt["root_hash"] and head["tree_size"] == 17
    digest = tmp_path / "head.json"
    digest.write_text(json.dumps(head))
    assert check(outcomes, saved, "--digest", str(digest)).exit_code == 0


@pytest.mark.parametrize(
    ("field", "how"),
    [
        ("leaf_data", "b64"),
        ("event", "b64"),
        ("leaf_hash", "hex"),
        ("root_hash", "hex"),
        ("audit_path", "hex"),
        ("tree_size", "int"),
        ("leaf_index", "int"),
    ],
)
def test_a_changed_byte_is_refused(
    outcomes: Invoke, seeded: Seeded, tmp_path: Path, field: str, how: str
) -> None:
    job_id = seeded.streams["retried"].removeprefix("job-")
    receipt = _json(outcomes, "audit", "prove", job_id, "--json")
    if how == "b64":
        raw = bytearray(base64.b64decode(receipt[field]))
        raw[5] ^= 1
        receipt[field] = base64.b64encode(bytes(raw)).decode()
    elif how == "hex":
        value = receipt[field][0] if field == "audit_path" else receipt[field]
        changed = ("1" if value[0] != "1" else "2") + value[1:]
        if field == "audit_path":
            receipt[field][0] = changed
        else:
            receipt[field] = changed
    else:
        receipt[field] += 1
    saved = tmp_path / "receipt.json"
    saved.write_text(json.dumps(receipt))
    result = check(outcomes, saved)
    assert result.exit_code == EXIT_PROBLEM, result.output
    assert "proof refused" in result.stderr


def test_consistency_between_heads(outcomes: Invoke, seeded: Seeded, tmp_path: Path) -> None:
    old = tmp_path / "old.json"
    outcomes("audit", "head", "-o", str(old))
    from tests.factories import accepted, fresh_job_stream

    for _ in range(5):
        seeded.store.append(fresh_job_stream(), [accepted()], 0)
    new = tmp_path / "new.json"
    outcomes("audit", "head", "-o", str(new))
    doc = _json(outcomes, "audit", "consistency", str(old), "--json")
    assert (doc["first_size"], doc["second_size"]) == (17, 22)
    proof = tmp_path / "proof.json"
    proof.write_text(json.dumps(doc))
    assert check(outcomes, proof, "--digest", str(old)).exit_code == 0
    assert check(outcomes, proof, "--digest", str(new)).exit_code == 0
    again = _json(outcomes, "audit", "consistency", str(old), str(new), "--json")
    assert again == doc
    doc["first_root"] = "0" * 64
    proof.write_text(json.dumps(doc))
    assert check(outcomes, proof).exit_code == EXIT_PROBLEM
    # A head that was never this ledger's: refused, not proven.
    forged = json.loads(old.read_text())
    forged["root_hash"] = "1" * 64
    forged["frontier"] = []
    forged["tree_size"] = 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(forged))
    assert outcomes("audit", "consistency", str(bad), ok=False).exit_code != 0


def test_signed_heads(
    outcomes: Invoke, seeded: Seeded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OUTCOMES_SIGNING_KEY", SEED)
    key = outcomes("audit", "public-key").stdout.strip()
    head = tmp_path / "head.json"
    outcomes("audit", "head", "-o", str(head))
    raw = head.read_bytes()
    assert len(raw) <= 4096
    assert json.loads(raw)["signature"]["alg"] == "Ed25519"
    assert check(outcomes, head, "--public-key", key).exit_code == 0
    doc = json.loads(raw)
    doc["position"] += 1  # a signed field changed
    head.write_text(json.dumps(doc))
    assert check(outcomes, head, "--public-key", key).exit_code == EXIT_PROBLEM
    monkeypatch.delenv("OUTCOMES_SIGNING_KEY")
    assert outcomes("audit", "public-key", ok=False).exit_code != 0


def test_a_job_without_an_outcome_has_no_receipt(outcomes: Invoke, seeded: Seeded) -> None:
    from tests.factories import accepted, fresh_job_stream

    stream = fresh_job_stream()
    seeded.store.append(stream, [accepted()], 0)
    result = outcomes("audit", "prove", stream.removeprefix("job-"), ok=False)
    assert result.exit_code != 0 and "has not ended" in result.stderr


def test_an_edited_outcome_row_is_refused_by_prove(outcomes: Invoke, seeded: Seeded) -> None:
    target = seeded.event("charge", 3)
    tamper_set(seeded.url, target.position, actor="worker:mallory")
    result = outcomes("audit", "prove", seeded.streams["charge"].removeprefix("job-"), ok=False)
    assert result.exit_code != 0 and "outcome (ledger position" in result.stderr


def test_a_row_rewritten_with_its_hash_is_refused_by_prove(
    outcomes: Invoke, seeded: Seeded
) -> None:
    """A forger who re-hashes the row (the stream's last event: no later link to mend): its
    content makes its hash, but the leaf it makes, recomputed from the row (the stores keep no
    leaf), no longer adds up to the stored tree and head."""
    target = seeded.event("charge", 3)
    rehash(seeded, target, target.data | {"result": {"charge_id": "ch_forged"}})
    assert seeded.event("charge", 3).hash != target.hash
    result = outcomes("audit", "prove", seeded.streams["charge"].removeprefix("job-"), ok=False)
    assert result.exit_code != 0 and "outcome (ledger position" in result.stderr
    assert "does not add up" in result.stderr
