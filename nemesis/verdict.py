"""The checker's verdict: the categories it counts, each case it names, whether the run is
clean, and the table a report prints (`nemesis.checker` reaches it)."""

from dataclasses import asdict, dataclass, field
from typing import Any

CATEGORIES = (
    "lost",
    "duplicated",
    "unexpected",
    "spend_over_once",
    "false_success",
    "false_silence",
    "untold_spend",
    "started_after_brake",
    "closed_before_deadline",
)
MAX_REDISPATCH_SHARE = 0.01  # re-dispatches per accepted job


@dataclass(frozen=True)
class Case:
    category: str
    job: str
    detail: str


@dataclass
class Verdict:
    jobs: int = 0
    accepted: int = 0
    submitted: int = 0
    faults: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0))
    explained_silence: int = 0  # OUTCOME_MISSING after a completed run, a fault on its path
    chain_ok: bool = False
    read_models_ok: bool = False
    cases: list[Case] = field(default_factory=list)
    time_to_truth: dict[str, dict[str, float]] = field(default_factory=dict)
    redispatched: int = 0  # job.redispatched events
    redispatched_by: dict[str, int] = field(default_factory=dict)  # by evidence

    @property
    def redispatch_share(self) -> float:
        return self.redispatched / self.accepted if self.accepted else 0.0

    def add(self, category: str, job: str, detail: str) -> None:
        if category in self.counts:
            self.counts[category] += 1
        self.cases.append(Case(category, job, detail))

    @property
    def clean(self) -> bool:
        hard = [c for c in CATEGORIES if c != "false_silence"]
        rare = self.redispatch_share <= MAX_REDISPATCH_SHARE
        return (
            all(self.counts[c] == 0 for c in hard)
            and rare
            and self.chain_ok
            and self.read_models_ok
        )

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["redispatch_share"] = round(self.redispatch_share, 6)
        body["clean"] = self.clean
        return body


MUST = {
    "lost": "0",
    "duplicated": "0",
    "unexpected": "0",
    "spend_over_once": "0",
    "false_success": "0",
    "false_silence": "0 (goal; each explained)",
    "untold_spend": "0",
    "started_after_brake": "0",
    "closed_before_deadline": "0",
}


def table(verdict: Verdict) -> list[tuple[str, str, str, str]]:
    """Rows: check, found, must be, verdict."""
    rows = []
    for category in CATEGORIES:
        count = verdict.counts[category]
        ok = "ok" if count == 0 else ("COUNTED" if category == "false_silence" else "FAIL")
        found = str(count)
        if category == "false_silence":
            found += f" (+{verdict.explained_silence} explained by a fault)"
        rows.append((category, found, MUST[category], ok))
    share = verdict.redispatch_share
    by = ", ".join(f"{k} {v}" for k, v in verdict.redispatched_by.items())
    found = f"{verdict.redispatched} ({share:.2%} of accepted{'; ' + by if by else ''})"
    rows.append(
        (
            "re-dispatched",
            found,
            f"<= {MAX_REDISPATCH_SHARE:.0%}",
            _ok(share <= MAX_REDISPATCH_SHARE),
        )
    )
    rows.append(("chains verify", str(verdict.chain_ok), "True", _ok(verdict.chain_ok)))
    rows.append(
        ("read models verify", str(verdict.read_models_ok), "True", _ok(verdict.read_models_ok))
    )
    return rows


def _ok(flag: bool) -> str:
    return "ok" if flag else "FAIL"
