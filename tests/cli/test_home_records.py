"""What `outcomes serve` leaves in its home folder for a second terminal, and what the CLI makes
of it: `outcomes status` asks the recorded URL (explicit options and OUTCOMES_API_URL win) and
exits 3 when the API is not ready; a stale record (its pid gone) is ignored and said so;
`outcomes tools list` and `tokens create --tools` load the recorded tools modules unless
OUTCOMES_TOOLS is set; and the reconciler's heartbeat tells a running reconciler from none."""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner, Result

from cli.home_records import (
    BeatingRunner,
    Heartbeat,
    ServeRecord,
    client_url,
    find_served,
    process_alive,
    reconciler_liveness,
    record_serve,
    write_record,
)
from cli.main import cli
from cli.status_commands import DEFAULT_API_URL, EXIT_NOT_READY
from ledger.clock import format_time, now
from ledger.errors import StorageUnavailableError
from ledger.reconcile_rules import ReconcilePolicy
from ledger.runtime.ledger import Ledger
from ledger.services.reconcile import ReconcileRunner
from tests.serving import embedded_env, outcomes_argv
from tests.tools import ECHO

HOME = Path(".outcomes")
POLICY = ReconcilePolicy(relay_after_s=3600)


@pytest.fixture
def folder(tmp_path: Path, sqlite_database: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A second terminal in the folder `outcomes serve` runs in: a SQLite ledger (embedded
    defaults) and no OUTCOMES_API_URL, OUTCOMES_TOOLS or broker setting."""
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith("OUTCOMES_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("OUTCOMES_DATABASE_URL", sqlite_database)
    return tmp_path


def outcomes(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def status(*args: str) -> tuple[int, dict[str, Any]]:
    done = outcomes("status", "--timeout", "0.2", "--json", *args)
    return done.exit_code, orjson.loads(done.stdout)


def gone_pid() -> int:
    """The pid of a process that ran and was reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def serve_record(url: str, pid: int, modules: tuple[str, ...] = ()) -> ServeRecord:
    return ServeRecord(
        url=url,
        pid=pid,
        hostname=socket.gethostname(),
        tool_modules=modules,
        tools=(),
        started_at=format_time(now()),
        worker_pid=None,
        reconciler=True,
    )


@contextmanager
def api_answering(code: int) -> Iterator[str]:
    """An HTTP server whose /readyz answers `code`; yields its base URL."""

    class Ready(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(code if self.path == "/readyz" else 404)
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ready)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# -- where `outcomes status` asks, and its exit code -----------------------------------------


def test_status_asks_the_url_serve_recorded_and_exits_0_when_ready(folder: Path) -> None:
    with api_answering(200) as url:
        record_serve(serve_record(url, os.getpid()))
        code, found = status()
        text = outcomes("status", "--timeout", "0.2")
    assert code == 0, found
    assert found["api"] == {"url": url, "ready": True, "error": None, "source": "serve record"}
    assert found["serve"]["state"] == "running" and found["serve"]["record"]["url"] == url
    assert text.exit_code == 0
    assert f"api:        {url} ready [from .outcomes/serve.json (outcomes serve pid" in text.stdout


def test_an_explicit_url_wins_over_the_record(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with api_answering(200) as url:
        record_serve(serve_record(url, os.getpid()))
        code, found = status("--api-url", "http://127.0.0.1:9")
        assert (code, found["api"]["url"], found["api"]["source"]) == (
            EXIT_NOT_READY,
            "http://127.0.0.1:9",
            "--api-url",
        )
        monkeypatch.setenv("OUTCOMES_API_URL", "http://127.0.0.1:9")
        code, found = status()
        assert (code, found["api"]["source"]) == (EXIT_NOT_READY, "OUTCOMES_API_URL")


def test_status_exits_3_when_the_api_is_not_ready_and_prints_everything(folder: Path) -> None:
    with api_answering(503) as url:
        code, found = status("--api-url", url)
        text = outcomes("status", "--timeout", "0.2", "--api-url", url)
    assert code == EXIT_NOT_READY == 3
    assert found["api"]["ready"] is False and found["api"]["error"] == "HTTP 503"
    assert "open_jobs" in found and "reconciler" in found  # the rest is there all the same
    assert text.exit_code == EXIT_NOT_READY
    assert f"api:        {url} NOT READY (HTTP 503)" in text.stdout
    assert "ledger:" in text.stdout
    unreachable, _ = status("--api-url", "http://127.0.0.1:9")  # nothing listens
    assert unreachable == EXIT_NOT_READY


def test_a_stale_record_is_ignored_and_said_so(folder: Path) -> None:
    pid = gone_pid()
    with api_answering(200) as url:
        record_serve(serve_record(url, pid))
        _, found = status()
        text = outcomes("status", "--timeout", "0.2").stdout
    assert (found["api"]["url"], found["api"]["source"]) == (DEFAULT_API_URL, "default")
    assert found["serve"]["state"] == "stale" and found["serve"]["record"]["pid"] == pid
    note = f"ignored stale .outcomes/serve.json (outcomes serve pid {pid} is gone)"
    assert found["serve"]["note"] == note
    assert f"serve:      {note}" in text


def test_an_unreadable_record_is_ignored_and_said_so(folder: Path) -> None:
    HOME.mkdir()
    (HOME / "serve.json").write_text('{"url": "http://127.0.0.1:1"')  # cut short
    served = find_served()
    assert (served.state, served.record) == ("unreadable", None)
    _, found = status()
    assert found["api"]["source"] == "default" and found["serve"]["state"] == "unreadable"


def test_a_zombie_is_not_a_running_serve() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    stat = Path(f"/proc/{child.pid}/stat")
    deadline = time.monotonic() + 10
    while stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":  # exited, not reaped yet
        assert time.monotonic() < deadline
        time.sleep(0.01)
    try:
        assert process_alive(child.pid, socket.gethostname()) is False
        assert process_alive(os.getpid(), socket.gethostname()) is True
        assert process_alive(child.pid, "another-host") is True  # cannot tell: not stale
    finally:
        child.wait()


def test_the_recorded_url_is_where_a_client_on_this_host_connects() -> None:
    assert client_url("127.0.0.1", 18610) == "http://127.0.0.1:18610"
    assert client_url("0.0.0.0", 8000) == "http://127.0.0.1:8000"
    assert client_url("::", 8000) == "http://[::1]:8000"


# -- the tools a second terminal sees --------------------------------------------------------


def second_terminal(folder: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`outcomes ARGS` as a process (the tool registry is per process) with no OUTCOMES_
    setting but the ledger and `env`."""
    ledger = os.environ["OUTCOMES_DATABASE_URL"]
    return subprocess.run(
        outcomes_argv(*args),
        cwd=folder,
        env=embedded_env(OUTCOMES_DATABASE_URL=ledger, **env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_tools_list_lists_the_tools_serve_loaded(folder: Path) -> None:
    record_serve(serve_record("http://127.0.0.1:9", os.getpid(), ("tests.tools",)))
    listed = second_terminal(folder, "tools", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    body = orjson.loads(listed.stdout)
    assert ECHO in [t["name"] for t in body["tools"]]
    where = f".outcomes/serve.json (outcomes serve pid {os.getpid()})"
    assert body["tool_modules"] == {"modules": ["tests.tools"], "from": where, "note": None}
    text = second_terminal(folder, "tools", "list")
    assert ECHO in [line.split()[0] for line in text.stdout.splitlines()]
    assert f"outcomes: tools of tests.tools, from {where}" in text.stderr
    # tokens create checks --tools against the same tools.
    token = second_terminal(folder, "tokens", "create", "--account", "a", "--role", "agent")
    assert token.returncode == 0, token.stderr
    named = second_terminal(
        folder, "tokens", "create", "--account", "a", "--role", "agent", "--tools", ECHO
    )
    assert named.returncode == 0, named.stderr


def test_outcomes_tools_set_wins_over_the_record(folder: Path) -> None:
    record_serve(serve_record("http://127.0.0.1:9", os.getpid(), ("tests.tools",)))
    listed = second_terminal(folder, "tools", "list", "--json", OUTCOMES_TOOLS="")
    body = orjson.loads(listed.stdout)
    assert body["tools"] == [] and body["tool_modules"]["from"] == "OUTCOMES_TOOLS"


def test_tools_list_ignores_a_stale_record_and_says_so(folder: Path) -> None:
    pid = gone_pid()
    record_serve(serve_record("http://127.0.0.1:9", pid, ("tests.tools",)))
    text = second_terminal(folder, "tools", "list")
    assert text.returncode == 0, text.stderr
    assert "no tools loaded" in text.stdout and ECHO not in text.stdout
    assert f"ignored stale .outcomes/serve.json (outcomes serve pid {pid} is gone)" in text.stderr


# -- whether a reconciler runs ---------------------------------------------------------------


def reconciler(*args: str) -> tuple[dict[str, Any], str]:
    _, found = status("--api-url", "http://127.0.0.1:9", *args)
    text = outcomes("status", "--timeout", "0.2", "--api-url", "http://127.0.0.1:9").stdout
    line = next(line for line in text.splitlines() if line.startswith("reconciler:"))
    assert isinstance(found["reconciler"], dict)
    return found["reconciler"], line


def test_no_heartbeat_says_no_reconciler_runs(folder: Path) -> None:
    found, line = reconciler()
    assert (found["running"], found["state"], found["last_finding"]) == (False, "never", None)
    assert line == (
        "reconciler: NOT RUNNING (none has recorded a pass in .outcomes/); last finding never"
    )


def test_a_beating_reconciler_is_running(folder: Path, memory_ledger: Ledger) -> None:
    heartbeat = Heartbeat("outcomes serve", 5.0)
    heartbeat.start()
    found, line = reconciler()
    assert (found["running"], found["last_pass_at"], found["pid"]) == (True, None, os.getpid())
    assert line.startswith(f"reconciler: running (outcomes serve pid {os.getpid()}), no pass yet")

    BeatingRunner(memory_ledger, None, POLICY, heartbeat).run_once()  # a real pass, recorded
    found, line = reconciler()
    assert found["running"] is True and found["last_pass_s_ago"] < 5
    assert line.startswith(f"reconciler: running (outcomes serve pid {os.getpid()}), last pass ")
    assert line.endswith("; last finding never")

    heartbeat.stop()
    found, line = reconciler()
    assert (found["running"], found["state"]) == (False, "stopped")
    assert "reconciler: NOT RUNNING (no pass for " in line
    assert f"outcomes serve pid {os.getpid()} stopped)" in line
    heartbeat.passed()  # a pass that ends after stop() does not bring it back
    assert reconciler()[0]["state"] == "stopped"


def test_a_failed_pass_is_recorded_and_still_raised(
    folder: Path, memory_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    def down(_: ReconcileRunner) -> None:
        raise StorageUnavailableError("database away")

    monkeypatch.setattr(ReconcileRunner, "run_once", down)
    heartbeat = Heartbeat("outcomes reconcile", 5.0)
    with pytest.raises(StorageUnavailableError):
        BeatingRunner(memory_ledger, None, POLICY, heartbeat).run_once()
    found, line = reconciler()
    assert found["running"] is True  # failing passes, but there
    assert found["last_error"] == "StorageUnavailableError: database away"
    assert "then a failed pass (StorageUnavailableError: database away)" in line


def beat(pid: int, quiet_s: float) -> None:
    at = format_time(now() - timedelta(seconds=quiet_s))
    write_record(
        HOME / "reconciler.json",
        {
            "by": "outcomes serve",
            "pid": pid,
            "hostname": socket.gethostname(),
            "interval_s": 5.0,
            "started_at": at,
            "last_pass_at": at,
            "last_error": None,
            "last_error_at": None,
            "stopped_at": None,
        },
    )


def test_a_heartbeat_of_a_gone_process_is_not_running(folder: Path) -> None:
    pid = gone_pid()
    beat(pid, quiet_s=2)
    found, line = reconciler()
    assert (found["running"], found["state"], found["pid"]) == (False, "gone", pid)
    assert line.startswith("reconciler: NOT RUNNING (no pass for ")
    assert f"; outcomes serve pid {pid} is gone); last finding never" in line


def test_a_silent_heartbeat_is_not_running(folder: Path) -> None:
    beat(os.getpid(), quiet_s=120)  # the process is there; its passes stopped
    found, line = reconciler()
    assert (found["running"], found["state"]) == (False, "stalled")
    assert found["last_pass_s_ago"] >= 120
    assert "is there but silent)" in line


def test_liveness_is_unknown_off_embedded_defaults(folder: Path) -> None:
    Heartbeat("outcomes serve", 5.0).start()
    assert reconciler_liveness(embedded=False).to_json()["running"] is None
    assert reconciler_liveness(embedded=True).running is True
