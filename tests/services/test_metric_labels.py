"""Every metric label is bounded (observability/labels.py): tool names nobody loaded, sent by
any agent, land in one `_other` series, in the ledger's counts (the API's `/metrics`) and in a
process's own metrics (a worker's port) alike."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ledger import telemetry
from ledger.decisions import Caller, JobRequest
from ledger.events import job_stream
from ledger.persistence.appends import NO_STREAM
from ledger.queries import JobCount
from ledger.queueing import DispatchSummary
from ledger.runtime.ledger import Ledger
from ledger.services import counts
from ledger.services.execute import Executor
from ledger.services.submit import submit
from ledger.tools import tool_names
from observability import collector, labels
from observability.collector import LedgerCollector
from observability.metrics import PrometheusTelemetry, process_collector
from tests.factories import accepted
from tests.tools import ECHO

AGENT = Caller(account="acme", token_id="tok-acme")
MANY = 200
Series = dict[str, set[tuple[tuple[str, str], ...]]]


def series(registry: CollectorRegistry) -> Series:
    """Each family's label sets, from the exposition a scraper reads."""
    found: Series = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            found.setdefault(sample.name, set()).add(tuple(sorted(sample.labels.items())))
    return found


def ledger_series(ledger: Ledger) -> Series:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LedgerCollector(ledger))
    return series(registry)


def tools_in(found: Series) -> set[str]:
    return {
        value for sets in found.values() for keys in sets for key, value in keys if key == "tool"
    }


@pytest.fixture
def prometheus() -> Iterator[None]:
    previous = telemetry.install(PrometheusTelemetry())
    yield
    telemetry.install(previous)


def test_refusals_of_tools_nobody_loaded_share_one_series(memory_ledger: Ledger) -> None:
    for i in range(MANY):
        name = f"nowhere.tool_{i}" if i % 2 else f"Any Name #{i} (really)"
        assert not submit(memory_ledger, AGENT, JobRequest(name, {})).view.accepted
    submit(memory_ledger, AGENT, JobRequest(ECHO, {"text": "x"}))
    found = ledger_series(memory_ledger)
    decisions = found["outcomes_decisions_total"]
    assert decisions == {
        (("code", "CAPABILITY_UNAVAILABLE"), ("status", "refused"), ("tool", labels.OTHER)),
        (("code", ""), ("status", "accepted"), ("tool", ECHO)),
    }
    assert tools_in(found) <= {labels.OTHER, *tool_names()}
    assert sum(len(sets) for sets in found.values()) < 40  # every family together


def test_a_worker_without_the_tool_records_it_under_other(
    memory_ledger: Ledger, prometheus: None
) -> None:
    """Accepted by an API that had the tools, taken by a worker that has none of them: each
    outcome is observed by the worker, and its histograms stay one series per status."""
    worker = Executor(memory_ledger, "host-1:7")
    gone = [f"gone.tool_{i}" for i in range(MANY)]
    for number, name in enumerate(gone):
        job_id = f"00000000-0000-4000-8000-{number:012d}"
        memory_ledger.store.append(job_stream(job_id), [accepted(tool=name)], NO_STREAM)
        worker.execute(job_id)
    registry = CollectorRegistry(auto_describe=False)
    process_collector(registry)  # what a worker's port serves
    process = series(registry)
    assert tools_in(process) & set(gone) == set()
    observed = process["outcomes_submit_to_outcome_seconds_count"]
    assert (("status", "failed"), ("tool", labels.OTHER)) in observed
    assert len(observed) <= len(tool_names()) * 5 + 5
    ledger_counts = ledger_series(memory_ledger)
    assert tools_in(ledger_counts) == {labels.OTHER}
    (outcome,) = ledger_counts["outcomes_outcomes_total"]
    assert dict(outcome) == {"status": "failed", "code": "CAPABILITY_UNAVAILABLE", "tool": "_other"}


def test_every_label_value_is_a_known_one_or_other() -> None:
    assert labels.tool(ECHO) == ECHO
    assert labels.tool("nowhere.tool") == labels.tool("_other") == labels.OTHER
    assert labels.code(None) == labels.code("") == ""
    assert labels.code("QUOTA_EXCEEDED") == "QUOTA_EXCEEDED"
    assert labels.code("MADE_UP") == labels.OTHER
    assert labels.one_of("succeeded", labels.STATUSES) == "succeeded"
    assert labels.one_of("whatever", labels.STATUSES) == labels.OTHER
    assert labels.one_of("queue_lost", labels.CAUSES) == "queue_lost"
    assert labels.one_of("brake-123", labels.CAUSES) == labels.OTHER


def test_groups_that_share_their_bounded_labels_add_up() -> None:
    """Two unloaded tools' groups are one sample with their sum (never two of the same)."""
    found = counts.LedgerCounts(
        position=9,
        jobs=[
            JobCount(True, "failed", "CAPABILITY_UNAVAILABLE", "gone.a", 2),
            JobCount(True, "failed", "CAPABILITY_UNAVAILABLE", "gone.b", 3),
            JobCount(False, "refused", "NOT_A_CODE", "gone.c", 4),
        ],
        brakes=[],
        findings={("outcome_missing", "never_started"): 1, ("outcome_missing", "odd"): 2},
        dispatch=DispatchSummary(0, 0, None, {}),
    )
    families = {f.name: f for f in [*collector._jobs(found), *collector._findings(found)]}
    outcomes = [(s.labels, s.value) for s in families["outcomes_outcomes"].samples]
    assert outcomes == [
        ({"status": "failed", "code": "CAPABILITY_UNAVAILABLE", "tool": labels.OTHER}, 5)
    ]
    decided = families["outcomes_decisions"].samples
    assert {(s.labels["status"], s.labels["code"]): s.value for s in decided} == {
        ("accepted", ""): 5,
        ("refused", labels.OTHER): 4,
    }
    findings = families["outcomes_reconciler_findings"].samples
    assert {s.labels["cause"]: s.value for s in findings} == {"never_started": 1, labels.OTHER: 2}
