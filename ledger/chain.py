"""The hash chains: canonical encoding, hashing and verification (contract §2).

Two chains, checked together:
- per stream: each event's hash covers its identity, place, content and the previous hash in
  the same stream, so an edited row, or a deleted one inside a stream, breaks it there;
- ledger-wide: each event's `ledger_hash` links its hash to the previous position's
  `ledger_hash`, so a deleted event anywhere (a stream's newest included, as long as any
  event follows it), an inserted or a reordered one breaks the chain at the next position.
A history re-hashed end to end is consistent with itself, and so is a ledger cut at its very
end; only a digest saved earlier (see `ledger.digest`) exposes those.

The hashing is in `chain_hash`, what a check finds in `chain_problems`, the checks of one
event in `chain_event_checks`, all importable from here; `audit verify` runs the checks in two
passes over the ledger (`ledger.ledger_pass`: ledger order; `ledger.stream_pass`: stream
order), in bounded memory.
"""

from __future__ import annotations

from ledger.chain_event_checks import (
    Link,
    dense_problem,
    digest_event_problem,
    digest_span_problems,
    digest_truncated,
    kept_problem,
    kept_whole_problems,
    ledger_link_problem,
    link_problems,
    stream_links,
)
from ledger.chain_hash import (
    canonical_bytes,
    event_hash,
    event_rows,
    ledger_link,
    link_rows,
    normalize_data,
    recomputed_hash,
    recorded_canonical_bytes,
)
from ledger.chain_problems import DIGEST_KINDS, Checkpoint, Problem, ProblemKind, VerifyReport

__all__ = [
    "DIGEST_KINDS",
    "Checkpoint",
    "Link",
    "Problem",
    "ProblemKind",
    "VerifyReport",
    "canonical_bytes",
    "dense_problem",
    "digest_event_problem",
    "digest_span_problems",
    "digest_truncated",
    "event_hash",
    "event_rows",
    "kept_problem",
    "kept_whole_problems",
    "ledger_link",
    "ledger_link_problem",
    "link_problems",
    "link_rows",
    "normalize_data",
    "recomputed_hash",
    "recorded_canonical_bytes",
    "stream_links",
]
