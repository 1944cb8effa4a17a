"""The CLI in-process: the `outcomes` fixture runs `outcomes ARGS…` against a migrated ledger
on each backend (`database_url`); `Invoke` is its type."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from click.testing import CliRunner, Result

from cli.main import cli

Invoke = Callable[..., Result]


@pytest.fixture
def outcomes(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Invoke:
    """Run `outcomes ARGS…` in-process against a migrated ledger on each backend."""
    monkeypatch.setenv("OUTCOMES_DATABASE_URL", database_url)
    runner = CliRunner()

    def invoke(*args: str, ok: bool = True) -> Result:
        result = runner.invoke(cli, list(args), catch_exceptions=False)
        if ok:
            assert result.exit_code == 0, f"outcomes {' '.join(args)}: {result.output}"
        return result

    return invoke
