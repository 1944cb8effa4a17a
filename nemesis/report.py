"""The campaign's table, for people: the checker's rows, then what was done to the product."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from nemesis.checker import Verdict, table


def by_kind(faults: list[dict[str, Any]]) -> dict[str, int]:
    return dict(sorted(Counter(str(f["kind"]) for f in faults).items()))


def markdown(rows: Sequence[tuple[str, ...]], header: tuple[str, ...]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(row: tuple[str, ...]) -> str:
        cells = (str(c).ljust(w) for c, w in zip(row, widths, strict=True))
        return "| " + " | ".join(cells) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), rule, *(line(r) for r in rows)])


def render(verdict: Verdict, info: dict[str, Any]) -> str:
    options = info.get("options", {})
    lines = [
        f"nemesis campaign: seed {info.get('seed')}, {options.get('duration_s')} s, "
        f"rate {info.get('rate')} jobs/s = {options.get('rate_share')} x max "
        f"{info.get('max_rate')} jobs/s (achieved {info.get('achieved_rate')} jobs/s)",
        f"command: {info.get('command') or '(library call)'}",
        f"jobs {verdict.jobs} (accepted {verdict.accepted}, submissions {verdict.submitted}); "
        f"by status {verdict.by_status}",
        f"faults {verdict.faults}: {info.get('faults_by_kind')}",
        f"fixed point reached: {info.get('fixed_point')} after {info.get('settle_s')} s",
        "",
        markdown(table(verdict), ("check", "found", "must be", "verdict")),
        "",
        "time from fault to truth (s until every job open at the fault was terminal):",
        markdown(
            [
                (kind, str(t["faults"]), str(t["median_s"]), str(t["max_s"]))
                for kind, t in verdict.time_to_truth.items()
            ],
            ("fault", "n", "median", "max"),
        )
        if verdict.time_to_truth
        else "(no faults)",
        "",
        f"memory growth after warm-up (KiB): {info.get('memory_growth_kib')}",
        f"verdict: {'CLEAN' if verdict.clean else 'VIOLATIONS'}",
    ]
    named = [c for c in verdict.cases][:40]
    if named:
        lines += ["", "cases:"] + [f"  {c.category}: job {c.job}: {c.detail}" for c in named]
    return "\n".join(lines) + "\n"
