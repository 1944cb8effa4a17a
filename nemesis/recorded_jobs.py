"""The jobs of a run as the ledger recorded them, from its export: each job stream's events
in ledger order, with the decision, outcomes and starts the checker reads."""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

DECISIONS = frozenset({"job.accepted", "job.refused"})
TERMINAL = {
    "job.refused": "refused",
    "work.succeeded": "succeeded",
    "work.declined": "declined",
    "work.partial": "partial",
    "work.failed": "failed",
    "work.halted": "refused",
    "job.outcome_missing": "failed",
}
# Outcomes a worker records for an attempt it started (a halt may be recorded at the claim).
WORKER_OUTCOMES = frozenset(
    {"work.succeeded", "work.declined", "work.partial", "work.failed", "work.late_outcome"}
)
TOLD_SUCCESS = frozenset({"succeeded", "declined", "partial"})


@dataclass
class Job:
    job_id: str
    events: list[dict[str, Any]]

    @property
    def decision(self) -> str:
        return str(self.events[0]["type"])

    @property
    def accepted(self) -> dict[str, Any] | None:
        first = self.events[0]
        return first["data"] if first["type"] == "job.accepted" else None

    @property
    def spends(self) -> bool:
        return bool((self.accepted or {}).get("spends", False))

    @property
    def terminals(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] in TERMINAL]

    def started(self) -> dict[int, dict[str, Any]]:
        return {int(e["data"]["attempt"]): e for e in self.events if e["type"] == "work.started"}


def unix(moment: str) -> float:
    return datetime.fromisoformat(moment).timestamp()


def jobs_of(events: Iterable[dict[str, Any]]) -> dict[str, Job]:
    jobs: dict[str, Job] = {}
    for event in sorted(events, key=lambda e: int(e["position"])):
        stream = str(event["stream_id"])
        if stream.startswith("job-"):
            job_id = stream.removeprefix("job-")
            jobs.setdefault(job_id, Job(job_id, [])).events.append(event)
    return jobs
