"""`outcomes tools list`: every loaded tool, enabled or not, for operators."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner

from cli.main import cli
from tests.tools import ECHO, METERED, OFF, QUOTA


def test_tools_list_json_names_every_loaded_tool_enabled_or_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OUTCOMES_TOOLS", "tests.tools")
    result = CliRunner().invoke(cli, ["tools", "list", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    tools = {tool["name"]: tool for tool in orjson.loads(result.output)["tools"]}
    assert tools[OFF]["enabled"] is False and tools[ECHO]["enabled"] is True
    assert tools[METERED]["quota"] == {"limit": QUOTA, "window_s": 3600, "remaining": None}
    assert tools["itest.charge"]["spends"] is True
    assert tools["itest.charge"]["description"].startswith("A spending tool")
    assert "amount" in tools["itest.charge"]["args_schema"]["properties"]


def test_tools_list_prints_one_line_per_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTCOMES_TOOLS", "tests.tools")
    result = CliRunner().invoke(cli, ["tools", "list"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = {line.split()[0]: line for line in result.output.splitlines()}
    assert "disabled" in lines[OFF] and "enabled" in lines[ECHO]
    assert f"quota {QUOTA}/3600s" in lines[METERED]
