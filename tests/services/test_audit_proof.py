"""`services.audit.verify_all` on the memory store: the read models rebuilt in memory from the
events and compared with the stored ones (the SQL backends:
tests/persistence/test_read_model_proof.py)."""

from __future__ import annotations

import uuid
from typing import Any

from ledger.events import BrakePulled, BrakeReleased
from ledger.persistence.appends import NO_STREAM
from ledger.persistence.memory import MemoryStore
from ledger.read_model_check import Mismatch, StreamModels
from ledger.read_models import ReadModel
from ledger.runtime.ledger import Ledger
from ledger.services.audit import verify_all
from tests.factories import accepted, fresh_job_stream, new, started, succeeded


def test_an_untouched_memory_ledger_verifies_and_an_edited_view_does_not() -> None:
    store = MemoryStore()
    stream = fresh_job_stream()
    store.append(stream, [accepted(), started(), succeeded(charge_id="ch_1")], NO_STREAM)
    found = verify_all(Ledger(store))
    assert found.ok and found.read_models.rows_checked == {
        "jobs": 1,
        "brakes": 0,
        "tokens": 0,
        "webhooks": 0,
    }

    job_id = stream.removeprefix("job-")
    view = store.state.jobs[job_id]
    store.state.jobs[job_id] = view.model_copy(update={"attempts": 3})
    found = verify_all(Ledger(store))
    assert not found.ok and found.chain.ok
    # A memory ledger keeps views alone: the column copies differ with the view.
    assert {
        (p.table, p.key, p.field, p.stored, p.expected) for p in found.read_models.problems
    } == {("jobs", job_id, name, 3, 1) for name in ("attempts", "view.attempts")}


def test_events_that_do_not_fold_are_a_problem_not_a_crash() -> None:
    """A damaged stream (here a release with no pull) is named, and its row is not compared."""
    brake_id = str(uuid.uuid4())
    store = MemoryStore()
    pulled = BrakePulled(brake_id=brake_id, scope="global", reason="x", operator="olga")
    released = BrakeReleased(brake_id=brake_id, reason="y", operator="olga")
    (first, second) = store.append(f"brake-{brake_id}", [new(pulled), new(released)]).events
    asked: list[tuple[str, list[str]]] = []

    def stored(model: ReadModel[Any], keys: list[str]) -> list[dict[str, Any]]:
        asked.append((model.table, keys))
        return []

    folded = StreamModels(stored)
    folded.add(second)  # as if the pull had been deleted
    folded.add(first)
    report = folded.finish()
    assert [(p.kind, p.table, p.key) for p in report.problems] == [
        (Mismatch.UNFOLDABLE, "brakes", brake_id)
    ]
    assert asked == []  # nothing to compare: its events say nothing reliable


def test_an_event_in_another_keys_stream_is_named_not_folded() -> None:
    """Every writer appends a brake's events to its own stream: one found in another stream
    (self-consistent, as a forger would write it) does not fold into the other brake."""
    store = MemoryStore()
    brake_id, forged = str(uuid.uuid4()), str(uuid.uuid4())
    pulled = BrakePulled(brake_id=brake_id, scope="global", reason="x", operator="olga")
    store.append(f"brake-{forged}", [new(pulled)])
    found = verify_all(Ledger(store))
    assert {(p.kind, p.table, p.key) for p in found.read_models.problems} == {
        (Mismatch.UNFOLDABLE, "brakes", brake_id),
        (Mismatch.EXTRA, "brakes", brake_id),  # its row: its own stream holds no event
    }
