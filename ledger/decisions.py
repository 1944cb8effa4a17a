"""The decision at submit: accept the job, or refuse it naming the precondition (pure rules).

Refusing early keeps an agent from spending by accident and names the fix in the same answer.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from pydantic import ValidationError

from ledger.budget import MIN_BUDGET_BYTES
from ledger.codes import Code
from ledger.error_info import ErrorInfo
from ledger.errors import InvalidEventError
from ledger.identifiers import check
from ledger.secrets import marked_place
from ledger.tools import ToolSpec


@dataclass(frozen=True)
class Caller:
    """Who submits: the token's id, its account and (optionally) the tools it may call."""

    account: str
    token_id: str
    tools: frozenset[str] | None = None
    # The token was admitted without a read (an API process's cache): the decision's own
    # write re-checks that it is not revoked, so a revoked token records nothing.
    recheck_token: bool = False


@dataclass(frozen=True)
class JobRequest:
    tool: str
    args: dict[str, Any]
    idempotency_key: str | None = None
    # The caller's start deadline (seconds; capped by the tool's): not part of the body an
    # idempotency key names, like how long a caller waits for the answer.
    start_within_s: float | None = None
    budget_bytes: int | None = None  # the agent's budget for the answer (at most the tool's)
    # The agent's turn (`Outcomes-Turn`, docs/turns.md): not part of the body either.
    turn: str | None = None
    halt_on_failure: bool = False  # `Outcomes-Turn-Halt: on-failure`

    def __post_init__(self) -> None:
        """A tool name or key that could pass for another is refused before anything is
        recorded (UnsafeTextError: control, bidirectional, zero-width characters)."""
        check("the tool name", self.tool)
        if self.idempotency_key is not None:
            check("the idempotency key", self.idempotency_key)
        if self.turn is not None:
            check_turn(self.turn)

    def fingerprint(self, key: bytes) -> str:
        """Same key + same body replays; same key + another body is a conflict. An HMAC under
        the ledger's own key: a plain hash of the body would let anyone who sees it test
        guesses of the argument values (a 4-digit PIN in 10,000 tries)."""
        return hmac.new(key, self._body(), hashlib.sha256).hexdigest()

    def same_body(self, request_hash: str | None, key: bytes) -> bool:
        """Whether an earlier job's `request_hash` was made from this very body (also as the
        unkeyed hash that ledgers recorded before they had a key)."""
        if request_hash is None:
            return False
        if hmac.compare_digest(request_hash, self.fingerprint(key)):
            return True
        return hmac.compare_digest(request_hash, hashlib.sha256(self._body()).hexdigest())

    def _body(self) -> bytes:
        body: dict[str, Any] = {"tool": self.tool, "args": self.args}
        if self.budget_bytes is not None:  # a body without one hashes as it always did
            body["budget_bytes"] = self.budget_bytes
        try:
            return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError as exc:
            raise InvalidEventError(f"job args are not JSON: {exc}") from None


TURN_PATTERN = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._:-]{0,127}\Z")


def check_turn(turn: str) -> str:
    """A turn id (docs/turns.md): 1 to 128 characters of letters, digits and `._:-`, starting
    with a letter or digit; InvalidEventError otherwise (nothing is recorded)."""
    if not TURN_PATTERN.fullmatch(turn):
        raise InvalidEventError(
            "the turn id must be 1 to 128 letters, digits, '.', '_', ':' or '-', "
            "starting with a letter or a digit"
        )
    return turn


def tool_refusal(spec: ToolSpec | None, caller: Caller, request: JobRequest) -> ErrorInfo | None:
    """Capability, then permission, then the args' schema."""
    if spec is None or not spec.enabled:
        state = "not enabled" if spec else "not available"
        return ErrorInfo(
            code=Code.CAPABILITY_UNAVAILABLE,
            dependency=request.tool,
            operation="run the tool",
            fix="enable the tool in OUTCOMES_TOOLS or choose another tool",
            message=f"The tool {request.tool!r} is {state} in this deployment.",
        )
    denied = permission_refusal(caller, request)
    if denied is not None:
        return denied
    marked = mark_refusal(request)
    if marked is not None:
        return marked
    try:
        spec.args_model.model_validate(request.args)
    except ValidationError as exc:
        return args_refusal(request.tool, exc)
    return unknown_args_refusal(spec, request) or budget_refusal(spec, request)


def mark_refusal(request: JobRequest) -> ErrorInfo | None:
    """A value starting with `ol-sealed:` or `ol-withheld` is refused: those are the ledger's
    marks for a sealed secret, which pages show as `(secret)`, so an agent sending one would
    hide that argument from staff. Only the ledger seals (the tool declares its secrets)."""
    place = marked_place(request.args)
    if place is None:
        return None
    return ErrorInfo(
        code=Code.INPUT_INVALID,
        dependency=request.tool,
        operation="validate the arguments",
        fix="send the value itself: only the ledger writes values starting with 'ol-sealed:' "
        "or 'ol-withheld' (a secret argument the tool declares is sealed for you)",
        message=f"The argument at {place[:120]} starts with a mark only the ledger writes.",
    )


def unknown_args_refusal(spec: ToolSpec, request: JobRequest) -> ErrorInfo | None:
    """An argument the tool's model does not name is refused (issue 47: `{"isue": 1}` beside
    `issue_ref` was dropped and the call accepted), unless the model says what to do with
    extras itself (`extra="allow"`, or `"ignore"` written out)."""
    model = spec.args_model
    if model.model_config.get("extra") is not None:
        return None  # "forbid" refused them already; "allow"/"ignore" chosen by the tool
    known: set[str] = set()
    for name, field in model.model_fields.items():
        known.add(name)
        for alias in (field.alias, field.validation_alias):
            if isinstance(alias, str):
                known.add(alias)
    unknown = sorted(key for key in request.args if key not in known)
    if not unknown:
        return None
    names = ", ".join(repr(key[:40]) for key in unknown[:5])
    more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
    return ErrorInfo(
        code=Code.INPUT_INVALID,
        dependency=request.tool,
        operation="validate the arguments",
        fix=f"send only the arguments {request.tool} takes: {', '.join(sorted(known)) or 'none'}",
        message=f"The tool {request.tool!r} takes no argument {names}{more}.",
    )


def budget_refusal(spec: ToolSpec, request: JobRequest) -> ErrorInfo | None:
    """The agent may ask for a smaller answer than the tool's `max_result_bytes`, not more."""
    asked = request.budget_bytes
    if asked is None or MIN_BUDGET_BYTES <= asked <= spec.max_result_bytes:
        return None
    return ErrorInfo(
        code=Code.INPUT_INVALID,
        dependency=request.tool,
        operation="accept the answer's budget",
        fix=f"send budget_bytes from {MIN_BUDGET_BYTES} to {spec.max_result_bytes}, or none",
        message=f"budget_bytes {asked} is outside what {request.tool!r} answers within "
        f"({MIN_BUDGET_BYTES} to {spec.max_result_bytes} bytes).",
    )


def permission_refusal(caller: Caller, request: JobRequest) -> ErrorInfo | None:
    """The token's own limit: checked before an idempotent replay too, because the key is
    the account's and another token of it may have used it for a tool this one may not call."""
    if caller.tools is None or request.tool in caller.tools:
        return None
    return ErrorInfo(
        code=Code.ACCESS_DENIED,
        dependency=request.tool,
        operation="run the tool",
        required_capability=f"tool:{request.tool}",
        fix="use a token that is allowed this tool, or ask an operator to grant it",
        message=f"This token may not call {request.tool!r}.",
    )


def args_refusal(tool: str, exc: ValidationError) -> ErrorInfo:
    """INPUT_MISSING names the missing fields; anything else is INPUT_INVALID.

    Only field names and the kind of problem are echoed, never the submitted values."""
    errors = exc.errors(include_input=False, include_url=False)
    missing = [_field(e["loc"]) for e in errors if e["type"] == "missing"]
    if missing:
        names = ", ".join(missing)
        return ErrorInfo(
            code=Code.INPUT_MISSING,
            dependency=tool,
            operation="validate the arguments",
            fix=f"send {names}",
            message=f"The request is missing {names}.",
        )
    return ErrorInfo(
        code=Code.INPUT_INVALID,
        dependency=tool,
        operation="validate the arguments",
        fix="correct the arguments to match the tool's schema",
        message=f"The arguments do not match the tool's schema ({describe_fields(exc)}).",
    )


def describe_fields(exc: ValidationError) -> str:
    """What is wrong with which fields (at most five), never the values sent."""
    errors = exc.errors(include_input=False, include_url=False)
    return "; ".join(f"{_field(e['loc'])}: {e['msg']}" for e in errors[:5])


def _field(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(body)"


def quota_refusal(tool: str, limit: int, window_s: int, retry_after_s: int) -> ErrorInfo:
    return ErrorInfo(
        code=Code.QUOTA_EXCEEDED,
        dependency=tool,
        operation="accept the job",
        retryable=True,
        fix=f"wait {retry_after_s} s, or ask an operator for a larger quota",
        message=f"The quota of {limit} jobs per {window_s} s for {tool!r} is used up.",
        retry_after_s=retry_after_s,
    )


def retry_after(oldest_in_window: datetime, window_s: int, now: datetime) -> int:
    """Whole seconds until the oldest counted job leaves the window (at least 1)."""
    remaining = (oldest_in_window - now).total_seconds() + window_s
    return max(1, math.ceil(remaining))


def backlog_refusal(tool: str, wait_s: float, start_within_s: float, retry_s: float) -> ErrorInfo:
    """Refused when asked, not parked: the queue ahead would not start it within its deadline
    (seed 001). `cause` says it is the backlog, not the account's quota."""
    return ErrorInfo(
        code=Code.QUOTA_EXCEEDED,
        dependency="queue",
        operation=f"start the job within {start_within_s:g} s",
        retryable=True,
        fix=(
            f"wait {retry_s:g} s and submit again, or submit with a longer start_within_s "
            "(up to the tool's)"
        ),
        message=(
            f"The jobs queued ahead would take about {math.ceil(wait_s)} s to start this one, "
            f"longer than its start deadline of {start_within_s:g} s; nothing was queued."
        ),
        retry_after_s=max(1, math.ceil(retry_s)),
        cause="backlog",
    )
