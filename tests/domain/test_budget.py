"""Budgeted answers (ledger/budget.py): an answer within its budget is kept whole and unchanged;
one over it is cut to fit, never over the budget, the small values kept whole before the big
ones are cut, and the note says what was left out where and how to narrow. The tools' helpers:
a count instead of a list, the changes instead of the state. And the rules of `@tool`."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from ledger.budget import (
    DEFAULT_MAX_RESULT_BYTES,
    HARD_CAP_BYTES,
    MIN_BUDGET_BYTES,
    delta,
    fit,
    json_size,
    list_or_count,
)
from ledger.errors import ConfigurationError
from ledger.outcomes import Succeeded
from ledger.tools import ToolContext, get_tool, tool, unregister

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=60),
    lambda inner: st.lists(inner, max_size=20) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=40,
)


@settings(max_examples=100, deadline=None)
@given(result=st.dictionaries(st.text(max_size=12), JSON), budget=st.integers(2, 1500))
def test_no_answer_comes_back_over_its_budget_and_one_within_it_comes_whole(
    result: dict[str, Any], budget: int
) -> None:
    answer = {"result": result}
    fitted = fit(answer, budget)
    if json_size(answer) <= budget:
        assert fitted.answer is answer and fitted.note is None
        return
    assert json_size(fitted.answer) <= budget
    assert fitted.note is not None
    assert fitted.note.kept_bytes == json_size(fitted.answer)
    assert fitted.note.omitted_bytes == json_size(answer) - fitted.note.kept_bytes > 0


def test_a_ten_megabyte_list_keeps_its_first_items_and_its_small_fields() -> None:
    items = [f"{n:08d}".ljust(100, "x") for n in range(100_000)]
    answer = {"result": {"items": items, "total": 100_000, "next_page": "p-2"}}
    fitted = fit(answer, DEFAULT_MAX_RESULT_BYTES, tool_max=DEFAULT_MAX_RESULT_BYTES)
    kept = fitted.answer["result"]
    note = fitted.note
    assert note is not None and json_size(fitted.answer) <= DEFAULT_MAX_RESULT_BYTES
    assert (kept["total"], kept["next_page"]) == (100_000, "p-2")
    assert kept["items"] == items[: len(kept["items"])] and len(kept["items"]) > 500
    (omission,) = note.omitted
    assert (omission.path, omission.unit, omission.total) == ("/result/items", "items", 100_000)
    assert note.omitted_items == 100_000 - omission.kept
    assert note.answer_bytes > 10_000_000
    assert "narrow the request" in note.narrow and "/result/items kept" in note.narrow
    assert "raise budget_bytes" not in note.narrow  # already the tool's maximum


def test_a_text_too_long_keeps_its_beginning_and_says_how_much() -> None:
    answer = {"result": {"log": "é" * 10_000}}
    fitted = fit(answer, 1000, tool_max=4096)
    assert fitted.note is not None
    assert "é" * 10 in fitted.answer["result"]["log"]
    (omission,) = fitted.note.omitted
    assert (omission.path, omission.unit, omission.total) == ("/result/log", "chars", 10_000)
    assert omission.kept == len(fitted.answer["result"]["log"])
    assert "raise budget_bytes (up to 4,096 for this tool)" in fitted.note.narrow


def test_keys_left_out_are_counted_and_paths_are_json_pointers() -> None:
    answer = {"result": {f"k{n}": "v" * 50 for n in range(100)} | {"a/b": [1] * 500}}
    fitted = fit(answer, 600)
    assert fitted.note is not None
    units = {o.path: o.unit for o in fitted.note.omitted}
    assert units.get("/result") == "keys"
    assert all(o.path.startswith("/result") for o in fitted.note.omitted)
    assert "/result/a~1b" in units or "a/b" not in fitted.answer["result"]


def test_a_list_whose_first_item_is_too_big_keeps_its_beginning() -> None:
    fitted = fit({"result": {"pages": ["x" * 5000, "y"]}}, 500)
    assert fitted.note is not None
    (page,) = fitted.answer["result"]["pages"]
    assert page.startswith("xxx") and json_size(fitted.answer) <= 500


def test_an_answer_that_is_not_json_is_left_to_the_ledger() -> None:
    answer: dict[str, Any] = {"result": {"when": object()}}
    assert fit(answer, 300).answer is answer


def test_a_count_instead_of_a_list_and_the_changes_instead_of_the_state() -> None:
    items = ["x" * 100] * 50
    assert list_or_count("items", items[:2], 1000, total=2) == {"items": items[:2], "total": 2}
    assert list_or_count("items", items, 1000, total=50) == {"items_count": 50, "total": 50}
    before = {"a": 1, "b": {"c": 2, "d": 3}, "gone": True}
    after = {"a": 1, "b": {"c": 4, "d": 3}, "new": [1]}
    assert delta(before, after) == {"gone": None, "b": {"c": 4}, "new": [1]}
    assert delta(after, after) == {}


class NoArgs(BaseModel):
    pass


def test_a_tool_declares_its_budget_within_the_hard_cap() -> None:
    @tool("budgettest.small", max_result_bytes=2048)
    def small(args: NoArgs, ctx: ToolContext) -> Succeeded:
        return Succeeded()

    try:
        spec = get_tool("budgettest.small")
        assert spec is not None and spec.max_result_bytes == 2048
    finally:
        unregister("budgettest.small")
    for bad in (MIN_BUDGET_BYTES - 1, HARD_CAP_BYTES + 1):
        with pytest.raises(ConfigurationError, match="max_result_bytes"):
            tool("budgettest.bad", max_result_bytes=bad)


def test_the_context_tells_the_tool_its_budget() -> None:
    ctx = ToolContext(
        job_id="j",
        attempt=1,
        idempotency_key="k",
        heartbeat=lambda: None,
        checkpoint=lambda: None,
        budget_bytes=300,
    )
    assert ctx.budget_bytes == 300
    assert ctx.fits({"a": "x" * 100}) and not ctx.fits({"a": "x" * 400})
    assert ctx.list_or_count("ids", list(range(1000))) == {"ids_count": 1000}
    assert ctx.delta({"a": 1}, {"a": 2}) == {"a": 2}
