"""Database access: engines, identifier quoting, and every difference between databases.

Everything sqlanon sends to a database goes through a `Database`: identifiers
are always quoted, values are always bound parameters. There is one subclass
per kind of database (`DuckDB`, `PostgreSQL`), made by `open_database(url)`;
what a kind can do is told by its capability flags (roles, concurrent
sessions, stored routines, ...) and how it says a thing in SQL by its own
fragment methods (scratch tables, medians, HMAC, catalog look-ups, bulk
loads). The rest of sqlanon asks these, never which database it is talking to.
"""
from __future__ import annotations

import json
import math
import os
import re
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .errors import ConfigError, DataError, SqlanonError

#: PostgreSQL truncates longer identifiers (NAMEDATALEN - 1), so two long names could be one table
PG_MAX_NAME_BYTES = 63
UNNEST_ROWS = 200  # DuckDB: up to this many rows, an insert binds one list per column (see DuckDBDatabase._insert)

#: read_csv options a job may pass through (name in the config -> DuckDB name)
CSV_OPTIONS = {"delimiter": "delim", "delim": "delim", "sep": "delim", "header": "header", "quote": "quote",
               "escape": "escape", "all_varchar": "all_varchar", "types": "types", "dateformat": "dateformat",
               "timestampformat": "timestampformat", "nullstr": "nullstr", "skip": "skip",
               "sample_size": "sample_size", "encoding": "encoding", "decimal_separator": "decimal_separator"}

#: DuckDB column types -> PostgreSQL types when a CSV is loaded into PostgreSQL
PG_TYPES = {"VARCHAR": "text", "BIGINT": "bigint", "INTEGER": "integer", "SMALLINT": "smallint",
            "DOUBLE": "double precision", "FLOAT": "real", "DATE": "date", "TIMESTAMP": "timestamp",
            "BOOLEAN": "boolean", "TIME": "time", "HUGEINT": "numeric"}


def open_database(url: str, memory_limit: str | None = None, temp_directory: Path | None = None) -> "Database":
    """The database at `url`, as the subclass for its kind. `memory_limit` (a size checked by
    config.check_memory_limit; default: half the machine's memory) and `temp_directory` (where it spills beyond
    it) apply where the database has `memory_settings`; PostgreSQL's memory is the server's."""
    if url.split(":", 1)[0] in ("spark", "sc"):
        from .spark import Spark  # pyspark is optional
        return Spark.open(url)
    try:
        engine = sa.create_engine(url)
    except Exception as exc:  # unknown driver, malformed URL
        raise SqlanonError(f"cannot use database URL {url!r}: {exc}") from None
    kinds = {kind.kind: kind for kind in (DuckDB, PostgreSQL)}
    if engine.dialect.name not in kinds:
        engine.dispose()
        raise SqlanonError(f"database {engine.dialect.name!r} is not supported; use DuckDB, PostgreSQL or Spark")
    return kinds[engine.dialect.name](engine, url, memory_limit, temp_directory)


class Database:
    """A database reached through one SQLAlchemy engine: what every kind shares."""

    kind = ""
    #: roles, GRANT and SET ROLE exist (output.grant_to, jobs that run with their registrant's rights)
    roles = False
    #: several sessions may work at once: advisory locks, and a run's liveness told by its session
    concurrent_sessions = False
    #: routines installed in the server (PL/Python: CALL sqlanon.run_job)
    stored_routines = False
    #: sqlanon sets the database's memory limit and spill folder (DuckDB runs inside this process)
    memory_settings = False
    #: roll-ups look parent codes up in per-run arrays (faster than joins where the planner does poorly)
    parent_code_arrays = False
    #: how names are compared, for messages
    name_rule = "the database does"
    #: the schema of the session's temporary tables
    temp_schema = "temp"
    #: DDL inside transactions: several tables written (and audited) as one, or none
    transactions = True
    #: WITH x AS MATERIALIZED computes x once however often the statement reads it (Spark inlines every
    #: reference instead, so a set read several times is stored first)
    materialized_ctes = True
    #: how a wave's frequency sets are named in its statement (see WaveChecker._wave)
    wave_cte = "AS MATERIALIZED"
    #: a roll-up's nodes grouped by GROUPING SETS over one read of it, instead of a join with their masks (see
    #: WaveChecker._grouping_sets). DuckDB builds a hash table per set: Adult at 2% suppression 0.45 -> 1.17 s
    grouping_sets = False
    #: a row's code in a small dimension comes from `lookup` instead of a join, on small tables (see
    #: StarSchema.coded); PostgreSQL's array lookups were slower than its hash joins (Adult's cube 57 ms against
    #: 48 ms), Spark binds no lists
    value_lookups = False
    #: a list binds as one parameter (an array), which UNNEST reads as rows (Spark binds no lists)
    binds_lists = False
    #: an integer column's codes come from a bound array indexed by its value (`index_lookup`), not a join with
    #: its dimension, whatever the rows (see StarSchema.coded). A million rows coded through 90 ages: DuckDB 57 ->
    #: 37 ms, PostgreSQL 680-960 -> 440-510 ms; Spark binds no lists
    index_lookups = False
    #: a wave's class sizes joined with its counts, not added up in a window (see FrequencySetView.sized_counts)
    class_sizes_by_join = True
    #: the type of a column of bytes (pseudonym pads)
    bytes_type = "BLOB"

    def __init__(self, engine: sa.engine.Engine, url: str, memory_limit: str | None = None,
                 temp_directory: Path | None = None):
        self.engine, self.url = engine, url
        #: where sqlanon's own tables live (runs, lattices, registries): the database itself, or a store beside it
        #: for an engine that cannot update tables in place (Spark)
        self.metadata: Database = self
        #: the caller's work schema by store schema, once asked (see store.Store.work_schema): the role is the
        #: engine's, the same for every connection
        self.work_schemas: dict[str, str] = {}

    def metadata_connection(self, conn: Connection) -> Connection:
        """The connection to `metadata` that goes with `conn` (the same one, or one committed with it)."""
        return conn

    def require_transactions(self, what: str) -> None:
        """Refuse, in one line, work that writes several tables as one transaction where there are none."""
        if not self.transactions:
            raise ConfigError(f"{what} is not available on {self.kind}: it writes its tables in one transaction, "
                              f"and {self.kind} has none; run it on DuckDB or PostgreSQL")

    def run_table(self, schema: str, name: str) -> str:
        """Reference to a table of one run (dimension tables) named `name` in the metadata schema."""
        return self.q(schema, name)

    # --- names ----------------------------------------------------------
    def q(self, *parts: str | None) -> str:
        """Quote a (possibly schema-qualified) name for a `text()` statement; None parts are skipped.

        Every statement goes through `text()`, which escapes `%` for the driver
        itself; a colon is escaped so that it is not read as a bind parameter.
        (The dialect's own quoting doubles `%` for pyformat drivers, which is
        right only for raw driver calls.)
        """
        return ".".join(quote_name(p).replace(":", "\\:") for p in parts if p is not None)

    @staticmethod
    def for_driver(sql: str) -> str:
        """A statement built with `q()` names, for a call that bypasses `text()` (COPY, a regclass literal)."""
        return sql.replace("\\:", ":")

    def name_key(self, name: str) -> str:
        """A name as the database compares it."""
        return name

    def same_name(self, a: str | None, b: str | None) -> bool:
        return a is not None and b is not None and self.name_key(a) == self.name_key(b)

    def check_name(self, name: str, where: str) -> None:
        """Refuse a name the database would change (none here; see PostgreSQL's)."""

    def execute(self, conn: Connection, sql: str, params: dict[str, Any] | None = None) -> Any:
        """Run one statement built with `q()` names (values always as bound parameters)."""
        return conn.execute(sa.text(sql), params or {})

    def scratch_ref(self, name: str) -> str:
        """Reference to a session-scoped scratch table (frequency sets)."""
        return f"{self.temp_schema}.{self.q(name)}"

    def create_scratch(self, conn: Connection, name: str, select: str, params: dict[str, Any] | None = None) -> str:
        """A session-scoped scratch table `name` made from `select`; returns its reference."""
        self.execute(conn, f"CREATE TEMP TABLE {self.q(name)} AS {select}", params)
        return self.scratch_ref(name)

    def create_run_scratch(self, conn: Connection, schema: str, name: str, select: str,
                           params: dict[str, Any] | None = None) -> tuple[str, int | None]:
        """A scratch table of one run that many statements read (the search's cube), made from `select`; returns
        its reference and its rows where the database reports them (None: count them). Here a session-scoped
        one; a database may keep it in the metadata schema `schema` instead, so `name` carries the run's number
        (metadata._run_of_table finds the tables a killed run left)."""
        return self.create_scratch(conn, name, select, params), None

    def analyze(self, conn: Connection, ref: str) -> None:
        """Fresh planner statistics for a table sqlanon just filled, where the planner needs them."""

    def approximate_distinct(self, columns: list[str]) -> str | None:
        """An aggregate estimating the distinct combinations of `columns` in one cheap pass, where the database
        has one (None: it has none)."""
        return None

    def plan_source_joins(self, conn: Connection, schema: str | None, table: str) -> None:
        """Make joins of the source with the dimension tables plan well on this connection, whatever the
        source's planner statistics (nothing to do where the planner does not depend on them)."""

    @contextmanager
    def parallel_plans(self, conn: Connection) -> Iterator[None]:
        """Within: a statement that reads the whole source and writes a result about as large (the search's
        cube) is planned to run on several cores where the database would not choose it by itself."""
        yield

    @contextmanager
    def large_sorts(self, conn: Connection) -> Iterator[None]:
        """Within: statements sort and group about a million rows each (Mondrian's rounds) and get the memory
        for it where the database's default would send them to disk."""
        yield

    # --- connections ----------------------------------------------------
    @contextmanager
    def connect(self) -> Iterator[Connection]:
        try:
            conn = self.engine.connect()
        except sa.exc.OperationalError as exc:
            first = str(exc.orig).strip().splitlines()[0]
            raise SqlanonError(f"cannot connect to {self.engine.url.render_as_string(hide_password=True)}: "
                               f"{first}{connect_hint(first)}") from None
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
    def _matches(self, column: str, param: str) -> str:
        """A catalog column equal to a bound name, compared as the database resolves names."""
        return f"{column} = {param}"

    def _column_types(self, conn: Connection, schema: str | None, table: str) -> dict[str, str]:
        """The table's columns, in order, each with its type as the catalog names it."""
        return dict(conn.execute(sa.text(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_catalog = current_database() "
            f"AND {self._matches('table_schema', 'COALESCE(:s, current_schema())')} "
            f"AND {self._matches('table_name', ':t')} ORDER BY ordinal_position"),
            {"s": schema, "t": table}).all())

    def resolved_schema(self, conn: Connection, schema: str | None) -> str:
        """The schema a name without one lands in (the current schema), or the given one."""
        return schema if schema is not None else conn.execute(sa.text("SELECT current_schema()")).scalar_one()

    def schema_exists(self, conn: Connection, schema: str) -> bool:
        return bool(conn.execute(sa.text(
            "SELECT COUNT(*) FROM information_schema.schemata WHERE catalog_name = current_database() AND "
            f"{self._matches('schema_name', ':s')}"), {"s": schema}).scalar_one())

    def may_create_in(self, conn: Connection, schema: str) -> bool:
        """Whether the current role may create tables in `schema` (always, where there are no roles)."""
        return True

    def role_exists(self, conn: Connection, role: str) -> bool:
        return bool(conn.execute(sa.text("SELECT COUNT(*) FROM pg_roles WHERE rolname = :r"), {"r": role}).scalar_one())

    def table_comment(self, conn: Connection, schema: str | None, table: str) -> str | None:
        raise NotImplementedError

    def set_table_comment(self, conn: Connection, ref: str, comment: str) -> None:
        """COMMENT ON TABLE takes a literal, not a parameter: the comment is sqlanon's own text, quoted here."""
        literal = "'" + comment.replace("'", "''") + "'"
        self.execute(conn, f"COMMENT ON TABLE {ref} IS {literal}")

    def table_exists(self, conn: Connection, schema: str | None, table: str) -> bool:
        return bool(self._column_types(conn, schema, table))

    def columns(self, conn: Connection, schema: str | None, table: str) -> list[str]:
        return list(self.column_types(conn, schema, table))

    def column_types(self, conn: Connection, schema: str | None, table: str) -> dict[str, str]:
        """The table's columns and their types (an error naming the fix when there is no such table)."""
        types = self._column_types(conn, schema, table)
        if not types:
            where = qualified_name(schema, table)
            self._check_readable(conn, schema, table, where)
            raise DataError(f"table {where!r} not found in {self.engine.url.render_as_string(hide_password=True)}; "
                            "check source.table (and source.schema), or load it with source.csv")
        return types

    def _check_readable(self, conn: Connection, schema: str | None, table: str, where: str) -> None:
        """Where the catalog lists only what a role may use: tell an unreadable table from a missing one."""

    def in_memory_array(self, column: str) -> str:
        """An integer-array column read by a scalar subquery that is indexed once per row."""
        return column

    def lookup(self, key: str, keys: str, values: str) -> str:
        """SQL for the integer paired with `key` (text) in two bound lists, the parameters named `keys` (text)
        and `values` (integers), where `value_lookups` says that beats a join with a small table."""
        raise NotImplementedError

    def index_lookup(self, value: str, first: int, codes: str) -> str:
        """SQL for the entry of the bound integer array `codes` at integer `value`, its first entry being the
        value `first`, where `index_lookups` says the database has them (1-based arrays on both)."""
        return f"(CAST(:{codes} AS BIGINT[]))[CAST({value} AS BIGINT) + ({1 - int(first)})]"

    def hmac_sha256_hex(self, value: str, inner_key: str, outer_key: str) -> str:
        """SQL for HMAC-SHA256 of `value` as text, in hex, from the two padded keys (bound parameters)."""
        raise NotImplementedError

    def lower_median(self, value: str) -> str:
        """The aggregate giving the ceil(n/2)-th smallest of `value` in a group (the lower median): the SQL
        standard's ordered-set aggregate, which PostgreSQL and Spark have."""
        return f"percentile_disc(0.5) WITHIN GROUP (ORDER BY {value})"

    def hash_sum(self, values: list[str]) -> str:
        """An aggregate summing a 64-bit hash of each row's `values` exactly (no overflow): two multisets of rows
        with equal counts and sums are, but for a hash collision, the same."""
        raise NotImplementedError

    def not_a_number(self, column: str) -> str:
        """A condition true where `column` (quoted) holds something that is not a finite number (NaN and the
        infinities included: no cut, range or width of Mondrian's is defined for them)."""
        return f"COALESCE(NOT isfinite(TRY_CAST(CAST({column} AS VARCHAR) AS DOUBLE)), TRUE)"

    @contextmanager
    def staged_output(self, conn: Connection, final: str, select: str, params: dict[str, Any],
                      replacing: bool) -> Iterator[str]:
        """The output table `final` made from `select`; yields what to audit. Here DDL is transactional: `final`
        itself is written (replacing sqlanon's earlier output), and the caller's transaction keeps both or
        neither."""
        if replacing:
            self.drop_table(conn, final)
        self.execute(conn, f"CREATE TABLE {final} AS {select}", params)
        yield final

    def drop_table(self, conn: Connection, ref: str) -> None:
        """Drop one of sqlanon's own tables (its dimension and scratch tables; outputs it wrote)."""
        self.execute(conn, f"DROP TABLE IF EXISTS {ref}")

    # --- bulk data ------------------------------------------------------
    def create_table_from_rows(self, conn: Connection, ref: str, columns: Sequence[tuple[str, str]],
                               rows: Sequence[Sequence[Any]]) -> None:
        """Create `ref` with (name, type) columns and fill it with rows (small metadata, e.g. hierarchies)."""
        cols = ", ".join(f"{self.q(name)} {sql_type}" for name, sql_type in columns)
        self.execute(conn, f"CREATE TABLE {ref} ({cols})")
        self.insert_rows(conn, ref, [name for name, _ in columns], rows)

    def insert_rows(self, conn: Connection, ref: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Bulk insert of small metadata rows, the database's fast way (executemany is slow on DuckDB)."""
        if rows:
            self._insert(conn, ref, ", ".join(self.q(c) for c in columns), columns, rows)

    def _insert(self, conn: Connection, ref: str, names: str, columns: Sequence[str],
                rows: Sequence[Sequence[Any]]) -> None:
        raise NotImplementedError

    @contextmanager
    def secret_table(self, conn: Connection, name: str, columns: Sequence[tuple[str, str]],
                     rows: Sequence[Sequence[Any]]) -> Iterator[str]:
        """A session-scoped table `name` of (name, type) `columns` holding `rows`, loaded so that no value is part of
        a statement's text or parameters (no statement log, query log or plan holds them: pseudonym keys); yields
        its reference. Dropped at the end; on an error, with the caller's transaction."""
        self.execute(conn, f"CREATE TEMP TABLE {self.q(name)} ({', '.join(f'{self.q(n)} {t}' for n, t in columns)})")
        ref = self.scratch_ref(name)
        self._load_secret(conn, ref, [n for n, _ in columns], rows)
        yield ref  # an error rolls the caller's transaction back, the table with it (and a drop would fail there)
        self.drop_table(conn, ref)

    def _load_secret(self, conn: Connection, ref: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        raise NotImplementedError

    def load_csv(self, conn: Connection, path: Path, options: dict[str, Any], ref: str, temporary: bool = False) -> int:
        """Create table `ref` from a CSV file, in the caller's transaction; returns the row count.
        `temporary`: `ref` is a scratch_ref (a temporary table of the session).

        DuckDB reads the file (type detection, options) for every database, so
        every database sees the same columns and types. Nothing is dropped here:
        the caller decides (in the same transaction) whether an existing table
        may be replaced.
        """
        if not path.is_file():
            raise DataError(f"CSV file not found: {path}")
        read_sql, params = _read_csv_sql(path, options)
        self._load_csv(conn, read_sql, params, path, ref, temporary)
        return self.execute(conn, f"SELECT COUNT(*) FROM {ref}").scalar_one()

    def _load_csv(self, conn: Connection, read_sql: str, params: dict, path: Path, ref: str, temporary: bool) -> None:
        raise NotImplementedError

    def read_parquet(self, conn: Connection, path: Path, name: str) -> None:
        """Parquet files read in place as the temporary view `name` (source.parquet)."""
        raise ConfigError(f"source.parquet reads files in place on Spark; on {self.kind} load the data into a "
                          "table first (e.g. with DuckDB's read_parquet) and name it in source.table")


TEXT_PARAMETER = re.compile(r"(?<![:\w\\]):(\w+)(?!:)")  # a bound parameter in text(), as SQLAlchemy finds them


class DuckDB(Database):
    """DuckDB, embedded in this process: one process per file, names compared ignoring case."""

    kind = "duckdb"
    memory_settings = True
    value_lookups = True
    binds_lists = True
    index_lookups = True
    name_rule = "DuckDB compares them, ignoring case"

    def __init__(self, engine: sa.engine.Engine, url: str, memory_limit: str | None = None,
                 temp_directory: Path | None = None):
        super().__init__(engine, url)
        self._limit_memory(memory_limit or default_memory_limit(), temp_directory)

    def execute(self, conn: Connection, sql: str, params: dict[str, Any] | None = None) -> Any:
        """As `text()` would run it, without its compilation: `:name` as DuckDB's own `$name` (the same pattern
        as SQLAlchemy's; DuckDB refuses parameters a statement does not name). Compiling a wave of hierarchical
        t-closeness took 0.9 ms, its statement 10 ms; a small search runs a dozen statements."""
        named: list[str] = []

        def to_driver(match: re.Match) -> str:
            named.append(match[1])
            return "$" + match[1]
        driver_sql = self.for_driver(TEXT_PARAMETER.sub(to_driver, sql))
        return conn.exec_driver_sql(driver_sql, {n: params[n] for n in named} if named else None)

    def create_run_scratch(self, conn: Connection, schema: str, name: str, select: str,
                           params: dict[str, Any] | None = None) -> tuple[str, int | None]:
        """A temporary table (DuckDB reads them in parallel), whose creation reports its rows."""
        created = self.execute(conn, f"CREATE TEMP TABLE {self.q(name)} AS {select}", params)
        return self.scratch_ref(name), created.rowcount

    def lookup(self, key: str, keys: str, values: str) -> str:
        # list functions rather than a MAP: map_extract_value is newer than DuckDB 1.1, and no faster here
        return f"list_extract(:{values}, list_position(:{keys}, {key}))"

    def _limit_memory(self, memory_limit: str, temp_directory: Path | None) -> None:
        """Every connection sets DuckDB's memory limit (and spill folder), so a large table spills to disk
        instead of taking the machine's memory (DuckDB's own default is 80% of it)."""
        settings = [f"SET memory_limit = {quote_literal(memory_limit)}"]
        if temp_directory is not None:
            temp_directory.mkdir(parents=True, exist_ok=True)
            settings.append(f"SET temp_directory = {quote_literal(str(temp_directory))}")

        @sa.event.listens_for(self.engine, "connect")
        def _set_limits(dbapi_connection, _record) -> None:
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
        return conn.execute(sa.text(
            "SELECT comment FROM duckdb_tables() WHERE database_name = current_database() AND "
            f"{self._matches('schema_name', 'COALESCE(:s, current_schema())')} AND "
            f"{self._matches('table_name', ':t')}"),
            {"s": schema, "t": table}).scalar()

    def hmac_sha256_hex(self, value: str, inner_key: str, outer_key: str) -> str:
        inner = f"unhex(sha256(CAST({inner_key} AS BLOB) || encode(CAST({value} AS VARCHAR))))"
        return f"sha256(CAST({outer_key} AS BLOB) || {inner})"

    def lower_median(self, value: str) -> str:
        return f"quantile_disc({value}, 0.5)"

    def hash_sum(self, values: list[str]) -> str:
        return f"SUM(CAST(hash({', '.join(values)}) AS HUGEINT))"

    def _insert(self, conn: Connection, ref: str, names: str, columns: Sequence[str],
                rows: Sequence[Sequence[Any]]) -> None:
        values = [list(column) for column in zip(*rows)]
        if len(rows) <= UNNEST_ROWS:
            # each column one list parameter, unnested: a registration costs more than the rows of a small insert
            # (1 row 1.26 -> 0.63 ms, 100 rows 1.46 -> 1.11 ms; 500 rows 2.2 against 3.1 ms)
            # NaN as NULL, as the registered arrays below read it
            lists = {f"c{i}": [None if isinstance(v, float) and math.isnan(v) else v for v in column]
                     for i, column in enumerate(values)}
            self.execute(conn, f"INSERT INTO {ref} ({names}) SELECT "
                               f"{', '.join(f'UNNEST(:{name})' for name in lists)}", lists)
            return
        self._insert_registered(conn, ref, names, columns, values)

    def _insert_registered(self, conn: Connection, ref: str, names: str, columns: Sequence[str],
                           values: list[list[Any]]) -> None:
        """The columns' `values` as a dict of NumPy arrays, registered as a view: DuckDB scans it as it scans a
        DataFrame (its bulk-insert fast path), without importing pandas (0.3 s of every CLI run)."""
        import numpy

        arrays = {name: numpy.array(column, dtype=object) for name, column in zip(columns, values)}
        raw = conn.connection.dbapi_connection
        raw.register("sqlanon_rows", arrays)
        try:
            self.execute(conn, f"INSERT INTO {ref} ({names}) SELECT * FROM sqlanon_rows")
        finally:
            raw.unregister("sqlanon_rows")

    def _load_secret(self, conn: Connection, ref: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Registered arrays, whatever the rows (a small insert binds lists as parameters, which a plan shows)."""
        self._insert_registered(conn, ref, ", ".join(self.q(c) for c in columns), columns,
                                [list(column) for column in zip(*rows)])

    def _load_csv(self, conn: Connection, read_sql: str, params: dict, path: Path, ref: str, temporary: bool) -> None:
        create = "CREATE TEMP TABLE" if temporary else "CREATE TABLE"
        with self._any_row_order(conn):
            _csv_errors(lambda: conn.execute(sa.text(f"{create} {ref} AS {read_sql}"), params), path)

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


class PostgreSQL(Database):
    """A PostgreSQL server: roles, concurrent sessions, PL/Python, names cut to 63 bytes."""

    kind = "postgresql"
    roles = True
    concurrent_sessions = True
    stored_routines = True
    parent_code_arrays = True  # see StarSchema.parent_code
    bytes_type = "BYTEA"
    #: PostgreSQL's own rule: a wave read once (k-anonymity, l-diversity, t-closeness with its class sizes from a
    #: window) is inlined, so its classes are not written to a tuplestore first; one read several times is
    #: materialized. And GROUPING SETS hash each row of a roll-up into every node's table in one pass instead of
    #: hashing its join with the masks.
    #: Adult, 9 QIs, k=5, 2% suppression: 3.85 s; inlined 3.52 s; grouping sets 3.20 s; both 2.88 s (10%: 9.41
    #: -> 6.86 s; 8 QIs, distinct l=3 at 2%: 3.97 -> 3.06 s); hospital 1M, k=5: 2.13 -> 1.96 s
    wave_cte = "AS"
    grouping_sets = True
    class_sizes_by_join = False
    binds_lists = True
    index_lookups = True
    temp_schema = "pg_temp"

    def __init__(self, engine: sa.engine.Engine, url: str, memory_limit: str | None = None,
                 temp_directory: Path | None = None):
        super().__init__(engine, url)

        @sa.event.listens_for(self.engine, "connect")
        def _without_jit(dbapi_connection, _record) -> None:
            """sqlanon's sessions do not compile queries to machine code. Its statements are estimated costly
            (a wave's join with its nodes) but run in milliseconds on small sets, and compiling took longer than
            running: Adult's default search 0.70 s with JIT, 0.20 s without; hospital 1M the same either way.
            Only sessions sqlanon opens; where the server has no JIT setting, nothing is changed."""
            with dbapi_connection.cursor() as cursor:
                cursor.execute("SELECT set_config('jit', 'off', false) WHERE current_setting('jit', true) IS NOT NULL")
            dbapi_connection.commit()  # a session setting made in a transaction lasts only if it is committed

    def check_name(self, name: str, where: str) -> None:
        """PostgreSQL truncates names longer than 63 bytes, so two long names could be one table."""
        size = len(name.encode())
        if size > PG_MAX_NAME_BYTES:
            raise ConfigError(f"{where} {name[:20]!r}... is {size} bytes long; PostgreSQL cuts names to "
                              f"{PG_MAX_NAME_BYTES} bytes, so it could name another table: use a shorter name")

    def analyze(self, conn: Connection, ref: str) -> None:
        """Temporary and new tables have no statistics until ANALYZE (autovacuum never sees temporary ones):
        without them the planner guessed a 1M-row join of the dimension tables as 1.2 billion rows, sorted
        for merge joins and compiled JIT code (2.2 s; 1.4 s with statistics)."""
        self.execute(conn, f"ANALYZE {ref}")

    #: the planner's default costs price passing a million rows from parallel workers above running the join
    #: and the grouping in one process, so the cube (hospital 1M: five joins and a GROUP BY) ran serially in
    #: 1.42 s; with these, in parallel in 0.83 s (the plain GROUP BY of the table already runs in parallel)
    PARALLEL_COSTS = {"parallel_setup_cost": "10", "parallel_tuple_cost": "0.001"}

    #: Mondrian's statements sort, hash and group a million rows each; with work_mem 64MB instead of the default
    #: 4MB, 1M hospital rows took 45.5 s instead of 48.3 s (the rounds' figures 12.3 -> 9.9 s, the publication
    #: 3.9 -> 2.8 s). A sort of a million rows still spills (in memory it needs 86MB); 256MB gained nothing more
    #: (42.7 s against 43.1 s)
    SORT_MEMORY = 64 * 1024 * 1024

    @contextmanager
    def parallel_plans(self, conn: Connection) -> Iterator[None]:
        with self._settings(conn, self.PARALLEL_COSTS):
            yield

    def create_run_scratch(self, conn: Connection, schema: str, name: str, select: str,
                           params: dict[str, Any] | None = None) -> tuple[str, int | None]:
        """An UNLOGGED table of the metadata schema: PostgreSQL never reads a temporary table in parallel, so a
        wave's branches (a cluster of nodes each) ran on one core; from a table, on every core (Parallel Append).
        Adult 9 QIs k=5 with 2% suppression 4.7-5.5 -> 3.2-3.8 s, 10% 12.1-12.6 -> 7.1-7.8 s, hospital 1M 3.29-3.37
        -> 3.15-3.20 s; small searches unchanged. A run's progress commits make it visible before the run ends:
        a killed run's table is dropped by the next cleanup, as its dimension tables are."""
        ref = self.run_table(schema, name)
        created = self.execute(conn, f"CREATE UNLOGGED TABLE {ref} AS {select}", params)
        return ref, created.rowcount

    @contextmanager
    def large_sorts(self, conn: Connection) -> Iterator[None]:
        """work_mem raised to SORT_MEMORY, never lowered (a server or role set higher keeps its own)."""
        low = conn.execute(sa.text("SELECT pg_size_bytes(current_setting('work_mem')) < :m"),
                           {"m": self.SORT_MEMORY}).scalar_one()
        with self._settings(conn, {"work_mem": f"{self.SORT_MEMORY // 1024}kB"} if low else {}):
            yield

    @contextmanager
    def _settings(self, conn: Connection, values: dict[str, str]) -> Iterator[None]:
        """`values` set for this transaction only (a failed statement's rollback restores them), then put back:
        a session's own settings (a job run inside the server runs in its caller's session) stay as they were."""
        saved = {n: conn.execute(sa.text("SELECT current_setting(:n)"), {"n": n}).scalar_one() for n in values}
        for name, value in values.items():
            conn.execute(sa.text("SELECT set_config(:n, :v, true)"), {"n": name, "v": value})
        yield
        for name, value in saved.items():
            conn.execute(sa.text("SELECT set_config(:n, :v, true)"), {"n": name, "v": value})

    def plan_source_joins(self, conn: Connection, schema: str | None, table: str) -> None:
        """A table never analyzed (freshly loaded, autovacuum off or not yet run) has no statistics, and the
        planner then takes each join with a small dimension table for a 1/200 filter: it estimated one row after
        four of them and joined the fifth by a nested loop, 1M x 1,205 comparisons (hospital cube: 26.6 s
        instead of about 1 s). sqlanon does not analyze a table it did not create: it says so, and plans this
        connection's joins without nested loops (hospital search: 38 s -> 15.6 s; 11.6 s with statistics,
        where nested loops stay allowed because the waves' small VALUES joins want them)."""
        unanalyzed = conn.execute(sa.text(
            "SELECT c.relkind IN ('r', 'p', 'm') AND NOT EXISTS (SELECT 1 FROM pg_stats s WHERE s.schemaname = "
            "n.nspname AND s.tablename = c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.oid = to_regclass(:t)"), {"t": self.for_driver(self.q(schema, table))}).scalar()
        if not unanalyzed:  # analyzed, or a view (planned with its tables' statistics)
            return
        warnings.warn(f"table {self.q(schema, table)} has no planner statistics (it was never analyzed), so "
                      "PostgreSQL would guess its joins badly; sqlanon plans them without nested loops. "
                      f"ANALYZE {self.q(schema, table)} first for the fastest plans", UserWarning, stacklevel=2)
        self.execute(conn, "SET enable_nestloop = off")  # this session only (the engine is the run's own)

    def schema_exists(self, conn: Connection, schema: str) -> bool:
        """pg_namespace: information_schema hides schemas the role has no privilege on."""
        return bool(conn.execute(sa.text("SELECT COUNT(*) FROM pg_namespace WHERE nspname = :s"),
                                 {"s": schema}).scalar_one())

    def may_create_in(self, conn: Connection, schema: str) -> bool:
        return bool(conn.execute(sa.text("SELECT has_schema_privilege(:s, 'CREATE')"), {"s": schema}).scalar_one())

    def table_comment(self, conn: Connection, schema: str | None, table: str) -> str | None:
        return conn.execute(sa.text("SELECT obj_description(to_regclass(:t), 'pg_class')"),
                            {"t": self.for_driver(self.q(schema, table))}).scalar()

    def _check_readable(self, conn: Connection, schema: str | None, table: str, where: str) -> None:
        """PostgreSQL lists only the columns a role may use: tell an unreadable table from a missing one."""
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
        """PostgreSQL stores a large array out of line (TOAST) and would fetch it again for every subscript
        (40 s instead of 1 s for a 1M-row roll-up); concatenating an empty array makes the subquery's value an
        in-memory copy."""
        return f"{column} || CAST(ARRAY[] AS INTEGER[])"

    def hmac_sha256_hex(self, value: str, inner_key: str, outer_key: str) -> str:
        text_bytes = f"convert_to(CAST({value} AS TEXT), 'UTF8')"
        inner = f"sha256(CAST({inner_key} AS BYTEA) || {text_bytes})"
        return f"encode(sha256(CAST({outer_key} AS BYTEA) || {inner}), 'hex')"

    def hash_sum(self, values: list[str]) -> str:
        """The row's text (a row of the same types prints the same) hashed to 64 bits; SUM of BIGINT is NUMERIC."""
        return f"SUM(hashtextextended(CAST(ROW({', '.join(values)}) AS TEXT), 0))"

    def not_a_number(self, column: str) -> str:
        # no TRY_CAST before PostgreSQL 16's pg_input_is_valid
        return f"CAST({column} AS TEXT) !~ '^\\s*[-+]?([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][-+]?[0-9]+)?\\s*$'"

    def _insert(self, conn: Connection, ref: str, names: str, columns: Sequence[str],
                rows: Sequence[Sequence[Any]]) -> None:
        with conn.connection.dbapi_connection.cursor() as cur:  # the driver's own call: no text() escapes
            with cur.copy(self.for_driver(f"COPY {ref} ({names}) FROM STDIN")) as copy:
                for row in rows:
                    copy.write_row(row)

    def _load_secret(self, conn: Connection, ref: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """COPY FROM STDIN: the server logs the COPY statement, never the rows it receives."""
        self._insert(conn, ref, ", ".join(self.q(c) for c in columns), columns, rows)

    def _load_csv(self, conn: Connection, read_sql: str, params: dict, path: Path, ref: str, temporary: bool) -> None:
        """COPY from a normalized copy of the file that DuckDB writes (DuckDB reads it, as on DuckDB)."""
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
                self.execute(conn, f"CREATE TABLE {ref} ({cols})")  # pg_temp.name when `temporary`
                with conn.connection.dbapi_connection.cursor() as cur, open(normalized, "rb") as fh:
                    with cur.copy(self.for_driver(f"COPY {ref} FROM STDIN (FORMAT csv, HEADER true)")) as copy:
                        while chunk := fh.read(1 << 20):
                            copy.write(chunk)
                self.analyze(conn, ref)  # sqlanon made this table: the planner gets its statistics now
        finally:
            reader.close()

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
    if not isinstance(state, dict) or state.get("status") != "running" or holder is None \
            or state.get("pid") != holder:
        return ""
    figures = (f": iteration {state.get('iteration')}, {state.get('nodes_checked')} nodes checked"
               if "nodes_checked" in state else "")
    return (f"run {state.get('run_id')} (process {state.get('pid')}) is {state.get('status')}{figures}, "
            f"as of {state.get('updated_at')}")


def connect_hint(message: str) -> str:
    """DuckDB lets one process open a file at a time: say so, and what the running job's progress file says.
    A file in a folder that does not exist: say which folder to create."""
    missing = re.search(r'Cannot open file "([^"]+)": No such file or directory', message)
    if missing and not Path(missing.group(1)).parent.is_dir():
        return f"; the folder {Path(missing.group(1)).parent} does not exist: create it, or choose a file in another"
    locked = re.search(r'Could not set lock on file "([^"]+)"', message)
    if not locked:
        return ""
    holder = re.search(r"\(PID (\d+)\)", message)
    status = side_file_status(locked.group(1), int(holder.group(1)) if holder else None)
    return ("; another process has this DuckDB file open (DuckDB allows one process per file, even to read): "
            "wait for it to finish" + (f". Its progress: {status}" if status else ""))


def default_memory_limit() -> str:
    """Half the machine's physical memory: room for the rest of the machine (and for Python beside DuckDB)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # no sysconf: DuckDB's own default stays
        return "80%"
    return f"{max(1, total // 2 // 2**20)}MB"


def quote_literal(text: str) -> str:
    """A single-quoted SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def quote_name(name: str) -> str:
    """A double-quoted SQL identifier (the same rule on DuckDB and PostgreSQL)."""
    return '"' + name.replace('"', '""') + '"'


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
