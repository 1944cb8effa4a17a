"""What only the order rows can tell (Postgres, migration 0014): `audit verify` names an event
the sequencer passed without a position, an order row whose event is gone, an event given two
positions, and a hole in the dense positions. Each is made here as a superuser would, around
the triggers."""

from __future__ import annotations

import uuid

import pytest
from click.testing import CliRunner
from sqlalchemy import delete, func, insert, select, text

from cli.main import cli
from ledger.chain import ProblemKind, ledger_link
from ledger.clock import now
from ledger.persistence.schema import events, ledger_order
from tests.factories import verify_store
from tests.plugins.tampering import (
    WORKLOAD_EVENTS,
    Seeded,
    around_the_triggers,
    tamper_delete,
    written_at,
)

pytestmark = pytest.mark.postgres


@pytest.fixture
def database_url(pg_database: str) -> str:
    return pg_database  # the tamper fixtures, on Postgres alone


def _found(seeded: Seeded) -> set[tuple[ProblemKind, int | None]]:
    return {(p.kind, p.position) for p in verify_store(seeded.store).problems}


def test_an_order_row_deleted_leaves_its_event_unsequenced_and_a_hole(seeded: Seeded) -> None:
    middle = WORKLOAD_EVENTS // 2
    with around_the_triggers(seeded.url) as conn:
        (written,) = written_at(conn, middle)
        conn.execute(delete(ledger_order).where(ledger_order.c.position == middle))
    report = verify_store(seeded.store)
    unsequenced = [p for p in report.problems if p.kind is ProblemKind.UNSEQUENCED]
    assert len(unsequenced) == 1 and f"written at {written}" in unsequenced[0].message
    assert {(p.kind, p.position) for p in report.problems} >= {
        (ProblemKind.POSITION_GAP, middle + 1),
        (ProblemKind.LEDGER_CHAIN_BROKEN, middle + 1),
    }
    seeded.store.sequence()  # the sequencer does not take it back: it has passed it
    assert any(p.kind is ProblemKind.UNSEQUENCED for p in verify_store(seeded.store).problems)


def test_an_event_slipped_in_without_a_transaction_id_is_unsequenced(seeded: Seeded) -> None:
    newest = seeded.event("retried", 5)
    with around_the_triggers(seeded.url) as conn:
        row = {c.name: getattr(newest, c.name) for c in events.columns if c.name != "position"}
        row |= {"stream_id": "job-forged", "event_id": uuid.uuid4(), "code": None}
        conn.execute(insert(events).values(**row))
        conn.execute(text("UPDATE events SET txid = NULL WHERE stream_id = 'job-forged'"))
    assert (ProblemKind.UNSEQUENCED, None) in _found(seeded)


def test_an_event_deleted_from_under_its_order_row_is_named_at_its_position(
    seeded: Seeded,
) -> None:
    middle = WORKLOAD_EVENTS // 2
    tamper_delete(seeded.url, middle, orders=False)  # a forger who knows only `events`
    found = _found(seeded)
    assert (ProblemKind.ORDER_ORPHANED, middle) in found
    assert (ProblemKind.POSITION_GAP, middle + 1) in found


def test_an_event_given_a_second_position_is_named(seeded: Seeded) -> None:
    with around_the_triggers(seeded.url) as conn:
        conn.execute(text("DROP INDEX uq_ledger_order_event_position"))  # the owner may
        (written,) = written_at(conn, 3)
        head = conn.execute(select(func.max(ledger_order.c.position))).scalar_one()
        conn.execute(
            insert(ledger_order).values(
                position=head + 1, event_position=written, ledger_hash="0" * 64, sequenced_at=now()
            )
        )
    report = verify_store(seeded.store)
    duplicated = [p for p in report.problems if p.kind is ProblemKind.ORDER_DUPLICATED]
    assert len(duplicated) == 1 and f"written at {written}" in duplicated[0].message


def test_a_hole_in_positions_is_named_even_when_the_chain_is_relinked_over_it(
    seeded: Seeded,
) -> None:
    """A forger who cuts an event and its order row and re-links every later link still leaves
    a hole: positions are dense since the sequencer began."""
    middle = WORKLOAD_EVENTS // 2
    tamper_delete(seeded.url, middle)
    with around_the_triggers(seeded.url) as conn:
        rows = conn.execute(
            select(ledger_order.c.position, events.c.hash)
            .join(events, events.c.position == ledger_order.c.event_position)
            .order_by(ledger_order.c.position)
        ).all()
        link = None
        for position, hash_ in rows:
            link = ledger_link(link, hash_)
            conn.execute(
                ledger_order.update()
                .where(ledger_order.c.position == position)
                .values(ledger_hash=link)
            )
    found = _found(seeded)
    assert (ProblemKind.POSITION_GAP, middle + 1) in found
    assert ProblemKind.LEDGER_CHAIN_BROKEN not in {kind for kind, _ in found}


def test_audit_verify_exits_non_zero_naming_an_order_finding(
    seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    tamper_delete(seeded.url, 4, orders=False)
    monkeypatch.setenv("OUTCOMES_DATABASE_URL", seeded.url)
    result = CliRunner().invoke(cli, ["audit", "verify", "--json"], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert "order_orphaned" in result.output
