"""The checker: pure functions from what was recorded (the ledger's export), what really
happened (the ground truth), what the clients were told, what the nemesis did (the fault log)
and `outcomes audit verify --json` to a verdict: counts per category, each case named.

Categories (every one but `false_silence` must be 0 for a clean verdict; false silence is
counted, and each case is judged against the fault windows: explained or not):

- lost: accepted (by the ledger, or by an answer a client got) and never terminal;
- duplicated: a job with more than one terminal event; one idempotency key, several jobs;
- unexpected: a job stream not opened by a decision, work after a refusal, an outcome for an
  attempt that never started, a tool run (ground truth) with no recorded start;
- spend_over_once: a spending tool's effect more than once for one job;
- false_success: succeeded, declined or partial, but the ground truth has no run of that
  attempt that reported it;
- false_silence: OUTCOME_MISSING (worker_lost) although the run had completed before the
  reconciler recorded the silence, with no fault on its path in between;
- untold_spend: a spending tool spent, but the envelope neither succeeded nor says
  verify_at_source;
- started_after_brake: a `work.started` between a brake's pull and its release (ledger
  positions), or a step whose brake check began after the pull had committed;
- closed_before_deadline: OUTCOME_MISSING (never_started) recorded before the job's own start
  deadline had passed (its decision's `start_within_s` after it was accepted, or after its
  retry was due): late told as lost;
- chain / read models: `outcomes audit verify` proved them.

And one rate, kept in the verdict and its table: re-dispatched, the `job.redispatched` events
per accepted job (a confirmed message sent again on evidence that it was gone), which must stay
at most `MAX_REDISPATCH_SHARE`.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from typing import Any

from nemesis.faults import DATABASE_FAULTS, WORKER_FAULTS
from nemesis.recorded_jobs import (
    DECISIONS,
    TERMINAL,
    TOLD_SUCCESS,
    WORKER_OUTCOMES,
    Job,
    jobs_of,
    unix,
)
from nemesis.truth import Act
from nemesis.verdict import CATEGORIES, MAX_REDISPATCH_SHARE, MUST, Case, Verdict, table

__all__ = [
    "CATEGORIES",
    "MAX_REDISPATCH_SHARE",
    "MUST",
    "WRITE_GRACE_S",
    "Case",
    "Job",
    "Verdict",
    "check",
    "jobs_of",
    "table",
    "time_to_truth",
    "unix",
]

# A run counts as completed before the silence only if it finished this much earlier: the
# outcome write needs a moment (a group commit) after the tool returns.
WRITE_GRACE_S = 1.0


def check(
    events: list[dict[str, Any]],
    acts: list[Act],
    submissions: list[dict[str, Any]],
    faults: list[dict[str, Any]],
    verify: dict[str, Any],
) -> Verdict:
    jobs = jobs_of(events)
    verdict = Verdict(jobs=len(jobs), submitted=len(submissions), faults=len(faults))
    verdict.accepted = sum(1 for j in jobs.values() if j.accepted is not None)
    statuses: Counter[str] = Counter()
    for job in jobs.values():
        if job.terminals:
            statuses[TERMINAL[job.terminals[0]["type"]]] += 1
        elif job.accepted is not None:
            statuses["open"] += 1
    verdict.by_status = dict(sorted(statuses.items()))
    runs = _runs(acts)
    _ledger_shape(verdict, jobs)
    _client_view(verdict, jobs, submissions)
    _against_truth(verdict, jobs, runs, faults)
    _brakes(verdict, events, acts, faults)
    _deadlines(verdict, jobs)
    verdict.chain_ok = bool(verify.get("ok")) and not verify.get("problems")
    verdict.read_models_ok = bool((verify.get("read_models") or {}).get("ok", False))
    verdict.time_to_truth = time_to_truth(jobs, faults)
    return verdict


def _runs(acts: list[Act]) -> dict[str, list[Act]]:
    by_job: dict[str, list[Act]] = defaultdict(list)
    for act in acts:
        by_job[act.job].append(act)
    return by_job


def _ledger_shape(verdict: Verdict, jobs: dict[str, Job]) -> None:
    keys: dict[tuple[str, str], list[str]] = defaultdict(list)
    for job in jobs.values():
        types = [e["type"] for e in job.events]
        if job.decision not in DECISIONS:
            verdict.add("unexpected", job.job_id, f"stream opens with {job.decision}")
        if job.decision == "job.refused" and len(types) > 1:
            verdict.add("unexpected", job.job_id, f"work after a refusal: {types}")
        if job.accepted is not None and not job.terminals:
            verdict.add("lost", job.job_id, f"accepted, never terminal: {types}")
        if len(job.terminals) > 1:
            verdict.add("duplicated", job.job_id, f"terminal events: {types}")
        started = job.started()
        for event in job.events:
            if event["type"] in WORKER_OUTCOMES and int(event["data"]["attempt"]) not in started:
                verdict.add(
                    "unexpected",
                    job.job_id,
                    f"{event['type']} for attempt {event['data']['attempt']}, never started",
                )
        decision = job.events[0]["data"]
        if decision.get("idempotency_key"):
            keys[(str(decision.get("account")), str(decision["idempotency_key"]))].append(
                job.job_id
            )
    for (_, key), ids in keys.items():
        if len(ids) > 1:
            verdict.add("duplicated", ids[0], f"idempotency key {key} made jobs {ids}")


def _client_view(verdict: Verdict, jobs: dict[str, Job], submissions: list[dict[str, Any]]) -> None:
    """What clients were told is the independent record of what was accepted."""
    for sub in submissions:
        ids = list(sub.get("job_ids") or [])
        if len(ids) > 1:
            verdict.add("duplicated", ids[0], f"key {sub['key']} answered with jobs {ids}")
        for job_id in ids:
            job = jobs.get(job_id)
            if job is None:
                verdict.add("lost", job_id, f"a client was answered {sub['status']}; no such job")
            elif sub.get("status") == "queued" and job.accepted is None:
                verdict.add("lost", job_id, f"a client was told queued; ledger: {job.decision}")


def _against_truth(
    verdict: Verdict, jobs: dict[str, Job], runs: dict[str, list[Act]], faults: list[dict[str, Any]]
) -> None:
    for job_id, acts in runs.items():
        job = jobs.get(job_id)
        if job is None:
            verdict.add("unexpected", job_id, "a tool ran for a job the ledger does not hold")
            continue
        started = job.started()
        for attempt in sorted({a.attempt for a in acts if a.action == "begin"}):
            if attempt not in started:
                verdict.add("unexpected", job_id, f"attempt {attempt} ran, no work.started")
        spends = [a for a in acts if a.action == "spend"]
        if len(spends) > 1:
            attempts = [a.attempt for a in spends]
            verdict.add("spend_over_once", job_id, f"{len(spends)} effects (attempts {attempts})")
    for job in jobs.values():
        if not job.terminals:
            _untold(verdict, job, runs.get(job.job_id, []), status=None)
            continue
        final = job.terminals[0]
        status = TERMINAL[final["type"]]
        acts = runs.get(job.job_id, [])
        if status in TOLD_SUCCESS:
            attempt = int(final["data"]["attempt"])
            reported = [a for a in acts if a.action == "done" and a.attempt == attempt]
            if not any(a.outcome == status for a in reported):
                said = [a.outcome for a in reported] or "no run"
                verdict.add(
                    "false_success", job.job_id, f"{status} (attempt {attempt}); ran: {said}"
                )
        if final["type"] == "job.outcome_missing":
            _silence(verdict, job, final, acts, faults)
        _untold(verdict, job, acts, status)


def _untold(verdict: Verdict, job: Job, acts: list[Act], status: str | None) -> None:
    if not any(a.action == "spend" for a in acts):
        return
    final = job.terminals[0] if job.terminals else None
    verify = (
        final is not None
        and final["type"] == "job.outcome_missing"
        and job.spends  # next_action: verify_at_source (ledger.codes.next_action)
    )
    if status != "succeeded" and not verify:
        told = final["type"] if final else "no outcome"
        verdict.add("untold_spend", job.job_id, f"spent; the envelope says {status} ({told})")


def _silence(
    verdict: Verdict,
    job: Job,
    final: dict[str, Any],
    acts: list[Act],
    faults: list[dict[str, Any]],
) -> None:
    data = final["data"]
    if data.get("cause") != "worker_lost":
        return  # never started, or the tool itself said nothing: honest silence
    attempt = int(data["attempt"])
    done = [a for a in acts if a.action == "done" and a.attempt == attempt]
    if not done:
        return  # the run did not complete: the silence is the truth
    run, recorded = done[0], unix(final["recorded_at"])
    if run.t > recorded - WRITE_GRACE_S:
        verdict.explained_silence += 1
        verdict.cases.append(
            Case("explained_silence", job.job_id, "the run completed after the silence was judged")
        )
        return
    for fault in faults:
        hit = fault["kind"] in DATABASE_FAULTS or (
            fault["kind"] in WORKER_FAULTS and run.pid in fault.get("pids", [])
        )
        if hit and fault["started"] <= recorded and fault["ended"] + WRITE_GRACE_S >= run.t:
            verdict.explained_silence += 1
            why = f"fault {fault['seq']} {fault['kind']} between the run's end and the silence"
            verdict.cases.append(Case("explained_silence", job.job_id, why))
            return
    verdict.add(
        "false_silence",
        job.job_id,
        f"attempt {attempt} completed ({run.outcome}) {recorded - run.t:.1f} s before "
        f"OUTCOME_MISSING, by pid {run.pid}, no fault on its path",
    )


def _brakes(
    verdict: Verdict, events: list[dict[str, Any]], acts: list[Act], faults: list[dict[str, Any]]
) -> None:
    held: list[tuple[int, float]] = []  # (pulled at position, released at position)
    pulled: dict[str, int] = {}
    for event in sorted(events, key=lambda e: int(e["position"])):
        if event["type"] == "brake.pulled" and event["data"].get("scope") == "global":
            pulled[event["data"]["brake_id"]] = int(event["position"])
        elif event["type"] == "brake.released" and event["data"]["brake_id"] in pulled:
            held.append((pulled.pop(event["data"]["brake_id"]), int(event["position"])))
    held += [(position, float("inf")) for position in pulled.values()]
    for event in events:
        if event["type"] != "work.started":
            continue
        position = int(event["position"])
        if any(start < position < end for start, end in held):
            job = str(event["stream_id"]).removeprefix("job-")
            verdict.add("started_after_brake", job, f"work.started at position {position}")
    windows = [
        (float(f["pulled_at"]), float(f["released_at"] or f["ended"]))
        for f in faults
        if f["kind"] == "brake" and f.get("pulled_at")
    ]
    steps = [a for a in acts if a.action == "step" and a.checked_at is not None]
    for act in steps:
        if any(start < (act.checked_at or 0.0) < end for start, end in windows):
            verdict.add("started_after_brake", act.job, "a step's brake check began after the pull")


def _deadlines(verdict: Verdict, jobs: dict[str, Job]) -> None:
    """Never started is told at the caller's deadline, never before; re-dispatches counted."""
    evidence: Counter[str] = Counter()
    for job in jobs.values():
        for event in job.events:
            if event["type"] == "job.redispatched":
                evidence[str(event["data"].get("evidence") or "timer")] += 1
        decision = job.accepted
        final = job.terminals[0] if job.terminals else None
        if decision is None or final is None or final["type"] != "job.outcome_missing":
            continue
        if final["data"].get("cause") != "never_started":
            continue
        within = decision.get("start_within_s")
        if within is None:
            continue  # decided before start deadlines were recorded
        began = unix(job.events[0]["recorded_at"])
        retries = [e for e in job.events if e["type"] == "work.retry_scheduled"]
        if retries:
            began = unix(str(retries[-1]["data"]["due_at"]))
        closed = unix(final["recorded_at"])
        if closed < began + float(within):
            verdict.add(
                "closed_before_deadline",
                job.job_id,
                f"never_started {began + float(within) - closed:.1f} s before its {within} s "
                "start deadline",
            )
    verdict.redispatched = sum(evidence.values())
    verdict.redispatched_by = dict(sorted(evidence.items()))


def time_to_truth(
    jobs: dict[str, Job], faults: list[dict[str, Any]]
) -> dict[str, dict[str, float]]:
    """Per fault kind: seconds from the fault's start until every job open at that moment had
    its terminal outcome recorded (median and max over the faults of that kind)."""
    spans = []
    for job in jobs.values():
        if job.accepted is None or not job.terminals:
            continue
        spans.append((unix(job.events[0]["recorded_at"]), unix(job.terminals[0]["recorded_at"])))
    found: dict[str, list[float]] = defaultdict(list)
    for fault in faults:
        start = float(fault["started"])
        ends = [end for begin, end in spans if begin <= start < end]
        found[fault["kind"]].append(max(ends) - start if ends else 0.0)
    return {
        kind: {
            "faults": len(values),
            "median_s": round(statistics.median(values), 2),
            "max_s": round(max(values), 2),
        }
        for kind, values in sorted(found.items())
    }
