"""Per-account fairness on a ledger in memory (docs/fairness.md): a rate-limited submit writes
nothing; the concurrency limit defers a claim (nothing recorded); the dispatch window holds an
account's jobs past it in the ledger, and a start, or the relay, tops it up."""

from __future__ import annotations

import pytest

from ledger.codes import Status
from ledger.decisions import Caller, JobRequest
from ledger.errors import RateLimitedError
from ledger.fairness import Limits
from ledger.runtime.ledger import Ledger
from ledger.runtime.outbox import Outbox
from ledger.services.execute import Executor
from ledger.services.submit import submit
from ledger.services.work import ClaimRequest, ClaimResult, claim_many
from tests.plugins.deployments import wait_until
from tests.services.test_outbox import Broker
from tests.tools import ECHO

ACME = Caller(account="acme", token_id="tok-acme")
GLOBEX = Caller(account="globex", token_id="tok-globex")
ECHOED = JobRequest(ECHO, {"text": "x"})


def test_a_rate_limited_submit_records_nothing(memory_ledger: Ledger) -> None:
    memory_ledger.limits = Limits(rate_per_s=0.01, burst=2)
    for _ in range(2):
        submit(memory_ledger, ACME, ECHOED)
    before = memory_ledger.store.last_position()
    with pytest.raises(RateLimitedError) as refused:
        submit(memory_ledger, ACME, ECHOED)
    assert refused.value.error.code.value == "QUOTA_EXCEEDED"
    assert refused.value.error.retry_after_s is not None and refused.value.error.retry_after_s >= 1
    assert memory_ledger.store.last_position() == before
    assert submit(memory_ledger, GLOBEX, ECHOED).view.accepted


def test_a_claim_over_the_accounts_limit_is_deferred_and_records_nothing(
    memory_ledger: Ledger,
) -> None:
    memory_ledger.limits = Limits(concurrency=2)
    acme = [submit(memory_ledger, ACME, ECHOED).view.job_id for _ in range(3)]
    globex = submit(memory_ledger, GLOBEX, ECHOED).view.job_id
    before = memory_ledger.store.last_position()
    claims = claim_many(memory_ledger, [ClaimRequest(j, "w1", 30) for j in [*acme, globex]])
    results = [c.result for c in claims]
    assert results == [ClaimResult.CLAIMED] * 2 + [ClaimResult.DEFERRED, ClaimResult.CLAIMED]
    assert memory_ledger.store.last_position() == before + 3  # the three starts, no more
    # Another worker, later: the account still runs two.
    again = claim_many(memory_ledger, [ClaimRequest(acme[2], "w2", 30)])[0]
    assert again.result is ClaimResult.DEFERRED
    assert again.view is not None and again.view.status is Status.QUEUED


def test_the_window_holds_an_accounts_jobs_past_it_and_a_start_tops_it_up(
    memory_ledger: Ledger,
) -> None:
    memory_ledger.limits = Limits(window=3)
    broker = Broker()
    outbox = Outbox(memory_ledger, broker)
    try:
        acme = [submit(memory_ledger, ACME, ECHOED, outbox).view.job_id for _ in range(10)]
        globex = submit(memory_ledger, GLOBEX, ECHOED, outbox).view.job_id
        assert outbox.flush(timeout_s=10)
        # Acme's first three, and globex's at once (two publishing threads: in either order).
        assert sorted(broker.taken) == sorted([*acme[:3], globex]), [
            ("acme", acme.index(j)) if j in acme else ("globex", 0) for j in broker.taken
        ]

        executor = Executor(memory_ledger, "w1", outbox)
        assert executor.claim_batch(acme[:2])[0].result is ClaimResult.CLAIMED
        wait_until(lambda: len(broker.taken) == 6, 10, "acme's window to be topped up")
        assert broker.taken[4:] == acme[3:5]  # the longest waiting first

        assert outbox.relay_once().confirmed == []  # full: the relay adds nothing
        memory_ledger.limits = Limits(window=5)
        assert outbox.relay_once().confirmed == acme[5:7]
    finally:
        outbox.close()
