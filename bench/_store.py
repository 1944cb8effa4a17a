"""The store itself, for the benchmarks that measure or fill it on purpose.

Every other benchmark uses the product through its front door: `open_ledger` for a URL, the
use cases (`ledger.services.*`: migrate, tokens, submit, claim, record, reconcile), the
`outcomes` command and the HTTP API. The few below work on the layer under the use cases, so
they reach it here, in this one module, and nowhere else in bench/
(tests/house/test_architecture.py holds them to it):

- bench.append times the store's append (`SqlStore.append_jobs`) against raw psycopg;
- bench.roundtrips counts the store's round trips on the wire: it traces the connections of
  its engine, and turns the batched path off (`job_batch.fast`) to count the general one;
- bench.poll's bare endpoint is the floor the API's read is compared with: one SELECT of the
  jobs read model (`jobs`) on the store's own connection (`SqlReads`);
- bench.growth fills its ledger through the store's batched append as the API and the workers
  write (decisions, claims with their leases, outcomes: `JobAppend`, `LeaseChange`), as no use
  case writes them in bulk;
- bench.console fills 100k jobs' whole histories, refusals by brakes and silences included,
  through the store's batched append (`JobAppend`s), as no use case writes them in bulk;
- bench.reconcile bulk-loads its closed history as rows (COPY, the jobs projection's
  `ViewProjection.row`), checks them against the tables (`events`, `jobs`, `leases`,
  `row_to_event`), and times the reconciler's read and its SQL alone;
- bench.throughput_notree (bench.throughput --tree-ab's "without" arm) points the sequencer's
  tick statement, in the modules that run it (`TICKING`: the loop's session and the store's
  `sequence()`), at a tick without the Merkle tree.
"""

from __future__ import annotations

from types import ModuleType

from ledger.persistence import job_batch, sequencer_session, sql_sequencing
from ledger.persistence.appends import AppendStatus, JobAppend, LeaseChange
from ledger.persistence.engine import make_engine
from ledger.persistence.projections import ViewProjection
from ledger.persistence.schema import events, jobs, leases
from ledger.persistence.sql_reads import SqlReads
from ledger.persistence.sql_rows import EVENT_COLUMNS, row_to_event
from ledger.persistence.sql_store import SqlStore

__all__ = [
    "EVENT_COLUMNS",
    "TICKING",
    "AppendStatus",
    "JobAppend",
    "LeaseChange",
    "SqlReads",
    "SqlStore",
    "ViewProjection",
    "events",
    "job_batch",
    "jobs",
    "leases",
    "row_to_event",
    "sql_store",
]


# The modules whose `SEQUENCE` statement runs a sequencer tick (`outcomes_sequence`).
TICKING: tuple[ModuleType, ...] = (sequencer_session, sql_sequencing)


def sql_store(url: str, *, pool_size: int = 5) -> SqlStore:
    """The ledger's store on this database, as `open_ledger` opens it; a SqlStore, because
    these benchmarks also look at its tables (`connection()`) and its engine. Close it when
    done."""
    return SqlStore(make_engine(url, pool_size=pool_size))
