"""`outcomes worker`: run a Celery worker that executes jobs."""

from __future__ import annotations

import click

from cli.errors import reports_errors

THREADS = 16  # tools mostly wait on other services: many run at once in one process


@click.command()
@click.option(
    "--concurrency",
    "-c",
    type=click.IntRange(1, 256),
    help="Jobs run at once: threads (default 16) or processes (default: one per CPU).",
)
@click.option(
    "--pool",
    type=click.Choice(["threads", "prefork", "solo"]),
    default="threads",
    show_default=True,
    help="Celery execution pool. With threads, the worker claims the jobs it receives in "
    "batches (one transaction each, up to the free threads) and writes their outcomes in "
    "groups; prefork isolates each job in a process of its own, one at a time.",
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

    if concurrency is None and pool == "threads":
        concurrency = THREADS
    run_worker(concurrency, pool, loglevel)
