"""What every kind of database shares: the `Database` class, identifier quoting, and reading CSV files with
DuckDB's reader (which every kind loads files through)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.sql import Executable, quoted_name
from sqlalchemy.sql.ddl import CreateTableAs
from sqlalchemy.sql.dml import UpdateBase
from sqlalchemy.sql.selectable import SelectBase

from ..errors import ConfigError, DataError, SqlanonError

if TYPE_CHECKING:
    import pandas as pd

    from ..model.frames import SourceFrame

#: read_csv options a job may pass through (name in the config -> DuckDB name)
CSV_OPTIONS = {
    "delimiter": "delim",
    "delim": "delim",
    "sep": "delim",
    "header": "header",
    "quote": "quote",
    "escape": "escape",
    "all_varchar": "all_varchar",
    "types": "types",
    "dateformat": "dateformat",
    "timestampformat": "timestampformat",
    "nullstr": "nullstr",
    "skip": "skip",
    "sample_size": "sample_size",
    "encoding": "encoding",
    "decimal_separator": "decimal_separator",
}


_T = TypeVar("_T")
#: what to check when the job's source table is not found (each other kind of table names its own setting)
SOURCE_FIX = "check source.table (and source.schema), or load it with source.csv"


class ColumnKind(Enum):
    """What sqlanon needs to know of a column's type, whatever the database calls it (`Database.column_kind`)."""

    SMALL_INTEGER = "small integer"  # whole numbers a 4-byte signed integer holds
    INTEGER = "integer"  # whole numbers up to 8 bytes
    FLOAT = "float"  # floating point: -0.0 and 0.0 are one value written as two texts
    EXACT = "exact"  # other numbers: decimals, wider integers
    OTHER = "other"  # text, dates, ...

    @property
    def integer(self) -> bool:
        return self in (ColumnKind.SMALL_INTEGER, ColumnKind.INTEGER)

    @property
    def numeric(self) -> bool:
        return self is not ColumnKind.OTHER


@dataclass(frozen=True)
class StoreSpelling:
    """The fragments in which the store's operations (`store.ops`) differ between databases, by placeholder.

    A database with roles and concurrent sessions says who the caller is, whether a role is the caller's, and which
    session a run works in (so a run whose session died can be told from a live one); a database one process owns
    at a time answers as its only user, every run still marked running being dead when another process opens it.
    """

    caller: str  # {caller}: the role that owns what an operation writes
    mine: str  # {mine:EXPR}: whether the role in {role} is the caller or one of its roles ({s}: the store's schema)
    session_pid: str  # {session_pid}: this session's process, recorded with a run
    session_start: str  # {session_start}: when that process started (a process id is reused)
    session_gone: str  # {session_gone:ALIAS}: whether the session of the run {run} (a row of runs) has ended
    #: {carries_token:ALIAS}: whether the table an owned_tables row {o} records still carries its token in its
    #: comment (checked by the store's routines; None where operations are not routines)
    carries_token: str | None = None
    temp: str = "temp"  # {temp}: the schema of the session's temporary tables


#: a database without roles or concurrent sessions (DuckDB, Spark)
SOLE_USER = StoreSpelling(
    caller="CAST(NULL AS VARCHAR)",
    mine="TRUE",
    session_pid="CAST(NULL AS INTEGER)",
    session_start="CAST(NULL AS VARCHAR)",
    session_gone="TRUE",
)


class Database:
    """A database reached through one SQLAlchemy engine: what every kind shares."""

    #: every kind of database by the URL schemes it answers to (filled by the subclasses as they are defined)
    kinds: ClassVar[dict[str, type[Database]]] = {}
    #: the schemes of this kind's URLs (the part before ':', without a '+driver')
    schemes: ClassVar[tuple[str, ...]] = ()
    #: how error messages show this kind's URLs
    url_examples: ClassVar[tuple[str, ...]] = ()
    kind = ""
    #: the catalog's type names (lower case, without their size) by what sqlanon needs to know of them; any other
    #: type is ColumnKind.OTHER
    type_kinds: ClassVar[dict[str, ColumnKind]] = {}
    #: roles, GRANT and SET ROLE exist (output.grant_to, jobs that run with their registrant's rights)
    roles = False
    #: several sessions may work at once: advisory locks, and a run's liveness told by its session
    concurrent_sessions = False
    #: routines installed in the server (PL/Python: CALL sqlanon.run_job)
    stored_routines = False
    #: sqlanon sets the database's memory limit and spill folder (DuckDB runs inside this process)
    memory_settings = False
    #: how names are compared, for messages
    name_rule = "the database does"
    #: the schema of the session's temporary tables
    temp_schema = "temp"
    #: DDL inside transactions: several tables written (and audited) as one, or none
    transactions = True
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
    #: dimension tables are kept across runs (engine.star.KeptDimensions, `kept_tables`, `keep_table`): DuckDB,
    #: one user per file; on PostgreSQL one role would read another's hierarchies
    keeps_dimensions = False
    #: the type of a column of bytes (pseudonym pads)
    bytes_type = "BLOB"
    #: how the store's operations say what databases spell differently (see store.ops.render)
    store_spelling: ClassVar[StoreSpelling] = SOLE_USER

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for scheme in cls.schemes:
            Database.kinds[scheme] = cls

    @classmethod
    def canonical_url(cls, url: str, parsed: URL, base_dir: Path) -> str:
        """The URL as sqlanon keeps it (a driver chosen, relative paths resolved against `base_dir`)."""
        return url

    @classmethod
    def open(cls, url: str, memory_limit: str | None = None, temp_directory: Path | None = None) -> Database:
        """This kind of database at `url`, through an engine of SQLAlchemy's."""
        try:
            engine = sa.create_engine(url)
        except Exception as exc:  # unknown driver, malformed URL
            raise SqlanonError(f"cannot use database URL {url!r}: {exc}") from None
        return cls(engine=engine, url=url, memory_limit=memory_limit, temp_directory=temp_directory)

    @staticmethod
    def hint(message: str) -> str:
        """What to add to a connection error of this kind of database (a fix, a cause), or ''."""
        return ""

    def __init__(
        self, *, engine: sa.engine.Engine, url: str, memory_limit: str | None = None, temp_directory: Path | None = None
    ):
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
            raise ConfigError(
                f"{what} is not available on {self.kind}: it writes its tables in one transaction, "
                f"and {self.kind} has none; run it on DuckDB or PostgreSQL"
            )

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

    def check_name(self, name: str, where: str, *, table: bool = False) -> None:
        """Refuse a name (of a table or schema, with `table`) that the database would change or could not take
        (none here; see PostgreSQL's and Spark's)."""

    def execute(self, conn: Connection, sql: str | Executable, params: dict[str, Any] | None = None) -> Any:
        """Run one statement: text built with `q()` names, or a SQLAlchemy Core statement (values always as bound
        parameters)."""
        return conn.execute(sa.text(sql) if isinstance(sql, str) else sql, params or {})

    def count_rows(self, conn: Connection, source: str) -> int:
        """The rows of `source`: a table, a parenthesized subquery with its alias, or a FROM clause with joins."""
        return int(self.execute(conn, sa.select(sa.func.count()).select_from(sa.text(source))).scalar_one())

    def first_rows(self, conn: Connection, source: str, limit: int, order: str | None = None) -> list[dict[str, Any]]:
        """The first `limit` rows of table `source` (by `order`, a column list, where given), as dicts."""
        query = self.every_row(source).limit(sa.literal_column(str(int(limit))))  # a number, not a bound value
        if order:
            query = query.order_by(sa.text(order))
        return [dict(row) for row in self.execute(conn, self.as_text(conn, query)).mappings()]

    def every_row(self, source: str) -> sa.Select[Any]:
        """SELECT * FROM table `source` (a `q()` reference), as Core; run it as text (`as_text`): the reference is
        written as it is, and only text() escapes a `%` or `:` a name may hold."""
        return sa.select(sa.text("*")).select_from(self.ref_table(source, []))

    def read_frames(self, conn: Connection, source: str, rows: int | None) -> Iterator[pd.DataFrame]:
        """Table `source` as pandas DataFrames of `rows` rows each (None: one frame of every row), streamed where
        the driver streams (a server-side cursor on PostgreSQL); an empty table gives one empty frame."""
        import pandas as pd

        every_row = sa.text(self.as_text(conn, self.every_row(source)))
        result = conn.execution_options(stream_results=True).execute(every_row)
        columns = list(result.keys())
        parts = result.partitions(rows) if rows else iter([result.all()])
        yielded = False
        for part in parts:
            yielded = True
            yield pd.DataFrame.from_records([tuple(row) for row in part], columns=columns)
        if not yielded:
            yield pd.DataFrame(columns=columns)

    def column_names(self, conn: Connection, source: str) -> list[str]:
        """The columns of table `source` as a query sees them, in order."""
        return list(self.execute(conn, self.as_text(conn, self.every_row(source).where(sa.false()))).keys())

    def grant_select(self, conn: Connection, ref: str, role: str) -> None:
        """Let `role` read table `ref` (where the database has roles)."""
        self.execute(conn, f"GRANT SELECT ON {ref} TO {self.q(role)}")

    def keyed_hmac(self, value: str, keys: str, k: int) -> str:
        """SQL for HMAC-SHA256 of `value` keyed by row `k` of the table `keys` (k, inner_pad, outer_pad)."""
        return self._hmac_of_row(value, keys, f"k = {int(k)}")

    def held_hmac(self, value: str, store: str, key_name: str) -> str:
        """SQL for HMAC-SHA256 of `value` with the key `key_name` the store `store` holds (store.keys): here its
        pads read where the statement runs (a database without roles: whoever runs it may read the file). The
        name is a plain name (config.check_key_name), written as a literal."""
        return self._hmac_of_row(value, f"{self.q(store)}.pseudonym_keys", f"name = {quote_literal(key_name)}")

    def _hmac_of_row(self, value: str, table: str, row: str) -> str:
        """HMAC-SHA256 of `value` with the pads of the row of `table` where `row` holds."""
        inner, outer = (f"(SELECT {pad} FROM {table} WHERE {row})" for pad in ("inner_pad", "outer_pad"))
        return self.hmac_sha256_hex(value, inner, outer)

    def scratch_ref(self, name: str) -> str:
        """Reference to a session-scoped scratch table (frequency sets)."""
        return f"{self.temp_schema}.{self.q(name)}"

    def create_scratch(
        self, conn: Connection, name: str, select: str | SelectBase, params: dict[str, Any] | None = None
    ) -> str:
        """A session-scoped scratch table `name` made from `select` (text, or a SQLAlchemy Core query); returns its
        reference."""
        if isinstance(select, str):
            self.execute(conn, f"CREATE TEMP TABLE {self.q(name)} AS {select}", params)
        else:
            self.execute(conn, CreateTableAs(select, name, temporary=True), params)
        return self.scratch_ref(name)

    def as_text(self, conn: Connection, query: SelectBase | UpdateBase) -> str:
        """A Core query (or DELETE) as text for `execute` and `create_scratch`, its values written in (sqlanon's own
        numbers and names, never a user's text): the dialect's doubled `%` undone and `:` escaped, as `text()`
        expects."""
        compiled = str(query.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
        if conn.dialect.paramstyle in ("format", "pyformat"):
            compiled = compiled.replace("%%", "%")
        return compiled.replace(":", "\\:")

    def ref_table(self, ref: str, columns: Sequence[str]) -> sa.TableClause:
        """A table named by a `q()` reference (a source, a staged output) as a Core table of `columns`: the
        reference written as it is."""
        return sa.table(quoted_name(self.for_driver(ref), quote=False), *(sa.column(c) for c in columns))

    def scratch_table(self, name: str, columns: Sequence[str]) -> sa.TableClause:
        """The session-scoped scratch table `name` with `columns`, for statements built with SQLAlchemy Core."""
        return sa.table(name, *(sa.column(c) for c in columns), schema=self.temp_schema or None)

    def create_scratch_from_rows(
        self, conn: Connection, name: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[Any]]
    ) -> str:
        """A session-scoped scratch table `name` of (name, type) `columns` holding `rows` (a lookup computed in
        Python from the hierarchies); returns its reference."""
        self._create_table(conn, self.q(name), columns, temporary=True)
        ref = self.scratch_ref(name)
        self.insert_rows(conn, ref, [n for n, _ in columns], rows)
        return ref

    def create_run_scratch(
        self, conn: Connection, schema: str, name: str, select: str, params: dict[str, Any] | None = None
    ) -> tuple[str, int | None]:
        """A scratch table of one run that many statements read (the search's cube), made from `select`; returns
        its reference and its rows where the database reports them (None: count them). Here a session-scoped
        one; a database may keep it in the metadata schema `schema` instead, so `name` carries the run's number
        (model.names.run_of_table finds the tables a killed run left)."""
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
    def hash_joins(self, conn: Connection) -> Iterator[None]:
        """Within: joins are planned without nested loops, for statements that join intermediate results (common
        table expressions, fresh scratch tables) on many columns, whose sizes the planner cannot know and may take
        for a row or two (nothing to do where the planner does not nest loops on such guesses)."""
        yield

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
            raise SqlanonError(
                f"cannot connect to {self.engine.url.render_as_string(hide_password=True)}: {first}{self.hint(first)}"
            ) from None
        with conn:
            yield conn

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        with self.connect() as conn, conn.begin():
            yield conn

    def dispose(self) -> None:
        self.engine.dispose()

    @property
    def in_memory(self) -> bool:
        """Whether the database lives in this process and this object (a DuckDB in memory), not at its URL."""
        return False

    # --- catalog --------------------------------------------------------
    # information_schema works alike on both databases (SQLAlchemy reflection does not on DuckDB)
    def _matches(self, column: str, param: str) -> str:
        """A catalog column equal to a bound name, compared as the database resolves names."""
        return f"{column} = {param}"

    def _column_types(self, conn: Connection, schema: str | None, table: str) -> dict[str, str]:
        """The table's columns, in order, each with its type as the catalog names it."""
        return dict(
            conn.execute(
                sa.text(
                    "SELECT column_name, data_type FROM information_schema.columns WHERE table_catalog = "
                    "current_database() "
                    f"AND {self._matches('table_schema', 'COALESCE(:s, current_schema())')} "
                    f"AND {self._matches('table_name', ':t')} ORDER BY ordinal_position"
                ),
                {"s": schema, "t": table},
            ).all()
        )

    # --- roles, sessions and the store's catalog (hooks: a database without roles answers as its only user) ----
    def session_role(self, conn: Connection) -> str | None:
        """The role the session logged in as (None where there are no roles)."""
        return None

    def current_role(self, conn: Connection) -> str | None:
        """The role the session acts as now (None where there are no roles)."""
        return None

    def is_superuser(self, conn: Connection) -> bool:
        """Whether the session may do anything (where there are no roles, whoever opens the database may)."""
        return True

    def try_session_lock(self, conn: Connection, space: str, name: str) -> bool:
        """Take a lock on (space, name) held by this session until released or the session ends; False when
        another session holds it. Where one process owns the database (DuckDB), there is no other session."""
        return True

    def release_session_lock(self, conn: Connection, space: str, name: str) -> None:
        """Release what `try_session_lock` took."""

    def schema_access(self, conn: Connection, schema: str, routine: str) -> tuple[str | None, bool, bool, bool]:
        """(the session's role, whether `schema` exists, whether the role may use it, whether the routine `routine`
        (a signature such as "s.installation()") exists), in one statement: for stores installed as routines."""
        return None, self.schema_exists(conn, schema), True, False

    def member_of_schema_owner(self, conn: Connection, schema: str) -> bool:
        """Whether the session's role is (a member of) the role that owns `schema`."""
        return True

    def routine_names(self, conn: Connection, schema: str) -> set[str]:
        """The functions and procedures of `schema` (none where the database has no stored routines)."""
        return set()

    def routine_call(
        self, schema: str, name: str, args: Sequence[tuple[str, str, str]], rows: bool, procedure: bool = False
    ) -> str:
        """A SELECT (a CALL: `procedure`) of the stored routine schema.name, its arguments named, each (argument,
        bound parameter, type) cast to its declared type; `rows`: a set-returning function's rows (stored routines
        only)."""
        raise NotImplementedError

    def work_schema_of_caller(self, conn: Connection, schema: str) -> tuple[str | None, str | None, str | None]:
        """(the work schema the store `schema` gives the session's role, that schema's owner, the role) (stored
        routines only)."""
        raise NotImplementedError

    def resolved_schema(self, conn: Connection, schema: str | None) -> str:
        """The schema a name without one lands in (the current schema), or the given one."""
        return schema if schema is not None else conn.execute(sa.text("SELECT current_schema()")).scalar_one()

    def schema_exists(self, conn: Connection, schema: str) -> bool:
        schemata = sa.table("schemata", sa.column("catalog_name"), schema="information_schema")
        named = sa.text(self._matches("schema_name", ":s")).bindparams(s=schema)
        return bool(
            conn.execute(
                sa.select(sa.func.count())
                .select_from(schemata)
                .where(schemata.c.catalog_name == sa.func.current_database(), named)
            ).scalar_one()
        )

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

    def columns(self, conn: Connection, schema: str | None, table: str, fix: str = SOURCE_FIX) -> list[str]:
        return list(self.column_types(conn, schema, table, fix))

    @classmethod
    def column_kind(cls, type_name: str) -> ColumnKind:
        """What a column of the catalog's type `type_name` holds (a size such as `(10,2)` aside)."""
        return cls.type_kinds.get(type_name.lower().split("(")[0].strip(), ColumnKind.OTHER)

    def column_types(self, conn: Connection, schema: str | None, table: str, fix: str = SOURCE_FIX) -> dict[str, str]:
        """The table's columns and their types (an error naming the `fix` when there is no such table: by default,
        the job's source's)."""
        types = self._column_types(conn, schema, table)
        if not types:
            where = qualified_name(schema, table)
            self._check_readable(conn, schema, table, where)
            raise DataError(
                f"table {where!r} not found in {self.engine.url.render_as_string(hide_password=True)}; {fix}"
            )
        return types

    def _check_readable(self, conn: Connection, schema: str | None, table: str, where: str) -> None:
        """Where the catalog lists only what a role may use: tell an unreadable table from a missing one."""

    def value_set(self, column: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        """An aggregate: the distinct values of `column` in a group as one text, equal for two groups exactly when
        they hold the same values: each value's text prefixed with its length (so no value's text can pass for
        two), NULL as '-', in order."""
        item = value_set_item(column)
        return sa.func.string_agg(sa.distinct(item), aggregate_order_by(sa.literal(""), item))

    def lookup(self, key: str, keys: str, values: str) -> str:
        """SQL for the integer paired with `key` (text) in two bound lists, the parameters named `keys` (text)
        and `values` (integers), where `value_lookups` says that beats a join with a small table."""
        raise NotImplementedError

    def text_at(self, code: str, texts: str) -> str:
        """SQL for the entry of the bound text list `texts` at integer `code` (1: the first), the way back from a
        `lookup`'s code to its text, where `value_lookups`."""
        raise NotImplementedError

    def index_lookup(self, value: str, first: int, codes: str) -> str:
        """SQL for the entry of the bound integer array `codes` at integer `value`, its first entry being the
        value `first`, where `index_lookups` says the database has them (1-based arrays on both)."""
        return f"(CAST(:{codes} AS BIGINT[]))[CAST({value} AS BIGINT) + ({1 - int(first)})]"

    def hmac_sha256_hex(self, value: str, inner_key: str, outer_key: str) -> str:
        """SQL for HMAC-SHA256 of `value` as text, in hex, from the two padded keys (SQL expressions)."""
        raise NotImplementedError

    def hex_integer(self, hex_digits: str) -> str:
        """SQL of the whole number that `hex_digits` (an SQL text of at most 15 hexadecimal digits) writes."""
        raise NotImplementedError

    def lower_median(self, value: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        """The aggregate giving the ceil(n/2)-th smallest of `value` in a group (the lower median): the SQL
        standard's ordered-set aggregate, which PostgreSQL and Spark have."""
        return sa.func.percentile_disc(0.5).within_group(value)

    def hash_sum(self, values: list[str]) -> str:
        """An aggregate summing a 64-bit hash of each row's `values` exactly (no overflow): two multisets of rows
        with equal counts and sums are, but for a hash collision, the same."""
        raise NotImplementedError

    def not_a_number(self, column: str) -> str:
        """A condition true where `column` (quoted) holds something that is not a finite number (NaN and the
        infinities included: no cut, range or width of Mondrian's is defined for them)."""
        return f"COALESCE(NOT isfinite(TRY_CAST(CAST({column} AS VARCHAR) AS DOUBLE)), TRUE)"

    @contextmanager
    def staged_output(
        self, conn: Connection, final: str, select: str, params: dict[str, Any], replacing: bool
    ) -> Iterator[str]:
        """The output table `final` made from `select`; yields what to audit. Here DDL is transactional: `final`
        itself is written (replacing sqlanon's earlier output), and the caller's transaction keeps both or
        neither."""
        if replacing:
            self.drop_table(conn, final)
        self.execute(conn, f"CREATE TABLE {final} AS {select}", params)
        yield final

    def kept_tables(self, conn: Connection, schema: str, prefix: str) -> dict[str, str | None]:
        """The tables of `schema` whose names start with `prefix`, each with its comment (`keep_table`)."""
        return {}

    def keep_table(self, conn: Connection, ref: str, schema: str, name: str, comment: str) -> None:
        """Rename the run's table `ref` (in `schema`) to `name`, and give it `comment`."""
        raise NotImplementedError("this database keeps no tables across runs")

    def drop_table(self, conn: Connection, ref: str) -> None:
        """Drop one of sqlanon's own tables (its dimension and scratch tables; outputs it wrote)."""
        self.execute(conn, f"DROP TABLE IF EXISTS {ref}")

    # --- bulk data ------------------------------------------------------
    def create_table_from_rows(
        self, conn: Connection, ref: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[Any]]
    ) -> None:
        """Create `ref` with (name, type) columns and fill it with rows (small metadata, e.g. hierarchies)."""
        self._create_table(conn, ref, columns)
        self.insert_rows(conn, ref, [name for name, _ in columns], rows)

    def _create_table(
        self, conn: Connection, ref: str, columns: Sequence[tuple[str, str]], temporary: bool = False
    ) -> None:
        """An empty table `ref` of (name, type) `columns`; `temporary`: of the session (`ref` unqualified)."""
        cols = ", ".join(f"{self.q(name)} {sql_type}" for name, sql_type in columns)
        self.execute(conn, f"CREATE {'TEMP ' if temporary else ''}TABLE {ref} ({cols})")

    def insert_rows(self, conn: Connection, ref: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Bulk insert of small metadata rows, the database's fast way (executemany is slow on DuckDB)."""
        if rows:
            self._insert(conn, ref, ", ".join(self.q(c) for c in columns), columns, rows)

    def _insert(
        self, conn: Connection, ref: str, names: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        raise NotImplementedError

    @contextmanager
    def secret_table(
        self, conn: Connection, name: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[Any]]
    ) -> Iterator[str]:
        """A session-scoped table `name` of (name, type) `columns` holding `rows`, loaded so that no value is part of
        a statement's text or parameters (no statement log, query log or plan holds them: pseudonym keys); yields
        its reference. Dropped at the end; on an error, with the caller's transaction."""
        self._create_table(conn, self.q(name), columns, temporary=True)
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
        sql, params = read_csv_sql(path, options)
        csv = CsvRead(path, sql, params, described_csv(sql, params, path))
        _check_delimiter(path, csv.columns)
        self._load_csv(conn, csv, ref, temporary)
        return self.count_rows(conn, ref)

    def _load_csv(self, conn: Connection, csv: CsvRead, ref: str, temporary: bool) -> None:
        """Create `ref` from the file."""
        raise NotImplementedError

    def load_frame(self, conn: Connection, frame: SourceFrame, ref: str, temporary: bool = False) -> int:
        """Create table `ref` from a DataFrame, in the caller's transaction; returns the row count (`temporary`
        as in load_csv). Where the database cannot scan a frame in this process, the user loads the table."""
        raise ConfigError(
            f"a DataFrame source is read by DuckDB (in memory, or the file RunOptions.db_url names); on "
            f"{self.kind} write the frame to a table first (e.g. pandas' to_sql) and name it in source.table"
        )

    def read_parquet(self, conn: Connection, path: Path, name: str) -> None:
        """Parquet files read in place as the temporary view `name` (source.parquet)."""
        raise ConfigError(
            f"source.parquet reads files in place on Spark; on {self.kind} load the data into a "
            "table first (e.g. with DuckDB's read_parquet) and name it in source.table"
        )


def open_database(url: str, memory_limit: str | None = None, temp_directory: Path | None = None) -> Database:
    """The database at `url`, as the kind its scheme names. `memory_limit` (a size checked by
    config.check_memory_limit; default: half the machine's memory) and `temp_directory` (where it spills beyond
    it) apply where the database has `memory_settings`; PostgreSQL's memory is the server's."""
    scheme = url.split(":", 1)[0].split("+", 1)[0]
    kind = Database.kinds.get(scheme)
    if kind is None:
        raise SqlanonError(f"database URL scheme {scheme!r} is not supported; use DuckDB, PostgreSQL or Spark")
    return kind.open(url, memory_limit, temp_directory)


TEXT_PARAMETER = re.compile(r"(?<![:\w\\]):(\w+)(?!:)")  # a bound parameter in text(), as SQLAlchemy finds them


def quote_literal(text: str) -> str:
    """A single-quoted SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def quote_name(name: str) -> str:
    """A double-quoted SQL identifier (the same rule on DuckDB and PostgreSQL)."""
    return '"' + name.replace('"', '""') + '"'


def value_set_item(column: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    """A value of `column` as an item of `Database.value_set`: its text prefixed with the text's length, NULL as
    '-'."""
    text = sa.cast(column, sa.String)
    return sa.case((column.is_(None), sa.literal("-")), else_=sa.cast(sa.func.length(text), sa.String) + ":" + text)


def qualified_name(schema: str | None, table: str) -> str:
    """`schema.table`, or `table` in the current schema: how messages name a table (unquoted)."""
    return f"{schema}.{table}" if schema else table


def read_csv_sql(path: Path, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    args, params = [":csv_path"], {"csv_path": str(path)}
    for i, (key, value) in enumerate(options.items()):
        if key not in CSV_OPTIONS:
            raise DataError(
                f"unknown CSV option {key!r} (source.csv_options, or --option of sqlanon load); "
                f"known: {', '.join(sorted(CSV_OPTIONS))}"
            )
        args.append(f"{CSV_OPTIONS[key]} = :csv_opt{i}")
        params[f"csv_opt{i}"] = value
    return f"SELECT * FROM read_csv({', '.join(args)})", params


@dataclass(frozen=True)
class CsvRead:
    """A CSV file as a job reads it: DuckDB's read_csv SELECT (`sql`, SQLAlchemy's :name parameters `params`), and
    the columns it gives, (name, DuckDB type) (`described_csv`)."""

    path: Path
    sql: str
    params: dict[str, Any]
    columns: list[tuple[str, str]]


def duckdb_query(read_sql: str, params: dict[str, Any]) -> tuple[str, list[Any]]:
    """`read_sql` (SQLAlchemy's :name parameters) for DuckDB's own driver: ? placeholders and their values."""
    names = sorted(params, key=read_sql.index)
    query = read_sql
    for name in names:
        query = query.replace(f":{name}", "?", 1)
    return query, [params[name] for name in names]


def described_csv(read_sql: str, params: dict[str, Any], path: Path) -> list[tuple[str, str]]:
    """(name, type) of each column of the CSV file as DuckDB reads it with the job's options (a sample of the
    file, in an in-memory DuckDB: whatever database the rows go to, the file is checked before anything is made)."""
    import duckdb

    reader = duckdb.connect()
    try:
        query, values = duckdb_query(read_sql, params)
        described = csv_errors(lambda: reader.execute(f"DESCRIBE {query}", values).fetchall(), path)
        return [(str(name), str(kind)) for name, kind, *_ in described]
    finally:
        reader.close()


def _check_delimiter(path: Path, columns: list[tuple[str, str]]) -> None:
    """A file read as one column whose name holds another delimiter was read with the wrong one: every row
    would load as one text, and the job would find none of its columns."""
    if len(columns) != 1:
        return
    name = columns[0][0]
    for delimiter, shown in ((";", ";"), (",", ","), ("\t", "\\t"), ("|", "|")):
        if delimiter in name:
            raise DataError(
                f"CSV file {path} reads as one column, {name[:60]!r}, whose name holds {shown!r}: its delimiter is "
                f"probably {shown!r}; set it in source.csv_options (delimiter: {shown!r}) or with sqlanon load "
                f"--delimiter, or leave the delimiter out to let it be detected"
            )


def csv_errors(action: Callable[[], _T], path: Path) -> _T:
    try:
        return action()
    except sa.exc.DBAPIError as exc:
        raise DataError(f"cannot read CSV file {path}: {first_line(exc.orig)}") from None
    except Exception as exc:  # duckdb's own exceptions when reading for PostgreSQL
        if type(exc).__module__.startswith("duckdb") or type(exc).__module__.startswith("_duckdb"):
            raise DataError(f"cannot read CSV file {path}: {first_line(exc)}") from None
        raise


def first_line(exc: BaseException | None) -> str:
    """An error's first line (its type's name when it has no text)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def driver_connection(conn: Connection) -> Any:
    """The driver's own connection under SQLAlchemy's (psycopg's, DuckDB's, the Spark DB-API's), for calls only
    the driver has: COPY, registering arrays, the Spark session."""
    return conn.connection.dbapi_connection


#: URL schemes that never carry a user or password (Spark's masters and Spark Connect's servers)
NO_CREDENTIALS = ("spark", "sc")


def normalize_url(url: str, base_dir: Path) -> str:
    """A SQLAlchemy URL of a kind of database sqlanon knows; a bare file path means a DuckDB file (relative to
    base_dir). Each kind puts its URLs in their canonical form (`Database.canonical_url`)."""
    if "://" not in url:
        url = f"duckdb:///{url}"
    scheme, _, rest = url.partition("://")
    if scheme in NO_CREDENTIALS and "?" in rest:
        # its query may name another database by a URL with a user (metadata=postgresql+psycopg://me@host/db),
        # whose "@" the parser would take for this URL's own credentials (its host then the other's)
        address, _, query = rest.partition("?")
        url = f"{scheme}://{address}?{query.replace('@', '%40')}"
    try:
        parsed = make_url(url)
    except Exception as exc:  # sqlalchemy raises ArgumentError with a terse message
        raise ConfigError(
            f"source.url {url!r} is not a database URL ({exc}); "
            "use e.g. duckdb:///file.duckdb or postgresql+psycopg://user@host/db"
        ) from None
    kind = Database.kinds.get(parsed.drivername.split("+")[0])
    if kind is None:
        examples = [e for k in dict.fromkeys(Database.kinds.values()) for e in k.url_examples]
        raise ConfigError(
            f"source.url {parsed.render_as_string()!r}: {parsed.drivername!r} is not supported; "
            f"use one of {', '.join(examples)}"
        )
    return kind.canonical_url(url, parsed, base_dir)
