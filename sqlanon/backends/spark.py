"""Apache Spark SQL as a database: the same jobs on a distributed engine.

The `Spark` database class holds Spark's own SQL fragments: scratch sets are temporary views over checkpointed
rows, outputs are staged and audited before they are written, catalog look-ups go through the session's catalog,
bulk data arrives as DataFrames. Its SQL reaches Spark through the DB-API shim and dialect of `spark_dbapi`.

A metadata store stands beside it: Spark tables cannot be updated in place, and a run record, a lattice and node
statuses are updated all the time, so sqlanon's own tables live in the DuckDB file or PostgreSQL database the URL
names (`?metadata=...`), committed whenever the Spark connection commits.

URLs: `spark://local[2]` (an embedded local session with two cores), `spark://spark-master:7077` (a standalone
cluster), `sc://host:15002` (Spark Connect).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection
from sqlalchemy.sql.selectable import SelectBase

from ..errors import ConfigError, DataError, SqlanonError
from .base import (
    ColumnKind,
    CsvRead,
    Database,
    driver_connection,
    first_line,
    normalize_url,
    open_database,
    value_set_item,
)
from .spark_dbapi import (
    DEFAULT_WAREHOUSE,
    ProgrammingError,
    require_spark,
    run_sql,
    spark_master,
    url_parameter,
)

#: sqlanon's own tables, when the URL names no `metadata` store: a DuckDB file (in the warehouse, for local mode)
METADATA_FILE = "sqlanon-metadata.duckdb"

#: CSV options (DuckDB's names, see base.CSV_OPTIONS) -> Spark's CSV reader options
CSV_OPTIONS = {
    "delim": "sep",
    "header": "header",
    "quote": "quote",
    "escape": "escape",
    "nullstr": "nullValue",
    "dateformat": "dateFormat",
    "timestampformat": "timestampFormat",
    "encoding": "encoding",
    "all_varchar": "inferSchema",
}  # the opposite of all_varchar, see _csv_options

_PARQUET_VIEWS: set[str] = set()  # the views over source.parquet files made in this process (lower-case names)


class Spark(Database):
    """Spark SQL: scratch sets are temporary views over checkpointed rows; sqlanon's own tables live in a
    metadata store (see the module docstring)."""

    kind = "spark"
    schemes = ("spark", "sc")
    #: the catalog's type names (listColumns' dataType, see Database.type_kinds)
    type_kinds: ClassVar[dict[str, ColumnKind]] = {
        **dict.fromkeys(("tinyint", "smallint", "int", "integer"), ColumnKind.SMALL_INTEGER),
        **dict.fromkeys(("bigint",), ColumnKind.INTEGER),
        **dict.fromkeys(("float", "double"), ColumnKind.FLOAT),
        **dict.fromkeys(("decimal",), ColumnKind.EXACT),
    }
    url_examples = (
        "spark://local[2] (or spark://HOST:7077; ?metadata=duckdb:///meta.duckdb)",
        "sc://HOST:15002 (Spark Connect)",
    )

    @classmethod
    def canonical_url(cls, url: str, parsed: URL, base_dir: Path) -> str:
        """The metadata store's URL and the warehouse folder resolve against base_dir too."""
        query = {}
        if "metadata" in parsed.query:
            query["metadata"] = normalize_url(str(parsed.query["metadata"]), base_dir)
        if "warehouse" in parsed.query:
            query["warehouse"] = str((base_dir / str(parsed.query["warehouse"])).resolve())
        return parsed.update_query_dict(query).render_as_string(hide_password=False)

    name_rule = "Spark compares them, ignoring case"
    temp_schema = ""
    transactions = False

    def __init__(self, engine: sa.engine.Engine, url: str, metadata: Database):
        super().__init__(engine=engine, url=url)
        self.metadata = metadata
        self._scratch: dict[str, Any] = {}  # scratch view (lower-case name) -> its checkpointed DataFrame
        sa.event.listen(self.engine, "commit", _follow("commit"))
        sa.event.listen(self.engine, "rollback", _follow("rollback"))

    @classmethod
    def open(cls, url: str, memory_limit: str | None = None, temp_directory: Path | None = None) -> Spark:
        """Spark at `url`, with the metadata store its `metadata` parameter names (default: a DuckDB file in the
        warehouse folder in local mode, in the current folder otherwise)."""
        parsed = sa.engine.make_url(url)
        require_spark(java=parsed.drivername != "sc")
        local = spark_master(parsed).startswith("local")
        warehouse = url_parameter(parsed, "warehouse", DEFAULT_WAREHOUSE)
        default = f"duckdb:///{Path(warehouse if local else '.').resolve() / METADATA_FILE}"
        metadata_url = url_parameter(parsed, "metadata", default)
        if metadata_url.split(":", 1)[0] in ("spark", "sc"):
            raise ConfigError(
                "the metadata store of a Spark URL must be DuckDB or PostgreSQL "
                "(?metadata=duckdb:///PATH or ?metadata=postgresql+psycopg://...)"
            )
        if local:
            Path(warehouse).mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(parsed.difference_update_query(["metadata"]))
        return cls(engine, url, open_database(metadata_url))

    def value_set(self, column: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        """As Database.value_set; Spark has no ordered STRING_AGG, so its items' set, sorted and joined."""
        return sa.func.array_join(sa.func.array_sort(sa.func.collect_set(value_set_item(column))), "")

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        """A Spark connection paired with a connection of the metadata store (in `conn.info`), committed and
        rolled back with it."""
        with self.metadata.connect() as meta, super().connect() as conn:
            conn.info["metadata"] = meta
            try:
                yield conn
            finally:
                conn.info.pop("metadata", None)

    def metadata_connection(self, conn: Connection) -> Connection:
        metadata: Connection = conn.info["metadata"]
        return metadata

    def dispose(self) -> None:
        super().dispose()
        self.metadata.dispose()

    @staticmethod
    def session(conn: Connection) -> Any:
        return driver_connection(conn).session

    # --- names ------------------------------------------------------------
    def name_key(self, name: str) -> str:
        """Spark resolves names ignoring case (spark.sql.caseSensitive is off by default)."""
        return name.lower()

    def check_name(self, name: str, where: str, *, table: bool = False) -> None:
        """Spark's catalog takes letters, digits and _ only in table and schema names (it says so only when the
        output is created, after the search): refused before any work."""
        if table and not re.fullmatch(r"[A-Za-z0-9_]+", name):
            raise ConfigError(
                f"{where} {name!r} is not a name Spark's catalog takes (letters, digits and _ only); "
                "choose another name"
            )

    def scratch_ref(self, name: str) -> str:
        return self.q(name)  # a temporary view: session-scoped, never qualified

    def create_scratch(
        self, conn: Connection, name: str, select: str | SelectBase, params: dict[str, Any] | None = None
    ) -> str:
        """A temporary view over the rows of `select`, computed now and kept by the executors (a local checkpoint:
        memory, then local disk), as a temporary table is on the other databases. The checkpoint cuts the rows
        off from what they were computed from, so dropping that later leaves this one intact (a cached view
        defined by SQL would be re-resolved, and break). A Core query is compiled in Spark's dialect."""
        if not isinstance(select, str):
            select = str(select.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
        try:
            _, frame = run_sql(self.session(conn), select, params, lambda f: f.localCheckpoint(eager=True))
        except ProgrammingError as exc:  # as SQLAlchemy reports the cursor's errors
            raise sa.exc.ProgrammingError(select, params, exc) from None
        frame.createOrReplaceTempView(name)
        self._scratch[name.lower()] = frame
        return self.scratch_ref(name)

    def run_table(self, schema: str, name: str) -> str:
        """Tables of one run (dimension tables) are cached temporary views of the session."""
        return self.scratch_ref(name)

    @contextmanager
    def staged_output(
        self, conn: Connection, final: str, select: str, params: dict[str, Any], replacing: bool
    ) -> Iterator[str]:
        """Spark has no transactions: the rows are staged in a cached view, which the caller audits, and only
        then written as `final` (Parquet) with CREATE TABLE AS, which shows the table once its files are
        complete. A failed audit writes nothing and leaves an earlier output in place."""
        staging = self.create_scratch(conn, f"staged_{uuid.uuid4().hex[:16]}", select, params)
        try:
            yield staging
            if replacing:
                self.drop_table(conn, final)
            self.execute(conn, f"CREATE TABLE {final} USING parquet AS SELECT * FROM {staging}")
        finally:
            self.drop_table(conn, staging)

    def drop_table(self, conn: Connection, ref: str) -> None:
        """DROP TABLE drops a temporary view too (and its cache); a scratch view's checkpoint is released."""
        self.execute(conn, f"DROP TABLE IF EXISTS {ref}")
        if "." not in ref and (frame := self._scratch.pop(_unquoted(ref).lower(), None)) is not None:
            frame.unpersist()

    # --- catalog ------------------------------------------------------------
    def _table(self, conn: Connection, schema: str | None, table: str) -> Any | None:
        catalog = self.session(conn).catalog
        name = _catalog_name(schema, table)
        return catalog.getTable(name) if catalog.tableExists(name) else None

    def _column_types(self, conn: Connection, schema: str | None, table: str) -> dict[str, str]:
        return {c.name: c.dataType for c in self._columns(conn, schema, table)}

    def _columns(self, conn: Connection, schema: str | None, table: str) -> list[Any]:
        if self._table(conn, schema, table) is None:
            return []
        return list(self.session(conn).catalog.listColumns(_catalog_name(schema, table)))

    def resolved_schema(self, conn: Connection, schema: str | None) -> str:
        return schema if schema is not None else self.session(conn).catalog.currentDatabase()

    def schema_exists(self, conn: Connection, schema: str) -> bool:
        return bool(self.session(conn).catalog.databaseExists(_backquote(schema)))

    def table_comment(self, conn: Connection, schema: str | None, table: str) -> str | None:
        found = self._table(conn, schema, table)
        return None if found is None else found.description

    # --- SQL fragments --------------------------------------------------------
    def hex_integer(self, hex_digits: str) -> str:
        return f"CAST(conv({hex_digits}, 16, 10) AS BIGINT)"

    def hash_sum(self, values: list[str]) -> str:
        return f"SUM(CAST(xxhash64({', '.join(values)}) AS DECIMAL(38, 0)))"

    def held_hmac(self, value: str, store: str, key_name: str) -> str:
        raise ConfigError(
            "a pseudonym key the database holds (key_name) is kept by PostgreSQL or DuckDB; on Spark read the key "
            "from the environment or a file (key_env, key_file)"
        )

    def hmac_sha256_hex(self, value: str, inner_key: str, outer_key: str) -> str:
        text_bytes = f"encode(CAST({value} AS STRING), 'UTF-8')"
        inner = f"unhex(sha2(concat(CAST({inner_key} AS BINARY), {text_bytes}), 256))"
        return f"sha2(concat(CAST({outer_key} AS BINARY), {inner}), 256)"

    # --- bulk data --------------------------------------------------------------
    bytes_type = "BINARY"

    @contextmanager
    def secret_table(
        self, conn: Connection, name: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[Any]]
    ) -> Iterator[str]:
        """A temporary view of rows held by the executors (a local checkpoint), not by the plan: rows from Python
        are a local relation, which the optimizer may fold into the statements that read it, where plans and the
        UI would show them."""
        schema = ", ".join(f"{_backquote(n)} {spark_type(t)}" for n, t in columns)
        frame = self.session(conn).createDataFrame([tuple(r) for r in rows], schema).localCheckpoint(eager=True)
        frame.createOrReplaceTempView(name)
        self._scratch[name.lower()] = frame
        try:
            yield self.scratch_ref(name)
        finally:  # Spark has no transaction to take the view away
            self.drop_table(conn, self.scratch_ref(name))

    def create_table_from_rows(
        self, conn: Connection, ref: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[Any]]
    ) -> None:
        """A temporary view (a run's dimension tables), or a Parquet table when `ref` names a schema. The rows
        live in the driver (a local relation, shipped with each plan), so the view needs no cache: caching the
        four dimension tables of an Adult job cost 2-3 s of statements."""
        schema = ", ".join(f"{_backquote(name)} {spark_type(sql_type)}" for name, sql_type in columns)
        frame = self.session(conn).createDataFrame([tuple(r) for r in rows], schema)
        self._store_frame(conn, ref, frame, cache=False)

    def create_scratch_from_rows(
        self, conn: Connection, name: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[Any]]
    ) -> str:
        """A temporary view of the rows, as the dimension tables are (create_table_from_rows)."""
        ref = self.scratch_ref(name)
        self.create_table_from_rows(conn, ref, columns, rows)
        return ref

    def _insert(
        self, conn: Connection, ref: str, names: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        raise SqlanonError("sqlanon does not insert rows into Spark tables (its own records go to the metadata store)")

    def _store_frame(self, conn: Connection, ref: str, frame: Any, cache: bool = True) -> None:
        """A DataFrame (rows from Python, a file Spark reads) as `ref`: a temporary view of that name, cached
        when `cache` (the view is the frame itself: a view defined on another temporary view would break once
        that one is dropped), or a Parquet table when `ref` names a schema."""
        if "." not in ref:
            frame.createOrReplaceTempView(_unquoted(ref))
            if cache:
                self.execute(conn, f"CACHE TABLE {ref}")
            return
        frame.createOrReplaceTempView("sqlanon_frame")
        try:
            self.execute(conn, f"CREATE TABLE {ref} USING parquet AS SELECT * FROM {self.q('sqlanon_frame')}")
        finally:
            self.execute(conn, f"DROP VIEW IF EXISTS {self.q('sqlanon_frame')}")

    def read_parquet(self, conn: Connection, path: Path, name: str) -> None:
        """The files stay where they are (a path Spark reads: local, HDFS, S3 ...); the view reads them."""
        if self._table(conn, None, name) is not None and name.lower() not in _PARQUET_VIEWS:
            raise DataError(
                f"source.table {name!r} already names a table or view; choose another name for the Parquet source"
            )
        try:
            frame = self.session(conn).read.parquet(str(path))
        except Exception as exc:  # no such path, not Parquet
            raise DataError(f"cannot read Parquet files at {path}: {first_line(exc)}") from None
        frame.createOrReplaceTempView(name)
        _PARQUET_VIEWS.add(name.lower())

    def _load_csv(self, conn: Connection, csv: CsvRead, ref: str, temporary: bool) -> None:
        """Spark reads the file itself (in parallel, on a cluster from shared storage); a source loaded for good
        is a Parquet table, one loaded for a run a cached temporary view."""
        options = {"header": True, "inferSchema": True, **_csv_options(csv.params, csv.sql)}
        reader = self.session(conn).read
        for key, value in options.items():
            reader = reader.option(key, str(value).lower() if isinstance(value, bool) else str(value))
        try:
            frame = reader.csv(str(csv.path))
        except Exception as exc:  # unreadable file, malformed options
            raise DataError(f"cannot read CSV file {csv.path}: {first_line(exc)}") from None
        try:
            self._store_frame(conn, ref, frame)  # `temporary`: a scratch reference, so a temporary view
        except sa.exc.DBAPIError as exc:  # malformed rows are found when Spark reads them
            raise DataError(f"cannot read CSV file {csv.path}: {first_line(exc.orig)}") from None


def _follow(action: str) -> Callable[[Connection], None]:
    """A handler of the Spark connection's commit or rollback that does the same on its metadata connection."""

    def handler(conn: Connection) -> None:
        meta = conn.info.get("metadata")
        if meta is not None and meta.in_transaction():
            getattr(meta, action)()

    return handler


def _csv_options(params: dict[str, Any], read_sql: str) -> dict[str, Any]:
    """The job's CSV options (as `_read_csv_sql` bound them, under DuckDB's names) under Spark's names."""
    found = {}
    for name, option in re.findall(r"(\w+) = :(csv_opt\d+)", read_sql):
        if name not in CSV_OPTIONS:
            raise DataError(
                f"CSV option {name!r} is not available on Spark; Spark reads: {', '.join(sorted(CSV_OPTIONS))}"
            )
        value = params[option]
        found[CSV_OPTIONS[name]] = (not value) if name == "all_varchar" else value
    return found


def spark_type(sql_type: str) -> str:
    """sqlanon's column types (DuckDB's names) in Spark's DDL."""
    return {
        "VARCHAR": "STRING",
        "INTEGER": "INT",
        "BIGINT": "BIGINT",
        "DOUBLE": "DOUBLE",
        "DOUBLE PRECISION": "DOUBLE",
        "BOOLEAN": "BOOLEAN",
    }.get(sql_type.upper(), sql_type)


def _backquote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _catalog_name(schema: str | None, table: str) -> str:
    """A name for the session's catalog calls, which parse it (back-quoted parts)."""
    return _backquote(table) if schema is None else f"{_backquote(schema)}.{_backquote(table)}"


def _unquoted(ref: str) -> str:
    """The name inside a quoted reference made by `Database.q` (one part)."""
    return ref[1:-1].replace('""', '"')
