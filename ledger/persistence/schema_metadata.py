"""The one MetaData every table of the ledger is declared on, and the column types the
tables share (`ledger.persistence.schema` gathers the tables)."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Integer,
    MetaData,
    String,
)
from sqlalchemy.dialects.postgresql import JSONB

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "pk": "pk_%(table_name)s",
    }
)

Json = JSON().with_variant(JSONB(), "postgresql")
Position = BigInteger().with_variant(Integer(), "sqlite")  # INTEGER PRIMARY KEY = rowid
Time = DateTime(timezone=True)

# On Postgres `jobs` is partitioned by range of `job_id` (migration 0020): windows of creation
# time, as UUIDv7 ids begin with it; the ids compare byte by byte (collation "C") in every locale.
JobId = String(36).with_variant(String(36, collation="C"), "postgresql")
# A job's status: `awaiting_approval` (17 characters) needed more than 16 on Postgres
# (migration 0022); SQLite does not enforce a length, and its tables keep their DDL.
StatusText = String(16).with_variant(String(32), "postgresql")
