"""A call still running says how long it was waited for as the wait was (issue 47): half a
second is `after 0.5 s`, never `after 0 s` or `after 1 s` (whole seconds rounded it)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from ledger.decisions import Caller, JobRequest
from ledger.job_view import envelope
from ledger.outcomes import Succeeded
from ledger.runtime.ledger import Ledger
from ledger.services.submit import submit
from ledger.tools import ToolContext, tool
from mcp_server.answers import paragraph, spoken_seconds


class Nothing(BaseModel):
    pass


@tool("mcpwait.idle")
def idle(args: Nothing, ctx: ToolContext) -> Succeeded:
    return Succeeded()


@pytest.mark.parametrize(
    ("waited_s", "said"),
    [
        (0.0, "0"),
        (0.5, "0.5"),
        (0.25, "0.25"),
        (1.0, "1"),
        (1.5, "1.5"),
        (9.996, "10"),
        (12.4, "12"),
        (30.0, "30"),
        (-0.001, "0"),
    ],
)
def test_a_wait_is_said_as_it_was(waited_s: float, said: str) -> None:
    assert spoken_seconds(waited_s) == said


def test_a_half_second_wait_is_said_as_half_a_second(memory_ledger: Ledger) -> None:
    view = submit(
        memory_ledger, Caller(account="acme", token_id="t"), JobRequest("mcpwait.idle", {})
    )
    text = paragraph(envelope(view.view), 0.5)
    assert "is still queued after 0.5 s; that is not an error." in text
