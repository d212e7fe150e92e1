"""Apache Spark SQL as a database: the same jobs on a distributed engine.

sqlanon sends SQL text to every database, so Spark needs three small pieces:
- a DB-API shim over a SparkSession (`connect`, `SparkConnection`, `SparkCursor`)
  and a SQLAlchemy dialect on top of it, so that the rest of sqlanon talks to
  Spark through the same engine, connection and `text()` statements;
- the `Spark` database class: Spark's own SQL fragments (scratch sets are
  temporary views over checkpointed rows, outputs are staged and audited before
  they are written, catalog look-ups go through the session's catalog, bulk
  data arrives as DataFrames);
- a metadata store beside it: Spark tables cannot be updated in place, and a
  run record, a lattice and node statuses are updated all the time, so
  sqlanon's own tables live in the DuckDB file or PostgreSQL database the URL
  names (`?metadata=...`), committed whenever the Spark connection commits.

URLs: `spark://local[2]` (an embedded local session with two cores),
`spark://spark-master:7077` (a standalone cluster), `sc://host:15002` (Spark
Connect). pyspark and a Java runtime are optional dependencies: without them a
Spark URL gets a one-line error that says what to install.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection, default

from .backends import Database
from .errors import ConfigError, DataError, SqlanonError

#: where a local session keeps its catalog and tables when the URL names no `warehouse`
DEFAULT_WAREHOUSE = "spark-warehouse"
#: sqlanon's own tables, when the URL names no `metadata` store: a DuckDB file (in the warehouse, for local mode)
METADATA_FILE = "sqlanon-metadata.duckdb"

#: settings of every session sqlanon starts (a session it attaches to keeps its own)
SESSION_SETTINGS = {
    # sqlanon's SQL quotes identifiers with double quotes, as the SQL standard does
    "spark.sql.ansi.enabled": "true",
    "spark.sql.ansi.doubleQuotedIdentifiers": "true",
}

#: CSV options (DuckDB's names, see backends.CSV_OPTIONS) -> Spark's CSV reader options
CSV_OPTIONS = {"delim": "sep", "header": "header", "quote": "quote", "escape": "escape", "nullstr": "nullValue",
               "dateformat": "dateFormat", "timestampformat": "timestampFormat", "encoding": "encoding",
               "all_varchar": "inferSchema"}  # the opposite of all_varchar, see _csv_options

_LOG4J = """rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.sql.name = org.apache.spark.sql.catalyst.util.SQLQueryContextLogger
logger.sql.level = off
logger.sqlexec.name = org.apache.spark.sql.execution
logger.sqlexec.level = off
"""


def require_spark(java: bool = True) -> None:
    """Refuse a Spark URL, in one line, when pyspark or (for a session in this process) Java is missing."""
    if importlib.util.find_spec("pyspark") is None:
        raise ConfigError('Spark URLs need pyspark: pip install "sqlanon[spark]"')
    if java and not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        raise ConfigError("Spark needs a Java runtime (17 or later) and none was found (no java on PATH, no "
                          "JAVA_HOME): install one, e.g. apt-get install openjdk-17-jre-headless")


_SESSIONS: dict[str, Any] = {}
_PARQUET_VIEWS: set[str] = set()  # the views over source.parquet files made in this process (lower-case names)


def session_for(master: str, warehouse: str = DEFAULT_WAREHOUSE) -> Any:
    """The process's Spark session for `master` (local[N], spark://host:port, or sc://host:port for Spark
    Connect), started once and shared: a JVM per process, as Spark wants.

    A local session keeps its catalog in `warehouse` (a Hive metastore in Derby beside the tables' Parquet
    files), so the tables one command writes are there for the next; a cluster uses its own catalog."""
    if master in _SESSIONS:
        return _SESSIONS[master]
    require_spark(java=not master.startswith("sc://"))  # a Spark Connect client runs no JVM
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("sqlanon")
    if master.startswith("sc://"):
        builder = builder.remote(master)
    else:
        folder = Path(warehouse).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        log4j = folder / "sqlanon-log4j2.properties"
        log4j.write_text(_LOG4J)
        java_options = f"-Dlog4j2.configurationFile=file:{log4j} -Dderby.stream.error.file={folder / 'derby.log'}"
        settings = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                    "spark.driver.extraJavaOptions": java_options,
                    "spark.sql.catalogImplementation": "hive", "spark.sql.warehouse.dir": str(folder),
                    "spark.hadoop.javax.jdo.option.ConnectionURL":
                        f"jdbc:derby:;databaseName={folder / 'metastore_db'};create=true",
                    **spark_settings_from_environment()}
        builder = builder.master(master)
        for key, value in settings.items():
            builder = builder.config(key, value)
    for key, value in SESSION_SETTINGS.items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except Exception as exc:  # JVM that does not start, unreachable cluster
        raise SqlanonError(f"cannot start a Spark session for {master}: {first_line(exc)}") from None
    for key, value in SESSION_SETTINGS.items():  # a session that existed before keeps its settings otherwise
        session.conf.set(key, value)
    _SESSIONS[master] = session
    return session


def spark_settings_from_environment() -> dict[str, str]:
    """SQLANON_SPARK_CONF="key=value,key=value": settings for sessions sqlanon starts (tests use it for 2 shuffle
    partitions and 1 GB of driver memory)."""
    pairs = [p.split("=", 1) for p in os.environ.get("SQLANON_SPARK_CONF", "").split(",") if "=" in p]
    return {k.strip(): v.strip() for k, v in pairs}


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# --- DB-API 2.0 over a Spark session --------------------------------------------------------------------------
apilevel, threadsafety, paramstyle = "2.0", 1, "named"


class Error(Exception):
    pass


class Warning(Exception):  # noqa: A001 (DB-API name)
    pass


class InterfaceError(Error):
    pass


class DatabaseError(Error):
    pass


class OperationalError(DatabaseError):
    pass


class IntegrityError(DatabaseError):
    pass


class InternalError(DatabaseError):
    pass


class ProgrammingError(DatabaseError):
    pass


class NotSupportedError(DatabaseError):
    pass


#: sqlanon's SQL says VARCHAR for text and DOUBLE PRECISION for floats (the standard's names, which DuckDB and
#: PostgreSQL read); Spark's names are STRING (unbounded text) and DOUBLE
_VARCHAR = re.compile(r"\bVARCHAR\b(?!\s*\()")
_DOUBLE = re.compile(r"\bDOUBLE PRECISION\b")
#: Spark's planner takes no hint to materialize a common table expression
_MATERIALIZED = re.compile(r"\bAS MATERIALIZED \(")


def spark_sql(sql: str) -> str:
    """A statement of sqlanon's SQL as Spark SQL reads it."""
    return _MATERIALIZED.sub("AS (", _DOUBLE.sub("DOUBLE", _VARCHAR.sub("STRING", sql)))


def run_sql(session: Any, sql: str, params: dict[str, Any] | None, action: Callable[[Any], Any]) -> tuple[Any, Any]:
    """The DataFrame of a statement of sqlanon's SQL and what `action` makes of it (rows, a checkpoint), Spark's
    errors (analysis, parsing, Py4J) raised as the DB-API's ProgrammingError with their first line."""
    try:
        frame = session.sql(spark_sql(sql), args=dict(params) if params else None)
        return frame, action(frame)
    except Exception as exc:
        raise ProgrammingError(first_line(exc)) from None


class SparkCursor:
    def __init__(self, session: Any):
        self.session = session
        self.description: list[tuple] | None = None
        self.rowcount = -1
        self.arraysize = 1
        self._rows: list[tuple] = []

    def execute(self, sql: str, params: dict[str, Any] | None = None) -> None:
        frame, rows = run_sql(self.session, sql, params, lambda f: f.collect())
        fields = frame.schema.fields
        self.description = [(f.name, None, None, None, None, None, True) for f in fields] if fields else None
        self._rows = [tuple(row) for row in rows]
        self.rowcount = len(self._rows)

    def executemany(self, sql: str, seq: Sequence[dict[str, Any]]) -> None:
        for params in seq:
            self.execute(sql, params)

    def fetchone(self) -> tuple | None:
        return self._rows.pop(0) if self._rows else None

    def fetchmany(self, size: int | None = None) -> list[tuple]:
        size = size or self.arraysize
        taken, self._rows = self._rows[:size], self._rows[size:]
        return taken

    def fetchall(self) -> list[tuple]:
        taken, self._rows = self._rows, []
        return taken

    def close(self) -> None:
        self._rows = []

    def setinputsizes(self, *args: Any) -> None:
        pass

    def setoutputsize(self, *args: Any) -> None:
        pass


class SparkConnection:
    """A DB-API connection: Spark has no transactions, so commit and rollback do nothing here (the metadata
    store's connection follows them, see Spark.connect)."""

    def __init__(self, session: Any):
        self.session = session

    def cursor(self) -> SparkCursor:
        return SparkCursor(self.session)

    def commit(self) -> None:
        pass

    def rollback(self) -> None:
        pass

    def close(self) -> None:
        pass  # the session is the process's, shared by every connection


def url_parameter(url: sa.engine.URL, name: str, default: str) -> str:
    """A query parameter of a Spark URL (the last one, when it is given twice)."""
    value = url.query.get(name, default)
    return str(value[-1] if isinstance(value, tuple) else value)


def connect(master: str, warehouse: str = DEFAULT_WAREHOUSE) -> SparkConnection:
    return SparkConnection(session_for(master, warehouse))


class SparkDialect(default.DefaultDialect):
    """SQLAlchemy's view of Spark: named parameters (Spark binds them itself), no transactions, no reflection."""

    name = "spark"
    driver = "pyspark"
    paramstyle = "named"
    supports_statement_cache = True
    supports_native_boolean = True
    supports_sane_rowcount = False
    postfetch_lastrowid = False

    @classmethod
    def import_dbapi(cls) -> Any:
        import sys
        return sys.modules[__name__]

    def create_connect_args(self, url: sa.engine.URL) -> tuple[list, dict]:
        return [spark_master(url)], {"warehouse": url_parameter(url, "warehouse", DEFAULT_WAREHOUSE)}

    def initialize(self, connection: Connection) -> None:
        self.default_schema_name = "default"

    def get_isolation_level(self, dbapi_connection: Any) -> str:
        return "AUTOCOMMIT"

    def do_ping(self, dbapi_connection: Any) -> bool:
        return True

    def _get_server_version_info(self, connection: Connection) -> tuple:
        return ()


def spark_master(url: sa.engine.URL) -> str:
    """The master a URL names: spark://local[2] -> local[2]; spark://host:7077 -> spark://host:7077;
    sc://host:15002 -> sc://host:15002 (Spark Connect)."""
    host = url.host or url.database or "local[*]"
    address = f"{host}:{url.port}" if url.port else host
    if url.drivername == "sc":
        return f"sc://{address}"
    return address if host.startswith("local") else f"spark://{address}"


sa.dialects.registry.register("spark", __name__, "SparkDialect")
sa.dialects.registry.register("sc", __name__, "SparkDialect")


# --- the database class ---------------------------------------------------------------------------------------
class Spark(Database):
    """Spark SQL: scratch sets are temporary views over checkpointed rows; sqlanon's own tables live in a
    metadata store (see the module docstring)."""

    kind = "spark"
    name_rule = "Spark compares them, ignoring case"
    temp_schema = ""
    transactions = False
    materialized_ctes = False

    def __init__(self, engine: sa.engine.Engine, url: str, metadata: Database):
        super().__init__(engine, url)
        self.metadata = metadata
        self._scratch: dict[str, Any] = {}  # scratch view (lower-case name) -> its checkpointed DataFrame
        sa.event.listen(self.engine, "commit", _follow("commit"))
        sa.event.listen(self.engine, "rollback", _follow("rollback"))

    @classmethod
    def open(cls, url: str) -> "Spark":
        """Spark at `url`, with the metadata store its `metadata` parameter names (default: a DuckDB file in the
        warehouse folder in local mode, in the current folder otherwise)."""
        parsed = sa.engine.make_url(url)
        require_spark(java=parsed.drivername != "sc")
        from .backends import open_database
        local = spark_master(parsed).startswith("local")
        warehouse = url_parameter(parsed, "warehouse", DEFAULT_WAREHOUSE)
        default = f"duckdb:///{Path(warehouse if local else '.').resolve() / METADATA_FILE}"
        metadata_url = url_parameter(parsed, "metadata", default)
        if metadata_url.split(":", 1)[0] in ("spark", "sc"):
            raise ConfigError("the metadata store of a Spark URL must be DuckDB or PostgreSQL "
                              "(?metadata=duckdb:///PATH or ?metadata=postgresql+psycopg://...)")
        if local:
            Path(warehouse).mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(parsed.difference_update_query(["metadata"]))
        return cls(engine, url, open_database(metadata_url))

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
        return conn.info["metadata"]

    def dispose(self) -> None:
        super().dispose()
        self.metadata.dispose()

    @staticmethod
    def session(conn: Connection) -> Any:
        return conn.connection.dbapi_connection.session

    # --- names ------------------------------------------------------------
    def name_key(self, name: str) -> str:
        """Spark resolves names ignoring case (spark.sql.caseSensitive is off by default)."""
        return name.lower()

    def scratch_ref(self, name: str) -> str:
        return self.q(name)  # a temporary view: session-scoped, never qualified

    def create_scratch(self, conn: Connection, name: str, select: str, params: dict[str, Any] | None = None) -> str:
        """A temporary view over the rows of `select`, computed now and kept by the executors (a local checkpoint:
        memory, then local disk), as a temporary table is on the other databases. The checkpoint cuts the rows
        off from what they were computed from, so dropping that later leaves this one intact (a cached view
        defined by SQL would be re-resolved, and break)."""
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
    def staged_output(self, conn: Connection, final: str, select: str, params: dict[str, Any],
                      replacing: bool) -> Iterator[str]:
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
    def hash_sum(self, values: list[str]) -> str:
        return f"SUM(CAST(xxhash64({', '.join(values)}) AS DECIMAL(38, 0)))"

    def hmac_sha256_hex(self, value: str, inner_key: str, outer_key: str) -> str:
        text_bytes = f"encode(CAST({value} AS STRING), 'UTF-8')"
        inner = f"unhex(sha2(concat(CAST({inner_key} AS BINARY), {text_bytes}), 256))"
        return f"sha2(concat(CAST({outer_key} AS BINARY), {inner}), 256)"

    # --- bulk data --------------------------------------------------------------
    bytes_type = "BINARY"

    @contextmanager
    def secret_table(self, conn: Connection, name: str, columns: Sequence[tuple[str, str]],
                     rows: Sequence[Sequence[Any]]) -> Iterator[str]:
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

    def create_table_from_rows(self, conn: Connection, ref: str, columns: Sequence[tuple[str, str]],
                               rows: Sequence[Sequence[Any]]) -> None:
        """A temporary view (a run's dimension tables), or a Parquet table when `ref` names a schema. The rows
        live in the driver (a local relation, shipped with each plan), so the view needs no cache: caching the
        four dimension tables of an Adult job cost 2-3 s of statements."""
        schema = ", ".join(f"{_backquote(name)} {spark_type(sql_type)}" for name, sql_type in columns)
        frame = self.session(conn).createDataFrame([tuple(r) for r in rows], schema)
        self._store_frame(conn, ref, frame, cache=False)

    def _insert(self, conn: Connection, ref: str, names: str, columns: Sequence[str],
                rows: Sequence[Sequence[Any]]) -> None:
        raise SqlanonError("sqlanon does not insert rows into Spark tables (its own records go to the metadata "
                           "store)")

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
            raise DataError(f"source.table {name!r} already names a table or view; choose another name for the "
                            "Parquet source")
        try:
            frame = self.session(conn).read.parquet(str(path))
        except Exception as exc:  # no such path, not Parquet
            raise DataError(f"cannot read Parquet files at {path}: {first_line(exc)}") from None
        frame.createOrReplaceTempView(name)
        _PARQUET_VIEWS.add(name.lower())

    def _load_csv(self, conn: Connection, read_sql: str, params: dict, path: Path, ref: str, temporary: bool) -> None:
        """Spark reads the file itself (in parallel, on a cluster from shared storage); a source loaded for good
        is a Parquet table, one loaded for a run a cached temporary view."""
        options = {"header": True, "inferSchema": True, **_csv_options(params, read_sql)}
        reader = self.session(conn).read
        for key, value in options.items():
            reader = reader.option(key, str(value).lower() if isinstance(value, bool) else str(value))
        try:
            frame = reader.csv(str(path))
        except Exception as exc:  # unreadable file, malformed options
            raise DataError(f"cannot read CSV file {path}: {first_line(exc)}") from None
        try:
            self._store_frame(conn, ref, frame)  # `temporary`: a scratch reference, so a temporary view
        except sa.exc.DBAPIError as exc:  # malformed rows are found when Spark reads them
            raise DataError(f"cannot read CSV file {path}: {first_line(exc.orig)}") from None


def _follow(action: str):
    """A handler of the Spark connection's commit or rollback that does the same on its metadata connection."""
    def handler(conn: Connection) -> None:
        meta = conn.info.get("metadata")
        if meta is not None and meta.in_transaction():
            getattr(meta, action)()
    return handler


def _csv_options(params: dict, read_sql: str) -> dict[str, Any]:
    """The job's CSV options (as `_read_csv_sql` bound them, under DuckDB's names) under Spark's names."""
    found = {}
    for name, option in re.findall(r"(\w+) = :(csv_opt\d+)", read_sql):
        if name not in CSV_OPTIONS:
            raise DataError(f"CSV option {name!r} is not available on Spark; Spark reads: "
                            f"{', '.join(sorted(CSV_OPTIONS))}")
        value = params[option]
        found[CSV_OPTIONS[name]] = (not value) if name == "all_varchar" else value
    return found


def spark_type(sql_type: str) -> str:
    """sqlanon's column types (DuckDB's names) in Spark's DDL."""
    return {"VARCHAR": "STRING", "INTEGER": "INT", "BIGINT": "BIGINT", "DOUBLE": "DOUBLE",
            "BOOLEAN": "BOOLEAN"}.get(sql_type.upper(), sql_type)


def _backquote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _catalog_name(schema: str | None, table: str) -> str:
    """A name for the session's catalog calls, which parse it (back-quoted parts)."""
    return _backquote(table) if schema is None else f"{_backquote(schema)}.{_backquote(table)}"


def _unquoted(ref: str) -> str:
    """The name inside a quoted reference made by `Database.q` (one part)."""
    return ref[1:-1].replace('""', '"')
