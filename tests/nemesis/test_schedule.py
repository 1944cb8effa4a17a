"""The fault schedule: the same seed replays the same faults; a short campaign covers every
kind; freezes outlast the lease (the "clock jump"), pauses do not."""

from __future__ import annotations

from nemesis.faults import KINDS, schedule


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another() -> None:
    assert schedule(7, 120, 3, 4.0, 2) == schedule(7, 120, 3, 4.0, 2)
    assert schedule(7, 120, 3, 4.0, 2) != schedule(8, 120, 3, 4.0, 2)


def test_every_kind_comes_first_once_then_by_weight() -> None:
    planned = schedule(16, 600, 8, 4.0, 2)
    assert {p.kind for p in planned[: len(KINDS)]} == set(KINDS)
    assert len(planned) >= 50
    assert all(0 <= p.at_s < 600 for p in planned)
    assert [p.at_s for p in planned] == sorted(p.at_s for p in planned)


def test_a_freeze_outlasts_the_lease_and_a_pause_does_not() -> None:
    planned = schedule(3, 2000, 2, 4.0, 3)
    freezes = [p.hold_s for p in planned if p.kind == "worker_freeze"]
    pauses = [p.hold_s for p in planned if p.kind == "worker_pause"]
    assert freezes and min(freezes) > 4.0
    assert pauses and max(pauses) < 4.0
    assert {p.target for p in planned if p.kind == "worker_kill"} == {0, 1, 2}


def test_kinds_can_be_narrowed() -> None:
    planned = schedule(1, 100, 2, 4.0, 2, kinds=("brake",))
    assert planned and {p.kind for p in planned} == {"brake"}
