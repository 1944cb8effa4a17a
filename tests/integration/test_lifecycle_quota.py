"""The quota is exact under parallel submits from separate OS processes (issue 3).

Four spawned processes, each like one API process, fire 25 submits at once at a tool with a
quota of 10, on SQLite and on Postgres: exactly 10 are accepted and every other one is refused
with QUOTA_EXCEEDED, a retry-after and `satisfy_precondition` as its next action.
"""

from __future__ import annotations

import traceback
from concurrent.futures import ThreadPoolExecutor
from multiprocessing import get_context
from typing import Any

import pytest

from ledger.codes import Code, NextAction
from ledger.decisions import JobRequest
from ledger.job_view import envelope
from ledger.runtime.ledger import Ledger
from ledger.services.submit import submit
from ledger.tools import load_tool_modules
from tests.factories import open_sql
from tests.plugins.deployments import AGENT, TOOL_MODULES, load_views
from tests.tools import QUOTA_LIMIT

REFUSED = NextAction.SATISFY_PRECONDITION

SUBMITTERS = 4
EACH = 25
SPAWN = get_context("spawn")


def submit_in_child(url: str, barrier: Any, results: Any) -> None:
    """A separate OS process (like one API process) firing its share of submits at once."""
    try:
        load_tool_modules(TOOL_MODULES.split(","))
        store = open_sql(url)
        barrier.wait(timeout=120)
        request = JobRequest(tool="itest.quota_ten", args={})
        with ThreadPoolExecutor(EACH) as pool:
            views = list(
                pool.map(lambda _: submit(Ledger(store), AGENT, request).view, range(EACH))
            )
        results.put([(v.job_id, v.status.value) for v in views])
        store.close()
    except BaseException:
        results.put(traceback.format_exc())


@pytest.mark.parametrize(
    "backend", ["sqlite_database", pytest.param("pg_database", marks=pytest.mark.postgres)]
)
def test_quota_is_exact_under_parallel_submits(
    backend: str, request: pytest.FixtureRequest
) -> None:
    url = str(request.getfixturevalue(backend))
    barrier = SPAWN.Barrier(SUBMITTERS)
    results = SPAWN.Queue()
    children = [
        SPAWN.Process(target=submit_in_child, args=(url, barrier, results), daemon=True)
        for _ in range(SUBMITTERS)
    ]
    for child in children:
        child.start()
    try:
        answers = []
        for _ in children:
            answer = results.get(timeout=180)
            assert isinstance(answer, list), answer
            answers.extend(answer)
    finally:
        for child in children:
            child.join(timeout=30)
            if child.is_alive():
                child.kill()
    assert len(answers) == SUBMITTERS * EACH == 100

    store = open_sql(url)
    try:
        views = load_views(store, [job_id for job_id, _ in answers])
    finally:
        store.close()
    assert {job_id: views[job_id].status.value for job_id, _ in answers} == dict(answers)
    accepted = [v for v in views.values() if v.accepted]
    refused = [v for v in views.values() if not v.accepted]
    assert len(accepted) == QUOTA_LIMIT
    assert len(refused) == 100 - QUOTA_LIMIT
    for view in refused:
        assert view.error is not None and view.error.code is Code.QUOTA_EXCEEDED
        assert view.error.retry_after_s is not None and view.error.retry_after_s >= 1
        assert envelope(view).next_action is REFUSED
