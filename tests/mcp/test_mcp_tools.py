"""MCP clients from the SDK, over stdio and streamable HTTP, against a real `outcomes serve`
(its worker runs the jobs): the tools a token may call, with their schemas; succeeded, refused
and failed calls with the typed envelope; a call still running at its budget; progress while
`outcome_get` waits; the changes feed; a token limited to one tool; no token."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import jsonschema
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ledger.persistence.open import open_store
from ledger.runtime.ledger import Ledger
from ledger.services import jobs
from tests.cancelling import jobs_to_cancel
from tests.mcp.clients import TRANSPORTS, connect, modern_client, stdio_params
from tests.mcp.serving import READ_ISSUE, Served, served
from tests.traces import CALLER_SPAN, CALLER_TRACE, TRACEPARENT

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with served(tmp_path_factory.mktemp("mcp")) as running:
        yield running


def structured(result: types.CallToolResult) -> dict[str, Any]:
    assert isinstance(result.structured_content, dict), result
    return result.structured_content


def text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_tools_an_agent_may_call_are_listed_with_their_schemas(
    ledger: Served, transport: str
) -> None:
    async def main() -> dict[str, types.Tool]:
        async with connect(ledger, transport, ledger.agent) as session:
            return {tool.name: tool for tool in (await session.list_tools()).tools}

    tools = anyio.run(main)
    assert {"tracker__read_issue", "matrix__gated_read", "outcome_get", "outcome_list"} <= set(
        tools
    )
    assert "apitest__off" not in tools  # disabled: submit would refuse it
    read = tools["tracker__read_issue"]
    assert read.description == "Read an issue's metadata from the tracker."
    assert "issue_ref" in read.input_schema["properties"]
    assert read.input_schema["required"] == ["issue_ref"]
    assert "_wait_s" in read.input_schema["properties"]
    assert read.output_schema is not None
    assert {"status", "next_action", "error", "job_id"} <= set(read.output_schema["properties"])


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_calls_answer_the_typed_envelope(ledger: Served, transport: str) -> None:
    async def main() -> list[types.CallToolResult]:
        async with connect(ledger, transport, ledger.agent) as session:
            return [
                await session.call_tool("tracker__read_issue", {"issue_ref": "T-1"}),
                await session.call_tool("tracker__read_issue", {}),
                await session.call_tool(
                    "tracker__read_issue", {"issue_ref": "T-1", "connector": "disabled"}
                ),
            ]

    ok, refused, failed = anyio.run(main)

    assert not ok.is_error
    envelope = structured(ok)
    assert (envelope["status"], envelope["next_action"]) == ("succeeded", "accept")
    assert envelope["result"]["issue"]["title"] == "Checkout fails on Safari"
    assert f"job {envelope['job_id']}" in text(ok) and "succeeded" in text(ok)

    assert refused.is_error
    envelope = structured(refused)
    assert (envelope["status"], envelope["error"]["code"]) == ("refused", "INPUT_MISSING")
    assert envelope["next_action"] == "satisfy_precondition"
    assert "INPUT_MISSING" in text(refused) and "issue_ref" in text(refused)

    assert failed.is_error
    envelope = structured(failed)
    assert (envelope["status"], envelope["error"]["code"]) == ("failed", "CAPABILITY_UNAVAILABLE")
    assert envelope["next_action"] == "stop_and_report"
    assert envelope["error"]["fix"] in text(failed)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_call_still_running_answers_its_job_and_outcome_get_reports_progress(
    ledger: Served, transport: str
) -> None:
    gate = Path(tempfile.mkdtemp(dir=ledger.home)) / "open"
    progress: list[str] = []

    async def opened_on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")
        gate.touch()  # the tool finishes once the client has heard progress

    async def main() -> tuple[types.CallToolResult, types.CallToolResult]:
        async with connect(ledger, transport, ledger.agent) as session:
            pending = await session.call_tool(
                "matrix__gated_read", {"gate": str(gate), "_wait_s": 0}
            )
            job_id = structured(pending)["job_id"]
            final = await session.call_tool(
                "outcome_get",
                {"job_id": job_id, "wait_s": 60},
                progress_callback=opened_on_progress,
            )
            return pending, final

    pending, final = anyio.run(main)
    assert not pending.is_error
    assert structured(pending)["status"] in ("queued", "running")
    assert "not an error" in text(pending) and "outcome_get" in text(pending)
    assert progress and all(structured(pending)["job_id"] in m for m in progress)
    assert structured(final)["status"] == "succeeded" and not final.is_error


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_outcome_list_is_the_changes_feed(ledger: Served, transport: str) -> None:
    async def main() -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
        async with connect(ledger, transport, ledger.agent) as session:
            call = await session.call_tool("tracker__read_issue", {"issue_ref": "T-1"})
            job_id = structured(call)["job_id"]
            pages, after = [], None
            while True:
                args: dict[str, Any] = {"limit": 2} | ({"after": after} if after else {})
                page = structured(await session.call_tool("outcome_list", args))
                pages.append(page)
                after = page["next_cursor"]
                if not page["truncated"]:
                    break
            bad = await session.call_tool("outcome_list", {"after": "1"})
            return job_id, pages, structured(bad)

    job_id, pages, bad = anyio.run(main)
    seen = [item["job_id"] for page in pages for item in page["items"]]
    assert job_id in seen and len(seen) == len(set(seen))
    assert all(isinstance(page["next_cursor"], str) for page in pages)
    assert bad["error"]["code"] == "INPUT_INVALID"  # a bare number is no cursor


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_token_limited_to_one_tool_sees_only_that_tool(ledger: Served, transport: str) -> None:
    async def main() -> tuple[set[str], types.CallToolResult]:
        async with connect(ledger, transport, ledger.read_only) as session:
            names = {tool.name for tool in (await session.list_tools()).tools}
            other = await session.call_tool("social__draw_card", {"post_id": "p"})
            return names, other

    names, other = anyio.run(main)
    # The ledger's own tools beside it (a cancel, like a read, is not a call of a tool).
    ledger_tools = {"outcome_get", "outcome_list", "outcome_cancel"}
    ledger_tools |= {"outcome_turn", "outcome_preflight"}
    assert names == {READ_ISSUE.replace(".", "__")} | ledger_tools
    # Calling another one anyway is a recorded refusal, as POST /v1/jobs would record it.
    assert other.is_error
    assert structured(other)["error"]["code"] == "ACCESS_DENIED"


def test_an_operator_token_over_http_calls_no_tool(ledger: Served) -> None:
    async def main() -> set[str]:
        async with connect(ledger, "http", ledger.operator) as session:
            return {tool.name for tool in (await session.list_tools()).tools}

    assert anyio.run(main) == {
        "outcome_get",
        "outcome_list",
        "outcome_cancel",
        "outcome_turn",
        "outcome_preflight",
    }


@pytest.mark.parametrize("token", ["none", "revoked"])
def test_over_http_no_valid_token_lists_nothing_and_says_why(ledger: Served, token: str) -> None:
    async def main() -> None:
        async with connect(ledger, "http", None if token == "none" else ledger.revoked) as session:
            await session.list_tools()

    with pytest.raises(BaseException) as raised:
        anyio.run(main)
    error = mcp_error(raised.value)
    assert error is not None, raised.value
    assert "Not authenticated" in error.message and "Authorization: Bearer" in error.message
    assert error.data["error"]["code"] == "ACCESS_DENIED"


def mcp_error(exc: BaseException) -> MCPError | None:
    """The MCPError inside the task groups' exception groups."""
    if isinstance(exc, MCPError):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        if (found := mcp_error(inner)) is not None:
            return found
    return None


@pytest.mark.parametrize("token", ["none", "revoked"])
def test_over_stdio_no_valid_token_exits_with_the_reason(
    ledger: Served, token: str, tmp_path: Path
) -> None:
    errlog_path = tmp_path / "stderr.txt"

    async def main() -> None:
        with errlog_path.open("w") as errlog:
            async with connect(
                ledger, "stdio", None if token == "none" else ledger.revoked, errlog
            ) as session:
                await session.list_tools()

    with pytest.raises(Exception):  # noqa: B017 (the server is gone before initialize answers)
        anyio.run(main)
    reason = errlog_path.read_text()
    expected = "no token: set OUTCOMES_TOKEN" if token == "none" else "is not a valid token"
    assert expected in reason


def test_the_same_idempotency_key_answers_the_same_job(ledger: Served) -> None:
    async def main() -> tuple[dict[str, Any], dict[str, Any], types.CallToolResult]:
        async with connect(ledger, "http", ledger.agent) as session:
            args = {"issue_ref": "T-1", "_idempotency_key": "mcp-key-1"}
            first = structured(await session.call_tool("tracker__read_issue", args))
            again = structured(await session.call_tool("tracker__read_issue", args))
            other = {"issue_ref": "T-2", "_idempotency_key": "mcp-key-1"}
            conflict = await session.call_tool("tracker__read_issue", other)
            return first, again, conflict

    first, again, conflict = anyio.run(main)
    assert first["job_id"] == again["job_id"] and again["status"] == "succeeded"
    assert conflict.is_error and structured(conflict)["error"]["code"] == "INPUT_INVALID"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_sdk_client_on_the_current_protocol_gets_the_same_answers(
    ledger: Served, transport: str
) -> None:
    """`mcp.Client` negotiates the per-request protocol (no handshake) where the server has it."""
    progress: list[str] = []

    async def heard(done: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async def main() -> tuple[str, types.CallToolResult, types.CallToolResult]:
        async with modern_client(ledger, transport, ledger.agent) as client:
            ok = await client.call_tool(
                "tracker__read_issue", {"issue_ref": "T-1"}, progress_callback=heard
            )
            refused = await client.call_tool("tracker__read_issue", {})
            return client.session.protocol_version, ok, refused

    version, ok, refused = anyio.run(main)
    assert version in MODERN_PROTOCOL_VERSIONS
    assert not ok.is_error and structured(ok)["status"] == "succeeded"
    assert refused.is_error and structured(refused)["error"]["code"] == "INPUT_MISSING"
    assert progress  # the wait reported at least the job's first status


def test_over_stdio_the_token_may_come_from_a_file(ledger: Served, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(ledger.read_only + "\n")
    params = stdio_params(ledger, None)
    params = params.model_copy(update={"args": [*params.args, "--token-file", str(token_file)]})

    async def main() -> set[str]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return {tool.name for tool in (await session.list_tools()).tools}

    assert "tracker__read_issue" in anyio.run(main)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_start_deadline_is_an_option_of_the_call(ledger: Served, transport: str) -> None:
    """`_start_within_s` is the submit's `start_within_s`: declared with its range and the
    tool's own as default, recorded in the decision (a longer one capped by the tool's), and
    refused outside its range, with nothing submitted."""

    async def main() -> tuple[types.Tool, list[types.CallToolResult]]:
        async with connect(ledger, transport, ledger.agent) as session:
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            calls = [
                await session.call_tool(
                    "tracker__read_issue", {"issue_ref": "T-1", "_start_within_s": s}
                )
                for s in (30, 86400, 10**6, 0.5)
            ]
            return tools["tracker__read_issue"], calls

    read, (short, capped, too_long, too_short) = anyio.run(main)
    option = read.input_schema["properties"]["_start_within_s"]
    assert (option["minimum"], option["maximum"], option["default"]) == (1.0, 604800.0, 600.0)
    for answered in (short, capped):
        assert not answered.is_error and structured(answered)["status"] == "succeeded"
    for refused in (too_long, too_short):
        assert refused.is_error and structured(refused)["error"]["code"] == "INPUT_INVALID"
        assert "_start_within_s" in text(refused)
    with Ledger(open_store(ledger.env["OUTCOMES_DATABASE_URL"])) as opened:
        decided = [jobs.get(opened, structured(a)["job_id"]) for a in (short, capped)]
    assert [view.start_within_s for view in decided] == [30, 600]  # the tool's caps the second


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_outcome_cancel_declines_a_queued_job_and_refuses_a_running_one(
    ledger: Served, transport: str
) -> None:
    jobs_of = jobs_to_cancel(ledger.env["OUTCOMES_DATABASE_URL"], queued=2)
    mine, theirs = jobs_of.queued

    declared: dict[str, Any] = {}
    cancel = "outcome_cancel"

    async def main() -> dict[str, types.CallToolResult]:
        async with connect(ledger, transport, ledger.agent) as session:
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            declared.update(tools[cancel].output_schema or {})
            answers = {
                "first": await session.call_tool(cancel, {"job_id": mine, "reason": "not needed"}),
                "again": await session.call_tool(cancel, {"job_id": mine}),
                "running": await session.call_tool(cancel, {"job_id": jobs_of.running}),
                "unknown": await session.call_tool(cancel, {"job_id": str(uuid.uuid4())}),
                "long": await session.call_tool(cancel, {"job_id": mine, "reason": "x" * 501}),
            }
        # Other roles over HTTP only: each stdio session is a process to start.
        async with connect(ledger, "http", ledger.operator) as session:
            answers["operator"] = await session.call_tool(cancel, {"job_id": theirs})
        async with connect(ledger, "http", jobs_of.auditor) as session:
            answers["auditor"] = await session.call_tool(cancel, {"job_id": theirs})
        return answers

    answers = anyio.run(main)
    first = structured(answers["first"])
    assert not answers["first"].is_error
    assert (first["status"], first["next_action"], first["recorded_by"]) == (
        "declined",
        "accept",
        "api",
    )
    assert "not needed" in first["declined_reason"] and "declined" in text(answers["first"])
    assert structured(answers["again"]) == first
    running = answers["running"]
    assert running.is_error and set(structured(running)) == {"error", "job"}
    assert structured(running)["error"]["code"] == "NOT_CANCELLABLE"
    assert structured(running)["job"]["status"] == "running"
    assert text(running).startswith("NOT_CANCELLABLE: ") and "outcome_get" in text(running)
    for name, code in (("unknown", "REFERENCE_UNRESOLVED"), ("long", "INPUT_INVALID")):
        assert answers[name].is_error and set(structured(answers[name])) == {"error"}, name
        assert structured(answers[name])["error"]["code"] == code, name
    assert structured(answers["operator"])["status"] == "declined"
    assert structured(answers["auditor"])["error"]["code"] == "ACCESS_DENIED"
    for answer in answers.values():  # every shape is one the tool declares
        jsonschema.validate(structured(answer), declared)


OTHER_TRACE = "0af7651916cd43dd8448eb211c80319c"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_calls_meta_traceparent_is_the_jobs_trace(ledger: Served, transport: str) -> None:
    """MCP's SEP-414: W3C trace context in the request's `_meta` (the SDK's clients inject
    it). The served ledger records no spans (no OTEL_*): its decision records the caller's."""
    meta: Any = {"traceparent": TRACEPARENT, "tracestate": "k=v"}
    malformed: Any = {"traceparent": "00-zz-zz-01"}

    async def main() -> list[types.CallToolResult]:
        async with connect(ledger, transport, ledger.agent) as session:
            args = {"issue_ref": "T-1"}
            return [
                await session.call_tool("tracker__read_issue", args, meta=meta),
                await session.call_tool("tracker__read_issue", args, meta=malformed),
            ]

    traced, ignored = anyio.run(main)
    assert not ignored.is_error and structured(ignored)["status"] == "succeeded"
    with Ledger(open_store(ledger.env["OUTCOMES_DATABASE_URL"])) as opened:
        views = [jobs.get(opened, structured(a)["job_id"]) for a in (traced, ignored)]
    assert views[0].trace is not None and views[1].trace is None
    assert (views[0].trace.trace_id, views[0].trace.parent_span_id, views[0].trace.state) == (
        CALLER_TRACE,
        CALLER_SPAN,
        "k=v",
    )


def test_over_http_the_traceparent_header_counts_and_meta_wins(ledger: Served) -> None:
    header = f"00-{OTHER_TRACE}-{CALLER_SPAN}-01"

    async def main() -> list[types.CallToolResult]:
        headers = {"Authorization": f"Bearer {ledger.agent}", "traceparent": header}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http,
            streamable_http_client(ledger.base_url + "/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            args = {"issue_ref": "T-1"}
            return [
                await session.call_tool("tracker__read_issue", args),
                await session.call_tool("tracker__read_issue", args, meta=_meta(TRACEPARENT)),
            ]

    by_header, by_meta = anyio.run(main)
    with Ledger(open_store(ledger.env["OUTCOMES_DATABASE_URL"])) as opened:
        views = [jobs.get(opened, structured(a)["job_id"]) for a in (by_header, by_meta)]
    assert [v.trace.trace_id if v.trace else None for v in views] == [OTHER_TRACE, CALLER_TRACE]


def _meta(traceparent: str) -> Any:
    return {"traceparent": traceparent}
