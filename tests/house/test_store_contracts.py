"""The store's two contracts (docs/architecture.md): the job contract, what a job's way needs,
holds none of the operations contract, so that it reads in one sitting; every backend
implements both, whole."""

from __future__ import annotations

from ledger.persistence.base import JobReads, JobWrites, OpsReads, OpsWrites, Reads, Writes
from ledger.persistence.memory import MemoryWrites
from ledger.persistence.memory_reads import MemoryReads
from ledger.persistence.sql_reads import SqlReads
from ledger.persistence.sql_writes import SqlWrites


def _declared(contract: type) -> set[str]:
    return set(getattr(contract, "__abstractmethods__", ()))


def test_the_job_contract_holds_none_of_the_operations_contract() -> None:
    assert not issubclass(JobReads, OpsReads) and not issubclass(JobWrites, OpsWrites)
    job = _declared(JobWrites)
    ops = _declared(OpsReads) | _declared(OpsWrites)
    assert job and ops and job.isdisjoint(ops)
    assert _declared(Writes) == job | ops  # nothing declared outside the two
    assert _declared(Reads) == _declared(JobReads) | _declared(OpsReads)


def test_every_backend_implements_both_contracts_whole() -> None:
    for view in (SqlReads, MemoryReads):
        assert issubclass(view, Reads) and not _declared(view), view
    for transaction in (SqlWrites, MemoryWrites):
        assert issubclass(transaction, Writes) and not _declared(transaction), transaction
