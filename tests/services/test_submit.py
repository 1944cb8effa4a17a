"""The decision at submit, on a ledger in memory: every refusal names its precondition and is
recorded; an acceptance is dispatched once; a key replays; a broker that is down loses nothing."""

from __future__ import annotations

import hashlib
import hmac
import uuid

import orjson
import pytest

from ledger.codes import Code, Status
from ledger.decisions import Caller, JobRequest
from ledger.errors import DispatchError, IdempotencyConflictError
from ledger.events import JobAccepted, NewEvent, job_stream
from ledger.persistence.memory import MemoryStore
from ledger.runtime.ledger import Ledger
from ledger.services import brakes
from ledger.services.submit import submit
from tests.factories import Recorder, get_job
from tests.tools import ECHO, METERED, OFF, QUOTA

AGENT = Caller(account="acme", token_id="tok-acme")


def test_an_accepted_job_is_recorded_queued_and_dispatched_once(memory_ledger: Ledger) -> None:
    recorder = Recorder()
    submitted = submit(memory_ledger, AGENT, JobRequest(ECHO, {"text": "hi"}), recorder)
    view = submitted.view
    assert (view.status, view.accepted, view.attempts, submitted.replayed) == (
        Status.QUEUED,
        True,
        0,
        False,
    )
    assert recorder.sent == [view.job_id]
    assert get_job(memory_ledger, view.job_id) == view  # the view is what the store holds
    (event,) = memory_ledger.store.read_stream(job_stream(view.job_id))
    assert (event.type, event.actor, event.data["args"]) == (
        "job.accepted",
        "tok-acme",
        {"text": "hi"},
    )


@pytest.mark.parametrize(
    ("tool", "args", "caller", "code"),
    [
        ("nobody.has_this", {}, AGENT, Code.CAPABILITY_UNAVAILABLE),
        (OFF, {"text": "x"}, AGENT, Code.CAPABILITY_UNAVAILABLE),
        (ECHO, {"text": "x"}, Caller("acme", "tok", frozenset({METERED})), Code.ACCESS_DENIED),
        (ECHO, {}, AGENT, Code.INPUT_MISSING),
        (ECHO, {"text": "x", "times": "many"}, AGENT, Code.INPUT_INVALID),
    ],
)
def test_a_refusal_is_recorded_with_its_code_and_never_dispatched(
    memory_ledger: Ledger, tool: str, args: dict[str, object], caller: Caller, code: Code
) -> None:
    recorder = Recorder()
    view = submit(memory_ledger, caller, JobRequest(tool, args), recorder).view
    assert (view.status, view.code, view.attempts, view.next_action) == (
        Status.REFUSED,
        code,
        0,
        "satisfy_precondition",
    )
    assert view.error is not None and view.error.fix
    assert recorder.sent == []
    assert get_job(memory_ledger, view.job_id) == view


def test_a_brake_refuses_at_submit_naming_itself(memory_ledger: Ledger) -> None:
    pulled = brakes.pull(memory_ledger, f"tool:{ECHO}", "provider incident", "olga")
    view = submit(memory_ledger, AGENT, JobRequest(ECHO, {"text": "x"})).view
    assert view.error is not None
    assert (view.status, view.code, view.error.cause) == (
        Status.REFUSED,
        Code.BRAKE_ENGAGED,
        pulled.brake_id,
    )
    brakes.release(memory_ledger, pulled.brake_id, "resolved", "olga")
    assert submit(memory_ledger, AGENT, JobRequest(ECHO, {"text": "x"})).view.accepted


def test_the_quota_counts_accepted_jobs_and_says_when_to_retry(memory_ledger: Ledger) -> None:
    views = [
        submit(memory_ledger, AGENT, JobRequest(METERED, {"text": "x"})).view for _ in range(3)
    ]
    assert [v.status for v in views] == [Status.QUEUED] * QUOTA + [Status.REFUSED]
    error = views[-1].error
    assert error is not None and error.code is Code.QUOTA_EXCEEDED
    assert error.retryable and error.retry_after_s is not None and error.retry_after_s > 3000
    other = Caller(account="beta", token_id="tok-beta")  # per account
    assert submit(memory_ledger, other, JobRequest(METERED, {"text": "x"})).view.accepted


def test_the_same_key_and_body_replays_another_body_conflicts(memory_ledger: Ledger) -> None:
    recorder = Recorder()
    request = JobRequest(ECHO, {"text": "x"}, idempotency_key="plan-1")
    first = submit(memory_ledger, AGENT, request, recorder)
    again = submit(memory_ledger, AGENT, request, recorder)
    assert (again.replayed, again.view.job_id) == (True, first.view.job_id)
    assert recorder.sent == [first.view.job_id]  # a replay is not dispatched again
    with pytest.raises(IdempotencyConflictError) as info:
        submit(memory_ledger, AGENT, JobRequest(ECHO, {"text": "y"}, idempotency_key="plan-1"))
    assert info.value.job_id == first.view.job_id
    other = Caller(account="beta", token_id="tok-beta")  # keys are per account
    assert not submit(memory_ledger, other, request).replayed


NARROW = Caller(account="acme", token_id="tok-narrow", tools=frozenset({METERED}))


@pytest.mark.parametrize("args", [{"text": "x"}, {"text": "other body"}])
def test_a_key_replays_only_to_a_token_that_may_call_the_tool(
    memory_ledger: Ledger, args: dict[str, object]
) -> None:
    first = submit(memory_ledger, AGENT, JobRequest(ECHO, {"text": "x"}, idempotency_key="k-1"))
    narrow = submit(memory_ledger, NARROW, JobRequest(ECHO, args, idempotency_key="k-1"))
    view = narrow.view
    assert (narrow.replayed, view.status, view.code) == (False, Status.REFUSED, Code.ACCESS_DENIED)
    assert view.job_id != first.view.job_id and view.idempotency_key is None  # the key is not its
    again = submit(memory_ledger, AGENT, JobRequest(ECHO, {"text": "x"}, idempotency_key="k-1"))
    assert (again.replayed, again.view.job_id) == (True, first.view.job_id)


class DownBroker:
    def dispatch(self, job_id: str, delay_s: float = 0.0) -> None:
        raise DispatchError("broker unreachable")


def test_a_broker_that_is_down_loses_nothing(memory_ledger: Ledger) -> None:
    view = submit(memory_ledger, AGENT, JobRequest(ECHO, {"text": "x"}), DownBroker()).view
    # The decision stands; the reconciler re-dispatches a job that never started.
    assert view.status is Status.QUEUED and get_job(memory_ledger, view.job_id) == view


def test_the_request_fingerprint_is_keyed_by_the_ledger(memory_ledger: Ledger) -> None:
    """A plain hash of the body would let anyone who reads it test guesses of the values."""
    request = JobRequest(ECHO, {"text": "1234"}, idempotency_key="k-pin")
    view = submit(memory_ledger, AGENT, request).view
    body = orjson.dumps({"tool": ECHO, "args": {"text": "1234"}}, option=orjson.OPT_SORT_KEYS)
    key = memory_ledger.request_key
    assert view.request_hash == hmac.new(key, body, hashlib.sha256).hexdigest()
    assert view.request_hash != hashlib.sha256(body).hexdigest()
    other = Ledger(MemoryStore())
    assert submit(other, AGENT, request).view.request_hash != view.request_hash
    assert submit(memory_ledger, AGENT, request).replayed


def test_a_key_recorded_before_fingerprints_were_keyed_still_replays(
    memory_ledger: Ledger,
) -> None:
    args = {"text": "old"}
    body = orjson.dumps({"tool": ECHO, "args": args}, option=orjson.OPT_SORT_KEYS)
    legacy = JobAccepted(
        account=AGENT.account,
        tool=ECHO,
        args=args,
        idempotency_key="k-old",
        request_hash=hashlib.sha256(body).hexdigest(),  # as ledgers before migration 0005
        spends=False,
        timeout_s=5.0,
        max_attempts=1,
    )
    stream = job_stream(uuid.uuid4())
    memory_ledger.store.append(stream, [NewEvent(payload=legacy, actor=AGENT.token_id)], 0)
    again = submit(memory_ledger, AGENT, JobRequest(ECHO, args, idempotency_key="k-old"))
    assert again.replayed and job_stream(again.view.job_id) == stream
    with pytest.raises(IdempotencyConflictError):
        submit(memory_ledger, AGENT, JobRequest(ECHO, {"text": "new"}, idempotency_key="k-old"))
