"""One campaign: start the private cluster, measure the maximum throughput, run the workload at
a share of it while the nemesis injects its schedule, heal, let the reconciler reach a fixed
point, then export the ledger, verify it and check it against the ground truth.

Everything lands in the output folder: campaign.json (options, rates, timings), faults.jsonl,
submissions.jsonl, truth.jsonl, events.jsonl (the export), verify.json, memory.json,
verdict.json and table.txt. Every process and service started is stopped by pid, error or not.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ledger.codes import Status
from ledger.errors import LedgerError
from ledger.runtime.ledger import open_ledger
from ledger.services import audit
from nemesis import checker, report, truth
from nemesis.cluster import Cluster, Shape
from nemesis.faults import KINDS, Nemesis, read_log, schedule
from nemesis.memory import Sampler
from nemesis.processes import run_cli
from nemesis.services import Reaper
from nemesis.workload import Submission, Workload

CALIBRATION_CLIENTS = 16  # closed loop: more would only queue in the API and time out
OPEN = (Status.QUEUED.value, Status.RUNNING.value, Status.RETRYING.value)


@dataclass(frozen=True)
class Options:
    seed: int
    duration_s: float
    rate_share: float = 0.5
    max_rate: float | None = None  # None: measured (calibration) first
    calibrate_s: float = 10.0
    mean_fault_gap_s: float = 8.0
    warmup_s: float = 5.0  # the workload runs this long before the first fault
    mcp_share: float = 0.2
    kinds: tuple[str, ...] = tuple(KINDS)
    faults: bool = True
    settle_timeout_s: float = 180.0
    shape: Shape = field(default_factory=Shape)


@dataclass
class Result:
    verdict: checker.Verdict
    out: Path
    info: dict[str, Any]
    memory: dict[str, list[int]]


def say(text: str) -> None:
    """Progress on stderr (stdout is the table or the JSON)."""
    print(f"nemesis {time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


def run(options: Options, out: Path, command: str = "") -> Result:
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.json*"):
        stale.unlink()  # a rerun with the same seed starts a clean folder
    home = Path(tempfile.mkdtemp(prefix=f"nemesis-{options.seed}-"))
    reaper = Reaper()
    info: dict[str, Any] = {"seed": options.seed, "command": command, "options": _options(options)}
    try:
        cluster = Cluster(home, options.shape, f"nemesis-{options.seed}", reaper)
        began = time.monotonic()
        cluster.start()
        info["startup_s"] = round(time.monotonic() - began, 1)
        say(f"cluster up in {info['startup_s']} s ({home})")
        return _campaign(cluster, options, out, info)
    finally:
        say("stopping every process and service")
        reaper.run()
        _keep_logs(home, out)
        say("stopped")
        shutil.rmtree(home, ignore_errors=True)


def _campaign(cluster: Cluster, options: Options, out: Path, info: dict[str, Any]) -> Result:
    assert cluster.api is not None
    with open_ledger(cluster.admin_env()["OUTCOMES_DATABASE_URL"], pool_size=1) as ledger:
        probe = Workload(cluster.api.url, cluster.token, options.seed, 0.0, f"cal{options.seed}")
        max_rate = options.max_rate or calibrate(probe, options, lambda: _open_jobs(ledger))
        rate = max_rate * options.rate_share
        info |= {"max_rate": round(max_rate, 2), "rate": round(rate, 2)}
        say(
            f"max {max_rate:.1f} jobs/s; workload at {rate:.1f} jobs/s for {options.duration_s:g} s"
        )
        planned = (
            schedule(
                options.seed,
                max(0.0, options.duration_s - options.warmup_s),
                options.mean_fault_gap_s,
                options.shape.lease_s,
                options.shape.workers,
                options.kinds,
            )
            if options.faults
            else []
        )
        nemesis = Nemesis(cluster, planned, out / "faults.jsonl")
        workload = Workload(
            cluster.api.url, cluster.token, options.seed, options.mcp_share, f"s{options.seed}"
        )
        sampler = Sampler(cluster.processes)
        sampler.start()
        began = time.monotonic()
        injector = threading.Thread(target=nemesis.run, args=(began + options.warmup_s,))
        injector.start()
        try:
            asyncio.run(workload.run(rate, options.duration_s, progress=say))
        finally:
            nemesis.stop()  # no new fault past the duration; those under way end by themselves
            injector.join()
        info["workload_s"] = round(time.monotonic() - began, 1)
        info["schedule_slip_max_s"] = round(workload.late_s, 2)
        info["submitted"] = len(workload.submissions)
        info["achieved_rate"] = round(len(workload.submissions) / options.duration_s, 2)
        info["fault_errors"] = nemesis.errors
        say(f"workload done: {len(workload.submissions)} jobs, {len(nemesis.logged)} faults")
        cluster.heal()
        settled = time.monotonic()
        info["fixed_point"] = settle(lambda: _open_jobs(ledger), options)
        info["settle_s"] = round(time.monotonic() - settled, 1)
        say(f"fixed point {info['fixed_point']} after {info['settle_s']} s; checking")
        sampler.stop()
    cluster.stop_product()  # nothing more is written: the export is the whole history
    say("product stopped; exporting and verifying")
    return _judge(cluster, out, info, [*probe.submissions, *workload.submissions], sampler)


def calibrate(probe: Workload, options: Options, open_jobs: Any) -> float:
    """The maximum throughput: jobs submitted flat out over HTTP for `calibrate_s`, divided by
    the time until the last of them was terminal (submission and execution both count)."""
    began = time.monotonic()
    asyncio.run(probe.run(0, options.calibrate_s, in_flight_max=CALIBRATION_CLIENTS))
    deadline = time.monotonic() + options.settle_timeout_s
    while open_jobs() and time.monotonic() < deadline:
        time.sleep(0.1)  # polling the ledger: the drain has no event to wait on
    return len(probe.submissions) / (time.monotonic() - began)


def settle(open_jobs: Any, options: Options) -> bool:
    """Wait until no accepted job is open, and stays so over two reconcile passes."""
    deadline = time.monotonic() + options.settle_timeout_s
    quiet_for = 2 * options.shape.reconcile_interval_s + 1
    quiet_since: float | None = None
    while time.monotonic() < deadline:
        if open_jobs():
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_for:
            return True
        time.sleep(0.25)  # polling the ledger for the fixed point
    return False


def _open_jobs(ledger: Any) -> int:
    """Open jobs now; -1 while the database is away (a restart by the nemesis)."""
    try:
        counts = audit.summary(ledger, None).by_status
    except LedgerError:
        return -1
    return sum(int(counts.get(status, 0)) for status in OPEN)


def _judge(
    cluster: Cluster,
    out: Path,
    info: dict[str, Any],
    submitted: list[Submission],
    sampler: Sampler,
) -> Result:
    env = cluster.admin_env()
    events_path = out / "events.jsonl"
    run_cli(env, "audit", "export", "-o", str(events_path), timeout_s=600)
    verify = _verify(env)
    (out / "verify.json").write_text(json.dumps(verify, indent=2))
    submissions = [s.to_json() for s in submitted]
    with (out / "submissions.jsonl").open("w") as sink:
        sink.writelines(json.dumps(s) + "\n" for s in submissions)
    shutil.copyfile(
        cluster.truth_path, out / "truth.jsonl"
    ) if cluster.truth_path.exists() else None
    events = [json.loads(line) for line in events_path.read_text().splitlines() if line]
    faults = read_log(out / "faults.jsonl")
    verdict = checker.check(events, truth.read(cluster.truth_path), submissions, faults, verify)
    memory = sampler.series()
    info["memory_growth_kib"] = sampler.growth_kib()
    info["faults_by_kind"] = report.by_kind(faults)
    (out / "memory.json").write_text(json.dumps(memory))
    (out / "campaign.json").write_text(json.dumps(info, indent=2))
    (out / "verdict.json").write_text(json.dumps(verdict.to_json(), indent=2))
    (out / "table.txt").write_text(report.render(verdict, info))
    return Result(verdict, out, info, memory)


def _verify(env: dict[str, str]) -> dict[str, Any]:
    """`outcomes audit verify --json`; a failed verification (exit 2) still prints its JSON."""
    import subprocess

    from nemesis.processes import ROOT, outcomes_argv

    done = subprocess.run(
        outcomes_argv("audit", "verify", "--json"),
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    try:
        found: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"ok": False, "problems": [done.stderr[-2000:]], "read_models": {"ok": False}}
    return found


def _options(options: Options) -> dict[str, Any]:
    body = asdict(options)
    body["kinds"] = list(options.kinds)
    return body


def _keep_logs(home: Path, out: Path) -> None:
    """The product's logs go with the results (the temp folder does not survive)."""
    logs = home / "logs"
    if logs.exists():
        shutil.copytree(logs, out / "logs", dirs_exist_ok=True)
