"""The Makefile echoes commands, never its own comments (issue 47): make prints every line of a
recipe, so a comment inside one (a tab, then `#`) would be printed as if it were run. Comments
belong above the target."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAKEFILE = ROOT / "Makefile"


def test_no_recipe_line_is_a_comment() -> None:
    lines = MAKEFILE.read_text().splitlines()
    assert [n for n, line in enumerate(lines, 1) if re.match(r"\t\s*@?\s*#", line)] == []


def test_make_prints_no_comment_for_any_target() -> None:
    phony = re.search(r"^\.PHONY:(.*)$", MAKEFILE.read_text(), re.MULTILINE)
    assert phony is not None
    targets = [t for t in phony.group(1).split() if t != "clean"]
    # -n prints each recipe line (even `@` ones) without running it; -B: the stamp's too.
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "-B", "-f", str(MAKEFILE), *targets],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "pytest" in done.stdout and "pip install" in done.stdout
    assert [line for line in done.stdout.splitlines() if line.lstrip().startswith("#")] == []
