"""Every data command has `--json`, and what it prints parses: found by walking the command
tree, so a new data command without `--json` fails here. `outcomes status` gets its own test."""

from __future__ import annotations

from pathlib import Path

import click
import orjson
import pytest

from cli.main import cli
from cli.status_commands import EXIT_NOT_READY
from tests.cli.test_operator_commands import accepted_job
from tests.cli.test_webhook_commands import registered_webhook
from tests.plugins.cli import Invoke

# Commands that print no data: they run something (the export is JSON Lines already; `mcp`
# speaks MCP on stdio).
NOT_DATA = {"serve", "worker", "mcp", "audit export"}


def leaves(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    found: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        if isinstance(command, click.Group):
            found |= leaves(command, f"{path} ")
        else:
            found[path] = command
    return found


def test_every_data_command_has_a_json_option() -> None:
    missing = [
        path
        for path, command in leaves(cli).items()
        if path not in NOT_DATA and not any("--json" in p.opts for p in command.params)
    ]
    assert missing == []


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The embedded broker (reconcile, status) lives under the working directory."""
    monkeypatch.chdir(tmp_path)
    for name in ("OUTCOMES_BROKER_URL", "OUTCOMES_QUEUE", "OUTCOMES_TOOLS"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_every_json_output_parses(outcomes: Invoke, database_url: str, scratch: Path) -> None:
    job_id, to_cancel = accepted_job(database_url), accepted_job(database_url)
    token = orjson.loads(
        outcomes("tokens", "create", "--account", "acme", "--role", "agent", "--json").stdout
    )
    pulled = orjson.loads(
        outcomes(
            "brake", "pull", "--scope", "account:nobody", "--reason", "r", "--force", "--json"
        ).stdout
    )
    hook = registered_webhook(database_url)
    runs = {
        "migrate": ["migrate"],
        "rebuild": ["rebuild"],
        "reconcile": ["reconcile", "--once"],
        "brake pull": ["brake", "pull", "--scope", "account:other", "--reason", "r", "--force"],
        "brake release": ["brake", "release", pulled["brake_id"], "--reason", "r"],
        "brake status": ["brake", "status"],
        "jobs show": ["jobs", "show", job_id],
        "jobs list": ["jobs", "list"],
        "jobs cancel": ["jobs", "cancel", to_cancel],
        "tokens create": ["tokens", "create", "--account", "acme", "--role", "agent"],
        "tokens list": ["tokens", "list"],
        "tokens revoke": ["tokens", "revoke", token["id"]],
        "audit summary": ["audit", "summary"],
        "audit digest": ["audit", "digest"],
        "audit verify": ["audit", "verify"],
        "tools list": ["tools", "list"],
        "tools new": ["tools", "new", "jsontest.scaffold"],
        "secrets new-key": ["secrets", "new-key"],
        "secrets keys": ["secrets", "keys"],
        "status": ["status", "--api-url", "http://127.0.0.1:9", "--timeout", "0.2"],
        "webhooks list": ["webhooks", "list"],
        "webhooks deliveries": ["webhooks", "deliveries", hook],
        "webhooks remove": ["webhooks", "remove", hook],
    }
    # demo, secrets check (it reads a value on stdin) and archive (it needs a ledger with full
    # partitions: tests/cli/test_archive_commands.py parses its --json): their own tests.
    # The Merkle proofs' commands: tests/cli/test_audit_proofs.py parses their --json.
    proofs = {"audit head", "audit prove", "audit consistency", "audit check-proof"}
    own = {"audit events", "demo", "secrets check", "archive", "audit public-key", *proofs}
    # Approvals and turns: tests/cli/test_people_commands.py parses their --json.
    own |= {"approvals list", "approvals approve", "approvals deny", "turns show"}
    assert set(runs) | NOT_DATA | own == set(leaves(cli))
    for name, args in runs.items():
        done = outcomes(*args, "--json", ok=name != "status")  # status: no API, exit 3
        assert isinstance(orjson.loads(done.stdout), dict), name
    lines = outcomes("audit", "events", "--json").stdout.splitlines()
    events = [orjson.loads(line) for line in lines]  # JSON Lines: one event per line
    assert len(events) >= 4 and all(isinstance(e, dict) for e in events)
    assert "JSON Lines" in outcomes("audit", "events", "--help").stdout
    # Long runs show a progress bar on stderr (its label alone off a terminal): stdout stays
    # parseable.
    for args, label in ((["rebuild"], "rebuilding"), (["audit", "verify"], "verifying")):
        assert label in outcomes(*args).stderr, args
    assert "exporting" in outcomes("audit", "export").stderr


def test_status_on_one_screen(
    outcomes: Invoke, database_url: str, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    accepted_job(database_url)
    outcomes("brake", "pull", "--scope", "tool:x.y", "--reason", "incident 9", "--force")
    args = ["status", "--api-url", "http://127.0.0.1:9", "--timeout", "0.2", "--json"]
    answered = outcomes(*args, ok=False)
    assert answered.exit_code == EXIT_NOT_READY  # the API is not ready; the rest is printed
    before = orjson.loads(answered.stdout)
    assert before["api"]["ready"] is False and before["api"]["error"]
    assert before["broker"]["reachable"] is True and before["broker"]["workers"] == []
    assert before["broker"]["queue_depth"] == 0  # (a queue that holds messages: integration)
    open_jobs = {"awaiting_approval": 0, "queued": 1, "running": 0, "retrying": 0}
    assert before["open_jobs"] == open_jobs
    assert [b["scope"] for b in before["brakes"]] == ["tool:x.y"]
    assert before["last_reconcile"] is None
    dispatch = before["dispatch"]
    assert (dispatch["waiting"], dispatch["unconfirmed"], dispatch["redispatched"]) == (1, 1, {})
    assert dispatch["oldest_wait_s"] >= 0

    # Nobody published the job: the reconciler's relay does, once its decider had its time.
    monkeypatch.setenv("OUTCOMES_DISPATCH_TIMEOUT_S", "0.000001")
    relayed = orjson.loads(outcomes("reconcile", "--once", "--json").stdout)
    assert (relayed["relayed"], relayed["recorded"]) == (1, [])  # published: no finding
    after = orjson.loads(outcomes(*args, ok=False).stdout)
    assert after["dispatch"]["unconfirmed"] == 0
    assert after["last_reconcile"] is None  # a relay records no event
    # A one-shot pass is no running reconciler: only a looping one keeps a heartbeat (in the
    # home folder, on embedded defaults; elsewhere status cannot tell).
    embedded = database_url.startswith("sqlite")
    assert after["reconciler"]["state"] == ("never" if embedded else "unknown")

    text = outcomes(*args[:-1], ok=False).stdout
    labels = ("api:", "workers:", "queue:", "open jobs:", "brakes:", "dispatch:", "reconciler:")
    for label in labels:
        assert label in text
