"""Every outcome and every error code end to end, with real Celery worker processes (issue 3).

`outcomes worker` processes run against a real broker (RabbitMQ, Redis, or the embedded
filesystem broker) and a real ledger (Postgres; SQLite for the zero-setup default); jobs are
submitted through the same path as the API, and only what the ledger recorded is read. Each
case ends in the envelope the contract promises (status, next action, attempts, who recorded
it, the error object); quotas and brakes refuse at submit; only the spending tools that ran
leave an effect, once each; and a crash's detail is kept scrubbed, never carrying a secret.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

from ledger.codes import Code, NextAction, Status
from ledger.decisions import Caller
from ledger.events import job_stream
from ledger.job_view import JobView, envelope
from ledger.runtime.ledger import Ledger
from ledger.services.brakes import pull
from tests.factories import ERROR_KEYS
from tests.plugins.deployments import AGENT, ON_EVERY_BROKER, Deployment, deployments, wait_terminal

SECRET = "hunter2-Zq9vX4pLm"


@dataclass(frozen=True)
class Case:
    tool: str
    args: dict[str, Any]
    status: Status
    action: NextAction
    code: Code | None = None
    attempts: int | None = None
    error: dict[str, Any] = field(default_factory=dict)  # expected subset of the error object
    caller: Caller = AGENT


REFUSED = NextAction.SATISFY_PRECONDITION
STOP = NextAction.STOP_AND_REPORT
TRACKER = "tracker.read_issue"
CARDS_ONLY = Caller(account="acme", token_id="tok-cards", tools=frozenset({"social.draw_card"}))


def refused(
    tool: str, args: dict[str, Any], code: Code, caller: Caller = AGENT, **error: Any
) -> Case:
    """Refused at submit: recorded by the API, never attempted."""
    return Case(tool, args, Status.REFUSED, REFUSED, code, 0, error, caller)


def failed(
    tool: str,
    args: dict[str, Any],
    code: Code,
    attempts: int = 1,
    action: NextAction = STOP,
    **error: Any,
) -> Case:
    """Failed in a worker, after `attempts` attempts."""
    return Case(tool, args, Status.FAILED, action, code, attempts, error)


def tracker(ref: str, connector: str = "enabled") -> dict[str, Any]:
    return {"issue_ref": ref, "connector": connector}


CASES: dict[str, Case] = {
    "succeeded": Case(TRACKER, tracker("T-1"), Status.SUCCEEDED, NextAction.ACCEPT),
    "declined": Case(
        "social.draw_card",
        {"post_id": "p-1", "has_cover": True},
        Status.DECLINED,
        NextAction.ACCEPT,
    ),
    "partial_mail": Case(
        "mail.send_release_note",
        {"recipients": ["ana@example.com", "bob"]},
        Status.PARTIAL,
        NextAction.USE_PARTIAL_AND_NARROW,
    ),
    "partial_stale": Case(
        TRACKER, tracker("T-2", "stale"), Status.PARTIAL, NextAction.USE_PARTIAL_AND_NARROW
    ),
    "input_missing": refused(TRACKER, {}, Code.INPUT_MISSING, fix="send issue_ref"),
    "input_invalid": refused(TRACKER, {"issue_ref": ""}, Code.INPUT_INVALID),
    "unknown_tool": refused(
        "nope.no_such_tool", {}, Code.CAPABILITY_UNAVAILABLE, dependency="nope.no_such_tool"
    ),
    "token_not_allowed": refused(
        TRACKER,
        tracker("T-1"),
        Code.ACCESS_DENIED,
        CARDS_ONLY,
        required_capability=f"tool:{TRACKER}",
    ),
    "reference_missing": failed(
        TRACKER,
        tracker("T-404"),
        Code.REFERENCE_UNRESOLVED,
        retryable=False,
        fix="check the issue id",
    ),
    "reference_ambiguous": failed(
        TRACKER, tracker("checkout"), Code.REFERENCE_UNRESOLVED, fix="choose one of: T-1, T-7"
    ),
    "connector_disabled": failed(
        TRACKER,
        tracker("T-1", "disabled"),
        Code.CAPABILITY_UNAVAILABLE,
        required_capability="tracker connector",
        retryable=False,
    ),
    "no_scope": failed(
        TRACKER,
        tracker("T-1", "no_scope"),
        Code.ACCESS_DENIED,
        dependency="tracker",
        operation="read issue metadata and recent comments",
        required_capability="tracker.issue:read",
        safe_fallback="inspect the local repository and prepare a provisional plan",
        fix="grant read access or paste an approved export",
        message="I could not read the linked tracker item.",
        retryable=False,
        retry_after_s=None,
        cause=None,
    ),
    # The fingerprint repeats: one retry, then stop.
    "source_unreliable": failed(
        TRACKER, tracker("T-1", "timeout"), Code.SOURCE_UNRELIABLE, 2, retryable=True
    ),
    "no_outcome": failed(
        "debug.return_nothing", {}, Code.OUTCOME_MISSING, cause="no_outcome_returned"
    ),
    "no_outcome_spending": failed(
        "itest.spend_nothing",
        {},
        Code.OUTCOME_MISSING,
        action=NextAction.VERIFY_AT_SOURCE,
        cause="no_outcome_returned",
    ),
    "crash": failed(
        "debug.crash",
        {"secret": SECRET},
        Code.TOOL_CRASHED,
        retryable=False,
        dependency="debug.crash",
    ),
    "deadline": failed(
        "debug.slow", {"seconds": 2.6, "steps": 26}, Code.DEADLINE_EXCEEDED, dependency="debug.slow"
    ),
}


def check_envelope(name: str, case: Case, view: JobView) -> None:
    body = envelope(view).model_dump(mode="json")
    where = f"{name}: {body}"
    assert body["status"] == case.status.value, where
    assert body["terminal"] is True, where
    assert body["next_action"] == case.action.value, where
    if case.attempts is not None:
        assert body["attempts"] == case.attempts, where
    assert body["recorded_by"] == ("api" if case.attempts == 0 else "worker"), where
    if case.code is None:
        assert body["error"] is None, where
        return
    error = body["error"]
    assert set(error) == ERROR_KEYS, where
    assert error["code"] == case.code.value, where
    assert error["message"], where
    assert {k: error[k] for k in case.error} == case.error, where


@pytest.mark.parametrize(
    "deployment", [*ON_EVERY_BROKER, *deployments("embedded/sqlite")], indirect=True
)
def test_every_outcome_and_code_end_to_end(deployment: Deployment) -> None:
    store = deployment.store
    frozen = pull(Ledger(store), "account:frozen", "account under review", "ops")
    deployment.start_workers(count=2)

    views = {name: deployment.submit(c.tool, c.args, c.caller) for name, c in CASES.items()}
    sweeps = [deployment.submit("seo.keyword_sweep", {"keywords": ["a"]}) for _ in range(4)]
    braked = deployment.submit(TRACKER, {"issue_ref": "T-1"}, Caller("frozen", "tok-frozen"))
    assert [v.status for v in sweeps] == [Status.QUEUED] * 3 + [Status.REFUSED]

    done = wait_terminal(store, [v.job_id for v in [*views.values(), *sweeps]], timeout_s=90)
    for name, case in CASES.items():
        check_envelope(name, case, done[views[name].job_id])

    succeeded = done[views["succeeded"].job_id]
    assert succeeded.result == {"issue": {"title": "Checkout fails on Safari", "state": "open"}}
    declined = done[views["declined"].job_id]
    assert declined.declined_reason and "cover" in declined.declined_reason
    assert declined.result == {"post_id": "p-1", "generated": False}
    mail = done[views["partial_mail"].job_id].partial
    assert mail is not None and (mail.processed, mail.skipped, mail.total) == (1, ["bob"], 2)
    stale = done[views["partial_stale"].job_id]
    assert stale.result is not None and "confidence" in stale.result

    quota = envelope(done[sweeps[3].job_id]).model_dump(mode="json")["error"]
    assert quota["code"] == Code.QUOTA_EXCEEDED and quota["retryable"] is True
    assert quota["retry_after_s"] is not None and 1 <= quota["retry_after_s"] <= 3600
    assert envelope(done[sweeps[3].job_id]).next_action is REFUSED
    assert [done[v.job_id].status for v in sweeps[:3]] == [Status.SUCCEEDED] * 3

    brake_error = envelope(braked).model_dump(mode="json")["error"]
    assert braked.status is Status.REFUSED and set(brake_error) == ERROR_KEYS
    assert brake_error["code"] == Code.BRAKE_ENGAGED and brake_error["cause"] == frozen.brake_id
    assert "account under review" in brake_error["message"]
    assert envelope(braked).next_action is REFUSED
    assert (braked.attempts, braked.recorded_by) == (0, "api")

    # Only the spending tools that ran left an effect, once each.
    spent = Counter(deployment.side_effect_jobs())
    expected = {views["partial_mail"].job_id, views["no_outcome_spending"].job_id}
    assert spent == Counter(expected | {v.job_id for v in sweeps[:3]})

    # A crash's raw detail is kept for operators, scrubbed; nothing carries the secret.
    crash_id = views["crash"].job_id
    (failed,) = [e for e in store.read_stream(job_stream(crash_id)) if e.type == "work.failed"]
    assert failed.data["detail"].startswith("RuntimeError: connector blew up")
    assert "[REDACTED]" in failed.data["detail"]
    assert SECRET not in str(failed.data)
    assert SECRET not in envelope(done[crash_id]).model_dump_json()
