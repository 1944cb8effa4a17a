"""`outcomes audit head | prove | consistency | check-proof | public-key`: the Merkle tree's
proofs (docs/integrity.md, "Proofs"). `check-proof` and `public-key` open no database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import orjson

from cli.context import with_ledger
from cli.errors import EXIT_PROBLEM, EXIT_USAGE, fail, reports_errors
from cli.output import emit_json, json_option
from ledger.errors import ProofError
from ledger.receipts import SignedHead, check_document, public_key_from
from ledger.runtime.ledger import Ledger
from ledger.services import proofs

output_option = click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Write the JSON to this file instead of stdout.",
)
_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


def _write(doc: dict[str, Any], output: Path | None) -> None:
    raw = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
    if output is None:
        click.echo(raw.decode())
    else:
        output.write_bytes(raw + b"\n")
        click.echo(f"→ {output}", err=True)


def _head_file(path: Path) -> SignedHead:
    return SignedHead.loads(path.read_bytes())


@click.command()
@output_option
@click.option(
    "--to",
    "to",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="Publish it into DIR as a new read-only file (head-<time>-p<position>.json, never "
    "overwritten): `audit verify --against DIR` checks every head there.",
)
@json_option
@reports_errors
@with_ledger
def head(ledger: Ledger, output: Path | None, to: Path | None, as_json: bool) -> None:
    """The Merkle tree head now: size, root, the position of the last leaf, the frontier (at
    most 4 KB), signed with Ed25519 when OUTCOMES_SIGNING_KEY is set. Keep it where the
    ledger's writers cannot change it: `audit verify --since FILE`, `audit verify --against
    DIR` and `audit consistency` later prove the ledger still extends it."""
    if to is not None:
        if output is not None:
            fail("--to and --output exclude each other", EXIT_USAGE)
        if not to.is_dir():
            fail(f"--to {to}: not a directory", EXIT_USAGE)
        path, published = proofs.publish_head(ledger, to)
        if as_json:
            emit_json({"file": str(path), **published.to_json()})
        else:
            click.echo(f"tree head of {published.head.tree_size} leaves → {path}")
        return
    found = proofs.head(ledger)
    if as_json or output is not None:
        _write(found.to_json(), output)
        return
    signed = "signed" if found.signature else "unsigned"
    click.echo(
        f"tree of {found.head.tree_size} leaves, root {found.head.root_hash.hex()}, "
        f"last position {found.position} ({signed})"
    )


@click.command()
@click.argument("job_id")
@output_option
@json_option
@reports_errors
@with_ledger
def prove(ledger: Ledger, job_id: str, output: Path | None, as_json: bool) -> None:
    """An inclusion receipt of JOB_ID's outcome (its terminal event) in the current tree:
    check it offline with `audit check-proof`, or with any RFC 9162 implementation."""
    found = proofs.prove(ledger, job_id)
    if as_json or output is not None:
        _write(found.receipt, output)
        return
    receipt = found.receipt
    click.echo(
        f"job {job_id}: leaf {receipt['leaf_index']} of {receipt['tree_size']}, root "
        f"{receipt['root_hash']}, {len(receipt['audit_path'])} hashes"  # type: ignore[arg-type]
    )


@click.command()
@click.argument("old", type=_FILE)
@click.argument("new", type=_FILE, required=False)
@output_option
@json_option
@reports_errors
@with_ledger
def consistency(
    ledger: Ledger, old: Path, new: Path | None, output: Path | None, as_json: bool
) -> None:
    """A consistency proof that the tree of the head in OLD is the start of the tree of NEW
    (a later head; by default the current one)."""
    doc = proofs.consistency(ledger, _head_file(old), _head_file(new) if new else None)
    if as_json or output is not None:
        _write(doc, output)
        return
    click.echo(
        f"the tree of {doc['first_size']} leaves is the start of the tree of "
        f"{doc['second_size']} ({len(doc['proof'])} hashes)"  # type: ignore[arg-type]
    )


@click.command("check-proof")
@click.argument("file", type=_FILE)
@click.option("--digest", "digest", type=_FILE, help="A tree head kept out of the writers' reach.")
@click.option(
    "--public-key",
    "public_key",
    metavar="KEY",
    help="The ledger's Ed25519 public key (base64, PEM, or a file holding either): the head "
    "must be signed by it.",
)
@json_option
def check_proof(file: Path, digest: Path | None, public_key: str | None, as_json: bool) -> None:
    """Check a receipt (`audit prove`), a consistency proof (`audit consistency`) or a tree
    head, offline, with no database. With --digest the proof must be against that head. Exit
    2 with the reason if anything does not add up."""
    try:
        doc = orjson.loads(file.read_bytes())
        key = None
        if public_key is not None:
            text = Path(public_key).read_text() if Path(public_key).is_file() else public_key
            key = public_key_from(text)
        kept = _head_file(digest) if digest is not None else None
        checked = check_document(doc, kept, key)
    except (ProofError, orjson.JSONDecodeError) as exc:
        if as_json:
            emit_json({"ok": False, "reason": str(exc)})
        fail(f"proof refused: {exc}", EXIT_PROBLEM)
        return
    if as_json:
        emit_json({"ok": True, "kind": checked.kind, **checked.head.to_json()})
    else:
        click.echo(f"ok: {checked.summary} (root {checked.head.root_hash.hex()})")


@click.command("public-key")
@json_option
@reports_errors
def public_key(as_json: bool) -> None:
    """The public half of OUTCOMES_SIGNING_KEY (base64 of its 32 raw bytes): publish it, so
    that anyone can check the ledger's signed tree heads."""
    found = proofs.public_key()
    if found is None:
        fail("OUTCOMES_SIGNING_KEY is not set: tree heads are not signed")
        return
    if as_json:
        emit_json({"alg": "Ed25519", "public_key": found, "key_id": proofs.public_key_id()})
    else:
        click.echo(found)


PROOF_COMMANDS = (head, prove, consistency, check_proof, public_key)
