"""A DB-API 2.0 shim over a SparkSession, and a SQLAlchemy dialect on top of it (`spark://`, `sc://`), so that the
rest of sqlanon talks to Spark through the same engine, connection and `text()` statements as to any database;
and the sessions themselves (`session_for`: one per master and process, with sqlanon's settings).

pyspark and a Java runtime are optional dependencies: without them a Spark URL gets a one-line error that says what
to install (`require_spark`).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, default

from ..errors import ConfigError, SqlanonError
from .base import first_line

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
        raise ConfigError(
            "Spark needs a Java runtime (17 or later) and none was found (no java on PATH, no "
            "JAVA_HOME): install one, e.g. apt-get install openjdk-17-jre-headless"
        )


_SESSIONS: dict[str, Any] = {}


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
        settings = {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.extraJavaOptions": java_options,
            "spark.sql.catalogImplementation": "hive",
            "spark.sql.warehouse.dir": str(folder),
            "spark.hadoop.javax.jdo.option.ConnectionURL": (
                f"jdbc:derby:;databaseName={folder / 'metastore_db'};create=true"
            ),
            **spark_settings_from_environment(),
        }
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


# --- DB-API 2.0 over a Spark session --------------------------------------------------------------------------
apilevel, threadsafety, paramstyle = "2.0", 1, "named"


class Error(Exception):
    pass


class Warning(Exception):
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
_MATERIALIZED = re.compile(r"\bAS MATERIALIZED\s*\(")  # SQLAlchemy's CTEs break the line before the parenthesis


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
        self.description: list[tuple[Any, ...]] | None = None
        self.rowcount = -1
        self.arraysize = 1
        self._rows: list[tuple[Any, ...]] = []

    def execute(self, sql: str, params: dict[str, Any] | None = None) -> None:
        frame, rows = run_sql(self.session, sql, params, lambda f: f.collect())
        fields = frame.schema.fields
        self.description = [(f.name, None, None, None, None, None, True) for f in fields] if fields else None
        self._rows = [tuple(row) for row in rows]
        self.rowcount = len(self._rows)

    def executemany(self, sql: str, seq: Sequence[dict[str, Any]]) -> None:
        for params in seq:
            self.execute(sql, params)

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._rows.pop(0) if self._rows else None

    def fetchmany(self, size: int | None = None) -> list[tuple[Any, ...]]:
        size = size or self.arraysize
        taken, self._rows = self._rows[:size], self._rows[size:]
        return taken

    def fetchall(self) -> list[tuple[Any, ...]]:
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

    def create_connect_args(self, url: sa.engine.URL) -> tuple[list[Any], dict[str, Any]]:
        return [spark_master(url)], {"warehouse": url_parameter(url, "warehouse", DEFAULT_WAREHOUSE)}

    def initialize(self, connection: Connection) -> None:
        self.default_schema_name = "default"

    def get_isolation_level(self, dbapi_connection: Any) -> Any:  # always "AUTOCOMMIT"
        return "AUTOCOMMIT"

    def do_ping(self, dbapi_connection: Any) -> bool:
        return True

    def _get_server_version_info(self, connection: Connection) -> tuple[Any, ...]:
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
