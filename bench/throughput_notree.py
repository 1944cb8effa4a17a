"""bench.throughput --tree-ab's "without" arm: `outcomes reconcile` whose sequencer ticks
without the Merkle tree. Bench-only; the product has no setting to turn the tree off.

Run:  OUTCOMES_DATABASE_URL=postgresql+psycopg://... python -m bench.throughput_notree reconcile

Postgres extends the tree inside the tick itself (`outcomes_sequence`, migration 0020:
`outcomes_tree_at()`, the check that the tree ends where the ledger did, and
`outcomes_tree_extend(...)`), so there is no Python call to stub. This entry installs, in the
ledger's database, `bench_sequence_notree`: the repository's `outcomes_sequence`
(migrations/functions/outcomes_sequence.sql) with that tree step cut out and nothing else
changed (its tick rows keep no tree size or frontier). It then points this process's tick
statement (the sequencer loop's and the store's `sequence()`) at it and runs the `outcomes`
CLI with the given arguments. Other processes on the database still call the real tick: the
"without" arm gets a ledger of its own, which only this process sequences.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import psycopg

from bench._common import libpq_url
from bench._store import TICKING

SOURCE = Path(__file__).resolve().parents[1] / "migrations" / "functions" / "outcomes_sequence.sql"
NOTREE_FUNCTION = "bench_sequence_notree"
NOTREE_SEQUENCE = f"SELECT {NOTREE_FUNCTION}(%s)"
_CREATE = "CREATE OR REPLACE FUNCTION outcomes_sequence(p_wait boolean)"
_TREE_FROM = "    SELECT t.tree_size, t.frontier, t.start_position INTO size, front, first_leaf"
_TREE_TO = "FROM outcomes_tree_extend(size, front, leaves) e;\n"


class TickChangedError(RuntimeError):
    """`outcomes_sequence` no longer has the tree step this entry cuts: update it."""


def notree_function_sql(source: str) -> str:
    """`CREATE FUNCTION bench_sequence_notree(p_wait boolean)`: the tick of `source` (the text
    of outcomes_sequence.sql) without its tree step."""
    try:
        body = source[source.index(_CREATE) :]
        cut_from = body.index(_TREE_FROM)
        cut_to = body.index(_TREE_TO, cut_from) + len(_TREE_TO)
    except ValueError as exc:
        raise TickChangedError(f"{SOURCE.name}: the tick's tree step was not found") from exc
    body = body[:cut_from] + "    -- bench: no Merkle tree step\n" + body[cut_to:]
    body = body.replace("        leaves[n] := r.hash;\n", "")  # the tree's leaves: unused now
    if "outcomes_tree" in body:
        raise TickChangedError(f"{SOURCE.name}: the tick touches the tree elsewhere too")
    return body.replace(_CREATE, f"CREATE OR REPLACE FUNCTION {NOTREE_FUNCTION}(p_wait boolean)")


def install(url: str) -> None:
    """Create (or replace) `bench_sequence_notree` in the ledger's database."""
    statement = notree_function_sql(SOURCE.read_text())
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute(statement.encode())


_STATEMENT = "SEQUENCE"


@contextmanager
def without_tree() -> Iterator[None]:
    """This process's ticks call `bench_sequence_notree` instead of `outcomes_sequence`."""
    saved = [getattr(module, _STATEMENT) for module in TICKING]
    for module in TICKING:
        setattr(module, _STATEMENT, NOTREE_SEQUENCE)
    try:
        yield
    finally:
        for module, statement in zip(TICKING, saved, strict=True):
            setattr(module, _STATEMENT, statement)


def main(argv: Sequence[str] | None = None) -> int:
    from cli.main import cli
    from ledger.settings import load_settings

    args = list(sys.argv[1:] if argv is None else argv)
    install(load_settings().database_url)
    with without_tree():
        cli.main(args=args, prog_name="outcomes", standalone_mode=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
