"""Helpers for the reliability matrix (`tests/reliability/test_matrix_*.py` import them).

- `prepare()` adds the matrix tools and the marks file to a deployment's worker environment;
- `verdict()` settles the ledger with the reconciler, runs the total-queue check and asserts it;
- service control (RabbitMQ, PostgreSQL, Redis) whose callers restore the service in `finally`
  (`services_restored()`), since other tests share these services;
- restricted Postgres roles, process memory (RSS), and the API on a background thread.

`stream_types` is in tests/plugins/deployments.py and `bearer` in tests/plugins/api.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from kombu.connection import Connection
from psycopg import sql
from psycopg.conninfo import make_conninfo
from sqlalchemy import select
from sqlalchemy.engine import make_url

from api.server import BackgroundServer
from ledger.dispatch import Dispatcher
from ledger.persistence.privileges import grant_statements
from ledger.persistence.schema import jobs
from ledger.persistence.sql_store import SqlStore
from ledger.reconcile_rules import ReconcilePolicy
from ledger.runtime.ledger import Ledger
from tests.databases import IN_CI, PG_ADMIN_DSN
from tests.plugins.deployments import Deployment
from tests.reliability.checker import Counters, check, fast_policy, settle
from tests.tools import MARKS_ENV

POLL_S = 0.05
SERVICE_TIMEOUT_S = 90.0


# --- deployments and the verdict ---------------------------------------------------------------


def prepare(dep: Deployment, **extra: str) -> Path:
    """Let the deployment's workers load the matrix tools; returns the marks file."""
    marks = dep.home.parent / "marks.log"
    dep.env |= {MARKS_ENV: str(marks)}
    dep.env |= extra
    return marks


@dataclass(frozen=True)
class Mark:
    job_id: str
    what: str
    at: float  # unix time


def read_marks(path: Path) -> list[Mark]:
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:
            found.append(Mark(parts[0], parts[1], float(parts[2])))
    return found


def spending_jobs(store: SqlStore) -> list[str]:
    with store.connection() as conn:
        query = select(jobs.c.job_id).where(jobs.c.spends.is_(True), jobs.c.accepted.is_(True))
        return [row.job_id for row in conn.execute(query)]


def verdict(
    store: SqlStore,
    scenario: str,
    *,
    dispatcher: Dispatcher | None = None,
    effects: Callable[[], Iterable[str]] = tuple,
    policy: ReconcilePolicy | None = None,
    timeout_s: float = 60.0,
) -> Counters:
    """Settle (reconciler to a fixed point), count, record and assert the counters."""
    started = time.monotonic()
    settle(store, dispatcher, policy or fast_policy(), timeout_s)
    counters = check(store, scenario, spending_jobs(store), list(effects()))
    _record(counters, time.monotonic() - started)
    assert counters.clean, f"{counters.line()} notes={counters.notes[:10]}"
    return counters


def deployment_verdict(
    dep: Deployment,
    scenario: str,
    *,
    policy: ReconcilePolicy | None = None,
    timeout_s: float = 60.0,
) -> Counters:
    """`verdict` for a deployment: its dispatcher re-dispatches, its effects file is counted."""
    return verdict(
        dep.store,
        scenario,
        dispatcher=dep.dispatcher,
        effects=dep.side_effect_jobs,
        policy=policy,
        timeout_s=timeout_s,
    )


def _record(counters: Counters, settle_s: float) -> None:
    """With MATRIX_COUNTERS_FILE set, keep each scenario's counters (docs/reliability.md)."""
    path = os.environ.get("MATRIX_COUNTERS_FILE")
    if not path:
        return
    line = {
        "scenario": counters.scenario,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "settle_s": round(settle_s, 1),
        "counters": counters.line(),
    }
    with Path(path).open("a") as out:
        out.write(json.dumps(line) + "\n")


def wait_for(condition: Callable[[], object], timeout_s: float, what: str) -> None:
    """Poll `condition` until it is truthy; fail the test at the deadline."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(POLL_S)


# --- services ----------------------------------------------------------------------------------


def require_control(*commands: str) -> None:
    """Skip (fail under CI=true) where this test may not stop and start the services."""
    missing = [c for c in commands if shutil.which(c) is None]
    reason = f"cannot control services: {missing} not found" if missing else None
    if reason is None and os.geteuid() != 0:
        reason = "cannot control services: not root"
    if reason is None:
        return
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: service-backed tests may not skip)")
    pytest.skip(reason)


def _run(argv: Sequence[str], timeout_s: float = SERVICE_TIMEOUT_S) -> None:
    done = subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        out = (done.stdout + done.stderr).decode(errors="replace")[-2000:]
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {out}")


def _pg_cluster() -> list[str]:
    versions = sorted(os.listdir("/etc/postgresql"))
    return ["pg_ctlcluster", "--skip-systemctl-redirect", versions[-1], "main"]


def postgres_ready() -> bool:
    try:
        with psycopg.connect(PG_ADMIN_DSN, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def wait_postgres(timeout_s: float = SERVICE_TIMEOUT_S) -> None:
    wait_for(postgres_ready, timeout_s, "PostgreSQL to accept connections")


def postgres_stop() -> None:
    _run([*_pg_cluster(), "stop", "-m", "fast"])


def postgres_start() -> None:
    if not postgres_ready():
        with suppress(RuntimeError):  # "already running" is fine; readiness decides
            _run([*_pg_cluster(), "start"])
    wait_postgres()


def postgres_restart() -> None:
    _run([*_pg_cluster(), "restart", "-m", "fast"])
    wait_postgres()


def amqp_ready(url: str) -> bool:
    try:
        with Connection(url, connect_timeout=2) as conn:  # type: ignore[no-untyped-call]
            conn.ensure_connection(max_retries=1, interval_start=0, timeout=2)
        return True
    except Exception:
        return False


def rabbit_stop_app() -> None:
    _run(["rabbitmqctl", "stop_app"])


def rabbit_start_app(url: str) -> None:
    if amqp_ready(url):
        return
    try:
        _run(["rabbitmqctl", "start_app"])
    except RuntimeError:
        _run(["rabbitmq-server", "-detached"])  # the node itself was down
    wait_for(lambda: amqp_ready(url), SERVICE_TIMEOUT_S, "RabbitMQ to accept connections")


def redis_ready() -> bool:
    done = subprocess.run(["redis-cli", "ping"], capture_output=True, timeout=10, check=False)
    return done.stdout.strip() == b"PONG"


def redis_shutdown() -> None:
    _run(["redis-cli", "shutdown", "nosave"], timeout_s=30)
    wait_for(lambda: not redis_ready(), 30, "Redis to stop")


def redis_start() -> None:
    if redis_ready():
        return
    _run(
        [
            "redis-server",
            "--daemonize",
            "yes",
            "--bind",
            "127.0.0.1",
            "-::1",
            "--port",
            "6379",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            "/var/lib/redis",
            "--logfile",
            "/var/log/redis/ci.log",
        ]
    )
    wait_for(redis_ready, SERVICE_TIMEOUT_S, "Redis to answer")


AMQP_URL = os.environ.get("OUTCOMES_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")


@contextmanager
def services_restored() -> Iterator[None]:
    """Whatever the scenario did to the services, they are up again when it ends."""
    try:
        yield
    finally:
        postgres_start()
        rabbit_start_app(AMQP_URL)
        redis_start()


def delete_queue(url: str, queue: str) -> None:
    """Drop a test queue with a fresh connection (pooled ones may be dead after a bounce)."""
    with suppress(Exception), Connection(url, connect_timeout=3) as conn:  # type: ignore[no-untyped-call]
        conn.channel().queue_delete(queue)


# --- Postgres roles ----------------------------------------------------------------------------

# What `outcomes migrate --app-role` grants, as the product writes it (its first statement
# creates the role, which `pg_role` has done): a table a later migration adds is covered, so
# a restricted worker fails only where a test takes a privilege away.
APP_GRANTS = tuple(grant_statements("{role}", "public")[1:])


def admin_dsn(database_url: str) -> str:
    return make_conninfo(PG_ADMIN_DSN, dbname=make_url(database_url).database)


def admin(database_url: str, *statements: str) -> None:
    with psycopg.connect(admin_dsn(database_url), autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement.encode())


@contextmanager
def pg_role(database_url: str, grants: Sequence[str] = APP_GRANTS) -> Iterator[tuple[str, str]]:
    """A new login role, not a superuser, granted `grants` ({role} is its name) in the test
    database; yields (name, database URL as that role). Dropped afterwards."""
    name = f"matrix_{uuid.uuid4().hex[:12]}"
    url = make_url(database_url).set(username=name).render_as_string(hide_password=False)
    admin(database_url, f"CREATE ROLE {name} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE")
    try:
        admin(database_url, *(g.format(role=name) for g in grants))
        yield name, url
    finally:
        with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (name,),
            )
        with suppress(psycopg.Error):
            admin(database_url, f"REASSIGN OWNED BY {name} TO postgres", f"DROP OWNED BY {name}")
        with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


# --- memory and the API ------------------------------------------------------------------------


def rss_kib(pid: int | str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


@contextmanager
def api_server(store: SqlStore, dispatcher: Dispatcher | None) -> Iterator[str]:
    """The real API (uvicorn) on a background thread of this process; yields its base URL."""
    server = BackgroundServer(Ledger(store), dispatcher)
    url = server.start()
    try:
        yield url
    finally:
        server.stop()
