"""No line the CLI prints for a bad input names a Python class (issue 47, item 5): the reason
is the error's own words (`outcomes: no job …`, not `outcomes: JobNotFoundError: no job …`),
and a bad input never ends in a traceback."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli

MISSING = "0190b6f0-0000-7000-8000-000000000000"
# A Python class name as a reason's label: `ValueError:`, `JobNotFoundError:`, `OSError` …
CLASS_NAME = re.compile(r"\b[A-Z][A-Za-z]*(Error|Exception|Exit|Interrupt)\b")

BAD_INPUTS: list[tuple[list[str], dict[str, str], str]] = [
    (["jobs", "show", MISSING], {}, f"no job {MISSING}"),
    (["jobs", "cancel", MISSING], {}, f"no job {MISSING}"),
    (["tokens", "revoke", MISSING], {}, f"no token {MISSING}"),
    (["tokens", "create", "--account", "A", "--role", "agent"], {}, "account 'A' must match"),
    (["brake", "pull", "--scope", "bogus", "--reason", "x"], {}, "brake scope 'bogus' must be"),
    (["brake", "release", "nope", "--reason", "x"], {}, "brake nope is unknown"),
    (["webhooks", "remove", "nope"], {}, "no webhook nope"),
    (["secrets", "check", "nope", "x"], {}, "no job nope"),
    (["audit", "verify", "--archive", "/nonexistent"], {}, "is not a folder of archives"),
    (["audit", "export", "-o", "/nonexistent/x"], {}, "No such file or directory"),
    (["archive", "--older-than", "99999999999d", "--to", "a"], {}, "longer ago than any date"),
    (["tools", "list"], {"OUTCOMES_TOOLS": "nope.mod"}, "cannot import 'nope.mod'"),
    (["jobs", "list"], {"OUTCOMES_DATABASE_URL": "garbage"}, "bad database URL"),
    (
        ["jobs", "list"],
        {"OUTCOMES_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/x"},
        "connection failed",
    ),
    (["status", "--api-url", "garbage", "--timeout", "0.2"], {}, "unknown url type"),
    (["status", "--api-url", "http://127.0.0.1:1", "--timeout", "0.2"], {}, "refused"),
    (["audit", "summary", "--since", "notadate"], {}, "is not an ISO 8601 date"),
]


@pytest.fixture
def folder(tmp_path: Path, sqlite_database: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith("OUTCOMES_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("OUTCOMES_DATABASE_URL", sqlite_database)
    return tmp_path


@pytest.mark.parametrize(
    ("args", "env", "said"), BAD_INPUTS, ids=[" ".join(a[:2]) for a, _, _ in BAD_INPUTS]
)
def test_no_line_for_a_bad_input_names_a_python_class(
    folder: Path, args: list[str], env: dict[str, str], said: str
) -> None:
    result = CliRunner(env=env).invoke(cli, args, catch_exceptions=False)
    if args[0] != "status":  # status reports a broken API and still shows the rest
        assert result.exit_code != 0, result.output
    assert said in result.output, result.output
    assert "Traceback" not in result.output
    named = [line for line in result.output.splitlines() if CLASS_NAME.search(line)]
    assert named == [], named


def test_an_unreadable_serve_record_is_described_without_a_class_name(folder: Path) -> None:
    (folder / ".outcomes").mkdir()
    (folder / ".outcomes" / "serve.json").write_text('{"url": "http://127.0.0.1:1"')  # cut short
    result = CliRunner().invoke(cli, ["status", "--timeout", "0.2"], catch_exceptions=False)
    assert "ignored unreadable .outcomes/serve.json (not a record:" in result.output
    assert [line for line in result.output.splitlines() if CLASS_NAME.search(line)] == []
