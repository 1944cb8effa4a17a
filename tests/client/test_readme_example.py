"""README's Python client example, run as written against a real `outcomes serve`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.plugins.client import Served

README = Path(__file__).resolve().parents[2] / "README.md"


def example() -> str:
    text = README.read_text()
    section = text[text.index("### Python client") :]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, "README's Python client section has no python example"
    return found.group(1)


def test_the_readme_example_runs(client_server: Served, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(example())
    env = os.environ | {
        "OUTCOMES_URL": client_server.base_url,
        "OUTCOMES_TOKEN": client_server.token,
    }
    run = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("succeeded accept {")
    assert lines[1].startswith("refused INPUT_MISSING ")
    assert len(lines) >= 4  # the feed lists both jobs
