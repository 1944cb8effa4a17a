"""The nemesis checker on synthetic histories: a clean one passes, and each category fails
when its promise is broken (so a clean verdict of a campaign means something)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nemesis.checker import check, jobs_of, table, time_to_truth
from nemesis.truth import Act

T0 = 1_800_000_000.0
VERIFIED = {"ok": True, "problems": [], "read_models": {"ok": True}}


class History:
    """A ledger export, ground truth, client answers and a fault log, built by hand."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.acts: list[Act] = []
        self.submissions: list[dict[str, Any]] = []
        self.faults: list[dict[str, Any]] = []
        self.versions: dict[str, int] = {}

    def event(self, stream: str, kind: str, at: float, **data: Any) -> None:
        self.versions[stream] = self.versions.get(stream, 0) + 1
        moment = datetime.fromtimestamp(T0 + at, UTC).isoformat()
        self.events.append(
            {
                "position": len(self.events) + 1,
                "stream_id": stream,
                "stream_version": self.versions[stream],
                "type": kind,
                "data": data,
                "recorded_at": moment,
            }
        )

    def act(self, job: str, attempt: int, action: str, at: float, **extra: Any) -> None:
        self.acts.append(Act(job, attempt, "tool", action, T0 + at, 100, **extra))

    def accepted(self, job: str, at: float = 0.0, spends: bool = False, key: str = "") -> None:
        self.event(f"job-{job}", "job.accepted", at, tool="t", spends=spends, idempotency_key=key)
        self.submissions.append({"key": key or job, "status": "queued", "job_ids": [job]})

    def ran(self, job: str, outcome: str = "succeeded", at: float = 1.0, attempt: int = 1) -> None:
        """Started, ran (ground truth) and recorded its outcome."""
        self.event(f"job-{job}", "work.started", at, attempt=attempt)
        self.act(job, attempt, "begin", at + 0.1)
        self.act(job, attempt, "done", at + 0.2, outcome=outcome)
        self.event(f"job-{job}", f"work.{outcome}", at + 0.3, attempt=attempt)

    def verdict(self, verify: dict[str, Any] = VERIFIED) -> Any:
        return check(self.events, self.acts, self.submissions, self.faults, verify)


def clean_history() -> History:
    h = History()
    h.accepted("a", key="k-a")
    h.ran("a")
    h.accepted("b", spends=True)
    h.event("job-b", "work.started", 1.0, attempt=1)
    h.act("b", 1, "begin", 1.1)
    h.act("b", 1, "spend", 1.2)
    h.act("b", 1, "done", 1.3, outcome="succeeded")
    h.event("job-b", "work.succeeded", 1.4, attempt=1)
    h.event("job-c", "job.refused", 2.0, tool="t")
    return h


def counts(h: History, **verify: Any) -> dict[str, int]:
    return dict(h.verdict({**VERIFIED, **verify}).counts)


def test_a_clean_history_is_clean() -> None:
    verdict = clean_history().verdict()
    assert verdict.clean and set(verdict.counts.values()) == {0}, verdict.cases
    assert verdict.by_status == {"refused": 1, "succeeded": 2}
    assert all(row[3] == "ok" for row in table(verdict))


def test_lost_an_accepted_job_never_terminal() -> None:
    h = clean_history()
    h.accepted("d")
    h.event("job-d", "work.started", 3.0, attempt=1)
    assert counts(h)["lost"] == 1


def test_lost_a_client_was_answered_for_a_job_the_ledger_lacks() -> None:
    h = clean_history()
    h.submissions.append({"key": "k-x", "status": "queued", "job_ids": ["x"]})
    verdict = h.verdict()
    assert verdict.counts["lost"] == 1 and not verdict.clean


def test_duplicated_two_terminal_events() -> None:
    h = clean_history()
    h.event("job-a", "job.outcome_missing", 5.0, attempt=1, cause="worker_lost")
    assert counts(h)["duplicated"] == 1


def test_duplicated_one_key_two_jobs() -> None:
    h = clean_history()
    h.accepted("a2", key="k-a")
    h.ran("a2")
    assert counts(h)["duplicated"] == 1


def test_unexpected_a_stream_without_a_decision_and_work_after_a_refusal() -> None:
    h = clean_history()
    h.event("job-e", "work.started", 1.0, attempt=1)
    h.event("job-c", "work.started", 3.0, attempt=1)
    assert counts(h)["unexpected"] >= 2


def test_unexpected_a_tool_ran_without_a_recorded_start() -> None:
    h = clean_history()
    h.act("a", 2, "begin", 4.0)  # a second attempt nobody claimed
    assert counts(h)["unexpected"] == 1


def test_spend_over_once() -> None:
    h = clean_history()
    h.act("b", 1, "spend", 1.25)
    assert counts(h)["spend_over_once"] == 1


def test_false_success_succeeded_without_a_completed_run() -> None:
    h = clean_history()
    h.accepted("f")
    h.event("job-f", "work.started", 1.0, attempt=1)
    h.act("f", 1, "begin", 1.1)  # began, never finished (killed)
    h.event("job-f", "work.succeeded", 2.0, attempt=1)
    assert counts(h)["false_success"] == 1


def test_false_success_a_decline_recorded_as_success() -> None:
    h = clean_history()
    h.accepted("g")
    h.event("job-g", "work.started", 1.0, attempt=1)
    h.act("g", 1, "done", 1.1, outcome="declined")
    h.event("job-g", "work.succeeded", 1.2, attempt=1)
    assert counts(h)["false_success"] == 1


def silent_after_completion(h: History, job: str) -> None:
    """The run completed at 1.2 s; the reconciler recorded it lost at 10 s."""
    h.accepted(job)
    h.event(f"job-{job}", "work.started", 1.0, attempt=1)
    h.act(job, 1, "done", 1.2, outcome="succeeded")
    h.event(f"job-{job}", "job.outcome_missing", 10.0, attempt=1, cause="worker_lost")


def test_false_silence_unexplained() -> None:
    h = clean_history()
    silent_after_completion(h, "s")
    verdict = h.verdict()
    assert verdict.counts["false_silence"] == 1 and verdict.explained_silence == 0
    assert verdict.clean  # counted and shown, judged separately from the hard promises


def test_false_silence_explained_by_a_fault_on_the_runs_path() -> None:
    h = clean_history()
    silent_after_completion(h, "s")
    h.faults.append(
        {"seq": 0, "kind": "worker_kill", "pids": [100], "started": T0 + 1.5, "ended": T0 + 3}
    )
    verdict = h.verdict()
    assert verdict.counts["false_silence"] == 0 and verdict.explained_silence == 1


def test_a_fault_on_another_worker_explains_nothing() -> None:
    h = clean_history()
    silent_after_completion(h, "s")
    h.faults.append(
        {"seq": 0, "kind": "worker_kill", "pids": [999], "started": T0 + 1.5, "ended": T0 + 3}
    )
    assert counts(h)["false_silence"] == 1


def test_untold_spend() -> None:
    h = clean_history()
    h.accepted("u", spends=True)
    h.event("job-u", "work.started", 1.0, attempt=1)
    h.act("u", 1, "spend", 1.1)
    h.event("job-u", "work.failed", 1.2, attempt=1)
    assert counts(h)["untold_spend"] == 1


def test_spend_then_silence_says_verify_at_source() -> None:
    h = clean_history()
    h.accepted("v", spends=True)
    h.event("job-v", "work.started", 1.0, attempt=1)
    h.act("v", 1, "spend", 1.1)
    h.event("job-v", "job.outcome_missing", 9.0, attempt=1, cause="worker_lost")
    assert counts(h)["untold_spend"] == 0


def brake(h: History, pulled: float, released: float, release: bool = True) -> None:
    """A global brake (the ledger's events and the nemesis's log of it)."""
    h.event("brake-1", "brake.pulled", pulled, brake_id="1", scope="global")
    if release:
        h.event("brake-1", "brake.released", released, brake_id="1")
    h.faults.append(
        {
            "seq": 0,
            "kind": "brake",
            "pids": [],
            "started": T0 + pulled - 0.5,
            "ended": T0 + released + 0.5,
            "pulled_at": T0 + pulled + 0.1,
            "released_at": T0 + released - 0.1,
        }
    )


def test_started_after_brake_by_ledger_position() -> None:
    h = clean_history()
    h.accepted("w")
    brake(h, 5.0, 8.0, release=False)
    h.event("job-w", "work.started", 6.0, attempt=1)  # between pull and release
    h.event("brake-1", "brake.released", 8.0, brake_id="1")
    h.act("w", 1, "done", 6.1, outcome="succeeded")
    h.event("job-w", "work.succeeded", 6.2, attempt=1)
    assert counts(h)["started_after_brake"] == 1


def test_started_after_brake_a_step_checked_after_the_pull() -> None:
    h = clean_history()
    h.accepted("x")
    h.event("job-x", "work.started", 4.0, attempt=1)
    brake(h, 5.0, 8.0)
    h.act("x", 1, "step", 6.0, checked_at=T0 + 5.5)
    h.act("x", 1, "done", 6.1, outcome="halted")
    h.event("job-x", "work.halted", 6.2, attempt=1)
    assert counts(h)["started_after_brake"] == 1


def test_work_before_the_pull_is_fine() -> None:
    h = clean_history()
    h.accepted("y")
    h.event("job-y", "work.started", 4.0, attempt=1)
    h.act("y", 1, "step", 4.5, checked_at=T0 + 4.4)
    brake(h, 5.0, 8.0)
    h.act("y", 1, "done", 6.1, outcome="halted")
    h.event("job-y", "work.halted", 6.2, attempt=1)
    assert counts(h)["started_after_brake"] == 0


def test_chain_or_read_models_that_do_not_verify_fail_the_verdict() -> None:
    assert (
        not clean_history()
        .verdict({"ok": False, "problems": ["x"], "read_models": {"ok": True}})
        .clean
    )
    assert (
        not clean_history()
        .verdict({"ok": True, "problems": [], "read_models": {"ok": False}})
        .clean
    )


def test_time_to_truth_runs_from_the_fault_to_the_last_open_job_closed() -> None:
    h = History()
    h.accepted("a", at=0.0)
    h.event("job-a", "work.succeeded", 7.0, attempt=1)
    found = time_to_truth(jobs_of(h.events), [{"kind": "pg_restart", "started": T0 + 2.0}])
    assert found == {"pg_restart": {"faults": 1, "median_s": 5.0, "max_s": 5.0}}


def never_started(h: History, job: str, at: float) -> None:
    h.event(f"job-{job}", "job.outcome_missing", at, attempt=0, cause="never_started")


def test_never_started_before_the_callers_deadline_is_counted() -> None:
    h = clean_history()
    h.event("job-early", "job.accepted", 0.0, tool="t", start_within_s=10)
    never_started(h, "early", 5.0)  # late told as lost
    h.event("job-on-time", "job.accepted", 0.0, tool="t", start_within_s=10)
    never_started(h, "on-time", 10.5)
    h.event("job-legacy", "job.accepted", 0.0, tool="t")  # no deadline recorded: not judged
    never_started(h, "legacy", 1.0)
    h.event("job-retry", "job.accepted", 0.0, tool="t", start_within_s=10)
    h.event("job-retry", "work.started", 1.0, attempt=1)
    h.act("retry", 1, "begin", 1.1)
    h.act("retry", 1, "done", 1.2, outcome="failed")
    due = datetime.fromtimestamp(T0 + 20.0, UTC).isoformat()
    h.event("job-retry", "work.retry_scheduled", 1.3, attempt=1, due_at=due)
    never_started(h, "retry", 25.0)  # 5 s after the retry was due: before its deadline
    verdict = h.verdict()
    assert verdict.counts["closed_before_deadline"] == 2
    named = {c.job for c in verdict.cases if c.category == "closed_before_deadline"}
    assert named == {"early", "retry"}
    assert not verdict.clean
    row = next(r for r in table(verdict) if r[0] == "closed_before_deadline")
    assert row[1:] == ("2", "0", "FAIL")


def test_redispatches_are_counted_per_accepted_job_and_bounded() -> None:
    h = clean_history()
    assert h.verdict().redispatched == 0
    h.event("job-a", "job.redispatched", 0.5, dispatch=2, reason="r", evidence="queue_lost")
    verdict = h.verdict()
    assert (verdict.redispatched, verdict.redispatched_by) == (1, {"queue_lost": 1})
    assert verdict.redispatch_share == 0.5  # one of the two accepted jobs
    assert not verdict.clean
    row = next(r for r in table(verdict) if r[0] == "re-dispatched")
    assert row[2:] == ("<= 1%", "FAIL") and row[1].startswith("1 (50.00% of accepted")
    body = verdict.to_json()
    assert body["redispatched"] == 1 and body["redispatch_share"] == 0.5
    many = clean_history()
    for i in range(200):  # 1 re-dispatch among 202 accepted jobs: within the bound
        many.accepted(f"x{i}")
        many.ran(f"x{i}")
    many.event("job-x0", "job.redispatched", 0.5, dispatch=2, reason="r", evidence="queue_lost")
    assert many.verdict().clean
