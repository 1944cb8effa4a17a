"""The house rules (docs/architecture.md), checked on the source: who may import whom, and no
import circle. Every import counts, at module level or inside a function."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "ledger",
    "api",
    "workers",
    "cli",
    "observability",
    "mcp_server",
    "console",
    "examples",
    "bench",
    "nemesis",
)
# Harnesses beside the product: they may use it; nothing in the product imports them.
HARNESSES = ("bench", "nemesis")
ADAPTERS = ("api", "workers", "cli", "mcp_server", "console")
MCP_SDK = ("mcp", "mcp_types")
FRAMEWORKS = ("celery", "kombu", "fastapi", "starlette", "click", "uvicorn", "httpx", *MCP_SDK)
METRICS = ("prometheus_client",)
TRACING = ("opentelemetry",)  # the SDK and the API alike: the core has its own port
DRIVERS = ("sqlalchemy", "psycopg", "alembic", "sqlite3")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources() -> Iterator[Path]:
    for package in PACKAGES:
        yield from sorted((ROOT / package).rglob("*.py"))


# The Alembic environment and versions, at the top: data the core loads by path.
MIGRATIONS = sorted((ROOT / "migrations").rglob("*.py"))


def imports_of(path: Path) -> set[str]:
    found: set[str] = set()
    package = module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else ""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base]).strip(".")
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


GRAPH = {module_name(path): imports_of(path) for path in sources()}


def _violations(where: tuple[str, ...], banned: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{module} imports {name}"
        for module, names in GRAPH.items()
        if module.split(".")[0] in where
        for name in names
        if any(name == b or name.startswith(f"{b}.") for b in banned)
    )


def test_the_adapters_never_reach_into_persistence() -> None:
    assert _violations(ADAPTERS, ("ledger.persistence",)) == []


def test_the_core_imports_no_web_queue_or_cli_framework() -> None:
    assert _violations(("ledger",), FRAMEWORKS) == []


def test_the_core_imports_no_metrics_library() -> None:
    assert _violations(("ledger",), METRICS) == []


def test_the_core_imports_no_tracing_library() -> None:
    # It traces through its port (ledger.tracing); observability/ implements it.
    assert _violations(("ledger",), TRACING) == []
    assert "ledger.tracing" in GRAPH["ledger.services.submit"]


def test_only_observability_speaks_opentelemetry() -> None:
    assert _violations(ADAPTERS, TRACING) == []
    assert any(name.startswith("opentelemetry") for name in GRAPH["observability.tracing"])


def test_observability_is_shared_by_the_adapters_and_imports_none_of_them() -> None:
    # It sits beside the adapters: it may use the use cases, never the store, nor an adapter.
    banned = (*ADAPTERS, "ledger.persistence", *FRAMEWORKS)
    assert _violations(("observability",), banned) == []
    # And only it speaks to prometheus_client: the adapters go through it.
    assert _violations(ADAPTERS, METRICS) == []


def test_the_runtime_never_imports_a_use_case() -> None:
    # ledger/runtime/ is the machinery the use cases run on: they call down into it, never
    # the reverse (a runtime module that needed a decision would put one on a second path).
    reaching = [
        f"{module} imports {name}"
        for module, names in GRAPH.items()
        if module == "ledger.runtime" or module.startswith("ledger.runtime.")
        for name in names
        if name == "ledger.services" or name.startswith("ledger.services.")
    ]
    assert reaching == []
    assert any(m.startswith("ledger.runtime.") for m in GRAPH), "the runtime wing is missing"


def test_the_process_machinery_lives_in_the_runtime_wing() -> None:
    # Threads, loops, group commits and the outbox are not use cases (docs/architecture.md).
    machinery = ("outbox", "sequencer", "batching", "watchdog", "tool_loop", "thread_hop")
    misplaced = [
        m
        for m in GRAPH
        if m.split(".")[-1] in machinery
        and not m.startswith("ledger.runtime.")
        and m.startswith("ledger.")
    ]
    assert misplaced == []


def test_only_persistence_talks_to_the_database() -> None:
    outside = [
        v for v in _violations(("ledger",), DRIVERS) if not v.startswith("ledger.persistence")
    ]
    assert outside == []


def test_adapters_do_not_import_each_other_except_the_cli_starting_them() -> None:
    crossing = [
        f"{module} imports {name}"
        for module, names in GRAPH.items()
        for name in names
        if (owner := module.split(".")[0]) in ADAPTERS
        and (target := name.split(".")[0]) in ADAPTERS
        and owner != target
        and not (owner == "cli" and name in CLI_ENTRY_POINTS)
        and not (owner == "api" and name in API_MOUNTS)
    ]
    assert crossing == []


def test_nothing_in_the_product_imports_a_harness() -> None:
    product = tuple(p for p in PACKAGES if p not in HARNESSES)
    assert _violations(product, HARNESSES) == []


def test_the_benchmarks_reach_the_store_through_one_module_only() -> None:
    # bench/ uses the product through its front door (`open_ledger`, the use cases, the CLI,
    # the HTTP API); what the benchmarks that measure or fill the store itself need of it,
    # bench/_store.py re-exports, and says why.
    reaching = {v.split(" ")[0] for v in _violations(("bench",), ("ledger.persistence",))}
    assert reaching == {"bench._store"}


def test_only_the_mcp_adapter_speaks_mcp() -> None:
    others = tuple(a for a in ADAPTERS if a != "mcp_server")
    assert _violations(others, MCP_SDK) == []


def test_no_project_package_shadows_the_mcp_sdk() -> None:
    # A top-level `mcp` package (or module) here would be imported instead of the SDK.
    assert not (ROOT / "mcp").exists() and not (ROOT / "mcp.py").exists()
    assert not any(module.split(".")[0] in MCP_SDK for module in GRAPH)


# The CLI starts the API and a worker by their entry points (contract: `outcomes serve|worker`),
# and `outcomes status` asks the workers through the broker (`workers.control`).
CLI_ENTRY_POINTS = {
    "workers.control",
    "workers.control.broker_status",
    "api.server",
    "api.server.serve",
    "api.server.BackgroundServer",
    "workers.main",
    "workers.main.run_worker",
    "workers.dispatch",
    "workers.dispatch.dispatcher_from_settings",
    "mcp_server.stdio",
    "mcp_server.stdio.check_token",
    "mcp_server.stdio.serve_stdio",
}
# The API mounts the MCP adapter's streamable HTTP transport at /mcp and the console at
# /console (one app, one port).
API_MOUNTS = {
    "mcp_server.http",
    "mcp_server.http.PATH",
    "mcp_server.http.McpHttp",
    "console.web",
    "console.web.mount",
}


def _edges(level: int) -> dict[str, set[str]]:
    """Import edges between project modules cut to `level` dotted parts (1: top packages)."""
    known = {".".join(m.split(".")[:level]) for m in GRAPH}
    edges: dict[str, set[str]] = {}
    for module, names in GRAPH.items():
        src = ".".join(module.split(".")[:level])
        for name in names:
            dst = ".".join(name.split(".")[:level])
            if dst in known and dst != src:
                edges.setdefault(src, set()).add(dst)
    return edges


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


@pytest.mark.parametrize("level", [1, 2, 3])
def test_no_import_circle(level: int) -> None:
    """Between top-level packages (1), their first rooms (2) and the modules below (3)."""
    assert _cycle(_edges(level)) is None


CLIENT = ROOT / "client" / "outcomes_client"
CLIENT_MAY_IMPORT = {"httpx", "pydantic", "outcomes_client", *sys.stdlib_module_names}


def test_the_client_imports_nothing_of_the_server() -> None:
    """Agents install the client alone: the standard library, httpx, pydantic and itself."""
    sources = sorted(CLIENT.rglob("*.py"))
    foreign = sorted(
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sources
        for name in imports_of(path)
        if name.split(".")[0] not in CLIENT_MAY_IMPORT
    )
    assert sources and foreign == []


def test_the_scan_sees_what_it_checks() -> None:
    # Guards the guards: the graph holds the modules, their imports and a real edge or two.
    assert "ledger.services.submit" in GRAPH and "api.jobs_submit" in GRAPH
    assert "ledger.services.submit" in GRAPH["api.jobs_submit"]
    assert "ledger.persistence.appends" in GRAPH["ledger.services.submit"]
    assert _cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
    assert _violations(("ledger",), ("ledger.persistence",))  # the core does use persistence


def test_nothing_imports_the_migrations_the_core_finds_them_as_data() -> None:
    assert _violations(PACKAGES, ("migrations",)) == []
    assert (ROOT / "migrations" / "env.py") in MIGRATIONS
    assert not (ROOT / "migrations" / "__init__.py").exists()  # no package to import


def test_the_migrations_use_the_schema_and_their_drivers_only() -> None:
    """They may read the declared schema (and load an earlier migration by path), never the
    store, the services or an adapter: so the core and its migrations form no circle."""
    allowed = ("alembic", "sqlalchemy", "ledger.persistence.schema")
    stray = sorted(
        f"{path.relative_to(ROOT)} imports {name}"
        for path in MIGRATIONS
        for name in imports_of(path)
        if name.split(".")[0] not in sys.stdlib_module_names
        and not any(name == a or name.startswith(f"{a}.") for a in allowed)
        and name not in ("ledger", "ledger.persistence")
    )
    assert stray == []


# The streams a use case may append to one at a time; a job stream only through the batch
# append (`Writes.append_jobs`), whose statuses answer every job write's preconditions.
SINGLE_STREAMS = ("token_stream", "webhook_stream", "brake_stream")


def _single_appends() -> list[tuple[str, str]]:
    """(module, first argument) of every store `append(stream, events, ...)` call outside
    the store itself: the two-or-more-argument `append` (a list's takes one)."""
    found = []
    for path in sources():
        module = module_name(path)
        if module.split(".")[0] in HARNESSES or module.startswith("ledger.persistence"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "append"
                and len(node.args) >= 2
            ):
                found.append((module, ast.unparse(node.args[0])))
    return found


def test_job_streams_are_written_through_the_one_batch_append_only() -> None:
    appends = _single_appends()
    assert [
        f"{module} appends to {stream}"
        for module, stream in appends
        if not stream.startswith(tuple(f"{name}(" for name in SINGLE_STREAMS))
    ] == []
    assert ("ledger.services.brakes", "brake_stream(brake_id)") in appends  # the scan sees
