"""What a key holder can learn of a declared secret without showing it: which keys this process
holds, and whether a candidate value is the one a job was given (its keyed digest, compared
under the key it was sealed with). Nothing here opens a sealed value: only the worker does,
to run the tool."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any

import orjson

from ledger.errors import NotASecretError, SecretUnavailableError
from ledger.runtime.ledger import Ledger
from ledger.secrets import sealed_digest, value_at
from ledger.services import jobs


@dataclass(frozen=True)
class SecretCheck:
    job_id: str
    path: str
    kid: str  # the key it was sealed under
    matches: bool


def key_ids(ledger: Ledger) -> tuple[str, ...]:
    """This process's keys, the one that seals first (empty: none configured)."""
    keyring = ledger.secrets
    return keyring.kids if keyring is not None else ()


def check(ledger: Ledger, job_id: str, path: str, candidate: Any) -> SecretCheck:
    """Whether `candidate` is the value of the secret at `path` (a JSON pointer into the
    job's arguments, one of its `secret_paths`)."""
    view = jobs.get(ledger, job_id)
    found = sealed_digest(value_at(view.args, path))
    if path not in (view.secret_paths or []) or found is None:
        raise NotASecretError(job_id, path, view.secret_paths or [])
    kid, digest = found
    keyring = ledger.secrets
    if keyring is None or kid not in keyring.kids:
        raise SecretUnavailableError(f"the secrets key {kid!r} is not loaded here", kid)
    mine = keyring.digest(orjson.dumps(candidate), kid)
    return SecretCheck(view.job_id, path, kid, hmac.compare_digest(mine, digest))
