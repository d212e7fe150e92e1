"""Operations on `owned_tables`: the tables sqlanon created outside its schema (outputs, loaded sources).

A record is the creating role's: other roles neither see it nor replace it while the table still carries its token
(a record whose table was dropped and created again by someone else is stale, and any role may replace it).
"""

from __future__ import annotations

from .ops import Op

TABLE = (("schema_name", "text"), ("table_name", "text"))

OWNED = Op(
    name="owned_table",
    params=TABLE,
    sql=(
        "SELECT kind, token, file_path, file_sha256, row_count FROM {s}.owned_tables WHERE schema_name = :schema_name "
        "AND table_name = :table_name AND {mine:owner_role}",
    ),
    returns=(
        ("kind", "text"),
        ("token", "text"),
        ("file_path", "text"),
        ("file_sha256", "text"),
        ("row_count", "bigint"),
    ),
)

RECORD = Op(
    name="owned_table_record",
    params=TABLE
    + (
        ("kind", "text"),
        ("token", "text"),
        ("run", "bigint"),
        ("file_path", "text"),
        ("file_sha256", "text"),
        ("row_count", "bigint"),
        ("created_at", "timestamp"),
    ),
    sql=(
        "DELETE FROM {s}.owned_tables WHERE schema_name = :schema_name AND table_name = :table_name",
        "INSERT INTO {s}.owned_tables (schema_name, table_name, kind, token, run_id, file_path, "
        "file_sha256, row_count, "
        "created_at, owner_role) VALUES (:schema_name, :table_name, :kind, :token, :run, :file_path, :file_sha256, "
        ":row_count, :created_at, {caller})",
    ),
    guard="table_free",
)

OPS = (OWNED, RECORD)
