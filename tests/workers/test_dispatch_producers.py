"""The Celery dispatcher keeps its producers (workers/dispatch.py): one broker connection each,
lent to one thread at a time, never lent again after a failed publish, never used by a forked
child. Every job id handed to it reaches the queue. Real RabbitMQ."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from celery import Celery
from kombu.exceptions import OperationalError

from ledger.dispatch import Message
from ledger.errors import DispatchError
from ledger.settings import Settings
from tests.plugins.deployments import drop_queue, require_broker
from workers.app import make_celery
from workers.dispatch import CeleryDispatcher


@pytest.fixture
def dispatcher() -> Iterator[CeleryDispatcher]:
    url = require_broker("rabbitmq")
    queue = f"test-dispatch-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        database_url="sqlite://",
        broker_url=url,
        tools=(),
        queue=queue,
        lease_s=30.0,
        dispatch_timeout_s=30.0,
    )
    app = make_celery(settings)
    chosen = CeleryDispatcher(app, queue)
    try:
        yield chosen
    finally:
        chosen.close()
        drop_queue(app, url, queue)
        app.close()


def drained_job_ids(app: Celery, queue: str) -> list[str]:
    """Every message now in the queue, taken off it: the job id each carries."""
    ids = []
    with app.connection_for_write() as conn:
        channel = conn.channel()
        try:
            while (message := channel.basic_get(queue, no_ack=True)) is not None:
                args, _kwargs, _embed = json.loads(message.body)
                ids.append(args[0])
        finally:
            channel.close()
    return ids


def test_one_thread_dispatching_in_turn_reuses_one_kept_producer(
    dispatcher: CeleryDispatcher,
) -> None:
    sent = [f"job-{i}" for i in range(20)]
    for job_id in sent:
        dispatcher.dispatch(job_id)
    assert len(dispatcher.producers._idle) == 1
    assert drained_job_ids(dispatcher.app, dispatcher.queue) == sent


def test_threads_dispatching_at_once_each_borrow_their_own(dispatcher: CeleryDispatcher) -> None:
    sent = [f"job-{i}" for i in range(200)]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(dispatcher.dispatch, sent))
    assert 1 <= len(dispatcher.producers._idle) <= 4
    assert len(set(map(id, dispatcher.producers._idle))) == len(dispatcher.producers._idle)
    assert sorted(drained_job_ids(dispatcher.app, dispatcher.queue)) == sorted(sent)


def test_a_producer_whose_publish_failed_is_closed_and_never_lent_again(
    dispatcher: CeleryDispatcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    dispatcher.dispatch("job-before")
    (broken,) = dispatcher.producers._idle

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise OperationalError("connection reset by the broker")

    monkeypatch.setattr(broken, "publish", refuse)
    with pytest.raises(DispatchError, match="job-lost"):
        dispatcher.dispatch("job-lost")
    assert dispatcher.producers._idle == []
    assert not broken.connection.connected  # released, not left open
    dispatcher.dispatch("job-after")
    assert dispatcher.producers._idle and dispatcher.producers._idle[0] is not broken
    assert drained_job_ids(dispatcher.app, dispatcher.queue) == ["job-before", "job-after"]


def test_a_forked_child_never_publishes_on_its_parents_connection(
    dispatcher: CeleryDispatcher,
) -> None:
    dispatcher.dispatch("job-parent")
    (parents,) = dispatcher.producers._idle
    dispatcher.producers._pid = -1  # as a child sees it: the producers were made by another pid
    dispatcher.dispatch("job-child")
    (childs,) = dispatcher.producers._idle
    assert childs is not parents
    assert drained_job_ids(dispatcher.app, dispatcher.queue) == ["job-parent", "job-child"]


def test_a_jobs_messages_share_its_id_and_are_each_confirmed(dispatcher: CeleryDispatcher) -> None:
    """The task id is the job id (Flower shows the job under it), so one batch may carry the
    same id twice (a job's retry beside its relay): each publish is confirmed on its own,
    known to the broker's confirms by its own correlation id."""
    fates = dispatcher.dispatch_many(
        [Message("job-twice", 0.0, "tracker.read_issue"), Message("job-twice"), Message("job-1")]
    )
    assert fates == [None, None, None]
    with dispatcher.app.connection_for_write() as conn:
        channel = conn.channel()
        try:
            got = []
            while (message := channel.basic_get(dispatcher.queue, no_ack=True)) is not None:
                got.append((message.headers, message.properties["correlation_id"]))
        finally:
            channel.close()
    assert [headers["id"] for headers, _ in got] == ["job-twice", "job-twice", "job-1"]
    assert len({correlation for _, correlation in got}) == 3  # one per publish
    assert got[0][0]["kwargsrepr"] == "{'tool': 'tracker.read_issue'}"
