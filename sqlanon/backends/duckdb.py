"""DuckDB, embedded in this process: the default database (a file, or memory).

DuckDB lets one process open a file at a time, even to read: a run writes its progress into a small file beside
the database (`progress_file`), which another process shows when the file is held (`DuckDB.hint`).
"""

from __future__ import annotations

import json
import math
import os
import re
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection
from sqlalchemy.sql import Executable

from ..errors import ConfigError, DataError
from .base import (
    TEXT_PARAMETER,
    ColumnKind,
    CsvRead,
    Database,
    csv_errors,
    driver_connection,
    first_line,
    quote_literal,
)

if TYPE_CHECKING:
    import pandas as pd

    from ..model.frames import SourceFrame

DUCKDB_VECTOR = 2048  # rows DuckDB hands over at a time
UNNEST_ROWS = 200  # up to this many rows, an insert binds one list per column (see DuckDB._insert)


class DuckDB(Database):
    """DuckDB, embedded in this process: one process per file, names compared ignoring case."""

    kind = "duckdb"
    schemes = ("duckdb",)
    #: information_schema's type names (see Database.type_kinds)
    type_kinds: ClassVar[dict[str, ColumnKind]] = {
        **dict.fromkeys(("tinyint", "smallint", "integer", "utinyint", "usmallint"), ColumnKind.SMALL_INTEGER),
        **dict.fromkeys(("bigint", "uinteger"), ColumnKind.INTEGER),
        **dict.fromkeys(("float", "double"), ColumnKind.FLOAT),
        **dict.fromkeys(("hugeint", "ubigint", "uhugeint", "decimal"), ColumnKind.EXACT),
    }
    url_examples = ("duckdb:///file.duckdb (or a bare file path)",)

    @classmethod
    def canonical_url(cls, url: str, parsed: URL, base_dir: Path) -> str:
        if parsed.host:  # duckdb://file.duckdb: the file read as a server's name, the database left empty
            path = "/".join(part for part in (parsed.host, parsed.database) if part)
            raise ConfigError(
                f"database URL {url!r} names a host ({parsed.host!r}), and DuckDB has none: a DuckDB file takes "
                f"three slashes, duckdb:///{path} (relative to the job file) or duckdb:////absolute/path"
            )
        db = parsed.database or ":memory:"
        if db != ":memory:" and not Path(db).is_absolute():
            parsed = parsed.set(database=str((base_dir / db).resolve()))
        return parsed.render_as_string(hide_password=False)

    memory_settings = True
    value_lookups = True
    binds_lists = True
    index_lookups = True
    keeps_dimensions = True
    name_rule = "DuckDB compares them, ignoring case"

    @staticmethod
    def hint(message: str) -> str:
        """DuckDB lets one process open a file at a time: say so, and what the running job's progress file says.
        A file in a folder that does not exist: say which folder to create."""
        missing = re.search(r'Cannot open file "([^"]+)": No such file or directory', message)
        if missing and not Path(missing.group(1)).parent.is_dir():
            return (
                f"; the folder {Path(missing.group(1)).parent} does not exist: create it, or choose a file in another"
            )
        locked = re.search(r'Could not set lock on file "([^"]+)"', message)
        if not locked:
            return ""
        holder = re.search(r"\(PID (\d+)\)", message)
        status = side_file_status(locked.group(1), int(holder.group(1)) if holder else None)
        return (
            "; another process has this DuckDB file open (DuckDB allows one process per file, even to read): "
            "wait for it to finish" + (f". Its progress: {status}" if status else "")
        )

    @classmethod
    def open(cls, url: str, memory_limit: str | None = None, temp_directory: Path | None = None) -> Database:
        """A file, or a database in this process' memory: one of its own, named (DuckDB shares a named in-memory
        database between the connections that name it), so that a run's several connections see one database,
        which lives as long as this object (see `in_memory`)."""
        if duckdb_file(url) is not None or not url.startswith("duckdb:"):
            return super().open(url, memory_limit, temp_directory)
        db = super().open(f"duckdb:///:memory:sqlanon_{uuid.uuid4().hex}", memory_limit, temp_directory)
        db.url = url
        assert isinstance(db, DuckDB)
        # the database ends with its last connection: this one, checked out for good (dispose closes the others)
        db._keeper = db.engine.raw_connection()
        return db

    def __init__(
        self, *, engine: sa.engine.Engine, url: str, memory_limit: str | None = None, temp_directory: Path | None = None
    ):
        super().__init__(engine=engine, url=url)
        self._keeper: Any = None  # an in-memory database's own connection (see open)
        self._limit_memory(memory_limit or default_memory_limit(), temp_directory)

    @property
    def in_memory(self) -> bool:
        """Whether the database is in this process' memory: it lives as long as this object does (a disposed
        engine connects again to the same database), and its tables are read through it, not its URL."""
        return self._keeper is not None

    def execute(self, conn: Connection, sql: str | Executable, params: dict[str, Any] | None = None) -> Any:
        """Text as `text()` would run it, without its compilation: `:name` as DuckDB's own `$name` (the same
        pattern as SQLAlchemy's; DuckDB refuses parameters a statement does not name). Compiling a wave of
        hierarchical t-closeness took 0.9 ms, its statement 10 ms; a small search runs a dozen statements."""
        if not isinstance(sql, str):
            return super().execute(conn, sql, params)
        named: list[str] = []

        def to_driver(match: re.Match[str]) -> str:
            named.append(match[1])
            return "$" + str(match[1])

        driver_sql = self.for_driver(TEXT_PARAMETER.sub(to_driver, sql))
        return conn.exec_driver_sql(driver_sql, {n: (params or {})[n] for n in named} if named else None)

    def create_run_scratch(
        self, conn: Connection, schema: str, name: str, select: str, params: dict[str, Any] | None = None
    ) -> tuple[str, int | None]:
        """A temporary table (DuckDB reads them in parallel), whose creation reports its rows."""
        created = self.execute(conn, f"CREATE TEMP TABLE {self.q(name)} AS {select}", params)
        return self.scratch_ref(name), created.rowcount

    def kept_tables(self, conn: Connection, schema: str, prefix: str) -> dict[str, str | None]:
        tables = _duckdb_tables()
        found = conn.execute(
            sa.select(tables.c.table_name, tables.c.comment).where(
                tables.c.database_name == sa.func.current_database(),
                tables.c.schema_name == schema,
                sa.func.starts_with(tables.c.table_name, prefix),
            )
        )
        return {str(name): comment for name, comment in found}

    def keep_table(self, conn: Connection, ref: str, schema: str, name: str, comment: str) -> None:
        # DDL binds no parameters: the comment is a literal (KeptDimensions writes base64 anyway)
        kept, note = self.q(schema, name), quote_literal(comment)
        self.execute(conn, f"ALTER TABLE {ref} RENAME TO {self.q(name)}; COMMENT ON TABLE {kept} IS {note}")

    def lookup(self, key: str, keys: str, values: str) -> str:
        # list functions rather than a MAP: map_extract_value is newer than DuckDB 1.1, and no faster here
        return f"list_extract(:{values}, list_position(:{keys}, {key}))"

    def text_at(self, code: str, texts: str) -> str:
        return f"list_extract(:{texts}, {code})"

    def _limit_memory(self, memory_limit: str, temp_directory: Path | None) -> None:
        """Every connection sets DuckDB's memory limit (and spill folder), so a large table spills to disk
        instead of taking the machine's memory (DuckDB's own default is 80% of it), and turns off DuckDB's own
        progress bar, which drew itself on stderr over a statement of more than two seconds, through sqlanon's
        bars and into a Python program's output."""
        settings = [f"SET memory_limit = {quote_literal(memory_limit)}", "SET enable_progress_bar = false"]
        if temp_directory is not None:
            temp_directory.mkdir(parents=True, exist_ok=True)
            settings.append(f"SET temp_directory = {quote_literal(str(temp_directory))}")

        @sa.event.listens_for(self.engine, "connect")
        def _set_limits(dbapi_connection: Any, _record: Any) -> None:
            for statement in settings:
                dbapi_connection.execute(statement)

    def approximate_distinct(self, columns: list[str]) -> str | None:
        """HyperLogLog over the columns' hash (hospital 1M, the cube's key: a few milliseconds)."""
        return f"approx_count_distinct(hash({', '.join(columns)}))"

    def name_key(self, name: str) -> str:
        """DuckDB's identifiers ignore case, even quoted ones."""
        return name.lower()

    def _matches(self, column: str, param: str) -> str:
        return f"lower({column}) = lower({param})"

    def table_comment(self, conn: Connection, schema: str | None, table: str) -> str | None:
        tables = _duckdb_tables()
        schema_name = sa.func.coalesce(schema, sa.func.current_schema())
        return conn.execute(
            sa.select(tables.c.comment).where(  # names compared as DuckDB resolves them: ignoring case
                tables.c.database_name == sa.func.current_database(),
                sa.func.lower(tables.c.schema_name) == sa.func.lower(schema_name),
                sa.func.lower(tables.c.table_name) == sa.func.lower(table),
            )
        ).scalar()

    def hmac_sha256_hex(self, value: str, inner_key: str, outer_key: str) -> str:
        inner = f"unhex(sha256(CAST({inner_key} AS BLOB) || encode(CAST({value} AS VARCHAR))))"
        return f"sha256(CAST({outer_key} AS BLOB) || {inner})"

    def hex_integer(self, hex_digits: str) -> str:
        return f"CAST(('0x' || {hex_digits}) AS BIGINT)"

    def lower_median(self, value: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        return sa.func.quantile_disc(value, 0.5)

    def hash_sum(self, values: list[str]) -> str:
        return f"SUM(CAST(hash({', '.join(values)}) AS HUGEINT))"

    def _insert(
        self, conn: Connection, ref: str, names: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        values = [list(column) for column in zip(*rows)]
        if len(rows) <= UNNEST_ROWS:
            # each column one list parameter, unnested: a registration costs more than the rows of a small insert
            # (1 row 1.26 -> 0.63 ms, 100 rows 1.46 -> 1.11 ms; 500 rows 2.2 against 3.1 ms)
            # NaN as NULL, as the registered arrays below read it
            lists = {
                f"c{i}": [None if isinstance(v, float) and math.isnan(v) else v for v in column]
                for i, column in enumerate(values)
            }
            self.execute(
                conn, f"INSERT INTO {ref} ({names}) SELECT {', '.join(f'UNNEST(:{name})' for name in lists)}", lists
            )
            return
        self._insert_registered(conn, ref, names, columns, values)

    def _insert_registered(
        self, conn: Connection, ref: str, names: str, columns: Sequence[str], values: list[list[Any]]
    ) -> None:
        """The columns' `values` as a dict of NumPy arrays, registered as a view: DuckDB scans it as it scans a
        DataFrame (its bulk-insert fast path), without importing pandas (0.3 s of every CLI run)."""
        import numpy

        arrays = {name: numpy.array(column, dtype=object) for name, column in zip(columns, values)}
        raw = driver_connection(conn)
        raw.register("sqlanon_rows", arrays)
        try:
            self.execute(conn, f"INSERT INTO {ref} ({names}) SELECT * FROM sqlanon_rows")
        finally:
            raw.unregister("sqlanon_rows")

    def _load_secret(self, conn: Connection, ref: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Registered arrays, whatever the rows (a small insert binds lists as parameters, which a plan shows)."""
        self._insert_registered(
            conn, ref, ", ".join(self.q(c) for c in columns), columns, [list(column) for column in zip(*rows)]
        )

    def read_frames(self, conn: Connection, source: str, rows: int | None) -> Iterator[pd.DataFrame]:
        """DuckDB's own conversion, column by column (a million hospital rows: 0.3 s; row by row, 2 s)."""
        cursor = driver_connection(conn).execute(str(self.every_row(source).compile(dialect=conn.dialect)))
        if rows is None:
            yield cursor.df()
            return
        vectors = max(1, rows // DUCKDB_VECTOR)  # DuckDB hands rows over in vectors of 2,048
        first = True
        while len(chunk := cursor.fetch_df_chunk(vectors)) or first:
            first = False
            yield chunk

    def load_frame(self, conn: Connection, frame: SourceFrame, ref: str, temporary: bool = False) -> int:
        """The frame scanned in place (registered as a view, as `_insert_registered` registers its arrays);
        categorical columns as text. A column DuckDB cannot convert (mixed types in one object column) is
        named in the error."""
        text = set(frame.categorical_columns())
        columns = [f"CAST({self.q(c)} AS VARCHAR) AS {self.q(c)}" if c in text else self.q(c) for c in frame.frame]
        import duckdb

        raw = driver_connection(conn)
        raw.register("sqlanon_frame", frame.frame)
        try:
            create = "CREATE TEMP TABLE" if temporary else "CREATE TABLE"
            self.execute(conn, f"{create} {ref} AS SELECT {', '.join(columns)} FROM sqlanon_frame")
        except sa.exc.DBAPIError as exc:
            mixed = frame.mixed_columns()
            raise DataError(
                f"DuckDB cannot read the DataFrame: {first_line(exc.orig)}"
                + (f"; column {mixed[0]!r} holds values of several types" if mixed else "")
                + "; give each column one type (e.g. frame[column].astype(str))"
            ) from None
        finally:
            with suppress(sa.exc.DBAPIError, duckdb.Error):  # a failed statement aborted the transaction
                raw.unregister("sqlanon_frame")
        return frame.rows

    def _load_csv(self, conn: Connection, csv: CsvRead, ref: str, temporary: bool) -> None:
        create = "CREATE TEMP TABLE" if temporary else "CREATE TABLE"
        with self._any_row_order(conn):
            csv_errors(lambda: conn.execute(sa.text(f"{create} {ref} AS {csv.sql}"), csv.params), csv.path)

    @contextmanager
    def _any_row_order(self, conn: Connection) -> Iterator[None]:
        """The file's rows stored in the order the parallel reader delivers them, not the file's: in the file's
        order DuckDB writes row groups that the next checkpoint rewrites (5M hospital rows: the load 2.0 s either
        way, then 1.35 s of checkpoint and a 92 MB file, against none and 49 MB). No table has an order in SQL,
        and what sqlanon publishes depends on none, but for relaxed Mondrian's choice among equal values (by row
        number). The setting is the whole database's, so it is put back as it was."""
        before = self.execute(conn, "SELECT current_setting('preserve_insertion_order')").scalar_one()
        self.execute(conn, "SET preserve_insertion_order = false")
        restore = f"SET preserve_insertion_order = {'true' if before else 'false'}"
        try:
            yield
        except BaseException:  # the load failed: its transaction is aborted, another session sets it back
            with self.engine.connect() as other:
                self.execute(other, restore)
            raise
        self.execute(conn, restore)


def duckdb_file(url: str) -> Path | None:
    """The file of a DuckDB URL (None for other databases and in-memory DuckDB). Read as SQLAlchemy reads it: a
    job's URL is written back by SQLAlchemy, which escapes `:memory:` as `%3Amemory%3A`."""
    if not url.startswith("duckdb:///"):
        return None
    database = sa.engine.make_url(url).database
    return None if not database or database == ":memory:" else Path(database)


def progress_file(db_url: str) -> Path | None:
    """The file beside a DuckDB database where its current run writes its progress (None: not a DuckDB file)."""
    database = duckdb_file(db_url)
    return None if database is None else database.with_name(database.name + ".sqlanon-run.json")


def side_file_status(database: str, holder: int | None) -> str:
    """What the progress file beside the DuckDB file `database` says of the run that holds the file, as one
    sentence: '' when there is none, or when the file speaks of another process than `holder` (the lock's, as
    DuckDB names it) or of a run that is not running any more (a stale file of a killed or finished run)."""
    path = progress_file(f"duckdb:///{database}")
    try:
        state = json.loads(path.read_text()) if path else None
    except (OSError, ValueError):
        return ""
    if not isinstance(state, dict) or state.get("status") != "running" or holder is None or state.get("pid") != holder:
        return ""
    figures = (
        f": iteration {state.get('iteration')}, {state.get('nodes_checked')} nodes checked"
        if "nodes_checked" in state
        else ""
    )
    return (
        f"run {state.get('run_id')} (process {state.get('pid')}) is {state.get('status')}{figures}, "
        f"as of {state.get('updated_at')}"
    )


def default_memory_limit() -> str:
    """Half the machine's physical memory: room for the rest of the machine (and for Python beside DuckDB)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # no sysconf: DuckDB's own default stays
        return "80%"
    return f"{max(1, total // 2 // 2**20)}MB"


def _duckdb_tables() -> sa.TableValuedAlias:
    """DuckDB's catalog of tables, as a FROM item with the columns sqlanon reads."""
    return sa.func.duckdb_tables().table_valued("database_name", "schema_name", "table_name", "comment")
