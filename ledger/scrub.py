"""Remove secrets from text a tool produced before it is recorded (exception text, the fields of
a `ToolFailure`, a decline's reason): operators and auditors read it, agents read some of it.

No secret leaves the ledger through any interface (contract §3). Two kinds are replaced:
- the job's declared secrets (`known_secrets`: the values of the tool's `SecretStr` and
  `SecretBytes` arguments), wherever they appear, as they were sent or as repr, JSON or a URL
  would quote them (`quote` with its default `safe="/"` or none, `quote_plus`, upper- or
  lowercase hex); a declared secret shorter than `MIN_SECRET` characters only where it stands
  alone (not inside a longer word or number), so that it does not blank ordinary text;
- known shapes: URL credentials, `password=…`-style pairs, bearer tokens, provider keys.
Other argument values are not secrets and stay readable: a message that names the lookup that
failed or the scope that was denied keeps saying so.

Cost is bounded whatever the input: the text is cut to a bound before anything else, and every
step after that is linear (literal replacement, possessive or fixed-width patterns, and a scan
for URL credentials that looks at most `_USERINFO_MAX` characters past each `://`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus

REDACTED = "[REDACTED]"
MAX_DETAIL = 2000
MIN_SECRET = 4  # shorter secrets are replaced only where they stand alone (see above)
# Characters past the cut that the patterns still see, so that a credential cut in half at the
# bound is recognised by what precedes it.
_CONTEXT = 256
_USERINFO_MAX = 256
# NUL and the other C0 controls (tab and newline aside) cannot be stored in every database.
_CONTROLS = {c: "\ufffd" for c in range(32) if chr(c) not in "\t\n"} | {0x7F: "\ufffd"}

_PLAIN = re.compile(r"[A-Za-z0-9_.~-]*+")
_KEY = (
    r"password|passwd|passphrase|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|"
    r"client[_-]?secret|authorization|auth|credentials?"
)
# `key=value`, `key: value`, `"key": "value"`: the value runs to its closing quote when quoted
# (spaces, `;`, `,` and `@` included), else to the next space or quote. Possessive: no
# backtracking. The key may follow `_` or `-` (DB_PASSWORD=…), not a letter (keyword=…).
_PAIR = re.compile(
    rf"(?i)(?<![a-z0-9])(?P<key>{_KEY})(?P<sep>[\"']?+\s*+[=:]\s*+)"
    r"(?P<value>\"(?:[^\"\\\n]|\\.)*+\"?+|'(?:[^'\\\n]|\\.)*+'?+|[^\s\"']++)"
)
_SCHEME_TOKEN = re.compile(r"(?i)\b(?P<scheme>bearer|basic|token)\s++[A-Za-z0-9._~+/=-]{8,}+")
# A run of token characters is matched only from its start, so no run is scanned twice.
_RUN_START = r"(?<![A-Za-z0-9_-])"
_SHAPES = [
    re.compile(_RUN_START + r"ol_[A-Za-z0-9_-]{16,}+"),  # this ledger's own API tokens
    re.compile(_RUN_START + r"sk-[A-Za-z0-9_-]{16,}+"),
    re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
    re.compile(_RUN_START + r"gh[pousr]_[A-Za-z0-9]{20,}+"),
    re.compile(_RUN_START + r"xox[abposr]-[A-Za-z0-9-]{10,}+"),
    re.compile(_RUN_START + r"eyJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+"),
]


def known_secrets(values: Any) -> tuple[str, ...]:
    """Every string and number in `values` (the declared secrets' values; nested ones too), in
    each form it may take in a message; longest first, so that a secret containing another is
    replaced whole."""
    found: set[str] = set()
    stack = [values]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list | tuple):
            stack.extend(value)
        elif isinstance(value, str):
            found.update(_forms(value))
        elif isinstance(value, bytes):
            found.update(_forms(value.decode("utf-8", "replace")))
            found.add(repr(value)[2:-1])
        elif isinstance(value, int | float) and not isinstance(value, bool):
            found.add(str(value))
    return tuple(sorted((s for s in found if s), key=len, reverse=True))


def _forms(value: str) -> tuple[str, ...]:
    if _PLAIN.fullmatch(value):  # quoting changes nothing
        return (value,)
    return (
        value,
        repr(value)[1:-1],
        repr(value.encode("utf-8", "replace"))[2:-1],  # as SecretBytes prints it
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        *_percent_forms(value),
    )


_ESCAPE = re.compile(r"%[0-9A-F]{2}")


def _percent_forms(value: str) -> tuple[str, ...]:
    """As a URL would carry it: `quote` with its default (`/` left as it is) and with nothing
    safe, `quote_plus` (a query string, `urlencode`: spaces as `+`), each also with lowercase
    hex digits (`%2f`: other encoders write them so, and a URL means the same)."""
    forms = {quote(value), quote(value, safe=""), quote_plus(value), quote_plus(value, safe="/")}
    forms |= {_ESCAPE.sub(lambda m: m[0].lower(), form) for form in forms}
    return tuple(sorted(forms))


def _alone(secret: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])")


def scrub(text: str, secrets: Iterable[str] = (), *, limit: int = MAX_DETAIL) -> str:
    """`text` without `secrets` (see `known_secrets`) or known secret shapes, at most `limit`
    characters long (then ending in "…")."""
    head = text[: limit + _CONTEXT]  # the bound comes first: nothing below sees more
    cut = len(head) < len(text)
    # Only a secret whose beginning is somewhere in the text can be in it: thousands of
    # argument values cost a set lookup each, not a scan each.
    secrets = tuple(secrets)
    grams = {head[i : i + MIN_SECRET] for i in range(len(head) - MIN_SECRET + 1)} if secrets else ()
    wanted = [s for s in secrets if len(s) >= MIN_SECRET and s[:MIN_SECRET] in grams]
    for secret in wanted:
        head = head.replace(secret, REDACTED)
    for secret in (s for s in secrets if len(s) < MIN_SECRET and s in head):
        head = _alone(secret).sub(REDACTED, head)
    if cut:
        head = _without_partial_secret(head, wanted)
    head = _hide_userinfo(head.translate(_CONTROLS), cut)
    head = _SCHEME_TOKEN.sub(rf"\g<scheme> {REDACTED}", head)
    head = _PAIR.sub(_hide_value, head)
    for shape in _SHAPES:
        head = shape.sub(REDACTED, head)
    head = head.encode("utf-8", "replace").decode("utf-8")  # lone surrogates cannot be stored
    if cut or len(head) > limit:
        head = head[:limit] + "…"
    return head


def _without_partial_secret(head: str, secrets: list[str]) -> str:
    """A secret that starts before the cut and goes on after it left its beginning at the end
    of `head`: drop the longest such beginning (`secrets`: those whose first characters are in
    `head`; a beginning shorter than that is too short to give one away)."""
    longest = 0
    for secret in secrets:
        if secret[0] in head[1 - len(secret) :]:  # else no end of head can begin it
            longest = max(longest, _overlap(head, secret))
    return head[: len(head) - longest] + REDACTED if longest else head


def _overlap(text: str, secret: str) -> int:
    """The length of the longest end of `text` that is a proper beginning of `secret` (the
    Knuth-Morris-Pratt failure function: linear in the lengths)."""
    pattern = secret[: min(len(secret) - 1, len(text))]
    if not pattern:
        return 0
    fail = [0] * len(pattern)
    k = 0
    for i in range(1, len(pattern)):
        while k and pattern[i] != pattern[k]:
            k = fail[k - 1]
        if pattern[i] == pattern[k]:
            k += 1
        fail[i] = k
    k = 0
    for char in text[-len(pattern) :]:
        while k and (k == len(pattern) or char != pattern[k]):
            k = fail[k - 1]
        if k < len(pattern) and char == pattern[k]:
            k += 1
    return k


def _hide_userinfo(text: str, cut: bool) -> str:
    """`scheme://user:password@host` → `scheme://[REDACTED]@host`. The credentials run to the
    last `@` before the end of the line or the next `://` (a password may hold `@`, `;`, `,`,
    `/` or even spaces), at most `_USERINFO_MAX` characters on. Text with spaces and no `:`
    before that `@` is prose, not credentials. A URL cut before its `@` is hidden to the end."""
    parts: list[str] = []
    done = 0
    while (found := text.find("://", done)) >= 0:
        start = found + 3
        window = text[start : start + _USERINFO_MAX]
        for stop in ("\n", "://"):
            window = window.partition(stop)[0]
        at = window.rfind("@")
        userinfo = window[:at]
        if at > 0 and (":" in userinfo or not any(c.isspace() or c == "/" for c in userinfo)):
            parts += [text[done:start], REDACTED]
            done = start + at
        elif at < 0 and cut and start + len(window) == len(text):
            parts += [text[done:start], REDACTED]
            done = len(text)
        else:
            parts.append(text[done:start])
            done = start
    parts.append(text[done:])
    return "".join(parts)


def _hide_value(match: re.Match[str]) -> str:
    value = match["value"]
    quote_char = value[0] if value[0] in "\"'" else ""
    return f"{match['key']}{match['sep']}{quote_char}{REDACTED}{quote_char}"


def scrub_value(value: Any, secrets: tuple[str, ...]) -> Any:
    """A tool's answer (`result`) without the job's declared secrets: every text in it (keys
    too) with each secret replaced, and nothing else changed (no cut, no patterns: an answer is
    data, and its size is the budget's business)."""
    if not secrets:
        return value
    if isinstance(value, str):
        return _without_secrets(value, secrets)
    if isinstance(value, dict):
        return {
            (_without_secrets(k, secrets) if isinstance(k, str) else k): scrub_value(v, secrets)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [scrub_value(item, secrets) for item in value]
    return value


def _without_secrets(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret in text:
            text = (
                text.replace(secret, REDACTED)
                if len(secret) >= MIN_SECRET
                else _alone(secret).sub(REDACTED, text)
            )
    return text
