"""MCP tool names: clients accept `[A-Za-z0-9_-]` only, ledger tools are dotted
(`tracker.read_issue`). Each `.` becomes `__` (`tracker__read_issue`), and back. A tool whose
name does not come back the same way (a segment holding `__` or ending in `_`) or that would
take a ledger tool's name is not offered over MCP (`mcp_name` answers None)."""

from __future__ import annotations

from ledger.tools import TOOL_NAME

SEPARATOR = "__"
OUTCOME_GET = "outcome_get"
OUTCOME_LIST = "outcome_list"
OUTCOME_CANCEL = "outcome_cancel"
OUTCOME_TURN = "outcome_turn"
OUTCOME_PREFLIGHT = "outcome_preflight"
LEDGER_TOOLS = (OUTCOME_GET, OUTCOME_LIST, OUTCOME_CANCEL, OUTCOME_TURN, OUTCOME_PREFLIGHT)


def mcp_name(tool: str) -> str | None:
    """The MCP name of a ledger tool, or None when it cannot be mapped reversibly."""
    name = tool.replace(".", SEPARATOR)
    if name in LEDGER_TOOLS or tool_name(name) != tool:
        return None
    return name


def tool_name(name: str) -> str | None:
    """The ledger tool an MCP name stands for, or None for a name no tool could have."""
    tool = name.replace(SEPARATOR, ".")
    return tool if TOOL_NAME.fullmatch(tool) else None
