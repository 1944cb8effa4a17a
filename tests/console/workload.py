"""A real deployment for the console's browser tests and screenshots: `outcomes serve` on
embedded defaults with the example tools, tokens made by the CLI, a brake pulled by the CLI,
and a mixed workload through the HTTP API: a success, a failure after a retry (same
fingerprint), a failure whose argument holds the canary, a job the brake refuses, and a paid
job whose worker is killed (by pid) mid-run, which the embedded reconciler records as
OUTCOME_MISSING / worker_lost (verify_at_source)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.console.ledger_rows import CANARY
from tests.plugins.deployments import wait_until
from tests.serving import embedded_env, outcomes_argv, serving

LEASE_S = "2"  # the killed worker's lease lapses soon; a live one renews it every 2/3 s
BRAKE_REASON = "cards render blank after the font update"


@dataclass(frozen=True)
class Workload:
    base: str
    home: Path
    operator: str
    auditor: str
    agent: str
    succeeded: str
    failed: str  # SOURCE_UNRELIABLE after a retry with an unchanged fingerprint
    canary: str  # failed; its argument held the canary
    refused: str  # refused at submit by the brake
    lost: str  # OUTCOME_MISSING / worker_lost


def _cli(home: Path, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        outcomes_argv(*args), cwd=home, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def _output(process: subprocess.Popen[bytes]) -> Any:
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err.decode(errors="replace")[-2000:]
    return json.loads(out)


@contextmanager
def deployment(home: Path) -> Iterator[Workload]:
    env = embedded_env(OUTCOMES_TOOLS="examples.seed_tools", OUTCOMES_LEASE_S=LEASE_S)
    with serving(home, env) as base:
        # The CLI's processes start in parallel: each one's imports cost about a second.
        made = {
            role: _cli(
                home, env, "tokens", "create", "--account", account, "--role", role, "--json"
            )
            for role, account in (("operator", "*"), ("auditor", "*"), ("agent", "acme"))
        }
        pull = _cli(
            home,
            env,
            "brake",
            "pull",
            "--scope",
            "tool:social.draw_card",
            "--reason",
            BRAKE_REASON,
            "--force",  # this CLI loads no tools and no job names it yet
            "--json",
        )
        secrets = {role: str(_output(p)["token"]) for role, p in made.items()}
        _output(pull)
        with httpx.Client(
            base_url=base, timeout=30, headers={"Authorization": f"Bearer {secrets['agent']}"}
        ) as api:
            ids = {
                "succeeded": _submit(api, "tracker.read_issue", {"issue_ref": "T-1"}),
                "failed": _submit(
                    api, "tracker.read_issue", {"issue_ref": "T-2", "connector": "timeout"}
                ),
                # A declared secret (SecretStr) that the tool repeats as it crashes.
                "canary": _submit(api, "debug.crash", {"secret": CANARY}),
                "refused": _submit(api, "social.draw_card", {"post_id": "p-1"}),
            }
            for job_id in ids.values():
                _wait(api, job_id, lambda e: bool(e["terminal"]))
            lost = _submit(api, "debug.spend_slowly", {"seconds": 120})
            _wait(api, lost, lambda e: e["status"] == "running")
            _kill_worker(home / "serve.log")
            # The embedded reconciler (a pass every 5 s) finds the lapsed lease.
            _wait(api, lost, lambda e: bool(e["terminal"]), timeout_s=45)
        yield Workload(
            base, home, secrets["operator"], secrets["auditor"], secrets["agent"], lost=lost, **ids
        )


def _submit(api: httpx.Client, tool: str, args: dict[str, Any]) -> str:
    answer = api.post("/v1/jobs", json={"tool": tool, "args": args})
    # 202 accepted; a refusal (409 for a brake) is a recorded decision with its job id too.
    assert answer.status_code in (200, 202, 409) and "job_id" in answer.json(), answer.text
    return str(answer.json()["job_id"])


def _wait(api: httpx.Client, job_id: str, until: Any, timeout_s: float = 30) -> None:
    def holds() -> bool:
        return bool(until(api.get(f"/v1/jobs/{job_id}", params={"wait": 1}).json()))

    wait_until(holds, timeout_s, f"job {job_id}")


def _kill_worker(log: Path) -> None:
    found = re.search(r"worker pid (\d+)", log.read_text(errors="replace"))
    assert found, "serve did not report its worker's pid"
    pid = int(found.group(1))
    os.killpg(pid, signal.SIGKILL)  # the worker leads its own session

    def dead() -> bool:  # a zombie until serve, its parent, reaps it when it stops
        try:
            return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
        except (FileNotFoundError, IndexError):
            return True

    wait_until(dead, 10, f"worker {pid} to die")
