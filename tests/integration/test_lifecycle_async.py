"""Async tools end to end, in one real `outcomes worker` process on its threads pool: an
`async def` tool and a `def` tool run at the same time, an async tool past its deadline ends
`DEADLINE_EXCEEDED` (its task cancelled), a brake pulled during async multi-step work halts it
at `acheckpoint()`, and a `def` tool handing back a coroutine is a typed failure."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.codes import Code, Status
from ledger.runtime.ledger import Ledger
from ledger.services.brakes import pull
from tests.plugins.deployments import Deployment, deployments, wait_terminal, wait_until

ASYNC_DEPLOYMENTS = deployments("rabbitmq/postgres", "embedded/sqlite")


@pytest.mark.parametrize("deployment", ASYNC_DEPLOYMENTS, indirect=True)
def test_async_and_sync_tools_run_side_by_side_in_one_worker(
    deployment: Deployment, tmp_path: Path
) -> None:
    (worker,) = deployment.start_workers(count=1, concurrency=16, pool="threads")
    jobs = []
    for pair in range(4):
        folder = tmp_path / f"meet-{pair}"
        folder.mkdir()
        # Each waits for the other's file: both succeed only if they ran at the same time.
        jobs.append(
            deployment.submit(
                "atest.meet_async", {"folder": str(folder), "me": "a", "other": "s"}
            ).job_id
        )
        jobs.append(
            deployment.submit(
                "atest.meet_sync", {"folder": str(folder), "me": "s", "other": "a"}
            ).job_id
        )
    done = wait_terminal(deployment.store, jobs, timeout_s=90)

    assert {v.status for v in done.values()} == {Status.SUCCEEDED}, done
    results = [done[j].result for j in jobs]
    assert all(r is not None for r in results)
    assert {r["pid"] for r in results if r} == {worker.process.pid}  # one worker process
    threads = [r["thread"] for r in results if r]
    assert set(threads[0::2]) == {"tool-loop"}  # every async job on the process's one loop
    assert "tool-loop" not in threads[1::2]


@pytest.mark.parametrize("deployment", ASYNC_DEPLOYMENTS, indirect=True)
def test_async_deadline_brake_and_returned_coroutine(
    deployment: Deployment, tmp_path: Path
) -> None:
    deployment.start_workers(count=1, concurrency=16, pool="threads")
    slow_dir, steps_dir, coro_dir = (tmp_path / n for n in ("slow", "steps", "coro"))
    for folder in (slow_dir, steps_dir, coro_dir):
        folder.mkdir()
    slow = deployment.submit("atest.slow_async", {"folder": str(slow_dir)}).job_id
    steps = deployment.submit("atest.steps_async", {"folder": str(steps_dir)}).job_id
    coro = deployment.submit("atest.sync_returns_coroutine", {"folder": str(coro_dir)}).job_id

    wait_until(lambda: (steps_dir / "step-2").exists(), 60, "the async steps to be under way")
    brake = pull(Ledger(deployment.store), "tool:atest.steps_async", "stop the steps", "ops")
    done = wait_terminal(deployment.store, [slow, steps, coro], timeout_s=90)

    assert (done[slow].status, done[slow].code) == (Status.FAILED, Code.DEADLINE_EXCEEDED)
    wait_until(lambda: (slow_dir / "cancelled").exists(), 30, "the deadline to cancel the task")

    halted = done[steps]
    assert halted.error is not None
    assert (halted.status, halted.code, halted.error.cause) == (
        Status.REFUSED,
        Code.BRAKE_ENGAGED,
        brake.brake_id,
    )
    taken = len(list(steps_dir.glob("step-*")))
    assert 3 <= taken < 200  # stopped between steps, not run to the end
    assert steps not in deployment.side_effect_jobs()

    crashed = done[coro]
    assert (crashed.status, crashed.code) == (Status.FAILED, Code.TOOL_CRASHED)
    assert not (coro_dir / "ran").exists()  # the coroutine was closed, never run
    assert "never awaited" not in deployment.worker_logs()
