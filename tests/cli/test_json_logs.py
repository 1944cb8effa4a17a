"""One-shot commands add the ledger's event lines, as JSON on stderr, when
OUTCOMES_LOG_FORMAT=json: a brake pulled and released from the command line is two lines;
stdout stays the command's own (its `--json` output parses alone)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import orjson
import pytest

from observability.logs import HANDLER_NAME
from tests.plugins.cli import Invoke


@pytest.fixture
def json_logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("OUTCOMES_LOG_FORMAT", "json")
    root = logging.getLogger()
    level = root.level
    yield
    for handler in [h for h in root.handlers if h.get_name() == HANDLER_NAME]:
        root.removeHandler(handler)  # it wrote to the runner's stderr, closed by now
    root.setLevel(level)


def test_brake_changes_are_json_lines_on_stderr(outcomes: Invoke, json_logs: None) -> None:
    pulled = outcomes(
        "brake", "pull", "--scope", "tool:x.y", "--reason", "runaway", "--force", "--json"
    )
    brake_id = orjson.loads(pulled.stdout)["brake_id"]
    released = outcomes("brake", "release", brake_id, "--reason", "fixed", "--json")
    orjson.loads(released.stdout)
    lines = [orjson.loads(line) for r in (pulled, released) for line in r.stderr.splitlines()]
    assert [(line["event"], line["status"], line["brake_id"]) for line in lines] == [
        ("brake", "pulled", brake_id),
        ("brake", "released", brake_id),
    ]
    assert lines[0]["scope"] == "tool:x.y" and lines[0]["level"] == "INFO"
