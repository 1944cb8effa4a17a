"""`outcomes demo`: every seed scenario through the real API and a real worker, on embedded
defaults in a scratch folder, printed as one table (scenario, status, code, next_action); then
the two stories of `cli/demo_stories.py`: a worker killed mid-job, and a queued job halted by a
brake pulled before a worker reached it."""

from __future__ import annotations

import os
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import orjson

from cli.context import ledger_of
from cli.demo_stories import HALTED, LOST, Stage, halted_at_execution, worker_lost
from cli.errors import reports_errors
from cli.output import emit_json, json_option
from cli.processes import exit_on_sigterm, start_worker, stop
from ledger.runtime.ledger import Ledger
from ledger.services import admin, brakes, tokens
from ledger.settings import load_settings
from ledger.tools import load_tool_modules

DEMO_LEASE_S = 2.0
# In this order: the first kills the worker, so the second can queue a job no worker takes yet.
STORIES = ((LOST, worker_lost), (HALTED, halted_at_execution))


@dataclass(frozen=True)
class Scenario:
    name: str
    tool: str
    args: dict[str, Any]
    token: str = "agent"  # which demo token submits it
    before: Callable[[Ledger], None] | None = field(default=None, compare=False)


def _scenarios(pulled: list[str]) -> list[Scenario]:
    def brake_mail(ledger: Ledger) -> None:
        view = brakes.pull(
            ledger, "tool:mail.send_release_note", "demo: mail provider incident", "demo"
        )
        pulled.append(view.brake_id)

    sweep = {"keywords": ["outcome ledger"]}
    return [
        Scenario("tracker: read an issue", "tracker.read_issue", {"issue_ref": "T-1"}),
        Scenario("tracker: no reference given", "tracker.read_issue", {}),
        Scenario("tracker: reference of the wrong type", "tracker.read_issue", {"issue_ref": 7}),
        Scenario("tracker: ambiguous reference", "tracker.read_issue", {"issue_ref": "checkout"}),
        Scenario(
            "tracker: connector disabled",
            "tracker.read_issue",
            {"issue_ref": "T-1", "connector": "disabled"},
        ),
        Scenario(
            "tracker: identity lacks read scope",
            "tracker.read_issue",
            {"issue_ref": "T-1", "connector": "no_scope"},
        ),
        Scenario(
            "tracker: source times out repeatedly",
            "tracker.read_issue",
            {"issue_ref": "T-2", "connector": "timeout"},
        ),
        Scenario(
            "tracker: stale source, labelled partial",
            "tracker.read_issue",
            {"issue_ref": "T-2", "connector": "stale"},
        ),
        Scenario(
            "social card: cover already exists",
            "social.draw_card",
            {"post_id": "p-42", "has_cover": True},
        ),
        Scenario(
            "mail-out: some recipients skipped",
            "mail.send_release_note",
            {"recipients": ["ana@example.com", "bob-at-example", "cy@example.com"]},
        ),
        Scenario("keyword sweep 1 of 3", "seo.keyword_sweep", sweep),
        Scenario("keyword sweep 2 of 3", "seo.keyword_sweep", sweep),
        Scenario("keyword sweep 3 of 3", "seo.keyword_sweep", sweep),
        Scenario("keyword sweep past the quota", "seo.keyword_sweep", sweep),
        Scenario("a tool this runtime lacks", "crm.export_contacts", {}),
        Scenario("token not allowed this tool", "social.draw_card", {"post_id": "p-1"}, "narrow"),
        Scenario("tool returns nothing", "debug.return_nothing", {}),
        Scenario("tool crashes", "debug.crash", {"secret": "demo-secret-value"}),
        Scenario("tool runs past its deadline", "debug.slow", {"seconds": 5}),
        Scenario(
            "brake pulled on the mail-out",
            "mail.send_release_note",
            {"recipients": ["ana@example.com"]},
            before=brake_mail,
        ),
    ]


class Client:
    """A tiny HTTP client (stdlib only) that speaks the API's JSON and problem+json."""

    def __init__(self, base: str) -> None:
        self.base = base

    def call(self, method: str, path: str, token: str, body: Any = None) -> tuple[int, Any]:
        data = orjson.dumps(body) if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {token}")
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=90) as response:
                return response.status, orjson.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, orjson.loads(error.read())


def _run(client: Client, secrets: dict[str, str], ledger: Ledger, sc: Scenario) -> dict[str, Any]:
    if sc.before is not None:
        sc.before(ledger)
    status, body = client.call(
        "POST", "/v1/jobs", secrets[sc.token], {"tool": sc.tool, "args": sc.args}
    )
    job_id = body.get("job_id")
    if job_id is None:
        raise click.ClickException(f"{sc.name}: HTTP {status} without a job id: {body}")
    envelope = body
    deadline = time.monotonic() + 60
    while True:
        _, envelope = client.call("GET", f"/v1/jobs/{job_id}?wait=20", secrets["agent"])
        if envelope.get("terminal") or time.monotonic() > deadline:
            break
    return _row(sc.name, status, job_id, envelope)


def _row(name: str, http: int, job_id: str, envelope: dict[str, Any]) -> dict[str, Any]:
    error = envelope.get("error") or {}
    return {
        "scenario": name,
        "http": http,
        "status": envelope.get("status"),
        "code": error.get("code"),
        "cause": error.get("cause"),
        "next_action": envelope.get("next_action"),
        "job_id": job_id,
    }


@click.command()
@click.option(
    "--home",
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for the demo's ledger and broker (default: a new temporary folder).",
)
@json_option
@reports_errors
def demo(home: Path | None, as_json: bool) -> None:
    """Run every seed scenario through the real API and a real worker on embedded defaults,
    and print what each one recorded: status, code and the agent's next action.

    Then two stories with a real worker process: it is killed (by pid) in the middle of a paid
    job, and the reconciler records OUTCOME_MISSING/worker_lost (verify_at_source); and with
    no worker running a job is queued, the brake is pulled, and the worker started next halts
    it at execution (BRAKE_ENGAGED)."""
    from api.server import BackgroundServer  # the CLI starts the API by its entry point
    from workers.dispatch import dispatcher_from_settings

    folder = home or Path(tempfile.mkdtemp(prefix="outcomes-demo-"))
    folder.mkdir(parents=True, exist_ok=True)
    os.chdir(folder)  # the embedded ledger and broker live under ./.outcomes
    for name in ("OUTCOMES_DATABASE_URL", "OUTCOMES_BROKER_URL", "OUTCOMES_QUEUE"):
        os.environ.pop(name, None)
    os.environ["OUTCOMES_TOOLS"] = "examples.seed_tools"
    # A short lease, so the killed worker's job is reconciled within seconds (renewed every
    # third of it by a live worker, so no other scenario notices).
    os.environ["OUTCOMES_LEASE_S"] = str(DEMO_LEASE_S)
    load_tool_modules(load_settings().tools)  # the narrow token names one of them
    ledger = ledger_of(click.get_current_context())
    admin.migrate(ledger)
    secrets = {
        "agent": tokens.create(ledger, "demo", "agent", None, "demo").token,
        "narrow": tokens.create(ledger, "demo", "agent", ["tracker.read_issue"], "demo").token,
    }
    exit_on_sigterm()
    log = folder / "worker.log"
    dispatcher = dispatcher_from_settings()
    server = BackgroundServer(ledger, dispatcher)
    pulled: list[str] = []
    rows: list[dict[str, Any]] = []
    stage = Stage(
        Client(""), secrets["agent"], ledger, dispatcher, start_worker(log=log), log, pulled
    )
    try:
        client = Client(server.start())
        stage.api = client
        scenarios = _scenarios(pulled)
        total = len(scenarios) + len(STORIES)
        for number, scenario in enumerate(scenarios, start=1):
            click.echo(f"[{number}/{total}] {scenario.name}", err=True)
            rows.append(_run(client, secrets, ledger, scenario))
        for number, (name, story) in enumerate(STORIES, start=len(scenarios) + 1):
            click.echo(f"[{number}/{total}] {name}", err=True)
            rows.append(_row(*story(stage)))
    finally:
        for brake_id in pulled:
            brakes.release(ledger, brake_id, "demo finished", "demo")
        server.stop()
        stop(stage.worker)
    if as_json:
        emit_json({"home": str(folder), "rows": rows})
        return
    click.echo(f"{'SCENARIO':<42} {'STATUS':<10} {'CODE':<36} NEXT ACTION")
    for row in rows:
        code = row["code"] or "-"
        if code == "OUTCOME_MISSING" and row["cause"]:  # which silence: the cause names it
            code = f"{code}/{row['cause']}"
        click.echo(
            f"{row['scenario']:<42} {row['status'] or '-':<10} {code:<36} {row['next_action']}"
        )
    click.echo(f"\nledger: {folder / '.outcomes' / 'ledger.db'}")
