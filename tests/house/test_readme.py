"""The README works as written: `make run` (the quickstart) serves in a fresh folder on the
embedded defaults, and every other ```sh / ```bash block of README.md runs against it, in
order, in one shell, as a reader in a second terminal would.

The temporary folder stands in for a clone: its `.venv` links to this checkout's venv, and
`make -f <checkout>/Makefile run PORT=…` is the quickstart's own command, on a free port
instead of 8000 (other suites may hold 8000). One substitution: that port in the blocks' URLs.
The second terminal gets no OUTCOMES_ setting at all: `outcomes status` and `outcomes tools
list` must find what `make run` serves by themselves (its record in `.outcomes/`). `make test`
is not run (it runs this test).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.serving import free_port

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BLOCK = re.compile(r"^```(?:sh|bash)\n(.*?)^```", re.MULTILINE | re.DOTALL)
QUICKSTART = ["make run", "make test"]
READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0


def blocks() -> list[str]:
    return BLOCK.findall(README.read_text())


def commands(block: str) -> list[str]:
    return [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]


@dataclass
class Served:
    folder: Path
    port: int
    env: dict[str, str]
    make: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def second_terminal(served: Served, *args: str) -> subprocess.CompletedProcess[str]:
    """`outcomes ARGS` in the served folder, as the README's second terminal runs it."""
    return subprocess.run(
        [str(Path(sys.prefix) / "bin" / "outcomes"), *args],
        cwd=served.folder,
        env=served.env,
        capture_output=True,
        text=True,
        check=False,
    )


def outcomes_status(served: Served) -> dict[str, object] | None:
    done = second_terminal(served, "status", "--json", "--timeout", "0.5")
    if done.returncode != 0:
        return None
    found = json.loads(done.stdout)
    assert isinstance(found, dict)
    return found


def wait_ready(served: Served) -> None:
    """Until `outcomes status`, told nothing, asks the port `make run` serves, finds the API
    ready there and the embedded worker answering a ping."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        found = outcomes_status(served)
        api = found["api"] if found else {}
        broker = found["broker"] if found else {}
        ready = isinstance(api, dict) and api.get("ready") and api.get("url") == served.url
        if ready and isinstance(broker, dict) and broker.get("workers"):
            return
        if served.make.poll() is not None:
            pytest.fail(f"make run exited {served.make.returncode}:\n{served.output()}")
        if time.monotonic() > deadline:
            pytest.fail(f"make run not ready after {READY_TIMEOUT_S:.0f}s:\n{served.output()}")
        time.sleep(0.2)


def pids_in(text: str) -> list[int]:
    """The serve process's and its worker's pids, from serve's first lines."""
    found = re.search(r"serve pid (\d+), embedded worker pid (\d+)", text)
    return [int(found.group(1)), int(found.group(2))] if found else []


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def stop(served: Served) -> None:
    """SIGTERM to make's process group (make and `outcomes serve`; serve stops its worker),
    then wait until serve and the worker are gone; SIGKILL what is left at the deadline."""
    pids = pids_in(served.output())
    with suppress(ProcessLookupError):
        os.killpg(served.make.pid, signal.SIGTERM)
    served.make.wait(timeout=STOP_TIMEOUT_S)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in pids if alive(pid)]
    for pid in left:
        with suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)  # the worker leads its own session
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert left == [], f"still running after SIGTERM: {left}\n{served.output()}"
    record = served.folder / ".outcomes" / "serve.json"
    assert not record.exists(), f"serve left its record behind:\n{served.output()}"


MAKE_RUN = ("make", "--no-print-directory", "-f")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))  # the clone's venv, made by `make run`
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OUTCOMES_", "MAKE"))}
    env.pop("MFLAGS", None)  # and no OUTCOMES_API_URL: the second terminal finds the server
    log = tmp_path / "make-run.log"
    with log.open("wb") as out:
        make = subprocess.Popen(
            # -o: the venv is this test run's own, never reinstalled through the symlink (a
            # reinstall from here would write this temporary folder into its scripts' paths).
            [*MAKE_RUN, str(ROOT / "Makefile"), "-o", ".venv/.installed", "run", f"PORT={port}"],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, stopped as one
        )
    running = Served(tmp_path, port, env, make, log)
    try:
        yield running
    finally:
        stop(running)


def test_the_quickstart_is_exactly_two_commands() -> None:
    quickstart = blocks()[0]
    assert commands(quickstart) == QUICKSTART


def test_every_readme_block_runs_against_make_run(served: Served) -> None:
    wait_ready(served)
    first = served.output()
    for said in (served.url, "ledger ", "tools loaded", "tracker.read_issue", "tokens create"):
        assert said in first, f"make run's first lines lack {said!r}:\n{first}"
    assert pids_in(first), first

    script = ["set -euo pipefail"]
    for number, block in enumerate(blocks()[1:], start=2):
        script.append(f"echo '### README block {number}' >&2")
        script.append(block.replace("127.0.0.1:8000", f"127.0.0.1:{served.port}"))
    done = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=served.folder,
        env=served.env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\nserver:\n{served.output()}"

    # The HTTP example's last call prints the job's envelope: the tool ran and succeeded.
    envelopes = [
        json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"job_id"')
    ]
    assert [e["status"] for e in envelopes] == ["succeeded"], done.stdout
    assert "outcomes-" in done.stdout and "pong" in done.stdout  # celery inspect ping answered
    # `outcomes status` asked the port make run serves, with nobody telling it, and exited 0
    # (`set -e`); `outcomes tools list` listed the tools it serves.
    assert f"api:        {served.url} ready [from .outcomes/serve.json" in done.stdout
    assert "open jobs:" in done.stdout and "reconciler: running (outcomes serve pid" in done.stdout
    assert "tracker.read_issue  enabled" in done.stdout, done.stdout

    # The same facts as JSON, from the same folder, still with no OUTCOMES_ setting.
    assert not any(name.startswith("OUTCOMES_") for name in served.env)
    status = second_terminal(served, "status", "--json")
    assert status.returncode == 0, f"{status.stdout}\n{status.stderr}\n{served.output()}"
    found = json.loads(status.stdout)
    assert (found["api"]["url"], found["api"]["ready"]) == (served.url, True)
    assert found["api"]["source"] == "serve record"
    assert found["serve"]["record"]["tool_modules"] == ["examples.seed_tools"]
    assert found["reconciler"]["running"] is True, found["reconciler"]
    tools = second_terminal(served, "tools", "list", "--json")
    assert tools.returncode == 0, tools.stderr
    listed = json.loads(tools.stdout)
    names = [t["name"] for t in listed["tools"]]
    assert names == found["serve"]["record"]["tools"] and "tracker.read_issue" in names
    assert listed["tool_modules"]["from"].startswith(".outcomes/serve.json (outcomes serve pid ")


def test_the_tool_example_is_whole_and_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's tool example is a whole tool (no `...`): imported as a module of its own
    folder, it registers, a known issue is closed, a closed one declined, an unknown one a
    typed failure."""
    import importlib

    from ledger.codes import Code
    from ledger.outcomes import Declined, Succeeded, ToolFailure
    from ledger.tools import ToolContext, get_tool, unregister

    section = README.read_text().split("## Writing a tool\n", 1)[1]
    example = re.search(r"^```python\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    assert example is not None
    assert "..." not in example.group(1)
    (tmp_path / "readme_close_issue.py").write_text(example.group(1))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        module = importlib.import_module("readme_close_issue")
        spec = get_tool("tracker.close_issue")
        assert spec is not None and spec.args_model is module.CloseIssue
        ctx = ToolContext(
            job_id="j",
            attempt=1,
            idempotency_key="k",
            heartbeat=lambda: None,
            checkpoint=lambda: None,
        )
        args = spec.args_model.model_validate({"issue_ref": "T-1"})
        assert spec.func(args, ctx) == Succeeded(result={"issue_ref": "T-1", "state": "closed"})
        assert isinstance(spec.func(args, ctx), Declined)
        with pytest.raises(ToolFailure) as raised:
            spec.func(spec.args_model.model_validate({"issue_ref": "T-9"}), ctx)
        assert raised.value.code is Code.REFERENCE_UNRESOLVED
    finally:
        unregister("tracker.close_issue")
        sys.modules.pop("readme_close_issue", None)


def test_the_token_commands_the_readme_shows_are_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every `outcomes tokens create …` the README shows (its optional parts left out) is
    accepted as written: no placeholder the CLI refuses, such as `--account A`."""
    import shlex

    from click.testing import CliRunner

    from cli.main import cli

    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith("OUTCOMES_")]:
        monkeypatch.delenv(name)
    runner = CliRunner()
    assert runner.invoke(cli, ["migrate"], catch_exceptions=False).exit_code == 0
    shown = re.findall(r"outcomes (tokens create [^`|#\n]*)", README.read_text())
    assert len(shown) >= 3, shown
    for command in shown:
        words = shlex.split(re.sub(r"\[[^]]*\]", "", command).split("|")[0].split(" /")[0])
        words = [w for w in words if w != "--json"]
        done = runner.invoke(cli, words, catch_exceptions=False)
        assert done.exit_code == 0, f"outcomes {command}: {done.output}"
