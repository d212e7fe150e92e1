"""Operations on sqlanon's own tables, spelled once for every database.

An `Op` is a named piece of SQL over the store's tables with typed parameters. On DuckDB, where whoever opens the
file has all of it, `Store.call` runs its statements as they are. On PostgreSQL the migration installs each one as
a routine of the store's schema (SECURITY DEFINER, search_path pinned to pg_catalog and pg_temp, see
`store.postgres`), and `Store.call` calls that routine by its schema-qualified name with every argument cast to its
declared type. Roles that run sqlanon then hold no privilege on the tables themselves, only EXECUTE on the
routines, and each routine acts on the caller's own rows (a run, a job: `guard`) or lists only those.

Placeholders in an op's SQL: `{s}` the store's schema; `{run_ids}` the run-number sequence as a literal; a
statement that is just `{analyze}` refreshes the lattice tables' planner statistics (PostgreSQL only); and what each
database spells its own way (`backends.StoreSpelling`, one per kind of database): `{caller}` the role that owns
what the op writes, `{mine:EXPR}` whether the role in EXPR is the caller or one of its roles, `{session_pid}` and
`{session_start}` the session a run works in, `{session_gone:ALIAS}` whether the session of the run ALIAS has
ended, `{carries_token:ALIAS}` whether the table an owned_tables row records still carries its token (in the
routines' guards). Parameters are `:name`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Result
from sqlalchemy.exc import DBAPIError

from ..backends import Database, StoreSpelling, quote_name
from ..errors import DataError

MINE = re.compile(r"\{mine:([^{}]+)\}")
GONE = re.compile(r"\{session_gone:(\w+)\}")
CARRIES = re.compile(r"\{carries_token:(\w+)\}")
ANALYZE = "{analyze}"
#: the tables a `{analyze}` statement refreshes: Incognito rewrites them at every iteration
LATTICE_TABLES = ("lattice_nodes", "lattice_node_levels", "lattice_edges")
#: SQLSTATE of a guard's refusal (no_data_found): the run or job is not the caller's, or does not exist
REFUSED = "P0002"


@dataclass(kw_only=True, frozen=True)
class Op:
    """A named operation: its parameters (name, PostgreSQL type) in call order, its statements, and what the
    last one returns ((column, PostgreSQL type), ...; empty: nothing).

    `guard` names the parameter that must designate the caller's own run (`run`) or job (`job`), or a job name
    that is free or the caller's (`job_free`); `owner_only` keeps the routine from the runner role.
    """

    name: str
    params: tuple[tuple[str, str], ...]
    sql: tuple[str, ...]
    returns: tuple[tuple[str, str], ...] = ()
    guard: str | None = None
    owner_only: bool = False


@dataclass(kw_only=True, frozen=True)
class Insert:
    """Rows of one run into `table`: the run's number in `run_id`, then `columns` ((name, PostgreSQL type), ...).
    With `replace`, the run's earlier rows go first. On PostgreSQL each column travels as one array."""

    name: str
    table: str
    columns: tuple[tuple[str, str], ...]
    replace: bool = False
    guard: str = "run"
    owner_only: bool = False
    params: tuple[tuple[str, str], ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", (("run", "bigint"),) + tuple((c, f"{t}[]") for c, t in self.columns))


def render(sql: str, schema: str, spelling: StoreSpelling) -> str:
    """An op's statement with its placeholders filled in for one kind of database."""
    s = quote_name(schema)
    sql = MINE.sub(lambda m: spelling.mine.replace("{s}", s).replace("{role}", m[1]), sql)
    sql = GONE.sub(lambda m: spelling.session_gone.replace("{run}", m[1]), sql)
    if spelling.carries_token is not None:
        sql = CARRIES.sub(lambda m: str(spelling.carries_token).replace("{o}", m[1]), sql)
    return (
        sql.replace("{s}", s)
        .replace("{caller}", spelling.caller)
        .replace("{session_pid}", spelling.session_pid)
        .replace("{session_start}", spelling.session_start)
        .replace("{temp}", spelling.temp)
        .replace("{run_ids}", "'" + f"{s}.run_ids".replace("'", "''") + "'")
    )


class Store:
    """sqlanon's own tables in one schema of a database, reached only through operations."""

    def __init__(self, db: Database, schema: str):
        self.db, self.schema = db.metadata, schema
        self.routines = self.db.stored_routines

    def call(self, conn: Connection, op: Op, **values: Any) -> Result[*tuple[Any, ...]]:
        """Run `op` with `values` (one per parameter); the last statement's result."""
        results = self._statements(conn, op, values)
        if not results:
            raise ValueError(f"operation {op.name} has no statement on this database: run it with Store.run")
        return results[-1]

    def run(self, conn: Connection, op: Op, **values: Any) -> None:
        """Run `op` for what it does, not for a result (on DuckDB an op may have no statement: ANALYZE is for
        PostgreSQL's planner)."""
        self._statements(conn, op, values)

    def _statements(self, conn: Connection, op: Op, values: dict[str, Any]) -> list[Result[*tuple[Any, ...]]]:
        if self.routines:
            return [self._routine(conn, op, values)]
        return [
            self.db.execute(conn, render(statement, self.schema, self.db.store_spelling), values)
            for statement in op.sql
            if statement != ANALYZE
        ]

    def insert(self, conn: Connection, op: Insert, run: int, rows: Sequence[Sequence[Any]]) -> None:
        """Add `rows` (values in `op.columns` order) to the run's rows of `op.table`."""
        if self.routines:
            arrays = {c: [row[i] for row in rows] for i, (c, _) in enumerate(op.columns)}
            self._routine(conn, op, {"run": run, **arrays})
            return
        if op.replace:
            records = sa.table(op.table, sa.column("run_id"), schema=self.schema)
            conn.execute(sa.delete(records).where(records.c.run_id == run))
        table = f"{quote_name(self.schema)}.{op.table}"
        if rows:
            self.db.insert_rows(conn, table, ["run_id", *(c for c, _ in op.columns)], [(run, *row) for row in rows])

    def work_schema(self, conn: Connection) -> str:
        """Where the caller's runs keep their scratch tables (dimension tables, the search's cube): the store's own
        schema on DuckDB and for the store's owner (and superusers) on PostgreSQL; for a runner, its work schema,
        which `sqlanon grant-runner` made and which the runner must own."""
        if not self.routines:
            return self.schema
        if self.schema in self.db.work_schemas:
            return self.db.work_schemas[self.schema]
        try:
            with conn.begin_nested():
                name, owner, user = self.db.work_schema_of_caller(conn, self.schema)
        except DBAPIError:  # not granted the runner role: no EXECUTE on work_schema()
            name, owner, user = None, None, self.db.session_role(conn)
        if name == self.schema:
            self.db.work_schemas[self.schema] = name
            return str(name)
        setup = f"a DBA sets it up with: sqlanon grant-runner {user} --db URL --metadata-schema {self.schema}"
        if owner is None:
            raise DataError(
                f"role {user!r} may not run sqlanon in schema {self.schema!r} (it is not a member of the "
                f"database's runner role, or has no work schema); {setup}"
            )
        if owner != user:
            raise DataError(
                f"schema {name!r}, where role {user!r} keeps its runs' scratch tables, belongs to role "
                f"{owner!r}; drop or rename it, and {setup}"
            )
        self.db.work_schemas[self.schema] = str(name)
        return str(name)

    def _routine(self, conn: Connection, op: Op | Insert, values: dict[str, Any]) -> Result[*tuple[Any, ...]]:
        """The op's routine, named with its schema, every argument cast to its declared type (so no routine of
        another schema or signature can be the one called)."""
        args = [(f"p_{name}", name, kind) for name, kind in op.params]
        select = self.db.routine_call(self.schema, op.name, args, rows=bool(getattr(op, "returns", ())))
        try:
            result: Result[*tuple[Any, ...]] = self.db.execute(conn, select, {n: values[n] for n, _ in op.params})
            return result
        except DBAPIError as exc:
            error = refused(exc)
            if error is None:
                raise
            raise error from None


def refused(exc: BaseException) -> DataError | None:
    """A guard's refusal as a DataError (the message is the routine's), or None for any other error."""
    orig = getattr(exc, "orig", None)
    if getattr(orig, "sqlstate", None) != REFUSED:
        return None
    return DataError(str(getattr(getattr(orig, "diag", None), "message_primary", None) or orig))
