"""What callers name things with (tool names, idempotency keys, accounts) must look like what it
is: these are shown to people and compared character for character, so a character that is
invisible or that reorders the text around it would let one name pass for another
(`acme` + U+202E, a zero-width space inside a key) or hide a line break in a log.

Refused in them, by code point:
- control characters: C0 (U+0000 to U+001F), DEL (U+007F) and C1 (U+0080 to U+009F);
- bidirectional controls: U+061C, U+200E, U+200F, U+202A to U+202E, U+2066 to U+2069;
- zero-width and invisible characters: U+200B to U+200D, U+2060 to U+2064, U+180E, U+FEFF;
- line and paragraph separators: U+2028, U+2029.

`PATTERN` is the same rule as a regular expression for JSON Schema (`/openapi.json`): written
with `\\uHHHH` escapes only, so that Python, ECMAScript and Rust's regex read it alike.
"""

from __future__ import annotations

import unicodedata

from ledger.errors import UnsafeTextError

# (first, last) code points, inclusive.
CONTROLS = ((0x00, 0x1F), (0x7F, 0x9F))
BIDI_CONTROLS = ((0x061C, 0x061C), (0x200E, 0x200F), (0x202A, 0x202E), (0x2066, 0x2069))
INVISIBLE = ((0x180E, 0x180E), (0x200B, 0x200D), (0x2060, 0x2064), (0xFEFF, 0xFEFF))
SEPARATORS = ((0x2028, 0x2029),)


def _merged(ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    merged: list[tuple[int, int]] = []
    for first, last in sorted(ranges):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(last, merged[-1][1]))
        else:
            merged.append((first, last))
    return tuple(merged)


UNSAFE_RANGES = _merged(CONTROLS + BIDI_CONTROLS + INVISIBLE + SEPARATORS)
_KINDS = (
    (CONTROLS, "a control character"),
    (BIDI_CONTROLS, "a bidirectional control"),
    (INVISIBLE, "an invisible character"),
    (SEPARATORS, "a line separator"),
)
_UNSAFE = frozenset(chr(c) for first, last in UNSAFE_RANGES for c in range(first, last + 1))


def _class(ranges: tuple[tuple[int, int], ...]) -> str:
    return "".join(
        f"\\u{first:04x}" if first == last else f"\\u{first:04x}-\\u{last:04x}"
        for first, last in ranges
    )


# One or more characters, none of them unsafe (for JSON Schema `pattern`s).
PATTERN = f"^[^{_class(UNSAFE_RANGES)}]+$"


def describe(char: str) -> str:
    """`U+202E (RIGHT-TO-LEFT OVERRIDE, a bidirectional control)`."""
    point = ord(char)
    kind = next(
        (what for ranges, what in _KINDS if any(a <= point <= b for a, b in ranges)), "unsafe"
    )
    name = unicodedata.name(char, "")
    return f"U+{point:04X} ({name + ', ' if name else ''}{kind})"


def unsafe_character(text: str) -> tuple[int, str] | None:
    """The first unsafe character of `text` (its index, and `describe` of it), or None."""
    if _UNSAFE.isdisjoint(text):
        return None
    index = next(i for i, char in enumerate(text) if char in _UNSAFE)
    return index, describe(text[index])


def problem(what: str, text: str) -> str | None:
    """Why `text` cannot be `what` (an idempotency key, a tool name...), or None. Names the
    character by code point and where it is, never echoes the text."""
    found = unsafe_character(text)
    if found is None:
        return None
    index, described = found
    return (
        f"{what} holds {described} at character {index + 1}: control, bidirectional and "
        "zero-width characters are not allowed"
    )


def check(what: str, text: str) -> str:
    """`text`, or UnsafeTextError naming the first unsafe character."""
    reason = problem(what, text)
    if reason is not None:
        raise UnsafeTextError(reason)
    return text
