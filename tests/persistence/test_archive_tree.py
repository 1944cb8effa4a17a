"""Archives carry the Merkle tree (the manifest's `tree`: its frontier before the archive's
first leaf and after its last), on SQLite and Postgres: the files are checked against it and
each archive goes on from the one before; the database's tree check goes on from the newest
archive's frontier instead of being skipped, so a row re-hashed after an archive is still a
`merkle_mismatch`; a manifest's tree changed is named by the files' check."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import select, update

from ledger.chain import ProblemKind
from ledger.merkle import Frontier
from ledger.persistence.schema import events, ledger_events
from ledger.persistence.sql_store import SqlStore
from ledger.runtime.ledger import Ledger
from ledger.services import archive, audit, proofs
from ledger.services.verify_proofs import check_heads
from tests.factories import open_sql
from tests.plugins.archiving import ended_jobs, soon, token_events
from tests.plugins.tampering import around_the_triggers


def test_archives_carry_the_tree_and_both_sides_check_it(tiny_url: str, tmp_path: Path) -> None:
    with open_sql(tiny_url) as store:
        ledger = Ledger(store)
        token_events(store, 1)
        ended_jobs(store, 16)
        first = archive.archive(ledger, tmp_path, soon()).manifest
        assert first.tree is not None
        before, after = first.tree.frontiers()
        assert before == Frontier.empty() and after.size > 0
        base = store.archive_base()
        assert base is not None and base.tree == after
        ended_jobs(store, 20)
        second = archive.archive(ledger, tmp_path, soon()).manifest
        assert second.tree is not None and second.tree.before == first.tree.after
        found = audit.verify_all(ledger)
        assert found.ok, found.chain.problems[:3]
        checks = archive.verify_files(tmp_path)
        assert len(checks) == 2 and all(c.ok for c in checks), [c.report.problems for c in checks]
        ended_jobs(store, 5)
        _rehash_last(store, tiny_url)
        report = audit.verify_all(ledger).chain
        assert ProblemKind.MERKLE_MISMATCH in {p.kind for p in report.problems}


def test_a_manifest_whose_tree_was_changed_is_named(tiny_url: str, tmp_path: Path) -> None:
    with open_sql(tiny_url) as store:
        ended_jobs(store, 16)
        done = archive.archive(Ledger(store), tmp_path, soon())
    path = done.folder / "manifest.json"
    doc = json.loads(path.read_bytes())
    size = doc["tree"]["after"]["tree_size"]
    forged = Frontier.empty().extend(bytes([i]) * 32 for i in range(size))
    doc["tree"]["after"] = forged.to_json()
    path.chmod(0o644)
    path.write_text(json.dumps(doc))
    (check,) = archive.verify_files(tmp_path)
    assert [p.kind for p in check.report.problems] == [ProblemKind.MERKLE_MISMATCH]
    assert "manifest records at its end" in check.report.problems[0].message


def _rehash_last(store: SqlStore, url: str) -> None:
    """The newest event's stored hash replaced (a forger's, with no care for the chain)."""
    with store.connection() as conn:
        position, written = conn.execute(
            select(ledger_events.c.position, ledger_events.c.write_position)
            .order_by(ledger_events.c.position.desc())
            .limit(1)
        ).one()
    with around_the_triggers(url) as conn:
        changed = conn.execute(
            update(events).where(events.c.position == (written or position)).values(hash="ab" * 32)
        )
        assert changed.rowcount == 1


def test_heads_against_a_ledger_after_an_archive(tiny_url: str, tmp_path: Path) -> None:
    """A head taken after the archive is proven from the database; one taken before it, whose
    proof reads leaves the archive took, is named as within archived history (not as a tree
    the ledger does not extend)."""
    with open_sql(tiny_url) as store:
        ledger = Ledger(store)
        ended_jobs(store, 6)  # 14 events: a head whose proof reads leaves, not only nodes
        before = proofs.head(ledger)
        assert before.head.tree_size % 16
        ended_jobs(store, 10)
        archive.archive(ledger, tmp_path / "archives", soon())
        ended_jobs(store, 3)
        after = proofs.head(ledger)
        ended_jobs(store, 3)
        old, new = check_heads(ledger, [(tmp_path / "old", before), (tmp_path / "new", after)])
    assert new.report.ok, new.report.problems
    assert [p.kind for p in old.report.problems] == [ProblemKind.TREE_HEAD_MISMATCH]
    assert "archived history" in old.report.problems[0].message
