"""Time-ordered ids: version 7 by RFC 9562's layout, ordered by time, random within a ms."""

from __future__ import annotations

import time
import uuid

from ledger.decisions import Caller, JobRequest
from ledger.events import job_stream
from ledger.runtime.ledger import Ledger
from ledger.services.submit import submit
from ledger.uuid7 import new_id, unix_ms, uuid7
from tests.factories import Recorder
from tests.tools import ECHO


def test_layout_is_version_7_of_the_rfc_variant() -> None:
    made = uuid7()
    assert made.version == 7
    assert made.variant == uuid.RFC_4122


def test_the_first_48_bits_are_the_time_in_ms() -> None:
    before = time.time_ns() // 1_000_000
    made = uuid7()
    after = time.time_ns() // 1_000_000
    found = unix_ms(made)
    assert found is not None and before <= found <= after
    assert unix_ms(uuid7(unix_ms=1_700_000_000_123)) == 1_700_000_000_123


def test_ids_of_later_milliseconds_sort_after_as_text_and_as_numbers() -> None:
    early = [uuid7(unix_ms=1_000 + i) for i in range(50)]
    assert sorted(early) == early
    assert sorted(str(u) for u in early) == [str(u) for u in early]


def test_ids_of_one_millisecond_are_distinct_and_random() -> None:
    same = {uuid7(unix_ms=42) for _ in range(1000)}
    assert len(same) == 1000


def test_other_versions_have_no_time() -> None:
    assert unix_ms(uuid.uuid4()) is None
    assert unix_ms(new_id()) is not None


def test_a_new_job_and_its_event_are_given_version_7_ids(memory_ledger: Ledger) -> None:
    # So the jobs' and events' indexes grow at one edge (the write path's keys).
    caller = Caller(account="acme", token_id="tok-acme")
    view = submit(memory_ledger, caller, JobRequest(ECHO, {"text": "hi"}), Recorder()).view
    assert uuid.UUID(view.job_id).version == 7
    (event,) = memory_ledger.store.read_stream(job_stream(view.job_id))
    assert event.event_id.version == 7
