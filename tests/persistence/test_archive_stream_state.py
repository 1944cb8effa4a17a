"""What an archive's writer and `verify --archive` keep a stream after a full pass: the kept
streams' heads as Python objects (a few, whatever the number of jobs), the archived jobs'
membership and heads in `stream_table`'s arrays, a few dozen bytes a job. Were either to keep
a tuple, a string or a set entry a job again, the kept-streams' counts below would grow with
the jobs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger import archive_check
from ledger.chain_check import StreamLinks
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services import archive
from tests.factories import open_sql
from tests.plugins.archiving import ended_jobs, open_job, soon, token_events

BYTES_A_JOB = 192  # the arrays' bytes a job: an id's bytes, slots, a version and 32 bytes


@pytest.fixture
def store(tiny_url: str) -> Iterator[SqlStore]:
    with open_sql(tiny_url) as opened:
        yield opened


@pytest.mark.parametrize("jobs", [10, 40])
def test_what_a_pass_keeps_a_stream_does_not_grow_with_the_jobs(
    store: SqlStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int
) -> None:
    chains: list[StreamLinks] = []
    tallies: list[Any] = []
    verify_in_order = archive_check.verify_in_order

    def watched(*args: Any, **kwargs: Any) -> Any:
        report, chain = verify_in_order(*args, **kwargs)
        chains.append(chain)
        return report, chain

    class Tally(archive._Tally):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            tallies.append(self)

    monkeypatch.setattr(archive_check, "verify_in_order", watched)
    monkeypatch.setattr(archive, "_Tally", Tally)
    token_events(store, 2)
    ended_jobs(store, jobs)
    open_job(store)  # kept: a straddler
    done = archive.archive(Ledger(store), tmp_path, soon())
    manifest = done.manifest
    assert manifest.counts.jobs >= jobs // 2
    kept = set(manifest.checkpoints)
    assert 2 <= len(kept) <= 3  # the tokens' streams, the open job's when it is below the cut
    checks = archive.verify_files(tmp_path)
    assert checks and all(c.ok for c in checks), [c.report.problems[:3] for c in checks]
    assert len(tallies) == 1 and set(tallies[0].heads) == kept
    assert len(chains) == 2  # the archive's read-back and verify_files
    for chain in chains:
        # Python objects a stream: the kept streams' heads only, none an archived job's.
        assert set(chain.heads) == kept
        assert len(chain.table) == manifest.counts.jobs
        assert chain.table_events == manifest.counts.job_events
        assert chain.table_heads.odd == 0
        held = chain.table.nbytes() + chain.table_heads.nbytes()
        assert held <= BYTES_A_JOB * manifest.counts.jobs + 1024, held
