"""Rebuilt job rows carry the envelopes the contract promises, and late outcomes stay apart.

After a seeded random workload (tests/rebuild_workload.py) and a rebuild, every job's envelope
follows the seed table of contract §3 (status, next action, terminal, error, position) and the
facts of its lifecycle, reaching every next action; a late outcome changes nothing in a job's
row but its late outcomes and stamps, and a rebuild agrees.
"""

from __future__ import annotations

import random

from ledger.codes import Code, NextAction, OutcomeMissingCause
from ledger.events import NewEvent, WorkLateOutcome
from ledger.job_view import JobEnvelope
from ledger.persistence.sql_store import SqlStore
from tests.factories import rebuild
from tests.rebuild_workload import (
    EXPECTED,
    OPEN_STATUSES,
    SEEDS,
    Plan,
    differences,
    job_envelopes,
    run_workload,
    snapshot,
)


def test_rebuilt_envelopes_follow_the_seed_table(store: SqlStore) -> None:
    work = run_workload(store, random.Random(SEEDS[-1] + 1))
    rebuild(store)
    envelopes = job_envelopes(store)
    assert set(envelopes) == {plan.key for plan in work.jobs}
    seen_next_actions = set()
    for plan in work.jobs:
        row, env = envelopes[plan.key]
        status, action = EXPECTED[plan.kind]
        if action is None:  # a lost outcome on a tool that spends may hide work that happened
            action = NextAction.VERIFY_AT_SOURCE if plan.spends else NextAction.STOP_AND_REPORT
        where = f"{plan.kind} job {plan.key}"
        assert (env.status, env.next_action) == (status, action), where
        assert env.terminal == (status not in OPEN_STATUSES), where
        assert plan.last_position == row["ledger_position"], where
        assert (row["status"], row["terminal"]) == (env.status.value, env.terminal), where
        assert row["code"] == (env.error.code.value if env.error else None), where
        assert env.created_at <= env.updated_at, where
        seen_next_actions.add(env.next_action)
        check_kind_facts(plan, env)
    assert seen_next_actions == set(NextAction), "the workload must reach every next action"


def check_kind_facts(plan: Plan, env: JobEnvelope) -> None:
    where = f"{plan.kind} job {plan.key}"
    has_error = plan.kind in {"failed", "refused", "halted", "lost"}
    assert (env.error is not None) == has_error, where
    assert (env.late_outcomes != []) == (plan.kind == "lost"), where
    if plan.kind == "lost":
        assert env.error is not None and env.error.code is Code.OUTCOME_MISSING, where
        assert env.error.cause == OutcomeMissingCause.WORKER_LOST.value, where
        assert env.recorded_by == "reconciler", where
        assert env.late_outcomes == [{"attempt": 1, "type": "work.succeeded", **(plan.late or {})}]
    elif plan.kind == "halted":
        assert env.error is not None and env.error.code is Code.BRAKE_ENGAGED, where
        assert env.error.cause == plan.brake_id, where
    elif plan.kind == "refused":
        assert env.attempts == 0 and env.recorded_by == "api", where
    elif plan.kind == "retried":
        assert env.attempts == 2 and env.error is None, where
    elif plan.kind == "partial":
        assert env.partial is not None and env.partial.processed == 40, where
    elif plan.kind == "declined":
        assert env.declined_reason == "already up to date", where


def test_late_outcome_changes_nothing_but_late_outcomes(store: SqlStore) -> None:
    """The row before and after a late outcome differs only in late_outcomes and its stamps."""
    work = run_workload(store, random.Random(SEEDS[0] + 1))
    lost = next(p for p in work.jobs if p.kind == "lost")
    row_before, before = job_envelopes(store)[lost.key]
    late = {"result": {"value": -1}}
    payload = WorkLateOutcome(attempt=1, outcome_type="work.partial", outcome=late)
    store.append(lost.stream_id, [NewEvent(payload=payload, actor="worker-9")], lost.version)
    row_after, after = job_envelopes(store)[lost.key]
    assert after.late_outcomes == [
        *before.late_outcomes,
        {"attempt": 1, "type": "work.partial", **late},
    ]
    stamps = {"late_outcomes", "updated_at"}
    assert after.model_dump(exclude=stamps) == before.model_dump(exclude=stamps)
    assert row_after["ledger_position"] > row_before["ledger_position"]
    live = snapshot(store)
    rebuild(store)
    assert differences(live, snapshot(store)) == []
