"""A small typed client for agents' code: submit jobs, wait for their outcomes, read their
events and follow the changes feed of an Outcome Ledger API (docs/contract.md).

    with Client("http://127.0.0.1:8000", token) as outcomes:
        envelope = outcomes.run("tracker.read_issue", {"issue_ref": "T-1"})
        if envelope.next_action == "accept": ...

Needs only httpx and pydantic: it imports nothing of the server.
"""

from outcomes_client.aio import AsyncClient
from outcomes_client.errors import (
    AuthenticationError,
    InvalidRequest,
    NotCancellable,
    NotFound,
    OutcomesError,
    PermissionDenied,
    ProblemError,
    ServiceUnavailable,
    TransportError,
    UnexpectedResponse,
    WaitTimeout,
)
from outcomes_client.models import (
    Approval,
    Budget,
    CancelRefusal,
    Change,
    Envelope,
    ErrorInfo,
    JobEvent,
    JobEvents,
    JobPage,
    LateOutcome,
    NextAction,
    Omission,
    PartialInfo,
    Problem,
    Status,
    Submission,
    Turn,
    TurnCall,
    TurnFailure,
    Waiting,
)
from outcomes_client.sync import Client

__all__ = [
    "Approval",
    "AsyncClient",
    "AuthenticationError",
    "Budget",
    "CancelRefusal",
    "Change",
    "Client",
    "Envelope",
    "ErrorInfo",
    "InvalidRequest",
    "JobEvent",
    "JobEvents",
    "JobPage",
    "LateOutcome",
    "NextAction",
    "NotCancellable",
    "NotFound",
    "Omission",
    "OutcomesError",
    "PartialInfo",
    "PermissionDenied",
    "Problem",
    "ProblemError",
    "ServiceUnavailable",
    "Status",
    "Submission",
    "TransportError",
    "Turn",
    "TurnCall",
    "TurnFailure",
    "UnexpectedResponse",
    "WaitTimeout",
    "Waiting",
]
