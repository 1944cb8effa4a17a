"""`outcomes tools new NAME` (issue 47): the module and test it writes work as written. The test
passes under pytest run from the folder, and `outcomes serve` on embedded defaults, told
OUTCOMES_TOOLS=<module> with the folder on PYTHONPATH, loads the tool and a call succeeds. It
never overwrites a file, and refuses a name the registry would refuse."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from cli.main import cli
from tests.cli.test_processes import http
from tests.serving import ROOT, embedded_env, outcomes_argv, serving


def scaffold(folder: Path, name: str = "billing.refund") -> str:
    result = CliRunner().invoke(
        cli, ["tools", "new", name, "--dir", str(folder)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    return result.output


def test_the_scaffold_is_written_with_the_next_commands(tmp_path: Path) -> None:
    said = scaffold(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "billing_refund.py",
        "test_billing_refund.py",
    ]
    assert f"wrote {tmp_path / 'billing_refund.py'}" in said
    assert "python -m pytest test_billing_refund.py" in said
    assert "export PYTHONPATH=. OUTCOMES_TOOLS=billing_refund" in said
    assert "..." not in (tmp_path / "billing_refund.py").read_text()


def test_json_says_what_was_written_and_what_to_run(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["tools", "new", "billing.refund", "--dir", str(tmp_path), "--json"]
    )
    assert result.exit_code == 0, result.output
    said = orjson.loads(result.stdout)
    assert (said["tool"], said["module"]) == ("billing.refund", "billing_refund")
    assert said["written"] == [
        str(tmp_path / "billing_refund.py"),
        str(tmp_path / "test_billing_refund.py"),
    ]
    assert "export PYTHONPATH=. OUTCOMES_TOOLS=billing_refund" in said["next"]


def test_an_existing_file_is_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "test_billing_refund.py").write_text("mine\n")
    result = CliRunner().invoke(cli, ["tools", "new", "billing.refund", "--dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "already exists; nothing written" in result.stderr
    assert (tmp_path / "test_billing_refund.py").read_text() == "mine\n"
    assert not (tmp_path / "billing_refund.py").exists()


@pytest.mark.parametrize("name", ["Billing.refund", "billing..refund", "9.x", "a-b.c", "billing."])
def test_a_name_the_registry_refuses_is_refused(tmp_path: Path, name: str) -> None:
    result = CliRunner().invoke(cli, ["tools", "new", name, "--dir", str(tmp_path)])
    assert result.exit_code == 1 and "is not a tool name" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_keyword_name_still_makes_a_module_that_imports(tmp_path: Path) -> None:
    scaffold(tmp_path, "ops.import")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_ops_import.py"],
        cwd=tmp_path,
        env=embedded_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_generated_test_passes_under_pytest(tmp_path: Path) -> None:
    scaffold(tmp_path)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_billing_refund.py"],
        cwd=tmp_path,
        env=embedded_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "4 passed" in run.stdout


def test_serve_loads_the_generated_tool_and_a_call_succeeds(tmp_path: Path) -> None:
    tools_folder = tmp_path / "mytools"
    tools_folder.mkdir()
    scaffold(tools_folder)
    home = tmp_path / "home"
    home.mkdir()
    env = embedded_env(OUTCOMES_TOOLS="billing_refund", PYTHONPATH=f"{ROOT}:{tools_folder}")
    subprocess.run(outcomes_argv("migrate"), cwd=home, env=env, check=True, timeout=120)
    made = subprocess.run(
        outcomes_argv(
            "tokens",
            "create",
            "--account",
            "acme",
            "--role",
            "agent",
            "--tools",
            "billing.refund",
            "--json",
        ),
        cwd=home,
        env=env,
        capture_output=True,
        timeout=120,
        check=True,
    )
    token = orjson.loads(made.stdout)["token"]
    with serving(home, env) as base:
        status, listed = http("GET", base + "/v1/tools", token)
        assert status == 200 and [t["name"] for t in listed["tools"]] == ["billing.refund"]
        status, body = http(
            "POST", base + "/v1/jobs", token, {"tool": "billing.refund", "args": {"ref": "R-1"}}
        )
        assert status == 202, body
        deadline = time.monotonic() + 60
        envelope: dict[str, Any] = body
        while not envelope.get("terminal") and time.monotonic() < deadline:
            _, envelope = http("GET", f"{base}/v1/jobs/{body['job_id']}?wait=20", token)
    assert (envelope["status"], envelope["result"]) == (
        "succeeded",
        {"ref": "R-1", "state": "open", "attempt": 1},
    )
