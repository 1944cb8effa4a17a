"""The keys that seal declared secret arguments (contract §3; docs/secrets.md), kept outside
the database.

A key is an id and 32 random bytes, written `id:base64url`. Several may be loaded: the first
seals new values, every one opens what it sealed (a rotation adds a key in front and keeps the
old ones until nothing open needs them). Where the keys come from, first found wins:
- `OUTCOMES_SECRETS_KEY`: entries separated by commas;
- `OUTCOMES_SECRETS_KEY_FILE`: one entry per line (`#` starts a comment);
- on the embedded defaults (a SQLite ledger), `secrets.key` beside the ledger's file
  (`.outcomes/secrets.key`), generated on first use, readable by its owner only;
- a memory ledger: a key of its own, for the life of the process.
A PostgreSQL ledger without either setting has no key: jobs of tools that declare secrets are
then refused (nothing a worker could open would be recorded).

Each key gives two subkeys (HKDF-SHA256), so a value is never encrypted and MACed under the same
key: AES-256-GCM seals (a random 96-bit nonce each time, the job and the argument's place as
associated data), HMAC-SHA256 gives the keyed digest that idempotency compares.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ledger.errors import ConfigurationError, SecretUnavailableError

KEY_BYTES = 32
NONCE_BYTES = 12
KEY_FILE = "secrets.key"
KEY_ID = re.compile(r"^[A-Za-z0-9_-]{1,32}$")


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class SecretKey:
    kid: str
    material: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not KEY_ID.fullmatch(self.kid):
            raise ConfigurationError(
                f"secrets key id {self.kid!r}: 1 to 32 letters, digits, '_' or '-'"
            )
        if len(self.material) != KEY_BYTES:
            raise ConfigurationError(f"secrets key {self.kid!r} must be {KEY_BYTES} bytes")

    def subkey(self, purpose: bytes) -> bytes:
        derive = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose)
        return derive.derive(self.material)


@dataclass(frozen=True)
class Sealed:
    kid: str
    box: str  # base64url of the nonce and the ciphertext with its tag


class Keyring:
    """The loaded keys: `current` seals, any of them opens."""

    def __init__(self, keys: Sequence[SecretKey]) -> None:
        if not keys:
            raise ConfigurationError("a secrets keyring needs at least one key")
        ids = [key.kid for key in keys]
        if len(set(ids)) != len(ids):
            raise ConfigurationError(f"secrets key ids must differ: {', '.join(ids)}")
        self.kids = tuple(ids)
        self._seal = {key.kid: AESGCM(key.subkey(b"outcomes seal v1")) for key in keys}
        self._mac = {key.kid: key.subkey(b"outcomes digest v1") for key in keys}

    @property
    def current(self) -> str:
        return self.kids[0]

    def seal(self, plaintext: bytes, aad: bytes) -> Sealed:
        nonce = secrets.token_bytes(NONCE_BYTES)
        box = self._seal[self.current].encrypt(nonce, plaintext, aad)
        return Sealed(self.current, b64(nonce + box))

    def open(self, sealed: Sealed, aad: bytes) -> bytes:
        aead = self._seal.get(sealed.kid)
        if aead is None:
            raise SecretUnavailableError(
                f"the secrets key {sealed.kid!r} is not among this process's keys "
                f"({', '.join(self.kids)})",
                missing_key=sealed.kid,
            )
        try:
            raw = unb64(sealed.box)
            return aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], aad)
        except (InvalidTag, ValueError, binascii.Error):
            raise SecretUnavailableError(
                "a sealed value does not open under its key (altered, or sealed for another "
                "job or place)"
            ) from None

    def digest(self, plaintext: bytes, kid: str | None = None) -> str:
        """The keyed digest of a value under one key (the current one by default)."""
        key = self._mac[kid or self.current]
        return b64(hmac.new(key, plaintext, hashlib.sha256).digest())


def new_key_line(kid: str | None = None) -> str:
    """A fresh key, as OUTCOMES_SECRETS_KEY and the key file take it."""
    kid = kid or f"k{secrets.token_hex(3)}"
    SecretKey(kid, bytes(KEY_BYTES))  # the id's rules, before anything is printed
    return f"{kid}:{b64(secrets.token_bytes(KEY_BYTES))}"


def parse_keys(text: str, where: str) -> Keyring:
    """`id:key` entries, separated by commas or lines; `#` starts a comment."""
    keys = []
    for line in text.splitlines():
        for entry in line.split("#", 1)[0].split(","):
            entry = entry.strip()
            if not entry:
                continue
            kid, sep, encoded = entry.partition(":")
            if not sep:
                raise ConfigurationError(f"{where}: each key is written id:base64url")
            try:
                material = unb64(encoded.strip())
            except (binascii.Error, ValueError):
                raise ConfigurationError(f"{where}: key {kid!r} is not base64url") from None
            keys.append(SecretKey(kid.strip(), material))
    if not keys:
        raise ConfigurationError(f"{where}: no key in it")
    return Keyring(keys)


def load_keyring(
    key: str | None, key_file: str | None, local_folder: Path | None, ephemeral: bool
) -> Keyring | None:
    """The keys this process seals and opens with (see the module's docstring for the order);
    None: none configured for a ledger that needs them configured."""
    if key is not None:
        return parse_keys(key, "OUTCOMES_SECRETS_KEY")
    if key_file is not None:
        try:
            text = Path(key_file).read_text()
        except OSError as exc:
            raise ConfigurationError(f"OUTCOMES_SECRETS_KEY_FILE: {exc.strerror}") from None
        return parse_keys(text, f"OUTCOMES_SECRETS_KEY_FILE {key_file}")
    if local_folder is not None:
        path = local_folder / KEY_FILE
        return parse_keys(_local_key(path), str(path))
    if ephemeral:
        return Keyring([SecretKey("ephemeral", secrets.token_bytes(KEY_BYTES))])
    return None


def _local_key(path: Path) -> str:
    """The embedded ledger's key file, made once: written whole to a private temporary file,
    then linked into place, so a process starting at the same moment reads a whole key or
    makes none (the link fails if another made it first)."""
    try:
        return path.read_text()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ConfigurationError(f"{path}: {exc.strerror}") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w") as out:
            out.write("# Outcome Ledger: the key that seals declared secret arguments.\n")
            out.write("# Keep it out of the ledger's backups; docs/secrets.md.\n")
            out.write(new_key_line("local1") + "\n")
        with contextlib.suppress(FileExistsError):
            os.link(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path.read_text()
