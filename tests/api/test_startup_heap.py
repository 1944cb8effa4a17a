"""Once started, a process of ours freezes its start-up heap (ledger/heap.py), so that full
garbage collections stop walking it: they paused the API and the workers 100-275 ms at a time
under sixteen agents."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

import ledger.heap


@pytest.fixture
def thawed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    gc.unfreeze()
    monkeypatch.setattr(ledger.heap, "_done", False)
    yield
    gc.unfreeze()  # the rest of the test process collects as usual


@pytest.mark.usefixtures("thawed")
def test_the_api_freezes_its_start_up_heap_once(
    app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert gc.get_freeze_count() == 0
    with TestClient(app):
        assert gc.get_freeze_count() > 0  # the app, its routes and everything imported

    def collect(*_: object) -> int:
        raise AssertionError("a second start collected and froze again")

    monkeypatch.setattr(gc, "collect", collect)
    with TestClient(app):  # tests start many apps in one process: once is enough
        pass
