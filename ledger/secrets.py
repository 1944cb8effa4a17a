"""Declared secrets (contract §3): a tool marks its secret arguments with pydantic's `SecretStr`
or `SecretBytes` (their JSON Schema says `format: password`, `writeOnly: true`), and only those
are secrets. Their values never rest in plain text: the decision records each one sealed
(`ledger.keyring`) at its place, and the places as JSON pointers (`secret_paths`); the worker
opens them to run the tool; pages show `(secret)`.

The places are read from the tool's JSON Schema, guided by the arguments as sent, so that a
request the schema refuses is sealed too (a password beside a malformed field is still a
password): properties, `additionalProperties`, `items`, `prefixItems`, `$ref`, and every
branch of `anyOf`/`oneOf`/`allOf` (a value that may be a secret is one).

A sealed value is the string `ol-sealed:v1:<key id>:<digest>:<box>`: the digest is an
HMAC-SHA256 of the value under the key (what idempotency compares, and what lets a key holder
check a value), the box its AES-GCM encryption bound to the job and the place. Without a key
the value is withheld (`ol-withheld`): the job is refused, nothing could run it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import BaseModel

from ledger.errors import SecretUnavailableError
from ledger.keyring import Keyring, Sealed

SEALED = "ol-sealed:v1:"
WITHHELD = "ol-withheld"
DIGESTED = "ol-digest:"
SHOWN = "(secret)"  # what every page shows in a secret's place
# Marks only the ledger writes: a value starting with one is shown as `(secret)` wherever it
# is, so an agent that sent one would hide that argument from staff (issue 47).
RESERVED_MARKS = ("ol-sealed:", WITHHELD)
_MAX_REFS = 64  # $ref hops without moving in the value: a schema that loops is no secret


@functools.cache
def _schema(model: type[BaseModel]) -> dict[str, Any]:
    schema: dict[str, Any] = model.model_json_schema()
    return schema


@functools.cache
def declares_secrets(model: type[BaseModel]) -> bool:
    """Whether any place of the model's schema is a secret (most tools: none, and their
    arguments need no walk)."""
    stack: list[Any] = [_schema(model)]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if is_secret_schema(node):
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def secret_paths(model: type[BaseModel], args: Any) -> list[str]:
    """The JSON pointers of the values in `args` that `model` declares secret."""
    if not declares_secrets(model):
        return []
    schema = _schema(model)
    found: dict[str, None] = {}
    _walk(schema, schema, args, "", found, 0)
    return list(found)


def is_secret_schema(node: Any) -> bool:
    return isinstance(node, dict) and (
        node.get("writeOnly") is True or node.get("format") == "password"
    )


def _walk(
    root: dict[str, Any], node: Any, value: Any, pointer: str, found: dict[str, None], hops: int
) -> None:
    if not isinstance(node, dict) or value is None:
        return
    if "$ref" in node and hops < _MAX_REFS:
        _walk(root, _resolve(root, node["$ref"]), value, pointer, found, hops + 1)
    if is_secret_schema(node):
        found[pointer] = None
        return
    for branch in ("anyOf", "oneOf", "allOf"):
        for sub in node.get(branch) or ():
            _walk(root, sub, value, pointer, found, hops + 1)
    if pointer in found:
        return
    if isinstance(value, dict):
        properties = node.get("properties") or {}
        extra = node.get("additionalProperties")
        for key, item in value.items():
            sub = properties.get(key, extra)
            _walk(root, sub, item, f"{pointer}/{escape(key)}", found, 0)
    elif isinstance(value, list):
        prefix = node.get("prefixItems") or []
        items = node.get("items")
        for index, item in enumerate(value):
            sub = prefix[index] if index < len(prefix) else items
            _walk(root, sub, item, f"{pointer}/{index}", found, 0)


def _resolve(root: dict[str, Any], ref: Any) -> Any:
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return None
    node: Any = root
    for part in ref[2:].split("/"):
        node = node.get(unescape(part)) if isinstance(node, dict) else None
    return node


def escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")


def _parts(pointer: str) -> list[str]:
    return [unescape(part) for part in pointer.split("/")[1:]]


def value_at(document: Any, pointer: str) -> Any:
    """The value at `pointer`, or None where there is none."""
    for part in _parts(pointer):
        if isinstance(document, dict):
            document = document.get(part)
        elif isinstance(document, list) and part.isdigit() and int(part) < len(document):
            document = document[int(part)]
        else:
            return None
    return document


def _replaced(document: Any, parts: list[str], value: Any) -> Any:
    """A copy of `document` with `value` at `parts` (the copy shares what it did not change)."""
    if not parts:
        return value
    head, rest = parts[0], parts[1:]
    if isinstance(document, dict) and head in document:
        return document | {head: _replaced(document[head], rest, value)}
    if isinstance(document, list) and head.isdigit() and int(head) < len(document):
        index = int(head)
        return [*document[:index], _replaced(document[index], rest, value), *document[index + 1 :]]
    return document


def replace_at(document: Any, pointers: Iterable[str], value: Any) -> Any:
    for pointer in pointers:
        document = _replaced(document, _parts(pointer), value)
    return document


def _aad(job_id: str, pointer: str) -> bytes:
    return f"{SEALED}{job_id}\x00{pointer}".encode()


def _plaintext(value: Any) -> bytes:
    return orjson.dumps(value)


@dataclass(frozen=True)
class SealedArgs:
    """A request's arguments as the decision records them."""

    stored: dict[str, Any]  # every declared secret sealed (or withheld)
    paths: list[str]  # where they are
    # The arguments the request hash covers, one per key the keyring holds (the current
    # one first): each secret as its keyed digest, so the same secret replays after a
    # rotation and nobody holding the database can test guesses of it.
    fingerprints: list[dict[str, Any]]

    @property
    def withheld(self) -> bool:
        return any(value_at(self.stored, p) == WITHHELD for p in self.paths)


def seal_args(
    model: type[BaseModel] | None, args: dict[str, Any], job_id: str, keyring: Keyring | None
) -> SealedArgs:
    """`model`: the tool's arguments (None: a tool this process does not have, which declares
    nothing). Without a keyring, secrets are withheld: the caller must refuse the job."""
    paths = secret_paths(model, args) if model is not None else []
    if not paths:
        return SealedArgs(args, [], [args])
    if keyring is None:
        stored = replace_at(args, paths, WITHHELD)
        return SealedArgs(stored, paths, [stored])
    stored = args
    digests: dict[str, dict[str, str]] = {kid: {} for kid in keyring.kids}
    for pointer in paths:
        plain = _plaintext(value_at(args, pointer))
        sealed = keyring.seal(plain, _aad(job_id, pointer))
        digest = keyring.digest(plain)
        stored = replace_at(stored, [pointer], f"{SEALED}{sealed.kid}:{digest}:{sealed.box}")
        for kid in keyring.kids:
            digests[kid][pointer] = digest if kid == sealed.kid else keyring.digest(plain, kid)
    fingerprints = []
    for kid in keyring.kids:
        fingerprint = args
        for pointer, digest in digests[kid].items():
            fingerprint = replace_at(fingerprint, [pointer], f"{DIGESTED}{kid}:{digest}")
        fingerprints.append(fingerprint)
    return SealedArgs(stored, paths, fingerprints)


@dataclass(frozen=True)
class OpenedArgs:
    args: dict[str, Any]  # as the agent sent them: for the tool, never recorded
    secrets: list[str]  # the declared secrets' values as text: what the scrub looks for


def open_args(
    model: type[BaseModel] | None,
    args: dict[str, Any],
    paths: Iterable[str],
    job_id: str,
    keyring: Keyring | None,
) -> OpenedArgs:
    """The job's arguments with every sealed secret opened (raises `SecretUnavailableError`),
    and the values `model` declares secret (a job recorded before secrets were sealed holds
    them in plain text: they are scrubbed all the same)."""
    opened = args
    for pointer in paths:
        value = value_at(args, pointer)
        if value == WITHHELD:
            raise SecretUnavailableError("the secret argument was withheld at submit (no key)")
        if not (isinstance(value, str) and value.startswith(SEALED)):
            continue
        if keyring is None:
            raise SecretUnavailableError(
                "this process has no secrets key (OUTCOMES_SECRETS_KEY)", missing_key="(none)"
            )
        parts = value.removeprefix(SEALED).split(":", 2)
        if len(parts) != 3:
            raise SecretUnavailableError("a sealed value is not in the ledger's form")
        kid, _digest, box = parts
        plain = keyring.open(Sealed(kid, box), _aad(job_id, pointer))
        opened = replace_at(opened, [pointer], orjson.loads(plain))
    declared = secret_paths(model, opened) if model is not None else []
    values = [value_at(opened, pointer) for pointer in dict.fromkeys([*paths, *declared])]
    return OpenedArgs(opened, list(_texts(values)))


def _texts(values: Iterable[Any]) -> Iterator[str]:
    for value in values:
        if isinstance(value, str):
            yield value
        elif value is not None:
            yield orjson.dumps(value).decode()


def sealed_digest(value: Any) -> tuple[str, str] | None:
    """(key id, digest) of a sealed value; None for anything else."""
    if not (isinstance(value, str) and value.startswith(SEALED)):
        return None
    kid, _, rest = value.removeprefix(SEALED).partition(":")
    digest = rest.partition(":")[0]
    return (kid, digest) if kid and digest else None


def shown(args: Any, paths: Iterable[str]) -> Any:
    """The arguments as pages show them: each secret's place says `(secret)`, and so does any
    sealed value found elsewhere (a release that declared other secrets)."""
    present = [pointer for pointer in paths if value_at(args, pointer) is not None]
    return _hide_sealed(replace_at(args, present, SHOWN))


def marked_place(args: Any, pointer: str = "") -> str | None:
    """The JSON pointer of the first string in `args` that starts with a mark only the ledger
    writes (`RESERVED_MARKS`), or None: what a request may not send."""
    stack: list[tuple[Any, str]] = [(args, pointer)]
    while stack:
        value, at = stack.pop()
        if isinstance(value, str):
            if value.startswith(RESERVED_MARKS):
                return at or "/"
        elif isinstance(value, dict):
            stack.extend((item, f"{at}/{escape(key)}") for key, item in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend(
                (item, f"{at}/{index}") for index, item in reversed(list(enumerate(value)))
            )
    return None


def _hide_sealed(value: Any) -> Any:
    if isinstance(value, str):
        return SHOWN if value.startswith((SEALED, WITHHELD)) else value
    if isinstance(value, dict):
        return {key: _hide_sealed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_hide_sealed(item) for item in value]
    return value
