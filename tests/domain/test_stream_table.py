"""`stream_table`: an exact set of stream ids and their heads in arrays (what an archive's
writer and `verify --archive` keep of its job streams)."""

from __future__ import annotations

import hashlib

from ledger.stream_table import HeadTable, StreamSet


def test_the_set_is_exact_and_numbers_each_stream_once() -> None:
    streams = [f"job-{i}" for i in range(5000)] + ["job-é", "", "job-0"]
    found = StreamSet(streams)
    assert len(found) == 5002  # "job-0" twice: one number
    assert [found.index(s) for s in ("job-0", "job-4999", "job-é", "")] == [0, 4999, 5000, 5001]
    assert found.add("job-17") == 17 and len(found) == 5002
    for absent in ("job-5000", "job-01", "job", "token-t0", "job-0 "):
        assert found.index(absent) == -1 and absent not in found
    assert "job-42" in found and 42 not in found
    assert len(found.marks) == 5002 and not any(found.marks)
    assert found.nbytes() < 64 * len(found)


def test_heads_give_back_exactly_what_was_set() -> None:
    table = HeadTable()
    digest = hashlib.sha256(b"x").hexdigest()
    table.set(3, 7, digest)
    assert table.get(3) == (7, digest) and table.odd == 0
    assert table.get(0) is None and table.get(99) is None
    # What does not pack (a file changed by hand) is kept as it is.
    for n, (version, hash_) in enumerate(
        [(1, digest.upper()), (2, "not a hash"), (2**70, digest), (-1, digest[:-2] + "zz")]
    ):
        table.set(10 + n, version, hash_)
        assert table.get(10 + n) == (version, hash_)
    assert table.odd == 4
    table.set(11, 8, digest)  # packs again
    assert table.get(11) == (8, digest) and table.odd == 3
