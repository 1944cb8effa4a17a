"""The CLI where processes matter: one-command serve on embedded defaults, a brake pulled from
the CLI with no API running, and the demo's table."""

from __future__ import annotations

import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from ledger.codes import REQUEST_CODES, Code, Status
from tests.factories import get_job, open_sql
from tests.plugins.deployments import Deployment, deployments, stream_types, wait_until
from tests.serving import embedded_env, outcomes_argv, serving


def http(method: str, url: str, token: str, body: Any = None) -> tuple[int, Any]:
    data = orjson.dumps(body) if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=70) as response:
            return response.status, orjson.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, orjson.loads(error.read())


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """`outcomes serve` on embedded defaults in a scratch folder: (base URL, agent token)."""
    env = embedded_env(OUTCOMES_TOOLS="examples.seed_tools")
    run = subprocess.run(
        outcomes_argv("tokens", "create", "--account", "acme", "--role", "agent", "--json"),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    # The token needs the schema; `serve` migrates by itself, the token command does not.
    if run.returncode != 0:
        subprocess.run(outcomes_argv("migrate"), cwd=tmp_path, env=env, check=True, timeout=120)
        run = subprocess.run(
            outcomes_argv("tokens", "create", "--account", "acme", "--role", "agent", "--json"),
            cwd=tmp_path,
            env=env,
            capture_output=True,
            timeout=120,
            check=True,
        )
    token = orjson.loads(run.stdout)["token"]
    with serving(tmp_path, env) as base:
        yield base, token


def test_serve_on_embedded_defaults_runs_api_worker_and_reconciler(
    served: tuple[str, str],
) -> None:
    base, token = served
    status, body = http(
        "POST",
        base + "/v1/jobs",
        token,
        {"tool": "tracker.read_issue", "args": {"issue_ref": "T-1"}},
    )
    assert status == 202, body
    deadline = time.monotonic() + 60
    envelope: dict[str, Any] = body
    while not envelope.get("terminal") and time.monotonic() < deadline:
        _, envelope = http("GET", f"{base}/v1/jobs/{body['job_id']}?wait=20", token)
    assert (envelope["status"], envelope["next_action"]) == ("succeeded", "accept")
    assert envelope["result"]["issue"]["title"] == "Checkout fails on Safari"
    refused, problem = http(
        "POST", base + "/v1/jobs", token, {"tool": "tracker.read_issue", "args": {}}
    )
    assert (refused, problem["error"]["code"]) == (422, "INPUT_MISSING")


@pytest.mark.parametrize("deployment", deployments("rabbitmq/postgres"), indirect=True)
def test_a_brake_pulled_from_the_cli_with_no_api_is_obeyed_by_running_workers(
    deployment: Deployment,
) -> None:
    deployment.start_workers(count=1)
    # Accepted before the pull (so the submit-time check could not refuse them) ...
    jobs = [
        deployment.submit("seo.keyword_sweep", {"keywords": ["k"]}, dispatch=False)
        for _ in range(3)
    ]
    env = embedded_env(OUTCOMES_DATABASE_URL=deployment.app_database_url)  # as the app role
    pulled = subprocess.run(
        outcomes_argv(
            "brake",
            "pull",
            "--scope",
            "tool:seo.keyword_sweep",
            "--reason",
            "provider incident",
            "--json",
        ),
        env=env,
        capture_output=True,
        timeout=60,
        check=True,
    )
    brake_id = orjson.loads(pulled.stdout)["brake_id"]
    # ... and reaching the workers only after it: nothing runs, each names the brake.
    for job in jobs:
        deployment.dispatcher.dispatch(job.job_id)

    def all_halted() -> bool:
        views = [get_job(deployment.store, job.job_id) for job in jobs]
        return all(v is not None and v.terminal for v in views)

    wait_until(all_halted, 60, "the workers to reach the held jobs")
    for job in jobs:
        view = get_job(deployment.store, job.job_id)
        assert view is not None and view.error is not None
        assert (view.status, view.code, view.error.cause) == (
            Status.REFUSED,
            Code.BRAKE_ENGAGED,
            brake_id,
        )
        assert view.attempts == 0
    assert deployment.side_effect_jobs() == []


def test_demo_prints_every_outcome_and_code(tmp_path: Path) -> None:
    home = tmp_path / "demo"
    run = subprocess.run(
        outcomes_argv("demo", "--home", str(home), "--json"),
        env=embedded_env(),
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    rows = orjson.loads(run.stdout)["rows"]
    statuses = {row["status"] for row in rows}
    codes = {row["code"] for row in rows} - {None}
    assert statuses == {"succeeded", "declined", "partial", "refused", "failed"}
    assert codes == {code.value for code in Code if code not in REQUEST_CODES}
    actions = {row["next_action"] for row in rows}
    assert {
        "accept",
        "use_partial_and_narrow",
        "satisfy_precondition",
        "stop_and_report",
    } <= actions
    stories = {row["scenario"]: row for row in rows}

    # A worker killed mid-job: the reconciler, not the worker, records the silence.
    lost = stories["worker killed mid-job (reconciler)"]
    assert (lost["http"], lost["status"], lost["code"], lost["cause"]) == (
        202,
        "failed",
        "OUTCOME_MISSING",
        "worker_lost",
    )
    assert lost["next_action"] == "verify_at_source"  # the tool spends
    # Queued before the brake was pulled: accepted at submit, halted by the worker.
    halted = stories["queued, then brake pulled (worker halts)"]
    assert (halted["http"], halted["status"], halted["code"]) == (202, "refused", "BRAKE_ENGAGED")
    with open_sql(f"sqlite:///{home / '.outcomes' / 'ledger.db'}") as store:
        lost_events = store.read_stream(f"job-{lost['job_id']}")
        halted_types = stream_types(store, halted["job_id"])
    assert [e.type for e in lost_events][:2] == ["job.accepted", "work.started"]
    assert lost_events[-1].actor == "reconciler"
    assert halted_types == ["job.accepted", "work.halted"]

    table = subprocess.run(
        outcomes_argv("demo", "--home", str(tmp_path / "demo-table")),
        env=embedded_env(),
        capture_output=True,
        timeout=300,
        check=True,
    ).stdout.decode()
    assert table.splitlines()[0].split() == ["SCENARIO", "STATUS", "CODE", "NEXT", "ACTION"]
    assert len([line for line in table.splitlines() if "ACCESS_DENIED" in line]) == 2
    lines = table.splitlines()
    assert any("worker killed mid-job" in x and "OUTCOME_MISSING/worker_lost" in x for x in lines)
    assert any("brake pulled (worker halts)" in x and "BRAKE_ENGAGED" in x for x in lines)
