"""Numeric options with both bounds and no NaN: click's FloatRange lets `nan` through (it
compares false with every bound) and `inf` through an open upper bound."""

from __future__ import annotations

import math
from typing import Any

import click

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
