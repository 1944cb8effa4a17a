"""A second `outcomes serve` in the same folder (issue 47, item 1): when its port is taken it
starts nothing, says why, exits 1 and leaves the live server's serve.json alone; a serve on
another port removes only its own record, putting back the one still running."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import orjson
import pytest

from cli.home_records import find_served, record_serve
from cli.serve_commands import _recorded
from ledger.settings import load_settings
from tests.cli.test_home_records import serve_record
from tests.serving import embedded_env, outcomes_argv, serving


def test_a_second_serve_on_a_taken_port_starts_nothing_and_keeps_the_live_record(
    tmp_path: Path,
) -> None:
    env = embedded_env(OUTCOMES_TOOLS="tests.tools")
    record_path = tmp_path / ".outcomes" / "serve.json"
    with serving(tmp_path, env) as base:
        live = orjson.loads(record_path.read_bytes())
        port = base.rsplit(":", 1)[1]
        second = subprocess.run(
            outcomes_argv("serve", "--port", port),
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert second.returncode == 1, second.stdout + second.stderr
        assert second.stdout == ""  # no "serving …" banner, no "embedded worker pid"
        assert second.stderr.startswith(
            f"outcomes: cannot serve on 127.0.0.1:{port}: the port is taken "
            f"(`outcomes serve` pid {live['pid']} serves it from this folder); "
            "nothing was started."
        ), second.stderr
        assert "Error" not in second.stderr and "Traceback" not in second.stderr
        assert orjson.loads(record_path.read_bytes()) == live
        with urllib.request.urlopen(base + "/healthz", timeout=5) as response:
            assert response.status == 200


def test_a_port_held_by_another_program_is_named_as_such(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        second = subprocess.run(
            outcomes_argv("serve", "--port", str(port)),
            cwd=tmp_path,
            env=embedded_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert second.returncode == 1
    assert second.stdout == ""
    assert "the port is taken (another process listens on it); nothing was started" in (
        second.stderr
    )
    assert not (tmp_path / ".outcomes").exists()  # no ledger made, nothing recorded


def test_a_serve_on_another_port_puts_back_the_record_of_the_one_still_running(
    tmp_path: Path, sqlite_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OUTCOMES_DATABASE_URL", sqlite_database)
    still_running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        other = serve_record("http://127.0.0.1:9", still_running.pid)
        record_serve(other)
        with _recorded(load_settings(), "127.0.0.1", 10, None, reconciler=False):
            ours = find_served().record
            assert ours is not None and ours.pid == os.getpid()
        assert find_served().record == other
    finally:
        still_running.kill()
        still_running.wait()
