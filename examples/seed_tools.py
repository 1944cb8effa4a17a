"""Tools that reproduce every scenario of the seed articles (used by the demo and the tests).

Each tool's behaviour is chosen by its arguments, so one deployment can show every outcome:
the tracker lookup (missing, ambiguous, disabled connector, missing scope, repeated timeouts,
stale source), the social card (declined: a cover already exists), the keyword sweep (spends
quota), the mail-out (partial), a tool that returns nothing, and a slow paid call whose worker
the demo kills.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, SecretStr

from ledger.codes import Code
from ledger.outcomes import Declined, Partial, Succeeded, ToolFailure
from ledger.tools import Quota, ToolContext, tool

ISSUES = {
    "T-1": {"title": "Checkout fails on Safari", "state": "open"},
    "T-2": {"title": "Export times out", "state": "open"},
}
AMBIGUOUS = {"checkout": ["T-1", "T-7"]}


class ReadIssue(BaseModel):
    issue_ref: str = Field(min_length=1)
    connector: str = "enabled"  # "enabled" | "disabled" | "no_scope" | "timeout" | "stale"


@tool("tracker.read_issue", spends=False, timeout_s=30, max_attempts=3)
def read_issue(args: ReadIssue, ctx: ToolContext) -> Succeeded | Partial:
    """Read an issue's metadata from the tracker."""
    if args.connector == "disabled":
        raise ToolFailure(
            code=Code.CAPABILITY_UNAVAILABLE,
            dependency="tracker",
            operation="read issue metadata",
            required_capability="tracker connector",
            fix="enable the tracker connector or change scope",
            message="This runtime has no tracker connector.",
        )
    if args.connector == "no_scope":
        raise ToolFailure(
            code=Code.ACCESS_DENIED,
            dependency="tracker",
            operation="read issue metadata and recent comments",
            required_capability="tracker.issue:read",
            safe_fallback="inspect the local repository and prepare a provisional plan",
            fix="grant read access or paste an approved export",
            message="I could not read the linked tracker item.",
        )
    if args.connector == "timeout":
        raise ToolFailure(
            code=Code.SOURCE_UNRELIABLE,
            dependency="tracker",
            operation="read issue metadata",
            retryable=True,
            fingerprint="tracker-config-v1",  # unchanged between attempts: stop retrying
            message="The tracker timed out.",
        )
    if args.issue_ref in AMBIGUOUS:
        candidates = ", ".join(AMBIGUOUS[args.issue_ref])
        raise ToolFailure(
            code=Code.REFERENCE_UNRESOLVED,
            dependency="tracker",
            operation="resolve the issue reference",
            fix=f"choose one of: {candidates}",
            message=f"'{args.issue_ref}' matches several issues: {candidates}.",
        )
    issue = ISSUES.get(args.issue_ref)
    if issue is None:
        raise ToolFailure(
            code=Code.REFERENCE_UNRESOLVED,
            dependency="tracker",
            operation="resolve the issue reference",
            fix="check the issue id",
            message=f"No issue matches '{args.issue_ref}'.",
        )
    if args.connector == "stale":
        return Partial(
            result={"issue": issue, "confidence": "low: the tracker's index is 3 days old"},
            processed=1,
            skipped=["recent comments"],
            total=2,
        )
    return Succeeded(result={"issue": issue})


class SocialCard(BaseModel):
    post_id: str
    has_cover: bool = False


@tool("social.draw_card", spends=True, timeout_s=30)
def draw_card(args: SocialCard, ctx: ToolContext) -> Succeeded | Declined:
    """Draw a social card for a post, unless it already has a cover image."""
    if args.has_cover:
        return Declined(
            reason="the post already has a cover image; nothing was generated",
            result={"post_id": args.post_id, "generated": False},
        )
    return Succeeded(result={"post_id": args.post_id, "generated": True})


class KeywordSweep(BaseModel):
    keywords: list[str] = Field(min_length=1)


@tool("seo.keyword_sweep", spends=True, timeout_s=60, quota=Quota(limit=3, window_s=3600))
def keyword_sweep(args: KeywordSweep, ctx: ToolContext) -> Succeeded:
    """Run a paid keyword sweep (spends quota; refused early when the quota is gone)."""
    _record_side_effect(ctx)
    return Succeeded(result={"keywords": args.keywords, "rankings": len(args.keywords)})


class MailOut(BaseModel):
    recipients: list[str] = Field(min_length=1)


@tool("mail.send_release_note", spends=True, timeout_s=60)
def send_release_note(args: MailOut, ctx: ToolContext) -> Succeeded | Partial:
    """Mail a release note; addresses without an '@' are skipped and named."""
    sent = [r for r in args.recipients if "@" in r]
    skipped = [r for r in args.recipients if "@" not in r]
    _record_side_effect(ctx)
    if skipped:
        return Partial(
            result={"sent": len(sent)},
            processed=len(sent),
            skipped=skipped,
            total=len(args.recipients),
        )
    return Succeeded(result={"sent": len(sent)})


class Nothing(BaseModel):
    note: str = ""


@tool("debug.return_nothing", spends=False, timeout_s=10, max_attempts=1)
def return_nothing(args: Nothing, ctx: ToolContext) -> Any:
    """A tool that reports nothing: the ledger records OUTCOME_MISSING, not success."""
    return {"status": "ok"}  # a dict is not an outcome


class Crash(BaseModel):
    secret: SecretStr = SecretStr("")  # declared secret: sealed at rest, scrubbed from text


@tool("debug.crash", spends=False, timeout_s=10, max_attempts=3)
def crash(args: Crash, ctx: ToolContext) -> Succeeded:
    """Raises an unexpected exception (its text is scrubbed before it is recorded)."""
    secret = args.secret.get_secret_value()
    raise RuntimeError(f"connector blew up: password={secret} at https://u:{secret}@host/")


class Slow(BaseModel):
    seconds: float = Field(ge=0, le=600)
    steps: int = Field(default=1, ge=1, le=1000)


@tool("debug.slow", spends=False, timeout_s=2, max_attempts=1)
def slow(args: Slow, ctx: ToolContext) -> Succeeded:
    """Sleeps in steps, re-checking the brake between them (DEADLINE_EXCEEDED past 2 s)."""
    for _ in range(args.steps):
        ctx.checkpoint()
        time.sleep(args.seconds / args.steps)  # simulated work
    return Succeeded(result={"slept": args.seconds})


class SpendSlowly(BaseModel):
    seconds: float = Field(default=30, ge=0, le=600)
    steps: int = Field(default=300, ge=1, le=10000)


@tool("debug.spend_slowly", spends=True, timeout_s=600, max_attempts=1)
def spend_slowly(args: SpendSlowly, ctx: ToolContext) -> Succeeded:
    """A paid call that takes a while: the demo kills its worker in the middle, and the
    reconciler records OUTCOME_MISSING (worker_lost) with verify_at_source."""
    for _ in range(args.steps):
        ctx.checkpoint()
        time.sleep(args.seconds / args.steps)  # simulated work
    return Succeeded(result={"spent_for_s": args.seconds})


def _record_side_effect(ctx: ToolContext) -> None:
    """Tests count a spending tool's real-world effects through this append-only file."""
    path = os.environ.get("OUTCOMES_SIDE_EFFECTS_FILE")
    if path:
        with Path(path).open("a") as out:
            out.write(f"{ctx.job_id} {ctx.attempt}\n")
