"""The Dockerfile builds from what the repository holds (no engine runs here to build it)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_copied_path_exists_and_every_package_is_copied() -> None:
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    copied = [part for line in lines if line.startswith("COPY ") for part in line.split()[1:-1]]
    assert copied, "the Dockerfile copies nothing"
    assert [p for p in copied if not (ROOT / p).exists()] == []
    # Each top-level package the wheel installs must reach the image.
    for package in ("ledger", "api", "workers", "cli", "examples"):
        assert package in copied, f"{package}/ is not copied into the image"
