"""The embedded broker hands a consumer whole messages only: a message is written under a name
no consumer reads, and enters the queue by one rename once it is complete."""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from kombu import Connection, Exchange, Queue
from kombu.exceptions import ChannelError

import workers.embedded_broker as embedded
from ledger import doorbell
from workers.app import embedded_broker


def a_queue() -> Queue:
    # A name of its own per test: kombu keeps bindings in process-wide state, per name.
    name = f"embedded-{uuid.uuid4().hex[:8]}"
    return Queue(name, Exchange(name), routing_key=name)


def publish(url: str, options: dict[str, Any], queue: Queue, body: dict[str, Any]) -> None:
    with Connection(url, transport_options=options) as conn:
        conn.Producer().publish(
            body,
            exchange=queue.exchange,
            routing_key=queue.routing_key,
            declare=[queue],
            serializer="json",
        )


def run_all(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive(), f"{thread.name} still running"


def test_a_message_enters_the_queue_whole_by_one_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, options = embedded_broker(tmp_path)
    folder = Path(options["data_folder_in"])
    seen: list[tuple[list[str], bytes]] = []
    real_replace = os.replace

    def watched(source: str, target: str | Path) -> None:
        # What a consumer polling just before the rename would find in the queue folder.
        if str(target).endswith(".msg"):  # (an exchange's table is renamed into place too)
            seen.append((sorted(p.name for p in folder.iterdir()), Path(source).read_bytes()))
        real_replace(source, target)

    monkeypatch.setattr(embedded.os, "replace", watched)
    queue = a_queue()
    publish(url, options, queue, {"n": 1, "body": "x" * 100_000})
    ((names, written),) = seen
    assert [n.endswith(".msg.part") for n in names] == [True]  # nothing a consumer takes
    assert orjson.loads(written)["body"]  # the whole message, before it became visible
    with Connection(url, transport_options=options) as conn:
        simple = conn.SimpleQueue(queue)
        message = simple.get(timeout=5)
        assert message.payload == {"n": 1, "body": "x" * 100_000}
        message.ack()
        simple.close()


def test_a_consumer_never_takes_a_partial_file(tmp_path: Path) -> None:
    url, options = embedded_broker(tmp_path)
    queue = a_queue()
    stray = Path(options["data_folder_in"]) / f"1_x.{queue.name}.msg.part"
    stray.write_bytes(b'{"half": ')  # a write in progress
    publish(url, options, queue, {"n": 2})
    with Connection(url, transport_options=options) as conn:
        simple = conn.SimpleQueue(queue)
        assert simple.get(timeout=5).payload == {"n": 2}
        with pytest.raises(simple.Empty):
            simple.get(timeout=0.2)
        simple.close()
    assert stray.exists()  # left alone


def test_the_embedded_home_it_creates_is_private(tmp_path: Path) -> None:
    previous = os.umask(0o022)  # the common umask: a plain mkdir would be world-readable
    try:
        embedded_broker(tmp_path / "home")
    finally:
        os.umask(previous)
    # The ledger's file lives in the same folder, whichever process creates it first.
    assert (tmp_path / "home").stat().st_mode & 0o777 == 0o700


def test_concurrent_binds_and_publishes_see_whole_exchange_tables(tmp_path: Path) -> None:
    """Processes declaring the same exchange at once (the API's first submits, a worker
    starting) each read a whole table and none loses another's binding."""
    url, options = embedded_broker(tmp_path)
    exchange = f"embedded-{uuid.uuid4().hex[:8]}"
    queues = [f"{exchange}-{n}" for n in range(8)]
    errors: list[BaseException] = []
    start = threading.Barrier(len(queues) * 2)

    def bind(queue: str) -> None:
        try:
            with Connection(url, transport_options=options) as conn:
                start.wait()
                conn.default_channel._queue_bind(exchange, queue, None, queue)
        except BaseException as exc:
            errors.append(exc)

    def read() -> None:
        try:
            with Connection(url, transport_options=options) as conn:
                start.wait()
                for _ in range(200):
                    conn.default_channel.get_table(exchange)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=bind, args=(q,)) for q in queues]
    run_all(threads + [threading.Thread(target=read) for _ in queues])
    assert errors == []
    with Connection(url, transport_options=options) as conn:
        bound = {entry.queue for entry in conn.default_channel.get_table(exchange)}
    assert bound == set(queues)


def test_an_unreadable_exchange_table_is_a_broker_error(tmp_path: Path) -> None:
    url, options = embedded_broker(tmp_path)
    exchange = f"embedded-{uuid.uuid4().hex[:8]}"
    control = Path(options["control_folder"])
    control.mkdir(parents=True, exist_ok=True)
    (control / f"{exchange}.exchange").write_bytes(b"")  # as kombu's own writer could leave it
    with Connection(url, transport_options=options) as conn, pytest.raises(ChannelError):
        conn.default_channel.get_table(exchange)


def test_a_publish_beside_a_first_bind_reaches_the_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two threads of one process publish at once to a queue neither has declared yet (the
    API's first submits). Both messages are in the queue: none went to kombu's dead letters."""
    url, options = embedded_broker(tmp_path)
    queue = a_queue()
    real_bind = embedded.Channel._queue_bind

    binding = threading.Event()

    def slow_bind(self: Any, *args: Any) -> None:
        binding.set()
        time.sleep(0.2)  # a slow disk: the table is written well after kombu noted the bind
        real_bind(self, *args)

    monkeypatch.setattr(embedded.Channel, "_queue_bind", slow_bind)
    errors: list[BaseException] = []

    def send(n: int) -> None:
        try:
            with Connection(url, transport_options=options) as conn:
                if n == 1:  # the second publishes while the first is binding
                    assert binding.wait(timeout=10)
                conn.Producer().publish(
                    {"n": n},
                    exchange=queue.exchange,
                    routing_key=queue.routing_key,
                    declare=[queue],
                    serializer="json",
                )
        except BaseException as exc:
            errors.append(exc)

    run_all([threading.Thread(target=send, args=(n,)) for n in (0, 1)])
    assert errors == []
    with Connection(url, transport_options=options) as conn:
        simple = conn.SimpleQueue(queue)
        got = sorted(simple.get(timeout=5).payload["n"] for _ in range(2))
        simple.close()
    assert got == [0, 1]


@pytest.mark.skipif(not doorbell.supported(), reason="bells need Linux")
def test_a_waiting_consumer_is_woken_by_a_put_not_by_its_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embedded, "BELL_POLL_S", 3600.0)  # only a ring can wake it in time
    woken: list[bool] = []  # each wait of the consumer's: ended by a ring (True) or timed out
    real_wait = doorbell.Bell.wait

    def wait(bell: doorbell.Bell, timeout: float) -> bool:
        woken.append(real_wait(bell, timeout))
        return woken[-1]

    monkeypatch.setattr(doorbell.Bell, "wait", wait)
    url, options = embedded_broker(tmp_path)
    bells = Path(options[embedded.BELLS])
    queue = a_queue()
    got: list[Any] = []
    with Connection(url, transport_options=options) as conn:
        consumer = conn.Consumer([queue], callbacks=[lambda body, message: got.append(body)])
        with consumer:
            publisher = threading.Timer(0.2, publish, args=(url, options, queue, {"n": 1}))
            publisher.start()
            try:
                conn.drain_events(timeout=30)  # TimeoutError: no ring woke it
            finally:
                publisher.cancel()
                publisher.join()
            assert len(list(bells.iterdir())) == 1  # the consumer's bell, while it consumes
    assert got == [{"n": 1}]
    assert woken == [True]  # one wait, ended by the put's ring
    assert list(bells.iterdir()) == []  # closed with its connection
