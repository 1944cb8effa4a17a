"""bench.agents: the closed loop waits for each call before the next, and the report states
each goal of the speed issue (1 agent p50 <= 3x bare; 16 agents calls/s >= 0.5x, p99 <= 2x)."""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from bench._common import durable_commit_ms, migrate, scratch_database
from bench.agents import BARE, OURS, PEER, Side, _goal, closed_loop, report
from bench.agents_phases import WITH_CONFIRMATION, Timed, phases
from bench.agents_procrastinate import ProcrastinateAgents, apply_schema, running_workers
from ledger.events import job_stream
from ledger.persistence.appends import NO_STREAM
from ledger.queueing import Confirmation
from ledger.runtime.ledger import open_ledger
from tests.factories import accepted, started, succeeded


def test_each_agent_makes_its_calls_one_after_another() -> None:
    lock = threading.Lock()
    busy: dict[int, int] = {}
    seen: list[int] = []

    def call(agent: int, i: int) -> None:
        with lock:
            busy[agent] = busy.get(agent, 0) + 1
            assert busy[agent] == 1, "an agent sent a call before its last one ended"
            seen.append(i)
        with lock:
            busy[agent] -= 1

    seconds, latencies = closed_loop(40, 4, call)
    assert sorted(seen) == list(range(40)) and len(latencies) == 40 and seconds > 0


def test_a_failing_call_fails_the_round() -> None:
    def call(agent: int, i: int) -> None:
        if i == 3:
            raise RuntimeError("job 3: failed")

    with pytest.raises(RuntimeError, match="job 3"):
        closed_loop(8, 2, call)


def test_percentiles_and_goals() -> None:
    side = Side(latencies=[i / 1000 for i in range(1, 101)], rounds=[2.0, 1.0, 4.0])
    assert side.percentile(0.50) == 0.051 and side.percentile(0.99) == 0.1
    assert side.rate(100) == 50.0  # the median round
    assert _goal("1 agent p50", 2.9, "<=", 3.0).endswith("-> met")
    assert _goal("16 agents calls/s", 0.4, ">=", 0.5).endswith("-> NOT met")


def test_the_json_report_carries_both_sides(capsys: pytest.CaptureFixture[str]) -> None:
    sides = {OURS: Side([0.01, 0.02], [1.0]), BARE: Side([0.002, 0.004], [0.5])}
    options = argparse.Namespace(json=True, calls=2, rounds=1)
    assert report({1: sides}, {1: 1.5}, options) == 0
    figures = json.loads(capsys.readouterr().out)["figures"]["1"]
    assert figures[OURS]["calls_per_s"] == 2.0 and figures[BARE]["calls_per_s"] == 4.0


def test_the_phases_of_a_call_come_from_the_agents_clock_and_the_events(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    migrate(url)
    timed = []
    with open_ledger(url) as ledger:
        for _ in range(3):
            job_id = str(uuid.uuid4())
            posted = time.time()
            with ledger.store.transaction() as tx:
                tx.append(job_stream(job_id), [accepted()], NO_STREAM)
            answered = time.time()
            for version, event in enumerate((started(), succeeded()), start=1):
                with ledger.store.transaction() as tx:
                    tx.append(job_stream(job_id), [event], version)
            timed.append(Timed(job_id, posted, answered, time.time()))
    split = phases(url, timed)  # no dispatch recorded: the claim's way is not split
    assert split.pop(WITH_CONFIRMATION) == 0
    assert len(split) == 5 and all(value >= 0 for value in split.values())
    # Consecutive phases add up to the whole call, as the agent timed it.
    whole = [1000 * (t.seen - t.posted) for t in timed]
    chain = ("POST sent -> decision recorded", "decision -> claimed by a worker")
    chain += ("claimed -> outcome recorded", "outcome -> terminal envelope read")
    assert sum(split[name] for name in chain) <= max(whole) + 1e-6
    assert sum(split[name] for name in chain) >= min(whole) * 0.5
    # The tail: the slowest call alone (a third of three rounds up to one), its whole time.
    slowest = phases(url, timed, slowest=0.3)
    assert slowest["whole call"] == pytest.approx(max(whole))
    assert sum(slowest[name] for name in chain) == pytest.approx(max(whole), abs=1e-3)
    longest = [slowest[f"longest in (calls): {name}"] for name in chain]
    assert sorted(longest) == [0, 0, 0, 1]  # one call, one longest phase


def test_a_durable_commit_is_timed_on_the_database(pg_database: str) -> None:
    assert 0 < durable_commit_ms(pg_database, commits=5) < 60_000


def test_the_report_states_the_goals_against_procrastinate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    sides = {
        OURS: Side([0.010, 0.020], [1.0]),
        BARE: Side([0.002, 0.004], [0.5]),
        PEER: Side([0.005, 0.010], [2.0]),
    }
    options = argparse.Namespace(json=False, calls=2, rounds=1)
    assert report({1: sides, 16: sides}, {1: None, 16: None}, options) == 0
    out = capsys.readouterr().out
    assert f"ours / {PEER}" in out
    # ours' p50 is twice procrastinate's (goal <= 1.3x); ours makes twice its calls/s.
    assert "1 agent(s) p50_ms: 2.00x procrastinate (goal <= 1.3x) -> NOT met" in out
    assert "16 agent(s) calls_per_s: 2.00x procrastinate (goal >= 1.0x) -> met" in out


def test_a_procrastinate_agent_waits_for_its_job_to_succeed(
    pg_database: str, tmp_path: Path
) -> None:
    # The peer as the benchmark runs it: a real `procrastinate worker` on this Postgres.
    with scratch_database(f"outcomes_peer_{uuid.uuid4().hex[:6]}") as dsn:
        apply_schema(dsn)
        with running_workers(dsn, 1, tmp_path):
            agents = ProcrastinateAgents(dsn, 2)
            try:
                closed_loop(6, 2, agents.call)
            finally:
                agents.close()
        with psycopg.connect(dsn) as conn:
            rows = conn.execute("SELECT status, count(*) FROM procrastinate_jobs GROUP BY 1")
            assert dict(rows.fetchall()) == {"succeeded": 6}


def test_the_claims_way_splits_at_the_brokers_confirmation(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    migrate(url)
    job_id = str(uuid.uuid4())
    posted = time.time()
    with open_ledger(url) as ledger:
        with ledger.store.transaction() as tx:
            tx.append(job_stream(job_id), [accepted()], NO_STREAM)
        confirmed = datetime.now(UTC)  # the broker confirmed its message, then a worker claimed
        with ledger.store.transaction() as tx:
            tx.record_dispatches([Confirmation(job_id, 1, None, confirmed)])
        for version, event in enumerate((started(), succeeded()), start=1):
            with ledger.store.transaction() as tx:
                tx.append(job_stream(job_id), [event], version)
    untimed = str(uuid.uuid4())  # a call whose message's confirmation was never recorded
    with open_ledger(url) as ledger, ledger.store.transaction() as tx:
        tx.append(job_stream(untimed), [accepted()], NO_STREAM)
    calls = [Timed(job_id, posted, time.time(), time.time()), Timed(untimed, posted, 0, 0)]
    split = phases(url, calls)
    assert split[WITH_CONFIRMATION] == 1  # the split is the recorded call's alone
    outbox = split["  decision -> broker's confirm seen by the outbox"]
    delivery = split["  confirm seen -> claimed (< 0: claimed first)"]
    assert outbox >= 0 and delivery >= 0
    assert outbox + delivery == pytest.approx(split["decision -> claimed by a worker"], abs=1e-3)
    slowest = phases(url, [Timed(job_id, posted, time.time(), time.time())], slowest=1.0)
    # The split overlaps the whole claim: never counted as a longest phase of its own.
    assert not any("confirmed" in name for name in slowest if name.startswith("longest"))
