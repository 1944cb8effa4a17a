"""Two roles on PostgreSQL (docs/deploy.md): the owner migrates; the application role that the
API, workers and reconciler use may read and append events, write the read models, and cannot
alter, disable, drop, update, delete or truncate the history.

The test databases are clones of a template migrated with `--app-role outcomes_app_test`
(tests/plugins/ledgers.py), so `pg_app_url` is a fresh ledger as the application role.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import orjson
import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from cli.errors import EXIT_PROBLEM
from cli.main import cli
from ledger.chain import ProblemKind
from ledger.decisions import Caller, JobRequest
from ledger.job_view import Status
from ledger.persistence.sql_store import SqlStore
from ledger.reconcile_rules import ReconcilePolicy
from ledger.runtime.ledger import Ledger
from ledger.services import admin, audit, brakes, tokens, verifications
from ledger.services.execute import Executor
from ledger.services.reconcile import reconcile_once
from ledger.services.submit import submit
from tests.databases import (
    APP_ROLE,
    admin_execute,
    as_role,
    create_database,
    drop_database,
    pg_url,
    unique_name,
)
from tests.factories import MarkedRecorder, open_sql, verify_store
from tests.plugins.tampering import saved_digest
from tests.tools import ECHO, METERED

pytestmark = pytest.mark.postgres

AGENT = Caller(account="acme", token_id="tok-agent")
# Each is refused by privileges (not by the triggers, whose message says "append-only").
FORBIDDEN = {
    "alter": "ALTER TABLE events ADD COLUMN sneaky integer",
    "disable trigger": "ALTER TABLE events DISABLE TRIGGER events_no_update_delete",
    "disable all triggers": "ALTER TABLE events DISABLE TRIGGER ALL",
    "take ownership": f"ALTER TABLE events OWNER TO {APP_ROLE}",
    "drop": "DROP TABLE events",
    "update": "UPDATE events SET actor = 'mallory'",
    "delete": "DELETE FROM events WHERE position = (SELECT max(position) FROM events)",
    "truncate": "TRUNCATE events",
    "new trigger": (
        "CREATE TRIGGER sneaky BEFORE INSERT ON events "
        "FOR EACH ROW EXECUTE FUNCTION outcomes_events_immutable()"
    ),
    "rewind positions": "SELECT setval('events_position_seq', 1)",
    "fake the schema version": "UPDATE alembic_version SET version_num = '9999'",
    "drop a read model": "DROP TABLE jobs",
    # The sequencer's own (issue 47): where it stood at 0015 is the owner's, and a tick adds
    # its row and removes an old one, but never changes one.
    "move the sequencer's start": "UPDATE ledger_sequencer SET head = 0",
    "change a tick": "UPDATE ledger_ticks SET head_hash = NULL",
    "empty the ticks": "TRUNCATE ledger_ticks",
}
PERMISSION_DENIED = r"permission denied|must be owner"


def dsn(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


@pytest.fixture
def app_store(pg_app_url: str) -> Iterator[SqlStore]:
    with open_sql(pg_app_url) as store:
        yield store


def live_a_little(ledger: Ledger) -> list[str]:
    """The application's normal life: tokens, submits (with a key and a quota), a
    worker's claim and outcome, the brake, a reconcile pass, a rebuild. Returns the job ids."""
    issued = tokens.create(ledger, "acme", "agent", None, actor="tests")
    tokens.revoke(ledger, tokens.create(ledger, "acme", "agent", None, "tests").view.token_id, "t")
    dispatcher = MarkedRecorder()  # its queue keeps an epoch marker, as the brokers do
    assert reconcile_once(ledger, dispatcher, ReconcilePolicy()).queue_lost is None  # epoch 1
    echo = submit(ledger, AGENT, JobRequest(ECHO, {"text": "hi"}), dispatcher).view
    keyed = submit(ledger, AGENT, JobRequest(ECHO, {"text": "k"}, idempotency_key="k-1")).view
    metered = submit(ledger, AGENT, JobRequest(METERED, {"text": "m"})).view  # a quota
    executor = Executor(ledger, "roles-worker")
    for job in (echo, keyed):
        assert executor.execute(job.job_id).event_type == "work.succeeded"
    pulled = brakes.pull(ledger, f"tool:{ECHO}", "incident", operator="olga")
    held = submit(ledger, AGENT, JobRequest(ECHO, {"text": "held"})).view
    assert held.status is Status.REFUSED  # the brake, read by the append function
    brakes.release(ledger, pulled.brake_id, "resolved", operator="olga")
    # A worker could not take metered's delivery: sent again on that evidence (the outbox's
    # tables, written and read as the application role).
    executor.report_rejected(metered.job_id, RuntimeError("could not claim"))
    later = datetime.now(UTC) + timedelta(minutes=1)
    found = reconcile_once(ledger, dispatcher, ReconcilePolicy(), at=later)
    assert found.recorded == [f"job.redispatched {metered.job_id}"]
    assert dispatcher.sent.count(metered.job_id) == 1
    assert admin.rebuild(ledger).events_replayed > 0  # its progress row, as the app role
    assert tokens.authenticate(ledger, issued.token).account == "acme"
    return [echo.job_id, keyed.job_id, metered.job_id, held.job_id]


def test_the_application_role_lives_its_normal_life(app_store: SqlStore, pg_app_url: str) -> None:
    ledger = Ledger(app_store)
    role = admin.connected_role(ledger)
    assert role is not None and (role.name, role.can_rewrite_history) == (APP_ROLE, False)
    job_ids = live_a_little(ledger)
    with app_store.reading() as reads:
        views = reads.jobs_by_id(job_ids)
    assert [views[j].status for j in job_ids] == [
        Status.SUCCEEDED,
        Status.SUCCEEDED,
        Status.QUEUED,
        Status.REFUSED,
    ]
    report = verify_store(app_store)
    assert report.ok, report.problems
    # `audit verify` as the application role records its result; the record is evidence: the
    # role may add one, never change or remove one.
    found = audit.verify_all(ledger)
    kept = verifications.record(ledger, found, "auditor-on-call", with_digest=False)
    assert verifications.last(ledger) == kept and kept.ok
    for statement in ("UPDATE verifications SET ok = false", "DELETE FROM verifications"):
        with (
            psycopg.connect(dsn(pg_app_url)) as conn,
            pytest.raises(psycopg.errors.InsufficientPrivilege),
        ):
            conn.execute(statement.encode())


@pytest.mark.parametrize("statement", FORBIDDEN.values(), ids=FORBIDDEN.keys())
def test_the_application_role_cannot_rewrite_history(
    app_store: SqlStore, pg_app_url: str, statement: str
) -> None:
    submit(Ledger(app_store), AGENT, JobRequest(ECHO, {"text": "recorded"}))
    before = [e.hash for e in app_store.iter_events()]
    with (
        psycopg.connect(dsn(pg_app_url)) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege, match=PERMISSION_DENIED),
    ):
        conn.execute(statement.encode())
    assert [e.hash for e in app_store.iter_events()] == before
    assert verify_store(app_store).ok


# --- a real owner, not a superuser ---------------------------------------------------------------

OWNER_ROLE = "outcomes_owner_test"


@pytest.fixture
def owned_database(pg_template: str) -> Iterator[tuple[str, str]]:
    """A database created for a non-superuser owner and migrated by it with `--app-role`, as in
    production; yields (owner's URL, application role's URL). The template made the app role."""
    admin_execute(sql.SQL(_CREATE_OWNER))  # cluster-wide, shared, races handled
    name = unique_name("outcomes_owned")
    create_database(name)
    owner = sql.Identifier(OWNER_ROLE)
    admin_execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(sql.Identifier(name), owner))
    owner_url = as_role(pg_url(name), OWNER_ROLE)
    try:
        with open_sql(owner_url) as store:
            admin.migrate(Ledger(store), APP_ROLE)
        yield owner_url, as_role(owner_url, APP_ROLE)
    finally:
        drop_database(name)


_CREATE_OWNER = f"""DO $$
BEGIN
    CREATE ROLE {OWNER_ROLE} LOGIN;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END $$"""


def test_the_owner_can_still_rewrite_history_and_only_a_digest_kept_elsewhere_sees_it(
    owned_database: tuple[str, str],
) -> None:
    owner_url, app_url = owned_database
    with open_sql(app_url) as app_store, open_sql(owner_url) as owner_store:
        live_a_little(Ledger(app_store))
        owner = admin.connected_role(Ledger(owner_store))
        assert owner is not None and (owner.superuser, owner.owns_events) == (False, True)
        digest = saved_digest(app_store)
        with (  # while enabled, the triggers refuse the owner too
            psycopg.connect(dsn(owner_url)) as conn,
            pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"),
        ):
            conn.execute(b"DELETE FROM events")
        # The reviewer's attack, as the owner: the triggers are the owner's to switch off.
        # The newest event in ledger order, and its order row: a consistent cut.
        with psycopg.connect(dsn(owner_url), autocommit=True) as conn:
            conn.execute(b"ALTER TABLE events DISABLE TRIGGER events_no_update_delete")
            conn.execute(b"ALTER TABLE ledger_order DISABLE TRIGGER ledger_order_no_update_delete")
            conn.execute(
                b"DELETE FROM events WHERE position = "
                b"(SELECT event_position FROM ledger_order ORDER BY position DESC LIMIT 1)"
            )
            conn.execute(
                b"DELETE FROM ledger_order"
                b" WHERE position = (SELECT max(position) FROM ledger_order)"
            )
            conn.execute(b"ALTER TABLE ledger_order ENABLE TRIGGER ledger_order_no_update_delete")
            conn.execute(b"ALTER TABLE events ENABLE TRIGGER events_no_update_delete")
        # A consistent rewrite of the rows: the chains alone cannot tell; the tree's recorded
        # head still counts the event (an owner who rebuilds the tree too leaves the digest).
        cut = verify_store(app_store)
        assert [p.kind for p in cut.problems] == [ProblemKind.MERKLE_MISMATCH], cut.problems
        assert not verify_store(app_store, digest).ok  # the digest taken before can
        # The application role cannot do the same.
        with (
            psycopg.connect(dsn(app_url)) as conn,
            pytest.raises(psycopg.errors.InsufficientPrivilege, match="must be owner"),
        ):
            conn.execute(b"ALTER TABLE events DISABLE TRIGGER events_no_update_delete")


# --- what `audit verify` says after the owner's attacks -------------------------------------------


def _cut_a_streams_newest(conn: psycopg.Connection, jobs: list[str], gap: int) -> str:
    conn.execute(
        "DELETE FROM events WHERE stream_id = %s AND stream_version = "
        "(SELECT max(stream_version) FROM events WHERE stream_id = %s)",
        (f"job-{jobs[0]}", f"job-{jobs[0]}"),
    )
    return "ledger_chain_broken"


def _delete_in_the_middle(conn: psycopg.Connection, jobs: list[str], gap: int) -> str:
    conn.execute(
        "DELETE FROM events WHERE stream_id = %s AND stream_version = 2", (f"job-{jobs[0]}",)
    )
    return "version_gap"


def _insert_between(conn: psycopg.Connection, jobs: list[str], gap: int) -> str:
    """A copy of a decision under a new stream, at a position an aborted insert left free. The
    sequencer puts it at the end of ledger order, like any append (only order rows written by
    hand could put it between others): its hash, copied, does not match its content."""
    conn.execute(
        "INSERT INTO events (position, stream_id, stream_version, event_id, type, data, code, "
        "actor, recorded_at, prev_hash, hash) SELECT %s, 'job-forged', 1, gen_random_uuid(), "
        "type, data, code, actor, recorded_at, NULL, hash FROM events WHERE stream_id = %s "
        "AND stream_version = 1",
        (gap, f"job-{jobs[0]}"),
    )
    return "hash_mismatch"


def _edit_a_read_model(conn: psycopg.Connection, jobs: list[str], gap: int) -> str:
    conn.execute(
        "UPDATE jobs SET status = 'succeeded', view = jsonb_set(view, '{status}', "
        "'\"succeeded\"') WHERE job_id = %s",
        (jobs[3],),
    )
    return "jobs"


OWNER_ATTACKS = {
    "a stream's newest event cut": _cut_a_streams_newest,
    "an event deleted in the middle": _delete_in_the_middle,
    "an event inserted between others": _insert_between,
    "a read-model row edited": _edit_a_read_model,
}


@pytest.mark.parametrize("attack", OWNER_ATTACKS.values(), ids=OWNER_ATTACKS.keys())
def test_audit_verify_names_what_the_owner_changed(
    owned_database: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    attack: Callable[[psycopg.Connection, list[str], int], str],
) -> None:
    """The ledger lives as the application role; the owner, who can switch the triggers off,
    cuts, deletes, inserts or edits; `outcomes audit verify` (run as the application role)
    exits 2 and names what changed."""
    owner_url, app_url = owned_database
    with open_sql(app_url) as app_store:
        ledger = Ledger(app_store)
        jobs = live_a_little(ledger)
        with psycopg.connect(dsn(owner_url)) as conn:  # a position left free, as a failed insert
            row = conn.execute(b"SELECT nextval(pg_get_serial_sequence('events', 'position'))")
            gap = int(row.fetchone()[0])  # type: ignore[index]
        submit(ledger, AGENT, JobRequest(ECHO, {"text": "after"}))  # events follow every job's
    monkeypatch.setenv("OUTCOMES_DATABASE_URL", app_url)
    runner = CliRunner()
    before = runner.invoke(cli, ["audit", "verify", "--json"], catch_exceptions=False)
    assert before.exit_code == 0, before.output

    with psycopg.connect(dsn(owner_url), autocommit=True) as conn:
        conn.execute(b"ALTER TABLE events DISABLE TRIGGER USER")  # the owner may; the app may not
        expected = attack(conn, jobs, gap)
        conn.execute(b"ALTER TABLE events ENABLE TRIGGER USER")

    after = runner.invoke(cli, ["audit", "verify", "--json"], catch_exceptions=False)
    assert after.exit_code == EXIT_PROBLEM
    found = orjson.loads(after.stdout)
    kinds = {p["kind"] for p in found["problems"]}
    tables = {p["table"] for p in found["read_models"]["problems"]}
    assert expected in kinds | tables, found
    if expected == "jobs":
        named = {(p["key"], p["field"]) for p in found["read_models"]["problems"]}
        assert named == {(jobs[3], "status"), (jobs[3], "view.status")}
