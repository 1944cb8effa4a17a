"""Real deployments for end-to-end tests: `outcomes worker` processes on a real broker and ledger.

A test asks for `deployment` (parametrized as "<broker>/<database>", see `deployments()`) and
gets a migrated ledger (on Postgres the workers connect as the application role, as a
production deployment does; the test itself as the owner), a broker queue of its own, the
Celery app and dispatcher that the submit path uses, and `start_workers()`, which launches
worker processes as an operator would. The workers are stopped (by pid, then their process
group) and the queue deleted at teardown.

The integration, reliability and CLI suites share the fixture and the helpers below (waiting for
jobs, reading what the ledger recorded); import the helpers from here, never from a conftest.

RabbitMQ and Redis must answer: without them a test skips on a laptop and fails under CI=true.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest
from celery import Celery
from kombu import Connection
from sqlalchemy import func, select

from ledger.decisions import Caller, JobRequest
from ledger.errors import StorageUnavailableError
from ledger.events import RecordedEvent, job_stream
from ledger.job_view import JobView
from ledger.persistence.schema import events, jobs
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services.submit import submit
from ledger.settings import load_settings
from tests.databases import IN_CI, as_role
from tests.factories import open_sql
from tests.plugins.ledgers import SECRETS_KEY
from workers.app import make_celery
from workers.dispatch import CeleryDispatcher

REPO_ROOT = Path(__file__).resolve().parents[2]
OUTCOMES = Path(sys.executable).parent / "outcomes"
TOOL_MODULES = "examples.seed_tools,tests.tools"
BROKER_URLS = {
    "rabbitmq": os.environ.get("OUTCOMES_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//"),
    "redis": os.environ.get("OUTCOMES_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"),
    "embedded": None,  # kombu's filesystem transport under <cwd>/.outcomes/broker
}
BROKERS = tuple(BROKER_URLS)
AGENT = Caller(account="acme", token_id="tok-agent")

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
POLL_S = 0.05


def deployments(*names: str) -> list[pytest.ParameterSet]:
    """Parameters for `deployment`: "rabbitmq/postgres", "embedded/sqlite", ..."""
    params = []
    for name in names:
        database = name.split("/")[1]
        marks = [pytest.mark.postgres] if database == "postgres" else []
        params.append(pytest.param(name, id=name, marks=marks))
    return params


ON_EVERY_BROKER = deployments(*(f"{broker}/postgres" for broker in BROKERS))


# --- services ---------------------------------------------------------------------------------


@cache
def broker_unavailable(url: str) -> str | None:
    """None when the broker answers, else why not."""
    if url.startswith("redis"):
        try:
            import redis  # noqa: F401  (kombu's Redis transport needs the client package)
        except ImportError:
            return "the `redis` client package is not installed"
    try:
        with Connection(url, connect_timeout=3) as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, timeout=3)
    except Exception as exc:
        return f"{url.split(':')[0]} broker unavailable: {type(exc).__name__}: {exc}"
    return None


def require_broker(kind: str) -> str | None:
    """The broker's URL (None: embedded). Skips without the service; fails under CI=true."""
    url = BROKER_URLS[kind]
    if url is None:
        return None
    reason = broker_unavailable(url)
    if reason is not None:
        if IN_CI:
            pytest.fail(f"{reason} (CI=true: service-backed tests may not skip)")
        pytest.skip(reason)
    return url


# --- worker processes -------------------------------------------------------------------------


@dataclass
class WorkerProcess:
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while " ready." not in self.log():
            if self.process.poll() is not None:
                pytest.fail(f"worker exited with {self.process.returncode}:\n{self.log()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"worker not ready after {timeout_s:.0f}s:\n{self.log()[-3000:]}")
            time.sleep(POLL_S)

    def terminate(self) -> None:
        """Ask for a warm shutdown (SIGTERM to the worker's main process)."""
        if self.process.poll() is None:
            with suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGTERM)

    def reap(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Wait for the exit, then SIGKILL whatever is left of its process group."""
        with suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=timeout_s)
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)  # its own session: pgid == pid
        self.process.wait(timeout=timeout_s)


# --- the deployment under test ----------------------------------------------------------------


@dataclass
class Deployment:
    broker: str
    database_url: str  # the owner's (the test inspects and submits with it)
    app_database_url: str  # the workers': the application role's on Postgres
    queue: str
    home: Path  # cwd of every process: the embedded broker's folder lives under it
    env: dict[str, str]
    store: SqlStore
    app: Celery
    dispatcher: CeleryDispatcher
    side_effects: Path
    workers: list[WorkerProcess] = field(default_factory=list)

    def start_workers(
        self, count: int = 2, concurrency: int = 2, pool: str = "threads"
    ) -> list[WorkerProcess]:
        """Start `outcomes worker` processes (all on this host) and wait until each consumes.
        Threads by default, as `outcomes worker` (the batched path, workers/batched.py);
        a test about pool processes asks for prefork."""
        started = [self._spawn(len(self.workers) + i, concurrency, pool) for i in range(count)]
        self.workers.extend(started)
        for worker in started:
            worker.wait_ready()
        return started

    def _spawn(self, index: int, concurrency: int, pool: str) -> WorkerProcess:
        if not OUTCOMES.exists():
            pytest.fail(f"{OUTCOMES} is missing: install the project into this venv (make test)")
        log_path = self.home / f"worker-{index}.log"
        argv = [str(OUTCOMES), "worker", "--pool", pool, "-c", str(concurrency)]
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                argv,
                cwd=self.home,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return WorkerProcess(process, log_path)

    def stop_workers(self) -> None:
        for worker in self.workers:
            worker.terminate()
        for worker in self.workers:
            worker.reap()

    def worker_logs(self) -> str:
        return "\n".join(worker.log() for worker in self.workers)

    def submit(
        self,
        tool: str,
        args: dict[str, object],
        caller: Caller = AGENT,
        dispatch: bool = True,
        start_within_s: float | None = None,
    ) -> JobView:
        """Decide (and, with `dispatch`, publish and record the broker's confirmation, in this
        thread); without `dispatch`, the job is left as a process that died after its commit
        leaves it: for the reconciler's relay."""
        request = JobRequest(tool=tool, args=args, start_within_s=start_within_s)
        dispatcher = self.dispatcher if dispatch else None
        return submit(Ledger(self.store), caller, request, dispatcher).view

    def side_effect_jobs(self) -> list[str]:
        """The job id of every real effect, one entry per effect, in the order written."""
        if not self.side_effects.exists():
            return []
        lines = self.side_effects.read_text().splitlines()
        return [line.split()[0] for line in lines if line.strip()]


def _environment(
    database_url: str, broker_url: str | None, queue: str, side_effects: Path
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTCOMES_")}
    env |= {
        "OUTCOMES_DATABASE_URL": database_url,
        "OUTCOMES_QUEUE": queue,
        "OUTCOMES_TOOLS": TOOL_MODULES,
        "OUTCOMES_SIDE_EFFECTS_FILE": str(side_effects),
        "OUTCOMES_SECRETS_KEY": SECRETS_KEY,  # the API in the test process seals with it
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])]),
    }
    if broker_url is not None:
        env["OUTCOMES_BROKER_URL"] = broker_url
    return env


def drop_queue(app: Celery, broker_url: str | None, queue: str) -> None:
    """Best effort: drop the test's queue (with any message left in it) and its exchange."""
    if broker_url is not None and broker_url.startswith("redis"):
        import redis  # kombu keeps the queue and its bindings in keys named after the queue

        with suppress(Exception), redis.Redis.from_url(broker_url) as client:
            keys = list(client.scan_iter(match=f"*{queue}*"))
            if keys:
                client.delete(*keys)
        return
    with suppress(Exception), app.connection_for_write() as conn:
        with suppress(Exception):
            conn.channel().queue_delete(queue)
        with suppress(Exception):
            conn.channel().exchange_delete(queue)


@pytest.fixture
def deployment(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Deployment]:
    broker, database = str(request.param).split("/")
    database_url = str(
        request.getfixturevalue(f"{'pg' if database == 'postgres' else database}_database")
    )
    app_database_url = as_role(database_url) if database == "postgres" else database_url
    broker_url = require_broker(broker)
    queue = f"itest-{uuid.uuid4().hex[:12]}"
    home = tmp_path / "home"
    home.mkdir()
    side_effects = tmp_path / "side-effects.log"
    env = _environment(app_database_url, broker_url, queue, side_effects)
    # The test process builds its Celery app from the same environment and cwd as the workers.
    monkeypatch.chdir(home)
    for name in [k for k in os.environ if k.startswith("OUTCOMES_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        if name.startswith("OUTCOMES_"):
            monkeypatch.setenv(name, value)
    settings = load_settings()
    app = make_celery(settings)
    store = open_sql(database_url)
    dep = Deployment(
        broker=broker,
        database_url=database_url,
        app_database_url=app_database_url,
        queue=queue,
        home=home,
        env=env,
        store=store,
        app=app,
        dispatcher=CeleryDispatcher(app, settings.queue),
        side_effects=side_effects,
    )
    try:
        yield dep
    finally:
        dep.stop_workers()
        drop_queue(app, broker_url, queue)
        dep.dispatcher.close()
        app.close()  # broker connections stay in kombu's process-wide pools, for the next test
        store.close()


# --- waiting and reading ----------------------------------------------------------------------


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll `condition` until it holds; a database blip while polling counts as "not yet"."""
    deadline = time.monotonic() + timeout_s
    while not _holds(condition):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(POLL_S)


def _holds(condition: Callable[[], bool]) -> bool:
    try:
        return condition()
    except StorageUnavailableError:  # e.g. a connection dropped by a Postgres restart
        return False


def load_views(store: SqlStore, job_ids: Iterable[str]) -> dict[str, JobView]:
    wanted = list(job_ids)
    views: dict[str, JobView] = {}
    with store.connection() as conn:
        for start in range(0, len(wanted), 500):
            query = select(jobs.c.view).where(jobs.c.job_id.in_(wanted[start : start + 500]))
            for row in conn.execute(query):
                view = JobView.model_validate(row.view)
                views[view.job_id] = view
    return views


def wait_terminal(
    store: SqlStore, job_ids: Iterable[str], timeout_s: float = 60.0
) -> dict[str, JobView]:
    """Poll the read model until every job is terminal (fails the test at the deadline)."""
    wanted = list(dict.fromkeys(job_ids))
    views: dict[str, JobView] = {}

    def all_terminal() -> bool:
        views.clear()
        views.update(load_views(store, wanted))
        return all(j in views and views[j].terminal for j in wanted)

    deadline = time.monotonic() + timeout_s
    while not _holds(all_terminal):
        if time.monotonic() > deadline:
            open_jobs = [j for j in wanted if j not in views or not views[j].terminal]
            sample = {j: views[j].status.value if j in views else "missing" for j in open_jobs[:5]}
            pytest.fail(
                f"{len(open_jobs)} of {len(wanted)} jobs not terminal after {timeout_s:.0f}s, "
                f"e.g. {sample}"
            )
        time.sleep(POLL_S)
    return dict(views)


def events_of_type(store: SqlStore, *types: str) -> list[RecordedEvent]:
    """Every recorded event of these types, in position order."""
    return [e for e in store.iter_events() if e.type in types]


def count_events(store: SqlStore, event_type: str) -> int:
    with store.connection() as conn:
        query = select(func.count()).select_from(events).where(events.c.type == event_type)
        return int(conn.execute(query).scalar_one())


def stream_types(store: SqlStore, job_id: str) -> list[str]:
    """The event types of one job's stream, in order."""
    return [e.type for e in store.read_stream(job_stream(job_id))]
