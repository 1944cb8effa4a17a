"""Tampering with the recorded events, on SQLite and on Postgres (contract §2).

The events table refuses UPDATE, DELETE (and on Postgres TRUNCATE) from the application.
Someone who goes around that (a table owner or superuser disabling the triggers, anyone
holding the SQLite file) is caught by the per-stream chain (an edited row, a row deleted in
the middle of a stream) and by the ledger-wide chain (a row deleted anywhere, a stream's newest
included, or inserted). What the chains alone cannot see (the ledger's very newest events
cut, a history re-hashed and re-linked end to end) is caught against a digest taken earlier
and kept elsewhere.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from sqlalchemy import text

from ledger.chain import ProblemKind, event_hash
from ledger.codes import Code
from ledger.digest import Digest
from ledger.errors import DigestError, ImmutableLedgerError
from ledger.events import (
    RecordedEvent,
    WorkLateOutcome,
    job_stream,
)
from ledger.persistence.errors import translated
from ledger.persistence.schema import events
from tests.factories import digest_of, open_sql, verify_store
from tests.plugins.tampering import (
    WORKLOAD_EVENTS,
    Seeded,
    _accepted,
    _by_worker,
    around_the_triggers,
    chain_problems,
    forge,
    place,
    postgres,
    record_workload,
    relink,
    retree,
    saved_digest,
    tamper_delete,
    tamper_set,
    tree_problems,
    written_at,
)

# --- a. the database refuses changes to recorded events -------------------------------------


REFUSED_STATEMENTS = [
    "UPDATE events SET actor = 'mallory' WHERE position = :position",
    "UPDATE events SET data = data WHERE position = :position",  # even a no-op update
    "DELETE FROM events WHERE position = :position",
    "DELETE FROM events",
]


@pytest.mark.parametrize("statement", REFUSED_STATEMENTS)
def test_updates_and_deletes_of_events_are_refused(seeded: Seeded, statement: str) -> None:
    before = seeded.stream("retried")
    target = before[2].position
    refused = pytest.raises(ImmutableLedgerError, match="append-only")
    with refused, translated(), seeded.store.engine.begin() as conn:
        conn.execute(text(statement), {"position": target})
    assert seeded.stream("retried") == before
    assert verify_store(seeded.store).events_checked == WORKLOAD_EVENTS


@pytest.mark.postgres
def test_truncate_of_events_is_refused_on_postgres(pg_database: str) -> None:
    store = open_sql(pg_database)
    try:
        record_workload(store)
        refused = pytest.raises(ImmutableLedgerError, match="append-only")
        with refused, translated(), store.engine.begin() as conn:
            conn.execute(text("TRUNCATE events"))
        report = verify_store(store)
        assert (report.ok, report.events_checked) == (True, WORKLOAD_EVENTS)
    finally:
        store.close()


# --- b. an edited row breaks its own hash ---------------------------------------------------


Edit = Callable[[RecordedEvent], dict[str, Any]]
EDITS: dict[str, Edit] = {
    "data": lambda e: {"data": e.data | {"attempt": 7}},
    "actor": lambda e: {"actor": "worker:mallory"},
    "code": lambda e: {"code": Code.TOOL_CRASHED.value},
    "recorded_at": lambda e: {"recorded_at": e.recorded_at - timedelta(hours=1)},
    "type": lambda e: {"type": "work.started"},
    "event_id": lambda e: {"event_id": uuid.uuid4()},
    "hash": lambda e: {"hash": "0" * 64},
}


@pytest.mark.parametrize("field", sorted(EDITS))
def test_an_edited_row_is_found_at_its_position(seeded: Seeded, field: str) -> None:
    edited = seeded.event("retried", 3)  # work.retry_scheduled, in the middle of its stream
    tamper_set(seeded.url, edited.position, **EDITS[field](edited))
    assert seeded.event("retried", 3) != edited

    report = verify_store(seeded.store)

    assert not report.ok
    assert report.first_problem is not None
    assert report.first_problem.kind is ProblemKind.HASH_MISMATCH
    assert report.first_problem.position == edited.position
    assert report.first_problem.stream_id == seeded.streams["retried"]
    assert report.first_problem.stream_version == 3
    if field == "hash":  # the next event's prev_hash no longer points at it either
        follower = seeded.event("retried", 4)
        assert [(p.kind, p.position) for p in chain_problems(report)[1:]] == [
            (ProblemKind.LEDGER_CHAIN_BROKEN, edited.position),  # its link covers the hash
            (ProblemKind.CHAIN_BROKEN, follower.position),
        ]
        # The stored hash is the leaf's data: the tree recomputed from the rows parts from
        # the one the sequencer recorded (at the tick that hashed it, and the head).
        assert tree_problems(report)
        assert all(p.position >= edited.position for p in tree_problems(report))
    else:  # the stored hash, the leaf's data, is intact: the tree has nothing to say
        assert len(report.problems) == 1, report.problems
    assert report.events_checked == WORKLOAD_EVENTS


# --- c. deleted rows --------------------------------------------------------------------------


def test_a_row_deleted_mid_stream_is_found_at_the_event_after_the_gap(seeded: Seeded) -> None:
    gone = seeded.event("retried", 3)
    after_gap = seeded.event("retried", 4)
    tamper_delete(seeded.url, gone.position)

    report = verify_store(seeded.store)

    next_in_ledger = _next_event(seeded, gone.position)
    at_next = (next_in_ledger.stream_id, next_in_ledger.stream_version, next_in_ledger.position)
    # Postgres's positions are dense (the sequencer's): the hole itself is a finding there.
    gap = {(ProblemKind.POSITION_GAP, *at_next)} if postgres(seeded) else set()
    found = {(p.kind, p.stream_id, p.stream_version, p.position) for p in chain_problems(report)}
    assert (
        found
        == {
            (ProblemKind.VERSION_GAP, seeded.streams["retried"], 4, after_gap.position),
            (ProblemKind.LEDGER_CHAIN_BROKEN, *at_next),
        }
        | gap
    )
    assert tree_problems(report)  # one leaf fewer: the recorded heads are not the rows' tree
    assert report.first_problem is not None
    assert report.first_problem.position == next_in_ledger.position
    assert report.events_checked == WORKLOAD_EVENTS - 1


def _next_event(seeded: Seeded, position: int) -> RecordedEvent:
    """The event that now follows `position` in the ledger."""
    return next(e for e in seeded.store.iter_events() if e.position > position)


def _broken_after(seeded: Seeded, positions: list[int]) -> set[tuple[ProblemKind, int]]:
    """Where the ledger-wide chain breaks once `positions` are gone: at the next survivor
    of each run of deleted events (none after the ledger's newest)."""
    survivors = [e.position for e in seeded.store.iter_events()]
    found = set()
    for position in positions:
        after = [p for p in survivors if p > position]
        if after:
            found.add((ProblemKind.LEDGER_CHAIN_BROKEN, after[0]))
            if postgres(seeded):  # dense positions: the hole is a finding too
                found.add((ProblemKind.POSITION_GAP, after[0]))
    return found


@pytest.mark.parametrize(
    ("name", "deleted_versions"),
    [("retried", [5]), ("declined", [3]), ("refused", [1]), ("charge", [2, 3])],
    ids=["last-row", "terminal-of-batch", "whole-stream", "last-two-rows"],
)
def test_a_truncated_stream_is_found_by_the_ledger_chain_and_against_a_digest(
    seeded: Seeded, name: str, deleted_versions: list[int]
) -> None:
    later = _accepted("tracker.read_issue", {"issue_ref": "T-7"})
    seeded.store.append(job_stream(uuid.uuid4()), [later], 0)  # so an event follows each tail
    digest = saved_digest(seeded.store)
    head_version = len(seeded.stream(name))
    positions = [seeded.event(name, v).position for v in deleted_versions]
    tamper_delete(seeded.url, *positions)
    broken = _broken_after(seeded, positions)
    assert broken

    alone = verify_store(seeded.store)
    assert {(p.kind, p.position) for p in chain_problems(alone)} == broken
    assert tree_problems(alone)
    assert alone.events_checked == WORKLOAD_EVENTS + 1 - len(positions)

    report = verify_store(seeded.store, digest=digest)
    found = {(p.kind, p.stream_id, p.stream_version, p.position) for p in report.problems}
    assert found >= {
        (ProblemKind.DIGEST_COUNT, "", 0, None),  # the span lost len(positions) events
        (ProblemKind.DIGEST_TRUNCATED, seeded.streams[name], head_version, None),
    }
    assert {(p.kind, p.position) for p in chain_problems(report) if p.position} == broken


def test_the_ledgers_newest_event_cut_is_found_by_the_tree_or_against_an_earlier_digest(
    seeded: Seeded,
) -> None:
    """Nothing follows the newest event, so no chain inside the ledger can miss it. The tree's
    recorded head still counts it; a forger who rebuilds the tree too is caught only by a
    digest kept elsewhere (`audit digest --every`)."""
    digest = saved_digest(seeded.store)
    newest = list(seeded.store.iter_events())[-1]
    tamper_delete(seeded.url, newest.position)

    cut = verify_store(seeded.store)
    assert not chain_problems(cut)
    assert [p.kind for p in cut.problems] == [ProblemKind.MERKLE_MISMATCH]
    assert "holds 16" in cut.problems[0].message, cut.problems
    retree(seeded.url)
    assert verify_store(seeded.store).ok
    report = verify_store(seeded.store, digest=digest)
    assert {p.kind for p in report.problems} == {
        ProblemKind.DIGEST_COUNT,
        ProblemKind.DIGEST_TRUNCATED,
        ProblemKind.DIGEST_LEDGER_MISMATCH,
    }


def test_an_event_inserted_between_others_breaks_the_ledger_chain(seeded: Seeded) -> None:
    """A forger copies an honest event's fields into a new row at a free position before the
    newest event: its stream chain may look fine, the ledger chain does not."""
    gap = seeded.store.last_position()  # the newest event moves up one; its old place is free
    newest = _event_at(seeded, gap)
    with around_the_triggers(seeded.url) as conn:
        (written,) = written_at(conn, gap)  # where the newest was written: the forgery's row
    tamper_delete(seeded.url, gap)
    with around_the_triggers(seeded.url) as conn:
        moved = written + 1
        conn.execute(events.insert().values(**_columns(newest, position=moved)))
        forged = _columns(newest, position=written, stream_id="job-forged", event_id=uuid.uuid4())
        forged["hash"] = _rehash(forged)
        conn.execute(events.insert().values(**forged))
        # In ledger order too: the copy one place up, the forgery in its place with its link.
        place(conn, gap + 1, moved, newest.ledger_hash or "")
        place(conn, gap, written, forged["ledger_hash"])

    report = verify_store(seeded.store)
    assert (ProblemKind.LEDGER_CHAIN_BROKEN, gap) in {(p.kind, p.position) for p in report.problems}


def _event_at(seeded: Seeded, position: int) -> RecordedEvent:
    return next(e for e in seeded.store.iter_events() if e.position == position)


def _columns(event: RecordedEvent, **changes: Any) -> dict[str, Any]:
    row = event.model_dump(exclude={"write_position"}) | changes
    row["code"] = event.code.value if event.code else None
    return row


def _rehash(row: dict[str, Any]) -> str:
    fields = {k: row[k] for k in row if k not in {"position", "hash", "ledger_hash"}}
    return event_hash(**(fields | {"event_id": str(row["event_id"]), "stream_version": 1}))


def test_a_row_slipped_into_a_gap_of_positions_is_found_against_a_digest(
    seeded: Seeded,
) -> None:
    """INSERT is allowed, and a failed append leaves a gap in positions: a forger who fills
    the gap with a whole new, self-consistent stream is caught by the digest's span. On
    Postgres the gap is in write positions only (ledger positions are dense), so the row filled
    in is sequenced as the newest event, an append like any other: only a forger who also
    rewrites ledger order puts it among the digest's span, and is caught there."""
    if postgres(seeded):
        _slipped_into_ledger_order(seeded)
        return
    gap = seeded.store.last_position() + 1
    with around_the_triggers(seeded.url) as conn:  # burn a position, as a failed insert does
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT nextval(pg_get_serial_sequence('events', 'position'))"))
        else:
            conn.execute(text("UPDATE sqlite_sequence SET seq = seq + 1 WHERE name = 'events'"))
    honest = job_stream(uuid.uuid4())
    seeded.store.append(honest, [_accepted("tracker.read_issue", {"issue_ref": "T-9"})], 0)
    digest = saved_digest(seeded.store)
    assert digest.position > gap  # the digest's span covers the gap
    assert verify_store(seeded.store, digest=digest).ok

    fields = _forged_fields()
    with around_the_triggers(seeded.url) as conn:
        conn.execute(events.insert().values(position=gap, **fields))

    naive = verify_store(seeded.store)  # the ledger chain was not re-linked around it
    assert tree_problems(naive)  # nor the tree: a leaf more than it holds
    assert [(p.kind, p.position) for p in chain_problems(naive)] == [
        (ProblemKind.LEDGER_CHAIN_BROKEN, gap),
        (ProblemKind.LEDGER_CHAIN_BROKEN, gap + 1),
    ]
    relink(seeded.url)  # a thorough forger re-links every later event too
    alone = verify_store(seeded.store)
    assert alone.ok, "the forged stream is internally consistent"
    report = verify_store(seeded.store, digest=digest)
    kinds = {(p.kind, p.position) for p in report.problems}
    assert kinds == {
        (ProblemKind.DIGEST_EXTRA, gap),
        (ProblemKind.DIGEST_COUNT, None),
        (ProblemKind.DIGEST_LEDGER_MISMATCH, None),
    }
    assert report.first_problem is not None and report.first_problem.position == gap


def _slipped_into_ledger_order(seeded: Seeded) -> None:
    with around_the_triggers(seeded.url) as conn:  # burn a write position, as a failed insert
        gap = int(
            conn.execute(
                text("SELECT nextval(pg_get_serial_sequence('events', 'position'))")
            ).scalar_one()
        )
    honest = job_stream(uuid.uuid4())
    seeded.store.append(honest, [_accepted("tracker.read_issue", {"issue_ref": "T-9"})], 0)
    digest = saved_digest(seeded.store)
    assert digest.position == WORKLOAD_EVENTS + 1  # dense: the burnt position left no hole
    assert verify_store(seeded.store, digest=digest).ok
    with around_the_triggers(seeded.url) as conn:
        conn.execute(events.insert().values(position=gap, **_forged_fields()))
    naive = verify_store(seeded.store, digest=digest)  # sequenced after the digest's span
    assert naive.ok, naive.problems
    relink(seeded.url)  # a thorough forger renumbers ledger order by write position
    alone = verify_store(seeded.store)
    assert alone.ok, "the forged stream is internally consistent"
    report = verify_store(seeded.store, digest=digest)
    assert {(p.kind, p.position) for p in report.problems} == {
        (ProblemKind.DIGEST_EXTRA, digest.position),  # the forgery took the honest one's place
        (ProblemKind.DIGEST_LEDGER_MISMATCH, None),
    }


def _forged_fields() -> dict[str, Any]:
    forged = _accepted("tracker.read_issue", {"issue_ref": "T-forged"})
    fields: dict[str, Any] = {
        "event_id": forged.event_id,
        "stream_id": job_stream(uuid.uuid4()),
        "stream_version": 1,
        "type": "job.accepted",
        "data": forged.payload.model_dump(mode="json"),
        "code": None,
        "actor": forged.actor,
        "recorded_at": datetime.now(UTC),
        "prev_hash": None,
    }
    fields["hash"] = event_hash(**(fields | {"event_id": str(forged.event_id)}))
    return fields


def test_a_rehashed_history_is_self_consistent_but_contradicts_an_earlier_digest(
    seeded: Seeded,
) -> None:
    digest = saved_digest(seeded.store)
    original = seeded.stream("retried")
    forged_data = original[2].data | {"due_at": "2001-01-01T00:00:00Z", "attempt": 2}
    forge(seeded, "retried", 3, forged_data)

    forged = seeded.stream("retried")
    assert forged[2].data == forged_data
    assert [e.hash for e in forged[:2]] == [e.hash for e in original[:2]]
    assert all(f.hash != o.hash for f, o in zip(forged[2:], original[2:], strict=True))

    alone = verify_store(seeded.store)
    assert alone.ok, alone.problems  # the forgery is internally consistent
    assert alone.events_checked == WORKLOAD_EVENTS

    report = verify_store(seeded.store, digest=digest)
    head = forged[-1]
    assert [(p.kind, p.stream_id, p.stream_version, p.position) for p in report.problems] == [
        (
            ProblemKind.DIGEST_MISMATCH,
            seeded.streams["retried"],
            head.stream_version,
            head.position,
        ),
        (ProblemKind.DIGEST_LEDGER_MISMATCH, "", 0, None),
    ]


def test_a_ledger_that_only_grew_still_matches_its_digest(seeded: Seeded) -> None:
    """The control for the digest tests: honest appends after a digest are no problem."""
    digest = saved_digest(seeded.store)
    late = WorkLateOutcome(
        attempt=1, outcome_type="work.succeeded", outcome={"result": {"charge_id": "ch_1"}}
    )
    seeded.store.append(seeded.streams["charge"], [_by_worker(late)], 3)
    fresh = job_stream(uuid.uuid4())
    seeded.store.append(fresh, [_accepted("tracker.read_issue", {"issue_ref": "T-8"})], 0)

    report = verify_store(seeded.store, digest=digest)
    assert report.ok, report.problems
    assert report.events_checked == WORKLOAD_EVENTS + 2


# --- a digest edited by hand ----------------------------------------------------------------


DocEdit = Callable[[dict[str, Any], str], None]


def _set_head_hash(doc: dict[str, Any], stream: str) -> None:
    doc["heads"][stream][1] = "f" * 64


def _set_head_version(doc: dict[str, Any], stream: str) -> None:
    doc["heads"][stream][0] -= 1


def _drop_stream(doc: dict[str, Any], stream: str) -> None:
    del doc["heads"][stream]


def _add_stream(doc: dict[str, Any], stream: str) -> None:
    doc["heads"][job_stream(uuid.uuid4())] = [1, "a" * 64]


def _set_root(doc: dict[str, Any], stream: str) -> None:
    doc["root"] = "0" * 64


def _set_format(doc: dict[str, Any], stream: str) -> None:
    doc["format"] = "some-other-digest/1"


def _heads_not_a_mapping(doc: dict[str, Any], stream: str) -> None:
    doc["heads"] = [[stream, 1, "a" * 64]]


def _head_not_a_pair(doc: dict[str, Any], stream: str) -> None:
    doc["heads"][stream] = [5]


DIGEST_EDITS: dict[str, DocEdit] = {
    "head-hash": _set_head_hash,
    "head-version": _set_head_version,
    "dropped-stream": _drop_stream,
    "added-stream": _add_stream,
    "root": _set_root,
    "format": _set_format,
    "heads-not-a-mapping": _heads_not_a_mapping,
    "head-not-a-pair": _head_not_a_pair,
}


def test_a_saved_digest_reads_back_unchanged(seeded: Seeded) -> None:
    digest = digest_of(seeded.store)
    assert Digest.loads(digest.dumps()) == digest
    assert digest.events == WORKLOAD_EVENTS
    assert len(digest.heads) == len(seeded.streams)
    assert digest.heads[seeded.streams["retried"]] == (5, seeded.event("retried", 5).hash)


@pytest.mark.parametrize("edit", sorted(DIGEST_EDITS))
def test_a_digest_edited_by_hand_is_refused(seeded: Seeded, edit: str) -> None:
    doc = orjson.loads(digest_of(seeded.store).dumps())
    DIGEST_EDITS[edit](doc, seeded.streams["retried"])
    with pytest.raises(DigestError):
        Digest.loads(orjson.dumps(doc))


@pytest.mark.parametrize("raw", [b"", b"{", b"[]", b"null", b'"digest"'])
def test_a_digest_that_is_not_a_digest_document_is_refused(raw: bytes) -> None:
    with pytest.raises(DigestError):
        Digest.loads(raw)


def test_a_truncated_digest_file_is_refused(seeded: Seeded) -> None:
    raw = digest_of(seeded.store).dumps()
    with pytest.raises(DigestError):
        Digest.loads(raw[: len(raw) // 2])
