"""Declared secrets on the memory ledger (ledger/secrets.py, ledger/keyring.py, the submit and
execute use cases): which arguments are secrets (SecretStr/SecretBytes, nested, in lists and
maps, behind aliases and unions; a request the schema refuses included), sealed at rest and
opened for the tool only; the same secret replays under its idempotency key, after a key
rotation too; a worker without the key, a sealed value moved to another job, and a ledger
without any key are typed refusals or failures that run nothing and keep nothing."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import BaseModel, Field, SecretBytes, SecretStr

from ledger.codes import Code, Status
from ledger.decisions import Caller, JobRequest
from ledger.errors import ConfigurationError, IdempotencyConflictError, SecretUnavailableError
from ledger.events import job_stream
from ledger.keyring import KEY_FILE, Keyring, load_keyring, new_key_line, parse_keys
from ledger.outcomes import Succeeded
from ledger.persistence.memory import MemoryStore
from ledger.public import public_event
from ledger.runtime.ledger import Ledger
from ledger.secrets import SEALED, WITHHELD, open_args, seal_args, secret_paths
from ledger.services import secrets as secret_service
from ledger.services.execute import Executor
from ledger.services.submit import submit
from ledger.tools import ToolContext, tool

CALLER = Caller("acme", "tok-acme")
RECEIVED: dict[str, Any] = {}


class Token(BaseModel):
    name: str
    value: SecretBytes


class Login(BaseModel):
    user: str
    password: SecretStr = Field(alias="pass")
    pin: SecretStr | None = None
    tokens: list[Token] = []
    by_host: dict[str, SecretStr] = {}
    retries: int = 1


@tool("secrets.login", max_attempts=1)
def login(args: Login, ctx: ToolContext) -> Succeeded:
    RECEIVED[ctx.job_id] = args
    return Succeeded(result={"user": args.user, "echo": args.password.get_secret_value()})


def keyring(*kids: str) -> Keyring:
    return parse_keys(",".join(new_key_line(kid) for kid in kids), "test")


def test_the_declared_secrets_are_found_wherever_the_schema_puts_them() -> None:
    args = {
        "user": "ann",
        "pass": "hunter2",
        "pin": None,
        "tokens": [{"name": "a", "value": "t-1"}, {"name": "b", "value": "t-2"}],
        "by_host": {"db/main": "pw-1", "cache": "pw-2"},
        "retries": "not a number",  # refused by the schema: its secrets are sealed all the same
    }
    assert secret_paths(Login, args) == [
        "/pass",
        "/tokens/0/value",
        "/tokens/1/value",
        "/by_host/db~1main",
        "/by_host/cache",
    ]
    assert secret_paths(Login, {"user": "ann", "pin": "1234"}) == ["/pin"]


def test_a_sealed_value_opens_for_its_own_job_and_place_only() -> None:
    keys = keyring("k1")
    sealed = seal_args(Login, {"user": "ann", "pass": "hunter2"}, "job-1", keys)
    assert sealed.paths == ["/pass"] and sealed.stored["user"] == "ann"
    assert sealed.stored["pass"].startswith(f"{SEALED}k1:")
    assert "hunter2" not in orjson.dumps(sealed).decode()
    opened = open_args(Login, sealed.stored, sealed.paths, "job-1", keys)
    assert opened.args == {"user": "ann", "pass": "hunter2"} and opened.secrets == ["hunter2"]
    with pytest.raises(SecretUnavailableError, match="does not open"):
        open_args(Login, sealed.stored, sealed.paths, "job-2", keys)
    with pytest.raises(SecretUnavailableError, match="not among") as missing:
        open_args(Login, sealed.stored, sealed.paths, "job-1", keyring("k2"))
    assert missing.value.missing_key == "k1"
    # Sealed twice, the same value gives two boxes (a random nonce) but one digest.
    again = seal_args(Login, {"user": "ann", "pass": "hunter2"}, "job-1", keys)
    assert again.stored != sealed.stored and again.fingerprints == sealed.fingerprints


def test_the_tool_gets_the_real_values_and_the_ledger_keeps_them_sealed() -> None:
    ledger = Ledger(MemoryStore())
    args = {"user": "ann", "pass": "hunter2-x", "tokens": [{"name": "a", "value": "tok-9"}]}
    view = submit(ledger, CALLER, JobRequest("secrets.login", args)).view
    Executor(ledger, "w").execute(view.job_id)
    got = RECEIVED[view.job_id]
    assert got.password.get_secret_value() == "hunter2-x"
    assert got.tokens[0].value.get_secret_value() == b"tok-9"
    recorded = ledger.store.read_stream(job_stream(view.job_id))
    stored = orjson.dumps([e.data for e in recorded]).decode()
    assert "hunter2-x" not in stored and "tok-9" not in stored
    assert recorded[-1].data["result"] == {"user": "ann", "echo": "[REDACTED]"}
    shown = public_event(recorded[0])["data"]["args"]
    assert shown == {
        "user": "ann",
        "pass": "(secret)",
        "tokens": [{"name": "a", "value": "(secret)"}],
    }


def test_the_same_secret_replays_after_a_rotation_and_another_conflicts() -> None:
    store = MemoryStore()
    old = new_key_line("old")
    first = submit(
        Ledger(store, parse_keys(old, "test")),
        CALLER,
        JobRequest("secrets.login", {"user": "a", "pass": "pw-1"}, "k"),
    ).view
    # The rotation: a new key first (it seals), the old one after it (it still opens).
    new = Ledger(store, parse_keys(f"{new_key_line('new')},{old}", "test"))
    again = submit(new, CALLER, JobRequest("secrets.login", {"user": "a", "pass": "pw-1"}, "k"))
    assert again.replayed and again.view.job_id == first.job_id
    with pytest.raises(IdempotencyConflictError):
        submit(new, CALLER, JobRequest("secrets.login", {"user": "a", "pass": "pw-2"}, "k"))
    # Sealed under the old key, the job still runs on a worker holding both.
    Executor(new, "w").execute(first.job_id)
    assert RECEIVED[first.job_id].password.get_secret_value() == "pw-1"
    fresh = submit(new, CALLER, JobRequest("secrets.login", {"user": "a", "pass": "pw-3"})).view
    assert fresh.args["pass"].startswith(f"{SEALED}new:")


def test_a_worker_without_the_key_runs_nothing_and_says_which_key() -> None:
    store = MemoryStore()
    view = submit(
        Ledger(store, keyring("api")),
        CALLER,
        JobRequest("secrets.login", {"user": "a", "pass": "pw"}),
    ).view
    Executor(Ledger(store, keyring("other")), "w").execute(view.job_id)
    failed = store.read_stream(job_stream(view.job_id))[-1]
    assert failed.type == "work.failed" and view.job_id not in RECEIVED
    assert failed.data["error"]["code"] == Code.CAPABILITY_UNAVAILABLE.value
    assert failed.data["error"]["required_capability"] == "secrets key api"


def test_without_any_key_a_secret_is_refused_and_not_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("OUTCOMES_SECRETS_KEY", "OUTCOMES_SECRETS_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    assert load_keyring(None, None, None, ephemeral=False) is None
    ledger = Ledger(MemoryStore(), keyring=None)  # as a PostgreSQL ledger unconfigured
    view = submit(ledger, CALLER, JobRequest("secrets.login", {"user": "a", "pass": "pw-9"})).view
    assert view.status is Status.REFUSED and view.code is Code.CAPABILITY_UNAVAILABLE
    assert view.error is not None and "OUTCOMES_SECRETS_KEY" in (view.error.fix or "")
    (refused,) = ledger.store.read_stream(job_stream(view.job_id))
    assert refused.data["args"] == {"user": "a", "pass": WITHHELD}
    assert "pw-9" not in orjson.dumps(refused.data).decode()
    # A tool without secrets needs no key.
    plain = submit(ledger, CALLER, JobRequest("apitest.echo", {"text": "x"})).view
    assert plain.status is Status.QUEUED


def test_a_key_holder_can_check_a_value_without_anyone_seeing_it() -> None:
    ledger = Ledger(MemoryStore(), keyring("k1"))
    view = submit(ledger, CALLER, JobRequest("secrets.login", {"user": "a", "pass": "pw-7"})).view
    assert secret_service.check(ledger, view.job_id, "/pass", "pw-7").matches
    assert not secret_service.check(ledger, view.job_id, "/pass", "pw-8").matches
    assert secret_service.key_ids(ledger) == ("k1",)


def test_keys_come_from_the_environment_a_file_or_beside_the_embedded_ledger(
    tmp_path: Path,
) -> None:
    line = new_key_line("k2")
    assert loaded(f"{line}, {new_key_line('k1')}", None, None).kids[0] == "k2"
    keyfile = tmp_path / "keys"
    keyfile.write_text(f"# rotated in March\n{line}\n")
    assert loaded(None, str(keyfile), None).kids == ("k2",)
    for bad in ("nocolon", "k1:not base64!", "k1:c2hvcnQ", f"{line},{line}"):
        with pytest.raises(ConfigurationError):
            parse_keys(bad, "OUTCOMES_SECRETS_KEY")
    # The embedded ledger's key, made once however many processes start at the same moment.
    home = tmp_path / "home"
    made: list[Keyring] = []
    starts = [
        threading.Thread(target=lambda: made.append(loaded(None, None, home))) for _ in range(8)
    ]
    for start in starts:
        start.start()
    for start in starts:
        start.join()
    assert len({keys.kids for keys in made}) == 1 and len(made) == 8
    path = home / KEY_FILE
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert [p.name for p in home.iterdir()] == [KEY_FILE]  # no temporary file left
    assert made[1].open(made[0].seal(b"x", b"aad"), b"aad") == b"x"


def loaded(key: str | None, key_file: str | None, folder: Path | None) -> Keyring:
    keys = load_keyring(key, key_file, folder, ephemeral=False)
    assert keys is not None
    return keys


@pytest.mark.parametrize(
    ("args", "place"),
    [
        ({"user": f"{SEALED}k:d:box", "pass": "p"}, "/user"),
        ({"user": "ol-sealed:anything", "pass": "p"}, "/user"),
        (
            {"user": "ann", "pass": "p", "tokens": [{"name": WITHHELD, "value": "v"}]},
            "/tokens/0/name",
        ),
        ({"user": "ann", "pass": f"{SEALED}k:d:box"}, "/pass"),
    ],
)
def test_an_agent_may_not_send_the_ledgers_own_marks(args: dict[str, Any], place: str) -> None:
    """Issue 47 (Low): pages show any value starting with `ol-sealed:` as `(secret)`, so an
    agent could hide an argument from staff by sending one. Only the ledger seals: such a
    value is refused (INPUT_INVALID, naming the place, not the value), nothing runs."""
    ledger = Ledger(MemoryStore())
    view = submit(ledger, CALLER, JobRequest("secrets.login", args)).view
    assert (view.status, view.code) == (Status.REFUSED, Code.INPUT_INVALID)
    assert (
        view.error is not None and f"argument at {place} starts with a mark" in view.error.message
    )
    assert "ol-sealed" in (view.error.fix or "") and view.job_id not in RECEIVED


def test_a_mark_inside_a_value_is_the_agents_text() -> None:
    ledger = Ledger(MemoryStore())
    args = {"user": "see ol-sealed: in the docs", "pass": "p"}
    view = submit(ledger, CALLER, JobRequest("secrets.login", args)).view
    assert view.status is Status.QUEUED
    shown = public_event(ledger.store.read_stream(job_stream(view.job_id))[0])["data"]["args"]
    assert shown["user"] == "see ol-sealed: in the docs"
