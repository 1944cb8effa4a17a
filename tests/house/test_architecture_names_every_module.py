"""docs/architecture.md names every module of the product in its room, so that a reader finds
any module's room on one page, and a new module cannot be left off it.

Each row of the page's rooms table ("## The rooms") is a room, named by its folder (`api/`,
`ledger/runtime/`, `ledger/` for the domain); its "holds" cell must name, in backticks, every
module of the room: a span that is exactly `stem.py` or `stem`, or ends with `/stem.py` or
`.stem` (a dotted path such as `ledger.runtime.ledger`, or `workers.main:app`). A module's room
is the row whose folder is the longest start of its path, so `ledger/runtime/outbox.py` must be
named in `ledger/runtime/`'s row, not only somewhere on the page. `__init__.py` files are not
named; templates and static files are not Python and are not looked at.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
# The product's folders (`client/` holds the package `outcomes_client`); `migrations/` is data.
PACKAGES = ("ledger", "api", "cli", "workers", "observability", "mcp_server", "console", "client")
SPAN = re.compile(r"`([^`\n]+)`")


def rooms() -> dict[str, str]:
    """Each room's folder (`api/`) and its "holds" cell, from the rooms table."""
    table = PAGE.read_text().split("\n## The rooms\n", 1)[-1].split("\n## ", 1)[0]
    held: dict[str, str] = {}
    for line in table.splitlines():
        cells = line.strip().strip("|").split(" | ")
        room = SPAN.match(cells[0].strip())
        if len(cells) == 3 and room:
            held[room.group(1)] = cells[1]
    return held


def names(cell: str, stem: str) -> bool:
    for span in SPAN.findall(cell):
        span = span.split(":", 1)[0]  # `workers.main:app` names workers/main.py
        if span in (f"{stem}.py", stem) or span.endswith((f"/{stem}.py", f".{stem}")):
            return True
    return False


def test_architecture_names_every_module_in_its_room() -> None:
    held = rooms()
    missing: list[str] = []
    for package in PACKAGES:
        if not (ROOT / package).is_dir():
            missing.append(f"{package}/ (no such folder)")
        for path in (ROOT / package).rglob("*.py"):
            if path.name == "__init__.py":
                continue
            module = path.relative_to(ROOT).as_posix()
            room = max(
                (folder for folder in held if module.startswith(folder)), key=len, default=""
            )
            if not room or not names(held[room], path.stem):
                missing.append(f"{module} (room {room or 'none'})")
    assert not missing, "docs/architecture.md's rooms table does not name these modules:\n" + (
        "\n".join(sorted(missing))
    )
