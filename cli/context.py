"""The ledger a command works on: opened once per command and closed when it ends (click's
`ctx.with_resource`), whatever the command does in between."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

import click

from ledger.runtime.ledger import Ledger, open_ledger

P = ParamSpec("P")
R = TypeVar("R")


def ledger_of(ctx: click.Context, url: str | None = None, pool_size: int = 5) -> Ledger:
    """The command's ledger (OUTCOMES_DATABASE_URL unless `url`), opened on first use."""
    root = ctx.find_root()
    opened = root.meta.get("outcomes.ledger")
    if opened is None:
        opened = root.with_resource(open_ledger(url, pool_size=pool_size))
        root.meta["outcomes.ledger"] = opened
    assert isinstance(opened, Ledger)
    return opened


def with_ledger(func: Callable[Concatenate[Ledger, P], R]) -> Callable[P, R]:
    """Pass the command's ledger as the first argument."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        return func(ledger_of(click.get_current_context()), *args, **kwargs)

    return wrapper
