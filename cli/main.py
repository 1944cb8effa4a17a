"""The `outcomes` command: operators' and auditors' entry point (contract §6)."""

from __future__ import annotations

import click

from cli.approval_commands import approvals
from cli.archive_commands import archive
from cli.audit_commands import audit
from cli.brake_commands import brake
from cli.demo import demo
from cli.jobs_commands import jobs
from cli.ledger_commands import migrate, rebuild
from cli.mcp_commands import mcp
from cli.reconcile_commands import reconcile
from cli.secrets_commands import secrets
from cli.serve_commands import serve
from cli.status_commands import status
from cli.token_commands import tokens
from cli.tool_commands import tools
from cli.turn_commands import turns
from cli.webhook_commands import webhooks_group
from cli.worker_commands import worker
from observability.logs import install_if_json


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="outcome-ledger")
def cli() -> None:
    """Outcome Ledger: every decision and every outcome of agents' tool work, recorded.

    Configuration comes from the environment: OUTCOMES_DATABASE_URL (default: a SQLite file
    under ./.outcomes/), OUTCOMES_BROKER_URL, OUTCOMES_TOOLS, OUTCOMES_QUEUE.
    """
    install_if_json()  # brake changes, findings and decisions as JSON lines on stderr


cli.add_command(migrate)
cli.add_command(rebuild)
cli.add_command(audit)
cli.add_command(archive)
cli.add_command(worker)
cli.add_command(reconcile)
cli.add_command(brake)
cli.add_command(jobs)
cli.add_command(approvals)
cli.add_command(turns)
cli.add_command(tokens)
cli.add_command(serve)
cli.add_command(status)
cli.add_command(demo)
cli.add_command(tools)
cli.add_command(mcp)
cli.add_command(secrets)
cli.add_command(webhooks_group)


def main() -> None:
    cli(prog_name="outcomes")
