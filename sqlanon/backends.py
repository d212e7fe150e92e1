"""Database access: engines, identifier quoting, and the few dialect differences.

Everything sqlanon sends to a database goes through `Database`: identifiers are
always quoted by the engine's own dialect, values are always bound parameters.
DuckDB (embedded) and PostgreSQL are supported; they differ only in where
scratch tables live, how a CSV file is loaded, and how rows are bulk-inserted.
"""
from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .errors import DataError, SqlanonError

#: read_csv options a job may pass through (name in the config -> DuckDB name)
CSV_OPTIONS = {"delimiter": "delim", "delim": "delim", "sep": "delim", "header": "header", "quote": "quote",
               "escape": "escape", "all_varchar": "all_varchar", "types": "types", "dateformat": "dateformat",
               "timestampformat": "timestampformat", "nullstr": "nullstr", "skip": "skip",
               "sample_size": "sample_size", "encoding": "encoding", "decimal_separator": "decimal_separator"}

#: DuckDB column types -> PostgreSQL types when a CSV is loaded into PostgreSQL
PG_TYPES = {"VARCHAR": "text", "BIGINT": "bigint", "INTEGER": "integer", "SMALLINT": "smallint",
            "DOUBLE": "double precision", "FLOAT": "real", "DATE": "date", "TIMESTAMP": "timestamp",
            "BOOLEAN": "boolean", "TIME": "time", "HUGEINT": "numeric"}


class Database:
    """A database reached through one SQLAlchemy engine."""

    def __init__(self, url: str):
        try:
            self.engine = sa.create_engine(url)
        except Exception as exc:  # unknown driver, malformed URL
            raise SqlanonError(f"cannot use database URL {url!r}: {exc}") from None
        self.kind = self.engine.dialect.name
        if self.kind not in ("duckdb", "postgresql"):
            raise SqlanonError(f"database {self.kind!r} is not supported; use DuckDB or PostgreSQL")
        self._preparer = self.engine.dialect.identifier_preparer
        self.url = url

    # --- names ----------------------------------------------------------
    def q(self, *parts: str | None) -> str:
        """Quote a (possibly schema-qualified) name; None parts are skipped."""
        return ".".join(self._preparer.quote_identifier(p) for p in parts if p is not None)

    def scratch_ref(self, name: str) -> str:
        """Reference to a session-scoped scratch table (frequency sets)."""
        return f"{'pg_temp' if self.kind == 'postgresql' else 'temp'}.{self.q(name)}"

    # --- connections ----------------------------------------------------
    @contextmanager
    def connect(self) -> Iterator[Connection]:
        try:
            conn = self.engine.connect()
        except sa.exc.OperationalError as exc:
            raise SqlanonError(f"cannot connect to {self.engine.url.render_as_string(hide_password=True)}: "
                               f"{str(exc.orig).strip().splitlines()[0]}") from None
        with conn:
            yield conn

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        with self.connect() as conn, conn.begin():
            yield conn

    def dispose(self) -> None:
        self.engine.dispose()

    # --- catalog --------------------------------------------------------
    # information_schema works alike on both databases (SQLAlchemy reflection does not on DuckDB)
    def _column_names(self, conn: Connection, schema: str | None, table: str) -> list[str]:
        return list(conn.execute(sa.text(
            "SELECT column_name FROM information_schema.columns WHERE table_catalog = current_database() "
            "AND table_schema = COALESCE(:s, current_schema()) AND table_name = :t ORDER BY ordinal_position"),
            {"s": schema, "t": table}).scalars())

    def column_type(self, conn: Connection, schema: str | None, table: str, column: str) -> str:
        return conn.execute(sa.text(
            "SELECT data_type FROM information_schema.columns WHERE table_catalog = current_database() "
            "AND table_schema = COALESCE(:s, current_schema()) AND table_name = :t AND column_name = :c"),
            {"s": schema, "t": table, "c": column}).scalar_one()

    def table_exists(self, conn: Connection, schema: str | None, table: str) -> bool:
        return bool(self._column_names(conn, schema, table))

    def columns(self, conn: Connection, schema: str | None, table: str) -> list[str]:
        names = self._column_names(conn, schema, table)
        if not names:
            where = qualified_name(schema, table)
            self._check_readable(conn, schema, table, where)
            raise DataError(f"table {where!r} not found in {self.engine.url.render_as_string(hide_password=True)}; "
                            "check source.table (and source.schema), or load it with source.csv")
        return names

    def _check_readable(self, conn: Connection, schema: str | None, table: str, where: str) -> None:
        """PostgreSQL lists only the columns a role may use: tell an unreadable table from a missing one."""
        if self.kind != "postgresql":
            return
        user = conn.execute(sa.text("SELECT current_user")).scalar_one()
        grant = f"ask its owner for: GRANT SELECT ON {self.q(schema, table)} TO {self.q(user)}"
        try:
            with conn.begin_nested():
                exists = conn.execute(sa.text("SELECT to_regclass(:name) IS NOT NULL"),
                                      {"name": self.q(schema, table)}).scalar_one()
        except sa.exc.DBAPIError:  # no USAGE on the schema
            raise DataError(f"role {user!r} may not use schema {schema!r} of table {where!r}; ask its owner for: "
                            f"GRANT USAGE ON SCHEMA {self.q(schema or 'public')} TO {self.q(user)}, and {grant}"
                            ) from None
        if exists:
            raise DataError(f"role {user!r} may not read table {where!r}; {grant}")

    def in_memory_array(self, column: str) -> str:
        """An integer-array column read by a scalar subquery that is indexed once per row.

        PostgreSQL stores a large array out of line (TOAST) and would fetch it
        again for every subscript (40 s instead of 1 s for a 1M-row roll-up);
        concatenating an empty array makes the subquery's value an in-memory copy.
        """
        if self.kind == "postgresql":
            return f"{column} || CAST(ARRAY[] AS INTEGER[])"
        return column

    def drop_table(self, conn: Connection, ref: str) -> None:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {ref}")

    # --- bulk data ------------------------------------------------------
    def create_table_from_rows(self, conn: Connection, ref: str, columns: Sequence[tuple[str, str]],
                               rows: Sequence[Sequence[Any]]) -> None:
        """Create `ref` with (name, type) columns and fill it with rows (small metadata, e.g. hierarchies)."""
        cols = ", ".join(f"{self.q(name)} {sql_type}" for name, sql_type in columns)
        conn.exec_driver_sql(f"CREATE TABLE {ref} ({cols})")
        self.insert_rows(conn, ref, [name for name, _ in columns], rows)

    def insert_rows(self, conn: Connection, ref: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Bulk insert: COPY on PostgreSQL, a registered DataFrame on DuckDB (executemany is slow there)."""
        if not rows:
            return
        names = ", ".join(self.q(c) for c in columns)
        if self.kind == "postgresql":
            with conn.connection.dbapi_connection.cursor() as cur:
                with cur.copy(f"COPY {ref} ({names}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
        else:
            import pandas as pd  # DataFrame in: the documented fast path for DuckDB bulk inserts
            frame = pd.DataFrame(list(rows), columns=list(columns))
            raw = conn.connection.dbapi_connection
            raw.register("sqlanon_rows", frame)
            try:
                conn.exec_driver_sql(f"INSERT INTO {ref} ({names}) SELECT * FROM sqlanon_rows")
            finally:
                raw.unregister("sqlanon_rows")

    def load_csv(self, conn: Connection, path: Path, options: dict[str, Any], schema: str | None,
                 table: str) -> int:
        """(Re)load a CSV file into schema.table atomically; returns the row count.

        DuckDB reads the file (type detection, options); PostgreSQL receives it
        through COPY from a normalized copy DuckDB writes, so both databases see
        the same columns and types.
        """
        if not path.is_file():
            raise DataError(f"CSV file not found: {path}")
        read_sql, params = _read_csv_sql(path, options)
        tmp = f"{table}__sqlanon_load"
        if self.kind == "duckdb":
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {self.q(schema, tmp)}")
            _csv_errors(lambda: conn.execute(sa.text(f"CREATE TABLE {self.q(schema, tmp)} AS {read_sql}"), params),
                        path)
        else:
            self._copy_csv_to_postgres(conn, read_sql, params, path, self.q(schema, tmp))
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {self.q(schema, table)}")
        conn.exec_driver_sql(f"ALTER TABLE {self.q(schema, tmp)} RENAME TO {self.q(table)}")
        return conn.exec_driver_sql(f"SELECT COUNT(*) FROM {self.q(schema, table)}").scalar_one()

    def _copy_csv_to_postgres(self, conn: Connection, read_sql: str, params: dict, path: Path, ref: str) -> None:
        import duckdb

        reader = duckdb.connect()
        try:
            duck_params = [params[k] for k in sorted(params, key=read_sql.index)]
            query = read_sql
            for k in sorted(params, key=read_sql.index):
                query = query.replace(f":{k}", "?", 1)
            described = _csv_errors(lambda: reader.execute(f"DESCRIBE {query}", duck_params).fetchall(), path)
            cols = ", ".join(f"{self.q(name)} {PG_TYPES.get(str(typ), 'text')}" for name, typ, *_ in described)
            with tempfile.TemporaryDirectory() as tmpdir:
                normalized = os.path.join(tmpdir, "data.csv")
                _csv_errors(lambda: reader.execute(f"COPY ({query}) TO '{normalized}' (HEADER, DELIMITER ',')",
                                                   duck_params), path)
                conn.exec_driver_sql(f"DROP TABLE IF EXISTS {ref}")
                conn.exec_driver_sql(f"CREATE TABLE {ref} ({cols})")
                with conn.connection.dbapi_connection.cursor() as cur, open(normalized, "rb") as fh:
                    with cur.copy(f"COPY {ref} FROM STDIN (FORMAT csv, HEADER true)") as copy:
                        while chunk := fh.read(1 << 20):
                            copy.write(chunk)
        finally:
            reader.close()


def qualified_name(schema: str | None, table: str) -> str:
    """`schema.table`, or `table` in the current schema: how messages name a table (unquoted)."""
    return f"{schema}.{table}" if schema else table


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
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _read_csv_sql(path: Path, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    args, params = [":csv_path"], {"csv_path": str(path)}
    for i, (key, value) in enumerate(options.items()):
        if key not in CSV_OPTIONS:
            raise DataError(f"unknown CSV option {key!r} (source.csv_options, or --option of sqlanon load); "
                            f"known: {', '.join(sorted(CSV_OPTIONS))}")
        args.append(f"{CSV_OPTIONS[key]} = :csv_opt{i}")
        params[f"csv_opt{i}"] = value
    return f"SELECT * FROM read_csv({', '.join(args)})", params


def _csv_errors(action, path: Path):
    try:
        return action()
    except sa.exc.DBAPIError as exc:
        raise DataError(f"cannot read CSV file {path}: {_first_line(exc.orig)}") from None
    except Exception as exc:  # duckdb's own exceptions when reading for PostgreSQL
        if type(exc).__module__.startswith("duckdb") or type(exc).__module__.startswith("_duckdb"):
            raise DataError(f"cannot read CSV file {path}: {_first_line(exc)}") from None
        raise


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
