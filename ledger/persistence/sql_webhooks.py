"""The webhooks' part of the contract in SQL (Postgres and SQLite): the webhooks read model,
the relay's cursor, deliveries and their attempts. Mixed into `SqlReads` and `SqlWrites` over
the same connection.

A claim is one conditional UPDATE: on Postgres a second relay's UPDATE of the same rows waits
for the first's commit, then finds them claimed and leaves them; SQLite runs one writer at a
time. Times are aware UTC, stored as SQLite's text (which compares in order) or timestamptz.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, delete, func, insert, or_, select, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite

from ledger.clock import utc
from ledger.events import TERMINAL_EVENT_TYPES, job_id_of
from ledger.persistence.schema import (
    ledger_events,
    webhook_attempts,
    webhook_cursor,
    webhook_deliveries,
    webhooks,
)
from ledger.persistence.webhooks_contract import CURSOR
from ledger.webhook_view import WebhookView
from ledger.webhooks import Attempt, Delivery, NewDelivery, Settled, TerminalEvent

_D = webhook_deliveries.c
_TERMINAL = sorted(TERMINAL_EVENT_TYPES)


def _time(value: datetime | None) -> datetime | None:
    return None if value is None else utc(value)


def _delivery(row: Any) -> Delivery:
    return Delivery(
        webhook_id=row.webhook_id,
        event_id=row.event_id,
        job_id=row.job_id,
        position=row.position,
        body=row.body,
        state=row.state,
        attempts=row.attempts,
        created_at=utc(row.created_at),
        next_attempt_at=utc(row.next_attempt_at),
        first_attempt_at=_time(row.first_attempt_at),
        delivered_at=_time(row.delivered_at),
        last_status=row.last_status,
        last_error=row.last_error,
    )


class SqlWebhookReads:
    conn: Connection

    def webhook(self, webhook_id: str) -> WebhookView | None:
        query = select(webhooks.c.view).where(webhooks.c.webhook_id == webhook_id)
        found = self.conn.execute(query).scalar()
        return WebhookView.model_validate(found) if found is not None else None

    def webhooks(self, account: str | None) -> list[WebhookView]:
        query = select(webhooks.c.view)
        if account is not None:
            query = query.where(webhooks.c.account == account)
        views = [WebhookView.model_validate(v) for v in self.conn.execute(query).scalars()]
        return sorted(views, key=lambda v: v.since_position)

    def webhook_cursor(self) -> int | None:
        query = select(webhook_cursor.c.position).where(webhook_cursor.c.name == CURSOR)
        found = self.conn.execute(query).scalar()
        return int(found) if found is not None else None

    def terminal_events_after(self, after: int, upto: int, limit: int) -> list[TerminalEvent]:
        # A parked call's decision too: its `approval.requested` delivery (docs/approvals.md).
        parked = and_(
            ledger_events.c.type == "job.accepted",
            ledger_events.c.data["approval"].as_string().is_not(None),
        )
        query = (
            select(
                ledger_events.c.position,
                ledger_events.c.event_id,
                ledger_events.c.stream_id,
                ledger_events.c.type,
            )
            .where(
                ledger_events.c.position > after,
                ledger_events.c.position <= upto,
                or_(ledger_events.c.type.in_(_TERMINAL), parked),
            )
            .order_by(ledger_events.c.position)
            .limit(limit)
        )
        return [
            TerminalEvent(
                row.position,
                str(row.event_id),
                job_id_of(row.stream_id),
                approval=row.type == "job.accepted",
            )
            for row in self.conn.execute(query)
        ]

    def registered_at(self, hooks: Sequence[WebhookView]) -> dict[str, int]:
        written = {h.since_position: h.webhook_id for h in hooks}
        if not written:
            return {}
        query = select(ledger_events.c.write_position, ledger_events.c.position).where(
            ledger_events.c.write_position.in_(sorted(written))
        )
        return {written[row.write_position]: int(row.position) for row in self.conn.execute(query)}

    def deliveries(self, webhook_id: str, limit: int) -> list[Delivery]:
        query = (
            select(webhook_deliveries)
            .where(_D.webhook_id == webhook_id)
            .order_by(_D.position.desc())
            .limit(limit)
        )
        return [_delivery(row) for row in self.conn.execute(query)]

    def delivery_attempts(self, webhook_id: str, event_ids: Sequence[str]) -> list[Attempt]:
        if not event_ids:
            return []
        a = webhook_attempts.c
        query = (
            select(webhook_attempts)
            .where(a.webhook_id == webhook_id, a.event_id.in_(list(event_ids)))
            .order_by(a.attempt_id)
        )
        return [
            Attempt(
                webhook_id=row.webhook_id,
                event_id=row.event_id,
                attempt=row.attempt,
                at=utc(row.at),
                duration_ms=row.duration_ms,
                status=row.status,
                error=row.error,
                relay=row.relay,
            )
            for row in self.conn.execute(query)
        ]


class SqlWebhookWrites(SqlWebhookReads):
    def _upsert(self) -> Any:
        return postgresql.insert if self.conn.dialect.name == "postgresql" else sqlite.insert

    def set_webhook_cursor(self, position: int) -> None:
        statement = self._upsert()(webhook_cursor).values(name=CURSOR, position=position)
        larger = (
            func.greatest(webhook_cursor.c.position, statement.excluded.position)
            if self.conn.dialect.name == "postgresql"
            else func.max(webhook_cursor.c.position, statement.excluded.position)
        )
        self.conn.execute(
            statement.on_conflict_do_update(index_elements=["name"], set_={"position": larger})
        )

    def add_deliveries(self, new: Sequence[NewDelivery]) -> int:
        if not new:
            return 0
        rows = [
            {
                "webhook_id": d.webhook_id,
                "event_id": d.event_id,
                "job_id": d.job_id,
                "position": d.position,
                "body": d.body,
                "state": "pending",
                "attempts": 0,
                "created_at": d.created_at,
                "next_attempt_at": d.created_at,
            }
            for d in new
        ]
        statement = (
            self._upsert()(webhook_deliveries)
            .values(rows)
            .on_conflict_do_nothing(index_elements=["webhook_id", "event_id"])
            .returning(_D.event_id)
        )
        return len(self.conn.execute(statement).all())

    def claim_deliveries(
        self,
        at: datetime,
        until: datetime,
        claimer: str,
        limit: int,
        exclude: Collection[str] = (),
    ) -> list[Delivery]:
        free = or_(_D.claimed_until.is_(None), _D.claimed_until < at)
        due = (
            select(_D.webhook_id, _D.event_id)
            .join(webhooks, webhooks.c.webhook_id == _D.webhook_id)
            .where(
                _D.state == "pending",
                _D.next_attempt_at <= at,
                free,
                webhooks.c.status == "active",
            )
            .order_by(_D.position)
            .limit(limit)
        )
        if exclude:
            due = due.where(_D.webhook_id.not_in(sorted(exclude)))
        keys = [(row.webhook_id, row.event_id) for row in self.conn.execute(due)]
        if not keys:
            return []
        pair = tuple_(_D.webhook_id, _D.event_id)
        self.conn.execute(
            update(webhook_deliveries)
            .where(pair.in_(keys), _D.state == "pending", free)
            .values(claimed_by=claimer, claimed_until=until)
        )
        mine = (
            select(webhook_deliveries)
            .where(pair.in_(keys), _D.claimed_by == claimer, _D.claimed_until == until)
            .order_by(_D.position)
        )
        return [_delivery(row) for row in self.conn.execute(mine)]

    def release_claims(self, keys: Sequence[tuple[str, str]], claimer: str) -> None:
        if not keys:
            return
        self.conn.execute(
            update(webhook_deliveries)
            .where(
                tuple_(_D.webhook_id, _D.event_id).in_(list(keys)),
                _D.claimed_by == claimer,
                _D.state == "pending",
            )
            .values(claimed_by=None, claimed_until=None)
        )

    def finish_attempt(self, attempt: Attempt, settled: Settled) -> bool:
        self.conn.execute(
            insert(webhook_attempts).values(
                webhook_id=attempt.webhook_id,
                event_id=attempt.event_id,
                attempt=attempt.attempt,
                at=attempt.at,
                duration_ms=attempt.duration_ms,
                status=attempt.status,
                error=attempt.error[:500] if attempt.error else None,
                relay=attempt.relay[:200],
            )
        )
        values: dict[str, Any] = {
            "attempts": attempt.attempt,
            "first_attempt_at": func.coalesce(_D.first_attempt_at, attempt.at),
            "last_status": attempt.status,
            "last_error": attempt.error[:500] if attempt.error else None,
            "state": settled.state,
            "claimed_by": None,
            "claimed_until": None,
        }
        if settled.next_attempt_at is not None:
            values["next_attempt_at"] = settled.next_attempt_at
        if settled.state == "delivered":
            values["delivered_at"] = attempt.at
        done = self.conn.execute(
            update(webhook_deliveries)
            .where(
                _D.webhook_id == attempt.webhook_id,
                _D.event_id == attempt.event_id,
                _D.claimed_by == attempt.relay,
                _D.state == "pending",
            )
            .values(**values)
        )
        return bool(done.rowcount)

    def prune_deliveries(self, before: datetime, limit: int) -> int:
        old = self.conn.execute(
            select(webhook_deliveries.c.webhook_id, webhook_deliveries.c.event_id)
            .where(
                webhook_deliveries.c.state != "pending",
                webhook_deliveries.c.created_at < before,
            )
            .limit(limit)
        ).all()
        if not old:
            return 0
        keys = [tuple(row) for row in old]
        attempts = tuple_(webhook_attempts.c.webhook_id, webhook_attempts.c.event_id)
        self.conn.execute(delete(webhook_attempts).where(attempts.in_(keys)))
        deliveries = tuple_(webhook_deliveries.c.webhook_id, webhook_deliveries.c.event_id)
        self.conn.execute(delete(webhook_deliveries).where(deliveries.in_(keys)))
        return len(keys)
