"""Database access: every difference between databases lives in this package.

Everything sqlanon sends to a database goes through a `Database`: identifiers are always quoted, values are always
bound parameters. There is one subclass per kind of database, one module each (`duckdb`, `postgres`, `spark`); what
a kind can do is told by its capability flags (roles, concurrent sessions, stored routines, ...) and how it says a
thing in SQL by its own fragment methods (scratch tables, medians, HMAC, catalog look-ups, bulk loads). The rest of
sqlanon asks these, never which database it is talking to.

Contract: this package imports `errors` and nothing else of sqlanon's. Adding a database: one module here with a
`Database` subclass that names its URL `schemes` (it registers itself as it is defined), imported below, and a line
in the tests' backend fixture.
"""

from __future__ import annotations

import sqlalchemy as sa

from . import duckdb, postgres, spark
from .base import (
    CSV_OPTIONS,
    TEXT_PARAMETER,
    ColumnKind,
    Database,
    StoreSpelling,
    driver_connection,
    first_line,
    normalize_url,
    open_database,
    qualified_name,
    quote_literal,
    quote_name,
)
from .duckdb import DuckDB, default_memory_limit, duckdb_file, progress_file, side_file_status
from .postgres import PG_MAX_NAME_BYTES, PostgreSQL
from .spark import Spark

__all__ = [
    "CSV_OPTIONS",
    "PG_MAX_NAME_BYTES",
    "TEXT_PARAMETER",
    "ColumnKind",
    "Database",
    "DuckDB",
    "PostgreSQL",
    "Spark",
    "StoreSpelling",
    "connect_hint",
    "default_memory_limit",
    "driver_connection",
    "duckdb",
    "duckdb_file",
    "first_line",
    "normalize_url",
    "open_database",
    "postgres",
    "progress_file",
    "qualified_name",
    "quote_literal",
    "quote_name",
    "side_file_status",
    "spark",
    "unreachable_reason",
]


def connect_hint(message: str) -> str:
    """What any kind of database adds to a connection error's message (see Database.hint)."""
    return "".join(kind.hint(message) for kind in dict.fromkeys(Database.kinds.values()))


def unreachable_reason(url: str) -> str | None:
    """Why the database at `url` cannot be reached, or None when it answers."""
    try:
        engine = sa.create_engine(url)
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
        finally:
            engine.dispose()
        return None
    except Exception as exc:  # any failure to connect is the answer, not an error
        return first_line(exc)
