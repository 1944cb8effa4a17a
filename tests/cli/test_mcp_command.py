"""`outcomes mcp` finds its tools and its ledger as the other commands of the folder do (issue
47, item 4): without OUTCOMES_TOOLS it offers the tools of the `outcomes serve` running there
(its serve.json), or warns on stderr that it offers none; `--home <folder>/.outcomes` (the path
serve prints) uses that ledger instead of making a nested empty one."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from cli.home_records import record_serve
from cli.main import cli
from tests.cli.test_home_records import serve_record
from tests.serving import embedded_env, outcomes_argv
from tests.tools import ECHO

HANDSHAKE = [
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "mcp-command-test", "version": "1"},
        },
    },
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
]


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A folder on embedded defaults with a migrated ledger under ./.outcomes/ and an agent
    token of it."""
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith("OUTCOMES_")]:
        monkeypatch.delenv(name)
    runner = CliRunner()
    assert runner.invoke(cli, ["migrate"], catch_exceptions=False).exit_code == 0
    made = runner.invoke(
        cli,
        [
            "tokens",
            "create",
            "--account",
            "acme",
            "--role",
            "agent",
            "--allow-unknown-tools",
            "--json",
        ],
        catch_exceptions=False,
    )
    return tmp_path, orjson.loads(made.stdout)["token"]


def mcp(cwd: Path, token: str, *args: str) -> tuple[list[str], str]:
    """`outcomes mcp ARGS` over stdio: the handshake and tools/list, then end of input once
    tools/list is answered (killed if it is not within 60 s); the tools listed and what it
    said on stderr."""
    server = subprocess.Popen(
        outcomes_argv("mcp", *args),
        cwd=cwd,
        env=embedded_env(OUTCOMES_TOKEN=token),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert server.stdin is not None and server.stdout is not None
    deadline = threading.Timer(60, server.kill)
    deadline.start()
    try:
        server.stdin.write(b"".join(orjson.dumps(m) + b"\n" for m in HANDSHAKE))
        server.stdin.flush()
        listed: dict[str, Any] = {}
        for line in iter(server.stdout.readline, b""):
            answer = orjson.loads(line)
            if answer.get("id") == 2:
                listed = answer
                break
        server.stdin.close()
        server.wait(timeout=60)
        assert server.stderr is not None
        stderr = server.stderr.read()
    finally:
        deadline.cancel()
        if server.poll() is None:
            server.kill()
            server.wait()
    assert "result" in listed, (listed, stderr)
    return [t["name"] for t in listed["result"]["tools"]], stderr.decode()


def test_without_outcomes_tools_it_offers_the_tools_serve_runs(folder: tuple[Path, str]) -> None:
    home, token = folder
    record_serve(serve_record("http://127.0.0.1:9", os.getpid(), ("tests.tools",)))
    names, said = mcp(home, token)
    assert ECHO.replace(".", "__") in names
    assert "tools of tests.tools, from .outcomes/serve.json" in said


def test_without_any_tools_it_warns_on_stderr(folder: tuple[Path, str]) -> None:
    home, token = folder
    names, said = mcp(home, token)
    assert all(n.startswith("outcome_") for n in names)  # the ledger's own tools only
    assert "WARNING: no tools loaded: agents will be offered none" in said


def test_home_given_as_the_outcomes_folder_uses_its_ledger(
    folder: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    home, token = folder
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    names, said = mcp(elsewhere, token, "--home", str(home / ".outcomes"))
    assert "not a valid token" not in said, said  # the token of that ledger was accepted
    assert "outcome_get" in names
    assert not (home / ".outcomes" / ".outcomes").exists()
