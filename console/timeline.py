"""A job's events as timeline steps: what kind of step each is (decision, start, retry, halt,
outcome, late outcome, reconciler finding) and one line saying what happened, drawn only from
the staff view of the event (`ledger.public`, argument values already withheld)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ledger.services.jobs import TimelineEntry
from ledger.services.reconcile import ACTOR as RECONCILER

OUTCOMES = ("work.succeeded", "work.declined", "work.partial", "work.failed")
# The fields each line already says, so the detail list under it does not repeat them.
SAID = {"type", "attempt", "worker", "lease_expires_at", "fingerprint", "due_at", "cause"}


@dataclass(frozen=True)
class Step:
    kind: str  # decision | start | retry | halt | outcome | late | finding
    title: str
    line: str
    event: dict[str, Any]
    details: list[tuple[str, Any]]
    problems: list[str]

    @property
    def verified(self) -> bool:
        return not self.problems


def steps(entries: list[TimelineEntry]) -> list[Step]:
    return [_step(entry) for entry in entries]


def _step(entry: TimelineEntry) -> Step:
    event = entry.event
    data: dict[str, Any] = event["data"]
    kind, title, line = _describe(event["type"], event["actor"], data)
    details = [(key, value) for key, value in data.items() if key not in SAID]
    return Step(kind, title, line, event, details, entry.problems)


def _describe(kind: str, actor: str, data: dict[str, Any]) -> tuple[str, str, str]:
    attempt = data.get("attempt")
    error = data.get("error") or {}
    code = error.get("code", "")
    if kind == "job.accepted" and data.get("approval"):
        approval = data["approval"]
        return (
            "decision",
            "Accepted, awaiting approval",
            f"{data.get('tool')} for {data.get('account')}: {approval.get('reason')} "
            f"(until {approval.get('expires_at')})",
        )
    if kind == "job.accepted":
        return "decision", "Accepted", f"{data.get('tool')} for {data.get('account')}"
    if kind == "job.approval_decided":
        return (
            "decision",
            f"Approval: {data.get('decision')}",
            f"by {data.get('role')} token {data.get('token_id')}: {data.get('reason')}",
        )
    if kind == "job.refused":
        return "decision", "Refused", f"{code}: {error.get('message', '')}"
    if kind == "work.started":
        return (
            "start",
            f"Attempt {attempt} started",
            f"worker {data.get('worker')}, lease until {data.get('lease_expires_at')}",
        )
    if kind == "work.retry_scheduled":
        return (
            "retry",
            f"Attempt {attempt} failed, retry scheduled",
            f"{code}, fingerprint {data.get('fingerprint') or '—'}, due {data.get('due_at')}",
        )
    if kind == "work.halted" and error.get("cause") in ("approval_denied", "approval_expired"):
        return "halt", "Never ran", f"{code}: {error.get('message', '')}"
    if kind == "work.halted":
        return "halt", f"Attempt {attempt} halted", f"{code}: {error.get('message', '')}"
    if kind in OUTCOMES:
        outcome = kind.removeprefix("work.")
        said = f"{code}: {error.get('message', '')}" if code else data.get("reason") or ""
        return "outcome", f"Outcome: {outcome}", str(said)
    if kind == "work.late_outcome":
        return (
            "late",
            f"Late outcome of attempt {attempt}",
            f"{data.get('outcome_type')} arrived after the job was closed; the first stands",
        )
    if kind == "job.redispatched":
        return (
            "finding",
            f"Reconciler: dispatched again (#{data.get('dispatch')})",
            str(data.get("reason", "")),
        )
    if kind == "job.outcome_missing":
        who = "Reconciler" if actor == RECONCILER else "Worker"
        return (
            "finding",
            f"{who}: outcome missing ({data.get('cause')})",
            f"attempt {attempt}: {error.get('message', '')}",
        )
    return "finding", kind, ""
