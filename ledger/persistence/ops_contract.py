"""The store's operations contract: what people and operations ask of the ledger beside a
job's way through it (the reports behind summaries, scrapes and the console; `audit verify`'s
reads and its record; the online rebuild; the Merkle tree; webhooks), gathered from each
part's own `*_contract` module. Every backend implements it beside the job contract
(`read_contract.JobReads`, `write_contract.JobWrites`); its contract tests are
`tests/persistence/test_ops_contract_*.py`."""

from __future__ import annotations

from ledger.persistence.audit_contract import AuditReads, AuditWrites
from ledger.persistence.rebuild_contract import RebuildReads, RebuildWrites
from ledger.persistence.report_contract import ReportReads
from ledger.persistence.tree_contract import TreeReads
from ledger.persistence.webhooks_contract import WebhookReads, WebhookWrites


class OpsReads(ReportReads, AuditReads, RebuildReads, TreeReads, WebhookReads):
    """What operations read: reports, audit, rebuild, the tree, webhooks."""


class OpsWrites(AuditWrites, RebuildWrites, WebhookWrites):
    """What operations write: a verification's record, a rebuild's rows, webhooks."""
