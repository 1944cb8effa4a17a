"""The catalog, on a ledger in memory: the tools a token may call are the ones `submit` would
accept the tool of, each quota counted for the token's account; who may submit at all."""

from __future__ import annotations

import pytest

from ledger.decisions import Caller, JobRequest
from ledger.errors import NotAnAgentError
from ledger.runtime.ledger import Ledger
from ledger.services import catalog
from ledger.services.submit import submit
from ledger.services.tokens import create
from tests.tools import ECHO, METERED, OFF, QUOTA


def test_every_tool_the_catalog_lists_is_one_submit_accepts(memory_ledger: Ledger) -> None:
    token = create(memory_ledger, "acme", "agent", None, actor="tests").view
    caller = catalog.submitter(token)
    for entry in catalog.for_token(memory_ledger, token):
        assert entry.enabled
        # Arguments aside (each tool has its own), the tool itself is never what is refused.
        view = submit(memory_ledger, caller, JobRequest(entry.name, {})).view
        assert view.error is None or view.error.code.value in ("INPUT_MISSING", "INPUT_INVALID")
    assert OFF in {entry.name for entry in catalog.every_tool()}
    assert OFF not in {entry.name for entry in catalog.for_token(memory_ledger, token)}


def test_quota_remaining_counts_the_tokens_account(memory_ledger: Ledger) -> None:
    acme = create(memory_ledger, "acme", "agent", [METERED, ECHO], actor="tests").view
    submit(memory_ledger, Caller("acme", acme.token_id), JobRequest(METERED, {"text": "x"}))
    entries = {e.name: e for e in catalog.for_token(memory_ledger, acme)}
    assert set(entries) == {METERED, ECHO}
    assert entries[METERED].quota is not None
    assert entries[METERED].quota.remaining == QUOTA - 1
    operator = create(memory_ledger, "*", "operator", None, actor="tests").view
    metered = {e.name: e for e in catalog.for_token(memory_ledger, operator)}[METERED]
    assert metered.quota is not None and metered.quota.remaining is None


@pytest.mark.parametrize(("account", "role"), [("*", "operator"), ("acme", "auditor")])
def test_only_an_agent_of_one_account_submits(
    memory_ledger: Ledger, account: str, role: str
) -> None:
    token = create(memory_ledger, account, role, None, actor="tests").view
    with pytest.raises(NotAnAgentError):
        catalog.submitter(token)
