"""`outcomes audit verify` catches tampering, from the command line, with a non-zero exit that
names the first broken position (the library's checks are in
tests/persistence/test_tamper.py)."""

from __future__ import annotations

from pathlib import Path

import orjson

from cli.errors import EXIT_PROBLEM
from tests.factories import rebuild
from tests.plugins.cli import Invoke
from tests.plugins.tampering import Seeded, forge, tamper_delete, tamper_set


def verify(outcomes: Invoke, *args: str) -> tuple[int, dict[str, object], str]:
    result = outcomes("audit", "verify", *args, "--json", ok=False)
    return result.exit_code, orjson.loads(result.stdout), result.stderr


def test_an_honest_ledger_verifies(outcomes: Invoke, seeded: Seeded) -> None:
    code, body, _ = verify(outcomes)
    assert (code, body["ok"], body["first_broken_position"]) == (0, True, None)


def test_an_edited_row_is_named(outcomes: Invoke, seeded: Seeded) -> None:
    target = seeded.event("retried", 3)
    tamper_set(seeded.url, target.position, actor="worker:mallory")
    code, body, stderr = verify(outcomes)
    assert (code, body["ok"], body["first_broken_position"]) == (
        EXIT_PROBLEM,
        False,
        target.position,
    )
    # Progress may precede it; the reason is one line.
    assert (
        stderr.strip()
        .splitlines()[-1]
        .startswith(f"outcomes: ledger broken at position {target.position}: ")
    )


def test_a_deleted_row_is_named(outcomes: Invoke, seeded: Seeded) -> None:
    gone = seeded.event("retried", 3)
    tamper_delete(seeded.url, gone.position)
    # The ledger-wide chain breaks at the very next event, whichever stream it belongs to.
    after = min(e.position for e in seeded.store.iter_events() if e.position > gone.position)
    code, body, _ = verify(outcomes)
    assert (code, body["first_broken_position"]) == (EXIT_PROBLEM, after)


def test_a_rehashed_history_is_caught_against_an_earlier_digest(
    outcomes: Invoke,
    seeded: Seeded,
    tmp_path: Path,
) -> None:
    digest = tmp_path / "digest.json"
    outcomes("audit", "digest", "--streams", "--output", str(digest))
    original = seeded.stream("retried")
    forge(seeded, "retried", 3, original[2].data | {"attempt": 2})
    # The stored job row still holds the old head hash: the read-model check sees that much.
    unfixed, body, _ = verify(outcomes)
    assert unfixed == EXIT_PROBLEM and body["first_broken_position"] is None
    assert {p["field"] for p in body["read_models"]["problems"]} == {"view.head_hash"}
    rebuild(seeded.store)  # a forger who owns the database refolds them too
    alone, _, _ = verify(outcomes)
    assert alone == 0  # internally consistent: only the digest can tell
    code, body, stderr = verify(outcomes, "--digest", str(digest))
    head = seeded.stream("retried")[-1]
    assert (code, body["first_broken_position"]) == (EXIT_PROBLEM, head.position)
    assert "history rewritten" in stderr
