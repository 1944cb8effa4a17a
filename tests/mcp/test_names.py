"""MCP tool names: `.` ↔ `__`, offered only where the way back gives the same tool."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.tools import TOOL_NAME
from mcp_server.names import LEDGER_TOOLS, mcp_name, tool_name

MCP_NAME = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
SEGMENT = st.from_regex(r"[a-z][a-z0-9]{0,6}(_[a-z0-9]{1,4}){0,2}", fullmatch=True)


@given(st.lists(SEGMENT, min_size=1, max_size=4))
def test_names_made_of_ordinary_segments_map_both_ways(segments: list[str]) -> None:
    tool = ".".join(segments)
    assert TOOL_NAME.match(tool)
    name = mcp_name(tool)
    if tool in LEDGER_TOOLS:
        assert name is None
        return
    assert name is not None and MCP_NAME.match(name)
    assert tool_name(name) == tool


@pytest.mark.parametrize(
    "tool",
    [
        "a.b__c",  # would come back as a.b.c
        "a_.b",  # a___b would come back as a._b
        "outcome_get",  # the ledger's own tool keeps its name
    ],
)
def test_names_that_would_not_come_back_the_same_are_not_offered(tool: str) -> None:
    assert mcp_name(tool) is None


def test_a_name_no_tool_could_have_is_none() -> None:
    assert tool_name("Not A Tool") is None
    assert tool_name("tracker__read_issue") == "tracker.read_issue"
