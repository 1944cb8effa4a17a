"""`outcomes worker`: run a Celery worker that executes jobs."""

from __future__ import annotations

import click

from cli.errors import reports_errors


@click.command()
@click.option("--concurrency", "-c", type=click.IntRange(1, 256), help="Worker processes/threads.")
@click.option(
    "--pool",
    type=click.Choice(["prefork", "threads", "solo"]),
    default="prefork",
    show_default=True,
    help="Celery execution pool.",
)
@click.option("--loglevel", default="INFO", show_default=True, help="Log level.")
@reports_errors
def worker(concurrency: int | None, pool: str, loglevel: str) -> None:
    """Run a worker: take job ids from the queue (OUTCOMES_BROKER_URL, OUTCOMES_QUEUE), re-check
    the brake, run the tool and record its outcome in the ledger (OUTCOMES_DATABASE_URL).

    Load tools with OUTCOMES_TOOLS=module.a,module.b. Any number of workers may run, on any
    number of machines.
    """
    from workers.main import run_worker  # imported here: it builds the Celery app

    run_worker(concurrency, pool, loglevel)
