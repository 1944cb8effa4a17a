"""The outbox's part of the contract over the in-memory state (`ledger.persistence.memory`):
the same answers as `sql_outbox.py`, read plainly."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from ledger.codes import Status
from ledger.job_view import JobView
from ledger.persistence.memory_state import MemoryState
from ledger.queueing import WAITING, Confirmation, DispatchState, DispatchSummary
from ledger.reconcile_rules import OpenJob


class MemoryOutboxReads:
    state: MemoryState

    def _waiting(self) -> list[JobView]:
        return [v for v in self.state.jobs.values() if not v.terminal and v.status in WAITING]

    def _unconfirmed(self, view: JobView) -> bool:
        found = self.state.dispatches.get(view.job_id)
        return found is None or not found.confirms(view)

    def dispatch_state(self, job_id: str) -> DispatchState | None:
        return self.state.dispatches.get(job_id)

    def undispatched_jobs(self, before: datetime, limit: int) -> list[JobView]:
        found = [v for v in self._waiting() if v.updated_at < before and self._unconfirmed(v)]
        found.sort(key=lambda v: v.updated_at)
        return found[:limit]

    def queue_epoch(self, queue: str) -> str | None:
        return self.state.epochs.get(queue)

    def overdue_jobs(self, now: datetime, epoch: str | None) -> list[OpenJob]:
        found = []
        for view in self.state.jobs.values():
            if view.terminal:
                continue
            dispatch = self.state.dispatches.get(view.job_id)
            lease = self.state.leases.get(view.job_id)
            renewed = lease.expires_at if lease else None
            if view.status is Status.AWAITING_APPROVAL:
                if view.start_by is not None and view.start_by <= now:
                    found.append(OpenJob(view, None, dispatch))
            elif view.status in WAITING:
                late = view.start_by is None or view.start_by < now
                if late or _lost(view, dispatch, epoch):
                    found.append(OpenJob(view, None, dispatch))
            elif view.status is Status.RUNNING:
                expires = renewed or view.lease_expires_at
                if expires is not None and expires < now:
                    found.append(OpenJob(view, renewed, dispatch))
        return found

    def dispatch_summary(self) -> DispatchSummary:
        waiting = self._waiting()
        evidence: Counter[str] = Counter(
            str(e.data.get("evidence") or "timer")
            for e in self.state.events
            if e.type == "job.redispatched"
        )
        return DispatchSummary(
            waiting=len(waiting),
            unconfirmed=sum(self._unconfirmed(v) for v in waiting),
            oldest_waiting_since=min((v.created_at for v in waiting), default=None),
            redispatched=dict(evidence),
        )

    def waiting_count(self) -> int:
        waiting = {s.value for s in WAITING}
        return sum(n for key, n in self.state.job_counts.items() if key[3] in waiting)

    def starts_between(self, after: int, upto: int) -> int:
        return sum(
            1 for e in self.state.events if after < e.position <= upto and e.type == "work.started"
        )


def _lost(view: JobView, dispatch: DispatchState | None, epoch: str | None) -> bool:
    if dispatch is None:
        return False
    if dispatch.rejects(view):
        return True
    moved = epoch is not None and dispatch.epoch is not None and dispatch.epoch != epoch
    return moved and dispatch.confirms(view)


class MemoryOutboxWrites(MemoryOutboxReads):
    _put: Callable[[dict[Any, Any], Any, Any], None]

    def record_dispatches(self, confirmed: Sequence[Confirmation]) -> None:
        table = self.state.dispatches
        for item in confirmed:
            job = self.state.jobs.get(item.job_id)
            if job is None or job.terminal or job.status not in WAITING:
                continue  # a confirmation matters only while the job waits
            held = table.get(item.job_id)
            if held is not None and held.version > item.version:
                continue
            stands = (
                held is not None
                and held.rejected_version is not None
                and held.rejected_version >= item.version
            )
            state = DispatchState(
                version=item.version,
                epoch=item.epoch,
                confirmed_at=item.confirmed_at,
                rejected=held.rejected if held is not None and stands else None,
                rejected_at=held.rejected_at if held is not None and stands else None,
                rejected_version=held.rejected_version if held is not None and stands else None,
            )
            self._put(table, item.job_id, state)

    def reject_dispatch(self, job_id: str, version: int, reason: str, at: datetime) -> None:
        held = self.state.dispatches.get(job_id)
        base = held or DispatchState(version=0, epoch=None, confirmed_at=at)
        update = {"rejected": reason[:500], "rejected_at": at, "rejected_version": version}
        self._put(self.state.dispatches, job_id, base.model_copy(update=update))

    def set_queue_epoch(self, queue: str, expected: str | None, epoch: str, at: datetime) -> bool:
        if self.state.epochs.get(queue) != expected:
            return False
        self._put(self.state.epochs, queue, epoch)
        return True

    def prune_dispatches(self, limit: int) -> int:
        jobs = self.state.jobs
        done = [j for j in self.state.dispatches if j not in jobs or jobs[j].terminal][:limit]
        for job_id in done:
            held = self.state.dispatches.pop(job_id)
            self._undo_pop(job_id, held)
        return len(done)

    def _undo_pop(self, job_id: str, held: DispatchState) -> None:
        self.undo.append(lambda: self.state.dispatches.__setitem__(job_id, held))

    undo: list[Callable[[], None]]
