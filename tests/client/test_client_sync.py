"""The sync client against a real `outcomes serve` (embedded defaults, test tools loaded):
a success, a refusal (an envelope, not an exception), a failure, a wait that reconnects
through dropped connections and short server-side waits, events, the changes feed page by
page, idempotency, and typed HTTP problems (401, 404)."""

from __future__ import annotations

import hashlib
import threading
import uuid
from pathlib import Path

import httpx
import orjson
import pytest
from outcomes_client import AuthenticationError, Client, NotCancellable, NotFound, WaitTimeout
from pydantic import SecretStr

from ledger.settings import DEFAULT_HOME, default_database_url
from tests.cancelling import jobs_to_cancel
from tests.plugins.client import Served


class DroppingTransport(httpx.BaseTransport):
    """Fails the first long-polls as a flaky network would, then lets them through; calls
    `on_poll(n)` before the n-th long-poll goes out."""

    def __init__(self, drops: list[type[httpx.TransportError]], on_poll: object = None) -> None:
        self._inner = httpx.HTTPTransport()
        self._drops = drops
        self.polls = 0
        self.dropped = 0
        self.on_poll = on_poll

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if "wait" in request.url.params:
            self.polls += 1
            if callable(self.on_poll):
                self.on_poll(self.polls)
            if self.dropped < len(self._drops):
                self.dropped += 1
                raise self._drops[self.dropped - 1]("dropped by the test", request=request)
        return self._inner.handle_request(request)

    def close(self) -> None:
        self._inner.close()


def test_run_a_job_that_succeeds_and_read_its_events(client_server: Served) -> None:
    with Client(client_server.base_url, client_server.token) as client:
        job = client.run("apitest.echo", {"text": "hi", "times": 2}, timeout_s=60)
        assert (job.status, job.terminal, job.next_action) == ("succeeded", True, "accept")
        assert job.result == {"text": "hihi"} and job.error is None and job.attempts == 1
        events = client.events(job.job_id)
    assert events.job_id == job.job_id
    assert [e.type for e in events.events] == ["job.accepted", "work.started", "work.succeeded"]
    # The agent's own arguments (no declared secret among them: contract §3).
    assert events.events[0].data["args"] == {"text": "hi", "times": 2}


def test_a_refused_job_is_an_envelope_not_an_exception(client_server: Served) -> None:
    with Client(client_server.base_url, client_server.token) as client:
        submission = client.submit("apitest.off", {"text": "x"})
        assert submission.refused and submission.next_action == "satisfy_precondition"
        assert submission.error is not None and submission.error.code == "CAPABILITY_UNAVAILABLE"
        assert submission.error.fix

        job = client.run("apitest.off", {"text": "x"})
        assert (job.status, job.attempts, job.next_action) == ("refused", 0, "satisfy_precondition")
        assert job.error is not None and job.error.code == "CAPABILITY_UNAVAILABLE"
        assert client.get(submission.job_id).status == "refused"  # the same recorded decision


def test_a_failing_job_ends_failed_with_its_code(client_server: Served) -> None:
    with Client(client_server.base_url, client_server.token) as client:
        job = client.run("canary.crash", {"secret": "s3cret-value"}, timeout_s=60)
    assert (job.status, job.next_action) == ("failed", "stop_and_report")
    assert job.error is not None and job.error.code == "TOOL_CRASHED"
    assert "s3cret-value" not in job.model_dump_json()


def test_an_async_tool_runs_in_the_served_worker(client_server: Served, tmp_path: Path) -> None:
    with Client(client_server.base_url, client_server.token) as client:
        job = client.run("atest.slow_async", {"folder": str(tmp_path)}, timeout_s=60)
    assert (job.status, job.error and job.error.code) == ("failed", "DEADLINE_EXCEEDED")


def test_wait_reconnects_through_drops_and_short_server_waits(
    client_server: Served, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    # The job ends only once the gate opens, which happens after two dropped long-polls and
    # one that the server ended (its wait, shorter than the client's deadline) without news.
    transport = DroppingTransport(
        [httpx.ConnectError, httpx.ReadTimeout],
        on_poll=lambda n: gate.touch() if n == 4 else None,
    )
    with Client(client_server.base_url, client_server.token, transport=transport) as client:
        submission = client.submit("matrix.gated_read", {"gate": str(gate), "limit_s": 60})
        job = client.wait(submission.job_id, timeout_s=90, poll_s=0.3)
    assert job.status == "succeeded" and job.result == {"read": True}
    assert transport.dropped == 2 and transport.polls >= 4


def test_wait_gives_up_at_its_deadline_with_the_last_envelope(
    client_server: Served, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    with Client(client_server.base_url, client_server.token) as client:
        submission = client.submit("matrix.gated_read", {"gate": str(gate), "limit_s": 60})
        try:
            with pytest.raises(WaitTimeout) as timed_out:
                client.wait(submission.job_id, timeout_s=0.5, poll_s=0.2)
        finally:
            gate.touch()
        assert timed_out.value.envelope is not None
        assert timed_out.value.envelope.next_action == "wait"
        assert client.wait(submission.job_id, timeout_s=60).status == "succeeded"


def test_the_same_idempotency_key_replays_the_first_answer(client_server: Served) -> None:
    key = f"plan-{uuid.uuid4()}"
    with Client(client_server.base_url, client_server.token) as client:
        first = client.submit("apitest.echo", {"text": "once"}, idempotency_key=key)
        again = client.submit("apitest.echo", {"text": "once"}, idempotency_key=key)
        ran = client.run("apitest.echo", {"text": "once"}, idempotency_key=key, timeout_s=60)
    assert first.job_id == again.job_id == ran.job_id and ran.status == "succeeded"


def test_the_changes_feed_pages_and_resumes_from_a_cursor(client_server: Served) -> None:
    with Client(client_server.base_url, client_server.tokens["feed-sync"]) as client:
        jobs = [client.run("apitest.echo", {"text": f"n{i}"}, timeout_s=60) for i in range(5)]
        first = client.page(limit=2)
        assert (first.count, first.truncated) == (2, True)

        changes = list(client.changes(limit=2))
        assert [c.job.job_id for c in changes] == [j.job_id for j in jobs]
        assert all(c.job.terminal for c in changes)
        assert list(client.changes(after=changes[-1].cursor)) == []

        later = client.run("apitest.echo", {"text": "later"}, timeout_s=60)
        resumed = list(client.changes(after=changes[-1].cursor, limit=2))
        assert [c.job.job_id for c in resumed] == [later.job_id]
        # Resuming from any job's cursor never skips a later change (it may repeat a few).
        ids = [*(j.job_id for j in jobs), later.job_id]
        for i, change in enumerate(changes):
            again = [c.job.job_id for c in client.changes(after=change.cursor, limit=2)]
            assert again[len(again) - (len(ids) - i - 1) :] == ids[i + 1 :]
            assert set(again) <= set(ids[i:])


def test_http_problems_are_typed_exceptions(client_server: Served) -> None:
    with (
        Client(client_server.base_url, "not-a-token") as client,
        pytest.raises(AuthenticationError) as denied,
    ):
        client.submit("apitest.echo", {"text": "x"})
    error = denied.value
    assert (error.status, error.code, error.next_action) == (
        401,
        "ACCESS_DENIED",
        "satisfy_precondition",
    )
    assert error.fix and error.job_id is None and error.problem.error.message

    with (
        Client(client_server.base_url, client_server.token) as client,
        pytest.raises(NotFound) as missing,
    ):
        client.get(str(uuid.uuid4()))
    assert missing.value.code == "REFERENCE_UNRESOLVED"


def test_many_threads_share_one_client(client_server: Served) -> None:
    results: list[str] = []
    with Client(client_server.base_url, client_server.token) as client:

        def one(i: int) -> None:
            results.append(client.run("apitest.echo", {"text": f"t{i}"}, timeout_s=60).status)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(90)
    assert results == ["succeeded"] * 4


class AnswerLostTransport(httpx.BaseTransport):
    """Delivers the first submit to the API, then loses its answer (a read timeout)."""

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport()
        self.keys: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._inner.handle_request(request)
        if request.method == "POST":
            self.keys.append(orjson.loads(request.content)["idempotency_key"])
            if len(self.keys) == 1:
                response.read()
                raise httpx.ReadTimeout("answer lost by the test", request=request)
        return response

    def close(self) -> None:
        self._inner.close()


def test_run_sends_a_submit_whose_answer_was_lost_again_and_one_job_is_recorded(
    client_server: Served,
) -> None:
    transport = AnswerLostTransport()
    token = client_server.tokens["replay"]
    with Client(client_server.base_url, token, transport=transport) as client:
        job = client.run("apitest.echo", {"text": "once"}, timeout_s=60)
        recorded = list(client.changes())
    assert job.status == "succeeded"
    assert len(transport.keys) == 2 and transport.keys[0] == transport.keys[1]  # same key
    assert [c.job.job_id for c in recorded] == [job.job_id]  # the retry was a replay


def test_a_budgeted_answer_and_a_secret_sent_as_secretstr(
    client_server: Served, tmp_path: Path
) -> None:
    with Client(client_server.base_url, client_server.token) as client:
        cut = client.run(
            "budget.listing", {"items": 500, "item_bytes": 50}, budget_bytes=1024, timeout_s=60
        )
        proof = tmp_path / "received"
        password = SecretStr(f"pw-{uuid.uuid4().hex}")
        args = {"vault": "v-1", "user": "ann", "password": password, "mode": "ok"}
        login = client.run("vault.login", args | {"proof": str(proof)}, timeout_s=60)
        events = client.events(login.job_id)
    assert (cut.status, cut.next_action) == ("succeeded", "use_partial_and_narrow")
    assert cut.budget is not None and cut.budget.budget_bytes == 1024
    assert cut.budget.omitted[0].path == "/result/items" and cut.budget.omitted_items > 0
    assert len(orjson.dumps({"result": cut.result})) <= 1024
    # The tool got the value; the ledger shows it nowhere.
    secret = password.get_secret_value()
    assert proof.read_text() == hashlib.sha256(secret.encode()).hexdigest()
    assert login.result == {"vault": "v-1", "user": "ann", "echo": "[REDACTED]"}
    assert events.events[0].data["args"]["password"] == "(secret)"
    assert secret not in events.model_dump_json()


def test_cancel_a_queued_job_and_a_running_one_is_not_cancellable(client_server: Served) -> None:
    url = default_database_url(client_server.home / DEFAULT_HOME)
    jobs = jobs_to_cancel(url)
    with Client(client_server.base_url, client_server.token) as client:
        cancelled = client.cancel(jobs.queued[0], reason="plan changed")
        assert (cancelled.status, cancelled.terminal, cancelled.next_action) == (
            "declined",
            True,
            "accept",
        )
        assert cancelled.declined_reason is not None and "plan changed" in cancelled.declined_reason
        assert client.cancel(jobs.queued[0]) == cancelled  # the same answer again
        with pytest.raises(NotCancellable) as refused:
            client.cancel(jobs.running)
        assert (refused.value.status, refused.value.code) == (409, "NOT_CANCELLABLE")
        assert (refused.value.envelope.status, refused.value.next_action) == ("running", "wait")
        with pytest.raises(NotFound):
            client.cancel(str(uuid.uuid4()))


def test_a_turn_of_calls_is_told_whole(client_server: Served) -> None:
    """docs/turns.md through the client: calls name their turn; `turn()` tells it whole, and
    a parked call reads `awaiting_approval` with its approval."""
    turn = f"client-{uuid.uuid4().hex[:8]}"
    with Client(client_server.base_url, client_server.token) as client:
        ran = client.run("apitest.echo", {"text": "a"}, turn=turn, timeout_s=60)
        refused = client.run("apitest.echo", {}, turn=turn)
        parked = client.submit("itest.charge_approved", {"amount": 1}, turn=turn)
        assert parked.status == "awaiting_approval"
        shown = client.get(parked.job_id)
        assert shown.approval is not None and shown.approval.decision is None
        told = client.turn(turn)
    assert [c.job_id for c in told.calls] == [ran.job_id, refused.job_id, parked.job_id]
    assert (told.complete, told.all_succeeded) == (False, False)
    assert told.already_happened == [ran.job_id]
    assert told.first_failure is not None and told.first_failure.job_id == refused.job_id
    assert told.summary.startswith("3 calls: 1 succeeded, 1 refused (INPUT_MISSING")
    with pytest.raises(ValueError):
        Client(client_server.base_url, client_server.token).submit(
            "apitest.echo", {"text": "x"}, halt_on_failure=True
        )
