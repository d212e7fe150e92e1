"""PostgreSQL: roles, concurrent sessions, stored routines (PL/Python), names cut to 63 bytes."""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection

from ..errors import ConfigError, DataError
from . import postgres_routines
from .base import (
    ColumnKind,
    CsvRead,
    Database,
    StoreSpelling,
    csv_errors,
    driver_connection,
    duckdb_query,
    quote_literal,
)

#: PostgreSQL truncates longer identifiers (NAMEDATALEN - 1), so two long names could be one table
PG_MAX_NAME_BYTES = 63

#: DuckDB column types -> PostgreSQL types when a CSV is loaded into PostgreSQL
PG_TYPES = {
    "VARCHAR": "text",
    "BIGINT": "bigint",
    "INTEGER": "integer",
    "SMALLINT": "smallint",
    "DOUBLE": "double precision",
    "FLOAT": "real",
    "DATE": "date",
    "TIMESTAMP": "timestamp",
    "BOOLEAN": "boolean",
    "TIME": "time",
    "HUGEINT": "numeric",
}


class PostgreSQL(Database):
    """A PostgreSQL server: roles, concurrent sessions, PL/Python, names cut to 63 bytes."""

    kind = "postgresql"
    schemes = ("postgresql", "postgres")
    #: information_schema's type names (see Database.type_kinds)
    type_kinds: ClassVar[dict[str, ColumnKind]] = {
        **dict.fromkeys(("smallint", "integer"), ColumnKind.SMALL_INTEGER),
        **dict.fromkeys(("bigint",), ColumnKind.INTEGER),
        **dict.fromkeys(("real", "double precision"), ColumnKind.FLOAT),
        **dict.fromkeys(("numeric",), ColumnKind.EXACT),
    }
    url_examples = ("postgresql://user@host/db (also postgres:// and postgresql+psycopg://)",)

    @classmethod
    def canonical_url(cls, url: str, parsed: URL, base_dir: Path) -> str:
        if parsed.drivername in ("postgres", "postgresql"):  # libpq's own spellings: the psycopg 3 driver
            return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
        return url

    roles = True
    concurrent_sessions = True
    stored_routines = True
    #: the caller is the role that logged in (a session that switched roles with SET ROLE could switch back);
    #: a run's session is its backend, told by its process id and start (another role's start may be hidden: then
    #: the process id alone keeps the run alive)
    store_spelling = StoreSpelling(
        temp="pg_temp",
        caller="session_user",
        mine="{s}.is_mine({role})",
        session_pid="pg_backend_pid()",
        session_start="(SELECT CAST(backend_start AS TEXT) FROM pg_stat_activity WHERE pid = pg_backend_pid())",
        session_gone=(
            "NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = {run}.backend_pid AND (a.backend_start IS "
            "NULL OR CAST(a.backend_start AS TEXT) = {run}.backend_start))"
        ),
        carries_token=(
            "strpos(COALESCE(obj_description(to_regclass(quote_ident({o}.schema_name) || '.' || "
            "quote_ident({o}.table_name)), 'pg_class'), ''), {o}.token) > 0"
        ),
    )
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

    def __init__(
        self, *, engine: sa.engine.Engine, url: str, memory_limit: str | None = None, temp_directory: Path | None = None
    ):
        super().__init__(engine=engine, url=url)

        @sa.event.listens_for(self.engine, "connect")
        def _without_jit(dbapi_connection: Any, _record: Any) -> None:
            """sqlanon's sessions do not compile queries to machine code. Its statements are estimated costly
            (a wave's join with its nodes) but run in milliseconds on small sets, and compiling took longer than
            running: Adult's default search 0.70 s with JIT, 0.20 s without; hospital 1M the same either way.
            Only sessions sqlanon opens; where the server has no JIT setting, nothing is changed."""
            with dbapi_connection.cursor() as cursor:
                cursor.execute("SELECT set_config('jit', 'off', false) WHERE current_setting('jit', true) IS NOT NULL")
            dbapi_connection.commit()  # a session setting made in a transaction lasts only if it is committed

    def check_name(self, name: str, where: str, *, table: bool = False) -> None:
        """PostgreSQL truncates names longer than 63 bytes, so two long names could be one table."""
        size = len(name.encode())
        if size > PG_MAX_NAME_BYTES:
            raise ConfigError(
                f"{where} {name[:20]!r}... is {size} bytes long; PostgreSQL cuts names to "
                f"{PG_MAX_NAME_BYTES} bytes, so it could name another table: use a shorter name"
            )

    def analyze(self, conn: Connection, ref: str) -> None:
        """Temporary and new tables have no statistics until ANALYZE (autovacuum never sees temporary ones):
        without them the planner guessed a 1M-row join of the dimension tables as 1.2 billion rows, sorted
        for merge joins and compiled JIT code (2.2 s; 1.4 s with statistics)."""
        self.execute(conn, f"ANALYZE {ref}")

    #: the planner's default costs price passing a million rows from parallel workers above running the join
    #: and the grouping in one process, so the cube (hospital 1M: five joins and a GROUP BY) ran serially in
    #: 1.42 s; with these, in parallel in 0.83 s (the plain GROUP BY of the table already runs in parallel)
    PARALLEL_COSTS: ClassVar[dict[str, str]] = {"parallel_setup_cost": "10", "parallel_tuple_cost": "0.001"}

    #: Mondrian's statements sort, hash and group a million rows each; with work_mem 64MB instead of the default
    #: 4MB, 1M hospital rows took 45.5 s instead of 48.3 s (the rounds' figures 12.3 -> 9.9 s, the publication
    #: 3.9 -> 2.8 s). A sort of a million rows still spills (in memory it needs 86MB); 256MB gained nothing more
    #: (42.7 s against 43.1 s)
    SORT_MEMORY = 64 * 1024 * 1024

    @contextmanager
    def hash_joins(self, conn: Connection) -> Iterator[None]:
        """PostgreSQL estimates a join of two common table expressions on eight columns at one row and nests loops:
        the Bayes audit of a node (Adult, 8 QIs, 2% suppression: 15,081 cells) ran for minutes instead of
        seconds. Without nested loops it merged instead, sorting both sides to disk: the audit's 2.7M released
        person rows against 121k classes (hospital 200k) spent 3 of its 5 s in sorts. Neither, then: a hash
        join builds on the smaller side (analysis of the 28 minimal releases, alternated: 23.8 -> 20.7-21.2 s;
        Adult's 322: 8.1 -> 7.3-7.6 s; publication and inference unchanged). Transaction-local, so the search's
        waves keep their nested loops over small VALUES lists."""
        with self._settings(conn, {"enable_nestloop": "off", "enable_mergejoin": "off"}):
            yield

    @contextmanager
    def parallel_plans(self, conn: Connection) -> Iterator[None]:
        with self._settings(conn, self.PARALLEL_COSTS):
            yield

    def create_run_scratch(
        self, conn: Connection, schema: str, name: str, select: str, params: dict[str, Any] | None = None
    ) -> tuple[str, int | None]:
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
        low = conn.execute(
            sa.text("SELECT pg_size_bytes(current_setting('work_mem')) < :m"), {"m": self.SORT_MEMORY}
        ).scalar_one()
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
        unanalyzed = conn.execute(
            sa.text(
                "SELECT c.relkind IN ('r', 'p', 'm') AND NOT EXISTS (SELECT 1 FROM pg_stats s WHERE s.schemaname = "
                "n.nspname AND s.tablename = c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.oid = to_regclass(:t)"
            ),
            {"t": self.for_driver(self.q(schema, table))},
        ).scalar()
        if not unanalyzed:  # analyzed, or a view (planned with its tables' statistics)
            return
        warnings.warn(
            f"table {self.q(schema, table)} has no planner statistics (it was never analyzed), so "
            "PostgreSQL would guess its joins badly; sqlanon plans them without nested loops. "
            f"ANALYZE {self.q(schema, table)} first for the fastest plans",
            UserWarning,
            stacklevel=2,
        )
        self.execute(conn, "SET enable_nestloop = off")  # this session only (the engine is the run's own)

    def session_role(self, conn: Connection) -> str | None:
        return str(conn.execute(sa.text("SELECT session_user")).scalar_one())

    def current_role(self, conn: Connection) -> str | None:
        return str(conn.execute(sa.text("SELECT current_user")).scalar_one())

    def is_superuser(self, conn: Connection) -> bool:
        return postgres_routines.is_superuser(conn)

    def try_session_lock(self, conn: Connection, space: str, name: str) -> bool:
        """A session-level advisory lock: it vanishes with a killed client, which is how a dead run is told."""
        taken = conn.execute(
            sa.text("SELECT pg_try_advisory_lock(hashtext(:space), hashtext(:name))"), {"space": space, "name": name}
        ).scalar_one()
        return bool(taken)

    def release_session_lock(self, conn: Connection, space: str, name: str) -> None:
        conn.execute(
            sa.text("SELECT pg_advisory_unlock(hashtext(:space), hashtext(:name))"), {"space": space, "name": name}
        )

    def schema_access(self, conn: Connection, schema: str, routine: str) -> tuple[str | None, bool, bool, bool]:
        user, exists, usable, installed = conn.execute(
            sa.text(
                "SELECT session_user, n IS NOT NULL, COALESCE(usable, false), CASE WHEN usable THEN "
                "to_regprocedure(:f) IS NOT NULL END FROM (SELECT to_regnamespace(:s) AS n, "
                "has_schema_privilege(session_user, to_regnamespace(:s), 'USAGE') AS usable) x"
            ),
            {"s": self.for_driver(self.q(schema)), "f": self.for_driver(routine)},
        ).one()
        return str(user), bool(exists), bool(usable), bool(installed)

    def member_of_schema_owner(self, conn: Connection, schema: str) -> bool:
        member = conn.execute(
            sa.text("SELECT pg_has_role(session_user, nspowner, 'MEMBER') FROM pg_namespace WHERE nspname = :s"),
            {"s": schema},
        ).scalar()
        return bool(member)

    def routine_call(
        self, schema: str, name: str, args: Sequence[tuple[str, str, str]], rows: bool, procedure: bool = False
    ) -> str:
        return postgres_routines.call(schema, name, args, rows, procedure)

    def work_schema_of_caller(self, conn: Connection, schema: str) -> tuple[str | None, str | None, str | None]:
        name, owner, user = conn.execute(
            sa.text(
                f"SELECT w.name, pg_get_userbyid(n.nspowner), session_user FROM (SELECT {self.q(schema)}."
                "work_schema() AS name) w LEFT JOIN pg_namespace n ON n.nspname = w.name"
            )
        ).one()
        return name, owner, user

    def routine_names(self, conn: Connection, schema: str) -> set[str]:
        names = conn.execute(
            sa.text(
                "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = :s"
            ),
            {"s": schema},
        ).scalars()
        return {str(name) for name in names}

    def schema_exists(self, conn: Connection, schema: str) -> bool:
        """pg_namespace: information_schema hides schemas the role has no privilege on."""
        return bool(
            conn.execute(sa.text("SELECT COUNT(*) FROM pg_namespace WHERE nspname = :s"), {"s": schema}).scalar_one()
        )

    def may_create_in(self, conn: Connection, schema: str) -> bool:
        return bool(conn.execute(sa.text("SELECT has_schema_privilege(:s, 'CREATE')"), {"s": schema}).scalar_one())

    def table_comment(self, conn: Connection, schema: str | None, table: str) -> str | None:
        return conn.execute(
            sa.text("SELECT obj_description(to_regclass(:t), 'pg_class')"),
            {"t": self.for_driver(self.q(schema, table))},
        ).scalar()

    def _check_readable(self, conn: Connection, schema: str | None, table: str, where: str) -> None:
        """PostgreSQL lists only the columns a role may use: tell an unreadable table from a missing one."""
        user = conn.execute(sa.text("SELECT current_user")).scalar_one()
        grant = f"ask its owner for: GRANT SELECT ON {self.q(schema, table)} TO {self.q(user)}"
        try:
            with conn.begin_nested():
                exists = conn.execute(
                    sa.text("SELECT to_regclass(:name) IS NOT NULL"), {"name": self.q(schema, table)}
                ).scalar_one()
        except sa.exc.DBAPIError:  # no USAGE on the schema
            raise DataError(
                f"role {user!r} may not use schema {schema!r} of table {where!r}; ask its owner for: "
                f"GRANT USAGE ON SCHEMA {self.q(schema or 'public')} TO {self.q(user)}, and {grant}"
            ) from None
        if exists:
            raise DataError(f"role {user!r} may not read table {where!r}; {grant}")

    def held_hmac(self, value: str, store: str, key_name: str) -> str:
        """The store's routine, as its owner, for the roles the key is for: no caller reads the pads."""
        return f"{self.q(store)}.pseudonym({quote_literal(key_name)}, CAST({value} AS TEXT))"

    def hmac_sha256_hex(self, value: str, inner_key: str, outer_key: str) -> str:
        text_bytes = f"convert_to(CAST({value} AS TEXT), 'UTF8')"
        inner = f"sha256(CAST({inner_key} AS BYTEA) || {text_bytes})"
        return f"encode(sha256(CAST({outer_key} AS BYTEA) || {inner}), 'hex')"

    def hex_integer(self, hex_digits: str) -> str:
        return f"CAST(CAST(('x' || lpad({hex_digits}, 16, '0')) AS BIT(64)) AS BIGINT)"

    def hash_sum(self, values: list[str]) -> str:
        """The row's text (a row of the same types prints the same) hashed to 64 bits; SUM of BIGINT is NUMERIC."""
        return f"SUM(hashtextextended(CAST(ROW({', '.join(values)}) AS TEXT), 0))"

    def not_a_number(self, column: str) -> str:
        # no TRY_CAST before PostgreSQL 16's pg_input_is_valid
        return f"CAST({column} AS TEXT) !~ '^\\s*[-+]?([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][-+]?[0-9]+)?\\s*$'"

    def _insert(
        self, conn: Connection, ref: str, names: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        with driver_connection(conn).cursor() as cur:  # the driver's own call: no text() escapes
            with cur.copy(self.for_driver(f"COPY {ref} ({names}) FROM STDIN")) as copy:
                for row in rows:
                    copy.write_row(row)

    def _load_secret(self, conn: Connection, ref: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """COPY FROM STDIN: the server logs the COPY statement, never the rows it receives."""
        self._insert(conn, ref, ", ".join(self.q(c) for c in columns), columns, rows)

    def _load_csv(self, conn: Connection, csv: CsvRead, ref: str, temporary: bool) -> None:
        """COPY from a normalized copy of the file that DuckDB writes (DuckDB reads it, as on DuckDB)."""
        import duckdb

        reader = duckdb.connect()
        try:
            query, duck_params = duckdb_query(csv.sql, csv.params)
            cols = ", ".join(f"{self.q(name)} {PG_TYPES.get(typ, 'text')}" for name, typ in csv.columns)
            with tempfile.TemporaryDirectory() as tmpdir:
                normalized = os.path.join(tmpdir, "data.csv")
                csv_errors(
                    lambda: reader.execute(f"COPY ({query}) TO '{normalized}' (HEADER, DELIMITER ',')", duck_params),
                    csv.path,
                )
                self.execute(conn, f"CREATE TABLE {ref} ({cols})")  # pg_temp.name when `temporary`
                with driver_connection(conn).cursor() as cur, open(normalized, "rb") as fh:
                    with cur.copy(self.for_driver(f"COPY {ref} FROM STDIN (FORMAT csv, HEADER true)")) as copy:
                        while chunk := fh.read(1 << 20):
                            copy.write(chunk)
                self.analyze(conn, ref)  # sqlanon made this table: the planner gets its statistics now
        finally:
            reader.close()
