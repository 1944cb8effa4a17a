"""A worker process reads its settings once (`workers.resources.settings`); the test process
plays many workers in turn, each test with its own environment, so each starts afresh."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from workers import resources


@pytest.fixture(autouse=True)
def fresh_worker_settings() -> Iterator[None]:
    resources.settings.cache_clear()
    yield
    resources.settings.cache_clear()
