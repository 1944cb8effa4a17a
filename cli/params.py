"""Numeric options with both bounds and no NaN: click's FloatRange lets `nan` through (it
compares false with every bound) and `inf` through an open upper bound."""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta
from typing import Any

import click

from ledger.clock import now, utc
from ledger.queries import MAX_POSITION


class FiniteFloatRange(click.FloatRange):
    """A finite float within [low, high]."""

    name = "finite float range"

    def __init__(self, low: float, high: float) -> None:
        super().__init__(min=low, max=high)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(number, param, ctx)


POSITION = click.IntRange(0, MAX_POSITION)  # a ledger position cursor


_AGO = re.compile(r"\A(\d{1,9})([smhd])\Z")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class Moment(click.ParamType):  # type: ignore[type-arg]
    """A moment: ISO 8601 (naive is UTC), or how long ago (`90s`, `15m`, `2h`, `7d`)."""

    name = "moment"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, datetime):
            return utc(value)
        text = str(value).strip()
        ago = _AGO.fullmatch(text)
        if ago:
            return now() - timedelta(seconds=int(ago.group(1)) * _UNIT_S[ago.group(2)])
        try:
            return utc(datetime.fromisoformat(text))
        except ValueError:
            self.fail(
                f"{value!r} is neither an ISO 8601 date or time (e.g. 2026-11-30T08:00, read "
                "as UTC) nor a time ago (e.g. 90s, 15m, 2h, 7d).",
                param,
                ctx,
            )


MOMENT = Moment()
