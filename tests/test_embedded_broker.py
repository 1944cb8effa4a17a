"""The embedded broker hands a consumer whole messages only: a message is written under a name
no consumer reads, and enters the queue by one rename once it is complete."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from kombu import Connection, Exchange, Queue

import workers.embedded_broker as embedded
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


def test_a_message_enters_the_queue_whole_by_one_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, options = embedded_broker(tmp_path)
    folder = Path(options["data_folder_in"])
    seen: list[tuple[list[str], bytes]] = []
    real_replace = os.replace

    def watched(source: str, target: str) -> None:
        # What a consumer polling just before the rename would find in the queue folder.
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
