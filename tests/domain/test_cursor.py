"""The changes feed's opaque cursor (ledger/cursor.py): it round-trips, says nothing of the
position it holds, and a cursor not issued under the key is refused, never read as a position."""

from __future__ import annotations

import re

import pytest

from ledger.cursor import CURSOR_PATTERN, cursor_key, issue_cursor, position_of
from ledger.errors import InvalidCursorError

KEY = cursor_key(b"a ledger's own secret")


@pytest.mark.parametrize("position", [0, 1, 41, 2**31, 2**63 - 1])
def test_a_cursor_round_trips_and_matches_the_documented_pattern(position: int) -> None:
    cursor = issue_cursor(position, KEY)
    assert re.fullmatch(CURSOR_PATTERN, cursor)
    assert position < 10**6 or str(position) not in cursor  # short digits may occur by chance
    assert position_of(cursor, KEY) == position


def test_the_same_position_never_gives_the_same_cursor() -> None:
    assert len({issue_cursor(7, KEY) for _ in range(50)}) == 50


@pytest.mark.parametrize("cursor", ["", "0", "12345", "AAAA", "A" * 38, "!!"])
def test_what_was_not_issued_is_refused(cursor: str) -> None:
    with pytest.raises(InvalidCursorError):
        position_of(cursor, KEY)


def test_a_cursor_is_bound_to_its_key_and_to_every_bit() -> None:
    cursor = issue_cursor(99, KEY)
    with pytest.raises(InvalidCursorError):
        position_of(cursor, cursor_key(b"another ledger's secret"))
    flipped = cursor[:10] + ("B" if cursor[10] != "B" else "C") + cursor[11:]
    with pytest.raises(InvalidCursorError):
        position_of(flipped, KEY)
