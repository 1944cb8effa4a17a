"""`outcomes audit verify --since HEAD | --sample N | --against DIR` (tree heads) on both SQL
stores: an honest ledger passes; a row changed after a head (its data, or its data and stored
hash), a history rewritten with its tree, a changed sampled row and a forged head are each
caught and named; a file that is not a tree head, a head whose root is not its frontier's and
a head larger than the tree are refused with a reason."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from cli.errors import EXIT_PROBLEM, EXIT_USAGE
from ledger.events import RecordedEvent
from ledger.merkle import Frontier
from tests.factories import accepted, fresh_job_stream, started
from tests.plugins.cli import Invoke
from tests.plugins.tampering import Seeded, forge, record_workload, rehash, tamper_set


def _head(outcomes: Invoke, path: Path) -> dict[str, Any]:
    outcomes("audit", "digest", "-o", str(path))
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def _verify(outcomes: Invoke, *args: str) -> tuple[int, dict[str, Any], str]:
    result = outcomes("audit", "verify", *args, "--json", ok=False)
    found = json.loads(result.stdout) if result.stdout.strip() else {}
    return result.exit_code, found, result.stderr


def _kinds(found: dict[str, Any]) -> set[str]:
    return {p["kind"] for p in found["problems"]}


def _more_events(seeded: Seeded) -> dict[str, str]:
    """Another workload after the head: 17 events in six new streams, sequenced."""
    streams = record_workload(seeded.store)
    seeded.store.sequence()
    return streams


def _placed(seeded: Seeded, stream_id: str, version: int) -> tuple[RecordedEvent, int]:
    """The event at this version as its row holds it, and its ledger position (on Postgres
    the sequencer's, which `tamper_set` takes; `rehash` takes the row)."""
    seeded.store.sequence()
    event = seeded.store.read_stream(stream_id)[version - 1]
    with seeded.store.in_order() as reads:
        position = reads.stream_ledger_positions(stream_id)[version - 1]
    assert position is not None
    return event, position


def test_since_passes_on_an_honest_ledger_and_reads_only_what_came_after(
    outcomes: Invoke, seeded: Seeded, tmp_path: Path
) -> None:
    head = _head(outcomes, tmp_path / "head.json")
    assert head["tree_size"] == 17 and len((tmp_path / "head.json").read_bytes()) <= 4096
    _more_events(seeded)
    code, found, stderr = _verify(outcomes, "--since", str(tmp_path / "head.json"))
    assert code == 0, (found, stderr)
    assert found["ok"] and found["events_checked"] == 17  # the events after the head only
    assert found["streams_checked"] == 6  # the streams they touch
    assert found["read_models"]["rows_checked"]["jobs"] == 5
    assert "since the tree head of 17 leaves" in found["scope"]
    text = outcomes("audit", "verify", "--since", str(tmp_path / "head.json")).stdout
    assert "ok: 17 events since the tree head of 17 leaves" in text
    # Nothing after the head: nothing to read, still a check of the head against the tree.
    _head(outcomes, tmp_path / "now.json")
    code, found, _ = _verify(outcomes, "--since", str(tmp_path / "now.json"))
    assert code == 0 and found["events_checked"] == 0


def test_since_names_a_row_changed_after_the_head(
    outcomes: Invoke, seeded: Seeded, tmp_path: Path
) -> None:
    _head(outcomes, tmp_path / "head.json")
    later = _more_events(seeded)
    target, position = _placed(seeded, later["charge"], 2)  # a row after the head's position
    tamper_set(seeded.url, position, actor="worker:mallory")
    code, found, stderr = _verify(outcomes, "--since", str(tmp_path / "head.json"))
    assert code == EXIT_PROBLEM
    assert found["first_broken_position"] == position
    named = [p for p in found["problems"] if p["kind"] == "hash_mismatch"]
    assert [(p["stream_id"], p["position"]) for p in named] == [(target.stream_id, position)]
    assert f"position {position}" in stderr


def test_since_names_a_row_rehashed_after_the_head(
    outcomes: Invoke, seeded: Seeded, tmp_path: Path
) -> None:
    """Its content makes its (new) stored hash: the tree recomputed from the rows parts from
    the stored subtrees and the current head at it."""
    _head(outcomes, tmp_path / "head.json")
    later = _more_events(seeded)
    target, position = _placed(seeded, later["charge"], 3)
    rehash(seeded, target, target.data | {"result": {"charge_id": "ch_forged"}})
    code, found, _ = _verify(outcomes, "--since", str(tmp_path / "head.json"))
    assert code == EXIT_PROBLEM
    assert "merkle_mismatch" in _kinds(found)
    assert min(p["position"] for p in found["problems"] if p["position"]) >= position


def test_since_checks_the_whole_of_a_stream_touched_after_the_head(
    outcomes: Invoke, seeded: Seeded, tmp_path: Path
) -> None:
    """A job begun before the head and ended after it: its earlier row, edited, is named."""
    stream = fresh_job_stream()
    seeded.store.append(stream, [accepted()], 0)
    _, before = _placed(seeded, stream, 1)
    _head(outcomes, tmp_path / "head.json")

    seeded.store.append(stream, [started()], 1)
    tamper_set(seeded.url, before, actor="token:mallory")
    code, found, _ = _verify(outcomes, "--since", str(tmp_path / "head.json"))
    assert code == EXIT_PROBLEM
    assert ("hash_mismatch", before) in {(p["kind"], p["position"]) for p in found["problems"]}


def test_since_catches_a_history_rewritten_with_its_tree(
    outcomes: Invoke, seeded: Seeded, tmp_path: Path
) -> None:
    """Every hash, link and the whole Merkle tree recomputed after an edit before the head:
    consistent with itself, but the current tree no longer extends the head kept apart."""
    _head(outcomes, tmp_path / "head.json")
    _more_events(seeded)
    forge(seeded, "charge", 3, seeded.event("charge", 3).data | {"result": {"charge_id": "x"}})
    full = json.loads(outcomes("audit", "verify", "--json", ok=False).stdout)
    assert full["problems"] == []  # the chains and the tree agree with themselves
    code, found, stderr = _verify(outcomes, "--since", str(tmp_path / "head.json"))
    assert code == EXIT_PROBLEM
    assert "tree_head_mismatch" in _kinds(found)
    assert "the tree head of 17 leaves" in stderr


def test_since_refuses_what_is_not_a_head_it_can_start_from(
    outcomes: Invoke, seeded: Seeded, tmp_path: Path
) -> None:
    streams = tmp_path / "streams.json"
    outcomes("audit", "digest", "--streams", "-o", str(streams))
    result = outcomes("audit", "verify", "--since", str(streams), ok=False)
    assert result.exit_code == EXIT_USAGE and "not a tree head" in result.stderr
    assert "Traceback" not in result.output

    head = _head(outcomes, tmp_path / "head.json")
    wrong_root = tmp_path / "wrong-root.json"
    wrong_root.write_text(json.dumps(head | {"root_hash": "ab" * 32}))
    result = outcomes("audit", "verify", "--since", str(wrong_root), ok=False)
    assert result.exit_code == EXIT_USAGE
    assert "do not add up to its root_hash" in result.stderr

    bigger = Frontier.empty().extend(hashlib.sha256(b"%d" % i).digest() for i in range(40))
    ahead = tmp_path / "ahead.json"
    ahead.write_text(json.dumps(head | bigger.to_json() | {"position": 40}))
    result = outcomes("audit", "verify", "--since", str(ahead), ok=False)
    assert result.exit_code == EXIT_PROBLEM
    assert "covers 40 leaves" in result.stderr and "holds only 17" in result.stderr

    not_json = tmp_path / "garbage.json"
    not_json.write_text("{not json")
    result = outcomes("audit", "verify", "--since", str(not_json), ok=False)
    assert result.exit_code == EXIT_USAGE and "not a tree head" in result.stderr


def test_sample_passes_and_catches_a_changed_row_when_drawn(
    outcomes: Invoke, seeded: Seeded
) -> None:
    code, found, _ = _verify(outcomes, "--sample", "100", "--seed", "7")
    assert code == 0 and found["events_checked"] == 17  # every leaf of a tiny ledger
    assert "17 leaves drawn" in found["scope"]

    target = seeded.event("retried", 2)  # content edited, stored hash left alone
    tamper_set(seeded.url, target.position, actor="worker:mallory")
    code, found, stderr = _verify(outcomes, "--sample", "100")
    assert code == EXIT_PROBLEM
    assert {(p["kind"], p["position"]) for p in found["problems"]} >= {
        ("hash_mismatch", target.position),
        ("merkle_mismatch", target.position),
    }
    assert f"position {target.position}" in stderr


def test_sample_catches_a_row_rehashed_with_its_content(outcomes: Invoke, seeded: Seeded) -> None:
    target = seeded.event("charge", 3)
    rehash(seeded, target, target.data | {"result": {"charge_id": "ch_forged"}})
    code, found, _ = _verify(outcomes, "--sample", "17")
    assert code == EXIT_PROBLEM
    assert ("merkle_mismatch", target.position) in {
        (p["kind"], p["position"]) for p in found["problems"]
    }
    assert "hash_mismatch" not in _kinds(found)  # the row makes its new hash


def test_against_tree_heads_by_consistency_proofs(
    outcomes: Invoke, seeded: Seeded, tmp_path: Path
) -> None:
    published = tmp_path / "published"
    published.mkdir()
    _head(outcomes, published / "head-1.json")
    _more_events(seeded)
    _head(outcomes, published / "head-2.json")
    made = json.loads(outcomes("audit", "head", "--to", str(published), "--json").stdout)
    assert Path(made["file"]).name.startswith("head-2") and made["tree_size"] == 34
    assert not Path(made["file"]).stat().st_mode & 0o222  # read-only
    code, found, _ = _verify(outcomes, "--against", str(published))
    assert code == 0, found
    assert [Path(d["file"]).name for d in found["digests"]][:2] == ["head-1.json", "head-2.json"]
    assert len(found["digests"]) == 3
    # With the fast checks too (no re-read of the ledger for the heads).
    code, _, _ = _verify(outcomes, "--sample", "5", "--against", str(published))
    assert code == 0
    code, _, _ = _verify(
        outcomes, "--since", str(published / "head-1.json"), "--against", str(published)
    )
    assert code == 0

    # A forged head: a well-formed frontier of the same size, not this ledger's tree.
    real = json.loads((published / "head-1.json").read_text())
    fake = Frontier(17, (hashlib.sha256(b"a").digest(), hashlib.sha256(b"b").digest()))
    (published / "head-3.json").write_text(json.dumps(real | fake.to_json()))
    code, found, stderr = _verify(outcomes, "--against", str(published))
    assert code == EXIT_PROBLEM
    bad = [d for d in found["digests"] if not d["ok"]]
    assert [Path(d["file"]).name for d in bad] == ["head-3.json"]
    assert bad[0]["problems"][0]["kind"] == "tree_head_mismatch"
    assert "head-3.json" in stderr

    # A head file altered by hand (its root no longer its frontier's): an error naming it.
    (published / "head-3.json").write_text(json.dumps(real | {"root_hash": "cd" * 32}))
    result = outcomes("audit", "verify", "--against", str(published), ok=False)
    assert result.exit_code != 0 and "head-3.json" in result.stderr


def test_against_mixed_with_per_stream_digests(
    outcomes: Invoke, seeded: Seeded, tmp_path: Path
) -> None:
    published = tmp_path / "published"
    published.mkdir()
    outcomes("audit", "digest", "--to", str(published))  # a per-stream digest
    _head(outcomes, published / "head.json")
    code, found, _ = _verify(outcomes, "--against", str(published))
    assert code == 0 and len(found["digests"]) == 2
    result = outcomes("audit", "verify", "--sample", "3", "--against", str(published), ok=False)
    assert result.exit_code == EXIT_USAGE and "per-stream digests" in result.stderr
