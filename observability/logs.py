"""Log lines as text (the default) or one JSON object per line (OUTCOMES_LOG_FORMAT=json).

The JSON carries the time, level, logger and message, and for the ledger's own lines
(`ledger.event_log`: decisions, outcomes, findings, brake changes) their fields, which the core
chose so that no argument or secret is among them."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import IO, Any

import orjson

HANDLER_NAME = "outcomes"
LOG_FORMAT_ENV = "OUTCOMES_LOG_FORMAT"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "outcomes", None)
        if isinstance(fields, dict):
            line |= {k: v for k, v in fields.items() if k not in line}
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


def formatter(log_format: str) -> logging.Formatter:
    return JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)


def install(
    log_format: str, level: int | str = logging.INFO, stream: IO[str] | None = None
) -> None:
    """One handler on the root logger, writing `log_format` lines to stderr (installed again,
    it replaces itself: never two copies of a line)."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if h.get_name() == HANDLER_NAME]:
        root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.set_name(HANDLER_NAME)
    handler.setFormatter(formatter(log_format))
    root.addHandler(handler)
    root.setLevel(level)


def install_if_json(environ: Mapping[str, str] = os.environ) -> None:
    """For one-shot commands: JSON lines on stderr when asked for (OUTCOMES_LOG_FORMAT=json);
    in text mode the command's own output says what it did. Read raw, not validated: the
    command itself reports a malformed setting when it loads the settings."""
    if environ.get(LOG_FORMAT_ENV, "").strip().lower() == "json":
        install("json")
