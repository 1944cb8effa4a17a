"""The README's "For agents" examples, run as written against a real `outcomes serve`: the
curl line, the desktop client's stdio config (its command starts, lists tools and calls one)
and the streamable HTTP config. Only the placeholders are filled in."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.mcp.serving import ROOT, Served, served

pytestmark = pytest.mark.timeout(240)
README = (ROOT / "README.md").read_text()
PLACEHOLDER_TOKEN = "ol_your_agent_token"
README_BASE = "http://127.0.0.1:8000"


def example(name: str) -> str:
    found = re.search(rf"<!-- readme-example: {name} -->\n```\w+\n(.*?)\n```", README, re.DOTALL)
    assert found, f"README has no example {name!r}"
    return found.group(1)


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with served(tmp_path_factory.mktemp("readme")) as running:
        yield running


def test_the_curl_line_lists_the_tools(ledger: Served) -> None:
    line = example("http").replace(README_BASE, ledger.base_url)
    run = subprocess.run(
        ["bash", "-c", line],
        env={"TOKEN": ledger.agent, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        timeout=60,
        check=True,
    )
    names = {tool["name"] for tool in json.loads(run.stdout)["tools"]}
    assert "tracker.read_issue" in names


def test_the_desktop_stdio_config_starts_lists_and_calls(ledger: Served) -> None:
    config = json.loads(example("mcp-stdio").replace(PLACEHOLDER_TOKEN, ledger.agent))
    entry = config["mcpServers"]["outcome-ledger"]
    command = str(Path(sys.executable).parent / "outcomes")  # the venv's, as installed
    assert entry["command"] == "/path/to/.venv/bin/outcomes"
    args = [str(ledger.home) if a == "/path/to/ledger-folder" else a for a in entry["args"]]
    # As a desktop client starts it: its own folder, the config's environment only.
    params = StdioServerParameters(command=command, args=args, env=entry["env"], cwd="/")

    async def main() -> tuple[set[str], Any]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            names = {tool.name for tool in (await session.list_tools()).tools}
            called = await session.call_tool("tracker__read_issue", {"issue_ref": "T-1"})
            return names, called.structured_content

    names, envelope = anyio.run(main)
    assert {"tracker__read_issue", "outcome_get", "outcome_list"} <= names
    assert envelope["status"] == "succeeded"


def test_the_streamable_http_config_lists_the_tools(ledger: Served) -> None:
    config = json.loads(example("mcp-http").replace(PLACEHOLDER_TOKEN, ledger.agent))
    entry = config["mcpServers"]["outcome-ledger"]
    url = entry["url"].replace(README_BASE, ledger.base_url)

    async def main() -> set[str]:
        async with (
            httpx2.AsyncClient(headers=entry["headers"]) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return {tool.name for tool in (await session.list_tools()).tools}

    assert "tracker__read_issue" in anyio.run(main)
