"""bench.throughput --tree-ab: ours' sequencing lag with the Merkle tree against without it.

Run:  .venv/bin/python -m bench.throughput --tree-ab [--n 1000] [--rounds 6] [--json] ...

Two arms, each ours as bench.throughput runs it (a scratch ledger on the same Postgres, its own
`outcomes worker` and queue, a reconciler beside it that is the ledger's sequencer):

- with_tree     the reconciler is `outcomes reconcile`: each tick extends the tree, as deployed.
- without_tree  the reconciler is `python -m bench.throughput_notree reconcile`: the same CLI,
                its ticks the product's `outcomes_sequence` with the tree step cut out
                (bench/throughput_notree.py). The tree of its ledger stays empty.

After a warm-up turn each, `--rounds` rounds of one turn per arm (`--n` jobs), the order
alternating (with, without; then without, with; ...) to cancel drift. Each turn's lag is
measured as bench.throughput measures it (bench/throughput_lag.py: commit -> position from a
probe every 5 ms, and recorded -> position). Printed: each turn's p50/p99, each arm's p50/p99
over all its turns' events pooled, and the ratio with / without. Issue 45's goal: the tree
adds at most 10% to the lag p99 (commit -> position; both measures are given).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import uuid
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from bench._common import exit_cleanly_on_sigterm, migrate, scratch_database, server_settings
from bench.throughput_lag import Lag, LagSamples, lag_json, lag_samples, probing, write_head
from bench.throughput_report import load_average
from bench.throughput_variants import LedgerVariant
from bench.throughput_workers import delete_queues


class Options(Protocol):
    """What of bench.throughput's options the A/B reads."""

    @property
    def n(self) -> int: ...
    @property
    def rounds(self) -> int: ...
    @property
    def warmup(self) -> int: ...
    @property
    def broker_url(self) -> str: ...
    @property
    def timeout_s(self) -> float: ...
    @property
    def as_json(self) -> bool: ...


OptionsT = TypeVar("OptionsT", bound=Options)
# bench.throughput's `_ours`: (stack, url, options, queue, logs, arm, reconciler argv) -> ours.
MakeArm = Callable[[ExitStack, str, OptionsT, str, Path, str, Sequence[str]], LedgerVariant]
WITH, WITHOUT = "with_tree", "without_tree"
ARMS = (WITH, WITHOUT)
GOAL_RATIO = 1.10  # issue 45: with / without, lag p99, at most


@dataclass(frozen=True)
class Turn:
    arm: str
    round: int  # 0: the warm-up
    jobs_per_s: float
    samples: LagSamples

    @property
    def lag(self) -> Lag:
        return self.samples.lag()


@dataclass(frozen=True)
class Arm:
    variant: LedgerVariant
    url: str


def _reconcile_argv(arm: str) -> list[str]:
    if arm == WITH:
        return []  # `outcomes reconcile`, as bench.throughput starts it
    return [sys.executable, "-m", "bench.throughput_notree", "reconcile"]


def set_up(stack: ExitStack, options: OptionsT, make_arm: MakeArm[OptionsT]) -> dict[str, Arm]:
    run_id = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    queues = {arm: f"bench-throughput-{arm}-{run_id}" for arm in ARMS}
    stack.callback(delete_queues, options.broker_url, list(queues.values()))  # runs last
    logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-tree-ab-")))
    arms = {}
    for arm in ARMS:
        url = stack.enter_context(scratch_database(f"outcomes_tput_{arm}"))
        migrate(url)
        variant = make_arm(stack, url, options, queues[arm], logs, arm, _reconcile_argv(arm))
        arms[arm] = Arm(variant, url)
    return arms


def turn(arm: str, at: Arm, n: int, number: int, timeout_s: float) -> Turn:
    head = write_head(at.variant.poll)
    with probing(at.url) as probe:
        result = at.variant.run(n, f"{arm[:2]}{number}", timeout_s)
        samples = lag_samples(at.variant.poll, head, probe)
    return Turn(arm, number, result.rate(n), samples)


def run_turns(arms: dict[str, Arm], options: Options) -> list[Turn]:
    for arm, at in arms.items():  # the warm-up: also waits for the workers to come up
        turn(arm, at, min(options.warmup, options.n), 0, options.timeout_s + 60)
    turns: list[Turn] = []
    for number in range(1, options.rounds + 1):
        order = ARMS if number % 2 else ARMS[::-1]
        turns.extend(turn(arm, arms[arm], options.n, number, options.timeout_s) for arm in order)
    return turns


@dataclass(frozen=True)
class Report:
    n: int
    rounds: int
    server: dict[str, str]
    turns: list[Turn]
    load: tuple[float, float]

    def pooled(self, arm: str) -> Lag:
        return LagSamples.pooled([t.samples for t in self.turns if t.arm == arm]).lag()

    def ratios(self) -> dict[str, float]:
        with_, without = self.pooled(WITH), self.pooled(WITHOUT)
        names = ("commit_p50_ms", "commit_p99_ms", "p50_ms", "p99_ms")
        labels = ("commit_p50", "commit_p99", "recorded_p50", "recorded_p99")
        return {
            label: _ratio(getattr(with_, name), getattr(without, name))
            for label, name in zip(labels, names, strict=True)
        }

    def goal_met(self) -> bool:
        return self.ratios()["commit_p99"] <= GOAL_RATIO


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("inf") if a > 0 else 1.0


def _lag_text(lag: Lag) -> str:
    return (
        f"{lag.events:>6,} events; commit -> position p50 {lag.commit_p50_ms:6.1f}, p99"
        f" {lag.commit_p99_ms:6.1f} ms; recorded -> position p50 {lag.p50_ms:6.1f}, p99"
        f" {lag.p99_ms:6.1f} ms"
    )


def report_lines(report: Report) -> list[str]:
    settings = ", ".join(f"{k}={v}" for k, v in report.server.items())
    lines = [
        f"tree A/B (bench/throughput_treeab.py): {report.rounds} rounds x {report.n} jobs per arm,"
        " turns alternating; ours' sequencing lag, commit -> position probed every 5 ms",
        f"postgres {settings}; 1-min load average {report.load[0]:.1f} before,"
        f" {report.load[1]:.1f} after",
        "",
    ]
    for t in report.turns:
        lines.append(
            f"  round {t.round} {t.arm:<12} {t.jobs_per_s:6,.0f} jobs/s {_lag_text(t.lag)}"
        )
    lines.append("pooled over the rounds:")
    lines.extend(f"  {arm:<12} {_lag_text(report.pooled(arm))}" for arm in ARMS)
    ratios = report.ratios()
    lines.append(
        "with / without: commit -> position p50 {commit_p50:.2f}x, p99 {commit_p99:.2f}x;"
        " recorded -> position p50 {recorded_p50:.2f}x, p99 {recorded_p99:.2f}x".format(**ratios)
    )
    met = "met" if report.goal_met() else "NOT met"
    lines.append(
        f"goal: the tree adds <= {GOAL_RATIO - 1:.0%} to the lag p99 (commit -> position"
        f" {ratios['commit_p99']:.2f}x) -> {met}"
    )
    return lines


def report_json(report: Report) -> str:
    document: dict[str, Any] = {
        "bench": "throughput_tree_ab",
        "n": report.n,
        "rounds": report.rounds,
        "server": report.server,
        "load_average_1m": {"before": report.load[0], "after": report.load[1]},
        "turns": [
            {"round": t.round, "arm": t.arm, "jobs_per_s": round(t.jobs_per_s, 1)}
            | {"lag": lag_json(t.lag)}
            for t in report.turns
        ],
        "pooled": {arm: lag_json(report.pooled(arm)) for arm in ARMS},
        "ratio_with_vs_without": {k: round(v, 3) for k, v in report.ratios().items()},
        "goal_ratio_p99": GOAL_RATIO,
        "goal_met": report.goal_met(),
    }
    return json.dumps(document)


def tree_ab(options: OptionsT, make_arm: MakeArm[OptionsT]) -> int:
    with exit_cleanly_on_sigterm(), ExitStack() as stack:
        arms = set_up(stack, options, make_arm)
        server = server_settings(
            arms[WITH].variant.poll, ("server_version", "synchronous_commit", "fsync")
        )
        load_before = load_average()
        try:
            turns = run_turns(arms, options)
        except Exception:
            for at in arms.values():
                worker = at.variant.worker
                print(f"--- {worker.name} worker log (tail) ---\n{worker.tail()}", file=sys.stderr)
            raise
    report = Report(options.n, options.rounds, server, turns, (load_before, load_average()))
    print(report_json(report) if options.as_json else "\n".join(report_lines(report)))
    return 0
