"""Brakes, tokens, reading jobs as a caller, and auditing, on a ledger in memory."""

from __future__ import annotations

import re

import pytest

from ledger.access import hash_token, token_stream
from ledger.codes import Code
from ledger.decisions import Caller, JobRequest
from ledger.errors import (
    BrakeNotFoundError,
    InvalidScopeError,
    JobNotFoundError,
    NotAuthenticatedError,
    RequestError,
    TokenError,
)
from ledger.events import NewEvent, TokenCreated
from ledger.job_view import envelope
from ledger.outcomes import Succeeded
from ledger.persistence.appends import NO_STREAM
from ledger.queries import EventFilter
from ledger.runtime.ledger import Ledger
from ledger.services import audit, brakes, jobs, tokens
from ledger.services.execute import Executor
from ledger.services.submit import submit
from ledger.services.tokens import AdmittedTokens
from ledger.tools import ToolContext, tool
from mcp_server.answers import error_result, paragraph
from tests.store_helpers import read_after
from tests.tools import ECHO, EchoArgs


def agent_job(ledger: Ledger, account: str = "acme", text: str = "x") -> str:
    request = JobRequest(ECHO, {"text": text})
    return submit(ledger, Caller(account, f"tok-{account}"), request).view.job_id


def test_brakes_pull_list_and_release(memory_ledger: Ledger) -> None:
    agent_job(memory_ledger, "acme")
    agent_job(memory_ledger, "beta")
    own = brakes.pull(memory_ledger, "account:acme", "fraud review", "olga")
    other = brakes.pull(memory_ledger, "account:beta", "fraud review", "olga")
    every = brakes.pull(memory_ledger, "global", "incident", "olga")
    assert [b.brake_id for b in brakes.active(memory_ledger)] == [
        own.brake_id,
        other.brake_id,
        every.brake_id,
    ]
    everyone = {h.brake.brake_id: h.queued_jobs for h in brakes.holds(memory_ledger)}
    assert everyone == {own.brake_id: 1, other.brake_id: 1, every.brake_id: 2}
    seen_by_acme = {h.brake.brake_id: h.queued_jobs for h in brakes.holds(memory_ledger, "acme")}
    assert seen_by_acme == {own.brake_id: 1, every.brake_id: 1}  # beta's brake stays hidden
    released = brakes.release(memory_ledger, every.brake_id, "over", "olga")
    assert (released.active, released.released_by) == (False, "olga")
    with pytest.raises(BrakeNotFoundError):
        brakes.release(memory_ledger, every.brake_id, "again", "olga")


@pytest.mark.parametrize(("scope", "reason"), [("planet:earth", "r"), ("tool:", "r")])
def test_a_bad_scope_is_refused(memory_ledger: Ledger, scope: str, reason: str) -> None:
    with pytest.raises(InvalidScopeError):
        brakes.pull(memory_ledger, scope, reason, "olga")
    with pytest.raises(RequestError):
        brakes.pull(memory_ledger, "global", "  ", "olga")
    assert brakes.active(memory_ledger) == []


@pytest.mark.parametrize(
    ("reason", "said"),
    [
        ("runaway spend", "runaway spend."),
        ("runaway spend.", "runaway spend."),
        ("stop now!", "stop now!"),
        ("paging on-call:  ", "paging on-call."),
        ("see T-1 (billing)", "see T-1 (billing)."),
    ],
)
def test_a_brake_refusal_ends_its_reason_before_the_fix(
    memory_ledger: Ledger, reason: str, said: str
) -> None:
    brake = brakes.pull(memory_ledger, f"tool:{ECHO}", reason, "olga")
    view = submit(memory_ledger, Caller("acme", "tok"), JobRequest(ECHO, {"text": "x"})).view
    assert view.error is not None and view.error.code is Code.BRAKE_ENGAGED
    assert view.error.message == f"An operator stopped this work: {said}"
    # What MCP says: the reason, then the fix, each its own sentence.
    text = paragraph(envelope(view), 0.0)
    fix = f"wait until an operator releases brake {brake.brake_id} (tool:{ECHO})"
    assert f"BRAKE_ENGAGED: An operator stopped this work: {said} Fix: {fix}. Next" in text
    assert not re.search(r"[\w)] Fix", text) and not re.search(r"[\w)]Fix", text)
    assert ".." not in text
    assert error_result(view.error).content[0].text.endswith(f"{said} Fix: {fix}.")


@pytest.mark.parametrize("account", ["acme\n", "acme\u202e", "ac\u200bme", "acme\x85"])
def test_an_account_that_would_show_as_another_is_refused(
    memory_ledger: Ledger, account: str
) -> None:
    tokens.create(memory_ledger, "acme", "agent", None, "t")
    with pytest.raises(TokenError, match=r"must match .*U\+[0-9A-F]{4}"):
        tokens.create(memory_ledger, account, "agent", None, "t")
    assert [t.account for t in tokens.list_all(memory_ledger)] == ["acme"]


def test_tokens_are_stored_hashed_and_checked_one_way(memory_ledger: Ledger) -> None:
    issued = tokens.create(
        memory_ledger, "acme", "agent", ["b.x", "a.y", "a.y"], "cli:olga", allow_unknown_tools=True
    )
    assert issued.view.tools == ["a.y", "b.x"] and issued.token.startswith("ol_")
    assert issued.token not in str(read_after(memory_ledger.store, 0))  # only the hash is kept
    assert tokens.authenticate(memory_ledger, issued.token) == issued.view
    tokens.revoke(memory_ledger, issued.view.token_id, "cli:olga")
    for presented in (issued.token, "ol_never_issued"):
        with pytest.raises(NotAuthenticatedError):
            tokens.authenticate(memory_ledger, presented)
    assert [t.revoked for t in tokens.list_all(memory_ledger)] == [True]
    with pytest.raises(TokenError):
        tokens.create(memory_ledger, "Not An Account", "agent", None, "cli:olga")
    with pytest.raises(TokenError):
        tokens.create(memory_ledger, "acme", "root", None, "cli:olga")
    with pytest.raises(TokenError):
        tokens.revoke(memory_ledger, "no-such-token", "cli:olga")


@pytest.mark.parametrize("listed", [[], [""], [" ", "  "]])
def test_a_tool_list_naming_no_tool_is_refused_not_unrestricted(
    memory_ledger: Ledger, listed: list[str]
) -> None:
    with pytest.raises(TokenError, match="names no tool"):
        tokens.create(memory_ledger, "acme", "agent", listed, "t", allow_unknown_tools=True)
    assert tokens.list_all(memory_ledger) == []


def test_a_token_names_only_registered_tools_unless_told_otherwise(memory_ledger: Ledger) -> None:
    known = tokens.create(memory_ledger, "acme", "agent", [f" {ECHO} ", ""], "t")
    assert known.view.tools == [ECHO]
    with pytest.raises(TokenError, match=r"unknown tools: nobody\.has_it.*allow-unknown-tools"):
        tokens.create(memory_ledger, "acme", "agent", [ECHO, "nobody.has_it"], "t")
    granted = tokens.create(
        memory_ledger, "acme", "agent", ["nobody.has_it"], "t", allow_unknown_tools=True
    )
    assert granted.view.tools == ["nobody.has_it"]
    with pytest.raises(TokenError, match="not tool names"):  # could never be registered
        tokens.create(memory_ledger, "acme", "agent", ["Not A Tool"], "t", allow_unknown_tools=True)
    assert len(tokens.list_all(memory_ledger)) == 2


def test_an_agent_token_never_holds_every_account(memory_ledger: Ledger) -> None:
    with pytest.raises(TokenError, match="belong to one account"):
        tokens.create(memory_ledger, "*", "agent", None, "t")
    assert tokens.list_all(memory_ledger) == []
    assert tokens.create(memory_ledger, "*", "auditor", None, "t").view.account == "*"
    # One recorded before the rule existed is refused when presented.
    created = TokenCreated(
        token_id="old", account="*", role="agent", token_hash=hash_token("ol_old")
    )
    memory_ledger.store.append(
        token_stream("old"), [NewEvent(payload=created, actor="t")], NO_STREAM
    )
    with pytest.raises(NotAuthenticatedError):
        tokens.authenticate(memory_ledger, "ol_old")


def test_a_job_is_seen_by_its_account_and_the_deployment_only(memory_ledger: Ledger) -> None:
    job_id = agent_job(memory_ledger, "acme")
    acme = tokens.create(memory_ledger, "acme", "agent", None, "t")
    beta = tokens.create(memory_ledger, "beta", "agent", None, "t")
    auditor = tokens.create(memory_ledger, "*", "auditor", None, "t")
    admitted = AdmittedTokens(memory_ledger)
    assert jobs.get_admitted(memory_ledger, admitted, acme.token, job_id)[1].job_id == job_id
    assert jobs.get_admitted(memory_ledger, admitted, auditor.token, job_id)[1].job_id == job_id
    assert jobs.get(memory_ledger, job_id).job_id == job_id  # the operator at the CLI
    for unknown in ("6b1f5f3e-0000-4000-8000-000000000000", "not-a-uuid"):
        with pytest.raises(JobNotFoundError):
            jobs.get_admitted(memory_ledger, admitted, acme.token, unknown)
    with pytest.raises(JobNotFoundError):  # another account's job looks like no job at all
        jobs.get_admitted(memory_ledger, admitted, beta.token, job_id)
    with pytest.raises(NotAuthenticatedError):  # the token first, then the job
        jobs.get_admitted(memory_ledger, admitted, "ol_wrong", job_id)


@tool("access.crash")
def crash(args: EchoArgs, ctx: ToolContext) -> Succeeded:
    raise RuntimeError(f"the parser choked on {args.text!r}")


def test_failure_detail_is_for_operators_and_auditors_only(memory_ledger: Ledger) -> None:
    request = JobRequest("access.crash", {"text": "x"})
    job_id = submit(memory_ledger, Caller("acme", "tok-acme"), request).view.job_id
    Executor(memory_ledger, "w-1").execute(job_id)
    agent = tokens.authenticate(
        memory_ledger, tokens.create(memory_ledger, "acme", "agent", None, "t").token
    )
    operator = tokens.authenticate(
        memory_ledger, tokens.create(memory_ledger, "*", "operator", None, "t").token
    )
    shown = jobs.events(memory_ledger, job_id, agent)
    assert [e["type"] for e in shown] == ["job.accepted", "work.started", "work.failed"]
    # The agent's own arguments: no declared secret among them (contract §3).
    assert shown[0]["data"]["args"] == {"text": "x"}
    # No global position (the ledger's volume), no worker identity, no raw detail.
    assert set(shown[0]) == {"stream_version", "type", "code", "recorded_at", "data"}
    assert [e["stream_version"] for e in shown] == [1, 2, 3]
    assert "worker" not in shown[1]["data"] and "detail" not in shown[2]["data"]
    for_operator = jobs.events(memory_ledger, job_id, operator)
    assert "the parser choked" in for_operator[2]["data"]["detail"]
    assert for_operator[1]["data"]["worker"] == "w-1" and "position" in for_operator[0]
    with pytest.raises(JobNotFoundError):
        jobs.events(
            memory_ledger,
            job_id,
            tokens.authenticate(
                memory_ledger, tokens.create(memory_ledger, "beta", "agent", None, "t").token
            ),
        )


def test_audit_verifies_digests_and_summarizes(memory_ledger: Ledger) -> None:
    for account in ("acme", "acme", "beta"):
        agent_job(memory_ledger, account)
    submit(memory_ledger, Caller("acme", "t"), JobRequest("nobody.has_it", {}))
    digest = audit.take_digest(memory_ledger)
    assert (digest.position, digest.events, len(digest.heads)) == (4, 4, 4)
    agent_job(memory_ledger, "beta")
    progress: list[int] = []
    report = audit.verify(memory_ledger, digest, progress=progress.append)
    assert report.ok and report.events_checked == 5
    assert sum(progress) == 5 * 2  # each event in ledger order, then in stream order
    summary = audit.summary(memory_ledger, None)
    assert summary.by_account == {"acme": 3, "beta": 2}
    assert summary.by_code == {Code.CAPABILITY_UNAVAILABLE.value: 1}
    refused = audit.events(memory_ledger, EventFilter(type="job.refused"))
    assert [e.code for e in refused] == [Code.CAPABILITY_UNAVAILABLE]
    assert audit.size(memory_ledger) == 5 and len(list(audit.every_event(memory_ledger))) == 5
