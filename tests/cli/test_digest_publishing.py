"""Digests published, not just printable: `outcomes audit digest --every S --to DIR` writes a
new read-only file per digest until SIGTERM (exit 0); `audit verify --against DIR` proves the
ledger still extends every one of them, and names the digest it no longer extends."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from cli.errors import EXIT_PROBLEM
from tests.factories import rebuild
from tests.plugins.cli import Invoke
from tests.plugins.deployments import wait_until
from tests.plugins.tampering import Seeded, retree, tamper_delete
from tests.serving import ROOT, embedded_env, outcomes_argv


def published(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if not p.name.startswith("."))


def verify_against(outcomes: Invoke, folder: Path) -> tuple[int, dict[str, Any], str]:
    result = outcomes("audit", "verify", "--against", str(folder), "--json", ok=False)
    return result.exit_code, orjson.loads(result.stdout), result.stderr


def test_published_every_period_until_sigterm_then_verified_against(
    outcomes: Invoke, seeded: Seeded, tmp_path: Path
) -> None:
    folder = tmp_path / "digests"
    folder.mkdir()
    publisher = subprocess.Popen(
        outcomes_argv("audit", "digest", "--every", "0.2", "--to", str(folder), "--json"),
        env=embedded_env(OUTCOMES_DATABASE_URL=seeded.url),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until(lambda: len(published(folder)) >= 2, 60, "two published digests")
    finally:
        publisher.send_signal(signal.SIGTERM)  # by its pid
        out, err = publisher.communicate(timeout=60)
    assert publisher.returncode == 0, err.decode()
    files = published(folder)
    lines = [orjson.loads(line) for line in out.decode().splitlines()]
    assert [Path(str(line["file"])) for line in lines] == files  # one line per file, in order
    assert {line["events"] for line in lines} == {17}
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o444
        assert not os.access(path, os.W_OK) or os.geteuid() == 0  # root writes anything

    code, body, _ = verify_against(outcomes, folder)
    assert (code, body["ok"]) == (0, True)
    assert [d["file"] for d in body["digests"]] == [str(p) for p in files]

    # The owner deletes a stream's newest event and refolds the read models and the Merkle
    # tree to match: the chains, the tree and the read models are consistent again, only the
    # published digests can tell.
    newest = seeded.stream("retried")[-1]
    tamper_delete(seeded.url, newest.position)
    rebuild(seeded.store)
    retree(seeded.url)
    assert outcomes("audit", "verify", "--json", ok=False).exit_code == 0
    code, body, stderr = verify_against(outcomes, folder)
    assert (code, body["ok"]) == (EXIT_PROBLEM, False)
    assert all(not d["ok"] for d in body["digests"])
    reason = stderr.strip().splitlines()[-1]
    assert reason.startswith(f"outcomes: ledger no longer extends digest {files[0]}: ")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A directory of its own (tmp_path also holds the SQLite ledger)."""
    made = tmp_path / "digests"
    made.mkdir()
    return made


def test_to_alone_publishes_one_new_file_each_time(outcomes: Invoke, folder: Path) -> None:
    first = outcomes("audit", "digest", "--to", str(folder)).output
    second = outcomes("audit", "digest", "--to", str(folder)).output
    files = published(folder)
    assert len(files) == 2 and first != second
    assert all(p.name.startswith("digest-") and p.name.endswith(".json") for p in files)
    said = outcomes("audit", "verify", "--against", str(folder)).output
    assert "ok: the ledger extends 2 published digests" in said


@pytest.mark.parametrize(
    "args",
    [
        ["--every", "5"],  # no --to
        ["--every", "0", "--to", "{dir}"],
        ["--every", "-3", "--to", "{dir}"],
        ["--every", "soon", "--to", "{dir}"],
        ["--every", "inf", "--to", "{dir}"],
        ["--every", "5", "--to", "{dir}/missing"],
        ["--to", "{dir}", "--output", "{dir}/d.json"],
    ],
)
def test_bad_publishing_options_are_a_one_line_usage_error(
    outcomes: Invoke, folder: Path, args: list[str]
) -> None:
    result = outcomes("audit", "digest", *[a.format(dir=folder) for a in args], ok=False)
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("outcomes: "), result.output
    assert published(folder) == []


def test_a_damaged_digest_is_an_error_naming_its_file(outcomes: Invoke, folder: Path) -> None:
    outcomes("audit", "digest", "--to", str(folder))
    (good,) = published(folder)
    doc = orjson.loads(good.read_bytes())
    doc["events"] += 1  # altered: its root no longer matches
    altered = folder / "digest-altered.json"
    altered.write_bytes(orjson.dumps(doc))
    result = outcomes("audit", "verify", "--against", str(folder), ok=False)
    assert result.exit_code != 0 and str(altered) in result.output and "altered" in result.output
    altered.write_text("{not json")
    result = outcomes("audit", "verify", "--against", str(folder), ok=False)
    assert result.exit_code != 0 and str(altered) in result.output
    empty = folder / "empty"
    empty.mkdir()
    result = outcomes("audit", "verify", "--against", str(empty), ok=False)
    assert result.exit_code != 0 and "no digest" in result.output
