"""The client stands alone: importing it, in a process that can import only what is installed,
loads none of the server's frameworks nor `ledger` (its source:
tests/house/test_architecture.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

# Not click: httpx itself imports it when installed (for its own command line).
SERVER_SIDE = (
    "ledger",
    "api",
    "workers",
    "cli",
    "fastapi",
    "starlette",
    "celery",
    "kombu",
    "sqlalchemy",
    "psycopg",
    "alembic",
    "uvicorn",
    "orjson",
)


def test_importing_the_client_loads_nothing_of_the_server(tmp_path: Path) -> None:
    probe = (
        "import json, sys; import outcomes_client; "
        "c = outcomes_client.Client('http://127.0.0.1:9', 't'); c.close(); "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    # -I: no PYTHONPATH and no current folder, so only what is installed can be imported.
    run = subprocess.run(
        [sys.executable, "-I", "-c", probe],
        cwd=tmp_path,
        capture_output=True,
        check=True,
        timeout=60,
    )
    loaded = set(orjson.loads(run.stdout))
    assert {"outcomes_client", "httpx", "pydantic"} <= loaded
    assert loaded.isdisjoint(SERVER_SIDE), loaded & set(SERVER_SIDE)
