"""Campaigns as tests: the short ones `make test` runs (a fixed seed, about a minute each) and
the soak. They run on private services (a PostgreSQL cluster and a RabbitMQ node of their
own), so they run beside other tests and stop no shared service."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from nemesis.campaign import Options, Result, run
from nemesis.cluster import Shape
from nemesis.services import PG_BIN, RABBIT_BIN
from tests.databases import IN_CI

SEED = 16
SHORT = Options(
    seed=SEED,
    duration_s=20.0,
    calibrate_s=3.0,
    mean_fault_gap_s=1.4,
    warmup_s=2.0,
    settle_timeout_s=90.0,
    shape=Shape(workers=2, worker_threads=8, lease_s=3.0, dispatch_timeout_s=3.0),
)


def prerequisites() -> str | None:
    """Why a campaign cannot run here (None: it can)."""
    if not (PG_BIN / "initdb").exists():
        return f"no PostgreSQL server binaries in {PG_BIN}"
    if not (RABBIT_BIN / "rabbitmq-server").exists():
        return f"no rabbitmq-server in {RABBIT_BIN}"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "root without runuser (initdb must run as postgres)"
    return None


def campaign(out: Path, **changes: object) -> Result:
    missing = prerequisites()
    if missing:
        if IN_CI:
            pytest.fail(f"{missing} (CI=true: the campaign may not skip)")
        pytest.skip(missing)
    options = replace(SHORT, **changes)  # type: ignore[arg-type]
    result = run(options, out, f"pytest: campaign seed {options.seed}, {options.duration_s:g} s")
    print((out / "table.txt").read_text())
    return result
