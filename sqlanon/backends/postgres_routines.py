"""PostgreSQL's stored routines: how a list of statements becomes a SECURITY DEFINER plpgsql routine, how one is
called, and the catalog around them (marked routines, grants, roles, the server's settings).

What the routines are and do is the store's (`store.postgres`); this module only spells them in PostgreSQL. A
routine acts with the rights of its owner, on the owner's tables, with its search_path pinned to pg_catalog and
pg_temp (every table it names is schema-qualified, and PostgreSQL never looks for functions or operators in
pg_temp); it first runs its guard, then its statements with EXECUTE ... USING (values travel as parameters, and
each statement is planned with them, as when a client sends it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .base import TEXT_PARAMETER, driver_connection, quote_literal, quote_name

SETTINGS = "LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp"
Columns = Sequence[tuple[str, str]]  # (name, PostgreSQL type), ...


@dataclass(frozen=True)
class Guard:
    """What a routine checks before its statements: when `failing` (a condition over the routine's parameters
    `p_<name>`) holds, it raises SQLSTATE `sqlstate` with the message format() makes of `message` and `args`."""

    failing: str
    message: str
    args: tuple[str, ...]
    sqlstate: str

    def block(self) -> str:
        args = "".join(f", {a}" for a in self.args)
        return (
            f"IF {self.failing} THEN RAISE EXCEPTION USING ERRCODE = {quote_literal(self.sqlstate)}, "
            f"MESSAGE = format({quote_literal(self.message)}{args}); END IF;"
        )


def signature(schema: str, name: str, kinds: Sequence[str]) -> str:
    """'FUNCTION s.name(type, ...)': how GRANT, COMMENT and DROP name a function."""
    return f"FUNCTION {quote_name(schema)}.{name}({', '.join(kinds)})"


def function(schema: str, name: str, params: Columns, returns: Columns, guard: Guard | None, body: str) -> str:
    """CREATE FUNCTION s.name(p_<param> type, ...) in plpgsql: the guard, then `body`."""
    args = ", ".join(f"p_{param} {kind}" for param, kind in params)
    result = f"TABLE ({', '.join(f'{quote_name(c)} {kind}' for c, kind in returns)})" if returns else "void"
    return (
        f"CREATE FUNCTION {quote_name(schema)}.{name}({args}) RETURNS {result} {SETTINGS} AS $routine$\n"
        f"#variable_conflict use_column\nBEGIN\n{guard.block() if guard else ''}\n{body}\nEND\n$routine$"
    )


def execute(statement: str, returns: Columns = ()) -> str:
    """A statement of a routine's body, as EXECUTE ... USING: its `:name` parameters are the routine's `p_name`,
    in order of appearance; with `returns`, its rows (a query) or values (INSERT ... RETURNING) are the routine's."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    quoted = f"$sql${TEXT_PARAMETER.sub(number, statement)}$sql$"
    using = f" USING {', '.join(f'p_{n}' for n in names)}" if names else ""
    if not returns:
        return f"EXECUTE {quoted}{using};"
    if statement.lstrip().upper().startswith(("SELECT", "WITH")):
        return f"RETURN QUERY EXECUTE {quoted}{using};"
    return f"EXECUTE {quoted}{using} INTO {', '.join(quote_name(c) for c, _ in returns)};\nRETURN NEXT;"


def insert_body(table: str, columns: Columns, replace: bool) -> str:
    """Rows of the run `p_run` into `table` (a reference), each column given as one array `p_<column>`; with
    `replace`, the run's earlier rows go first."""
    names = ", ".join(["run_id"] + [quote_name(c) for c, _ in columns])
    arrays = ", ".join(f"${i + 2}" for i in range(len(columns)))
    using = ", ".join(["p_run"] + [f"p_{c}" for c, _ in columns])
    delete = f"EXECUTE 'DELETE FROM {table} WHERE run_id = $1' USING p_run;\n" if replace else ""
    insert = f"INSERT INTO {table} ({names}) SELECT $1, u.* FROM unnest({arrays}) AS u"
    return f"{delete}EXECUTE $sql${insert}$sql$ USING {using};"


def analyze(tables: Sequence[str]) -> str:
    """Fresh planner statistics of `tables` (references), as a statement of a routine's body."""
    return f"ANALYZE {', '.join(tables)};"


def constant_function(schema: str, name: str, columns: Columns, values: Sequence[str | None]) -> str:
    """CREATE FUNCTION s.name() returning one row of constants, written into its body: only the routine's owner
    can change them, and no table holds them for a grant to expose."""
    literals = ", ".join("CAST(NULL AS text)" if v is None else quote_literal(v) for v in values)
    return (
        f"CREATE FUNCTION {quote_name(schema)}.{name}() RETURNS TABLE "
        f"({', '.join(f'{quote_name(c)} {kind}' for c, kind in columns)}) LANGUAGE sql IMMUTABLE "
        f"SET search_path = pg_catalog, pg_temp AS $constants$ SELECT {literals} $constants$"
    )


def call(schema: str, name: str, args: Sequence[tuple[str, str, str]], rows: bool, procedure: bool = False) -> str:
    """A call of s.name with named arguments, each (argument, bound parameter, type) cast to its declared type (so
    no routine of another schema or signature can be the one called); `rows`: a set-returning function's rows."""
    named = ", ".join(f"{arg} => CAST(:{param} AS {kind})" for arg, param, kind in args)
    routine = f"{quote_name(schema)}.{name}({named})"
    return f"CALL {routine}" if procedure else f"SELECT * FROM {routine}" if rows else f"SELECT {routine}"


def rows_of(conn: Connection, schema: str, name: str, known: bool | None = None) -> Any:
    """The one row of the function s.name() (no arguments), or None when there is no such function (`known`:
    whether there is, when the caller already asked)."""
    if known is None:
        found = conn.execute(sa.text("SELECT to_regprocedure(:f) IS NOT NULL"), {"f": f"{quote_name(schema)}.{name}()"})
        known = bool(found.scalar_one())
    return conn.execute(sa.text(call(schema, name, (), rows=True))).one() if known else None


# --- installing ----------------------------------------------------------------------------------------------------
def ddl(conn: Connection, sql: str) -> None:
    """One statement as it is, on the driver's cursor: no parameters, so nothing in routine bodies (colons,
    percent signs) is read as a placeholder."""
    with driver_connection(conn).cursor() as cursor:
        cursor.execute(sql)


def mark(conn: Connection, routine: str, marker: str) -> None:
    """Comment the routine (a `signature`) with `marker` and revoke EXECUTE from PUBLIC."""
    kind, name = routine.split(" ", 1)
    ddl(conn, f"COMMENT ON {kind} {name} IS {quote_literal(marker)}")
    ddl(conn, f"REVOKE ALL ON {kind} {name} FROM PUBLIC")


def grant_execute(conn: Connection, routines: Sequence[str], schema: str, role: str) -> None:
    """USAGE on `schema` and EXECUTE on each routine (a `signature`) to `role`."""
    ddl(conn, f"GRANT USAGE ON SCHEMA {quote_name(schema)} TO {quote_name(role)}")
    for routine in routines:
        kind, name = routine.split(" ", 1)
        ddl(conn, f"GRANT EXECUTE ON {kind} {name} TO {quote_name(role)}")


def drop_marked(conn: Connection, schema: str, marker: str) -> None:
    """Drop every routine of `schema` commented with `marker` (nothing else of the schema)."""
    for routine, kind in conn.execute(
        sa.text(
            "SELECT CAST(CAST(p.oid AS regprocedure) AS text), p.prokind FROM pg_proc p JOIN pg_namespace n ON "
            "n.oid = p.pronamespace WHERE n.nspname = :s AND obj_description(p.oid, 'pg_proc') = :m"
        ),
        {"s": schema, "m": marker},
    ).all():
        ddl(conn, f"DROP {'PROCEDURE' if kind == 'p' else 'FUNCTION'} {routine}")


def ensure_role(conn: Connection, role: str) -> bool:
    """Whether `role` exists, after creating it (NOLOGIN) where the current role may create roles."""
    exists, may_create = conn.execute(
        sa.text(
            "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :r), (SELECT rolsuper OR rolcreaterole FROM "
            "pg_roles WHERE rolname = current_user)"
        ),
        {"r": role},
    ).one()
    if not exists and may_create:
        ddl(conn, f"CREATE ROLE {quote_name(role)} NOLOGIN")
    return bool(exists or may_create)


def keep_to_owner(conn: Connection, schema: str, user: str | None) -> None:
    """No role but the owner holds a privilege on the tables or sequences of `schema`, or CREATE on it; only
    `user` (if any) holds USAGE on it: every other grant is revoked."""
    s = quote_name(schema)
    for kind, name, grantee in conn.execute(
        sa.text(
            "SELECT DISTINCT c.relkind, c.relname, r.rolname FROM pg_class c JOIN pg_namespace n ON n.oid = "
            "c.relnamespace, aclexplode(c.relacl) a LEFT JOIN pg_roles r ON r.oid = a.grantee WHERE n.nspname = :s "
            "AND a.grantee <> c.relowner"
        ),
        {"s": schema},
    ).all():
        what = "SEQUENCE" if kind == "S" else "TABLE"
        ddl(conn, f"REVOKE ALL ON {what} {s}.{quote_name(name)} FROM {_grantee(grantee)}")
    for grantee in conn.execute(
        sa.text(
            "SELECT DISTINCT r.rolname FROM pg_namespace n, aclexplode(n.nspacl) a LEFT JOIN pg_roles r ON r.oid = "
            "a.grantee WHERE n.nspname = :s AND a.grantee <> n.nspowner AND (r.rolname IS DISTINCT FROM :user OR "
            "a.privilege_type <> 'USAGE')"
        ),
        {"s": schema, "user": user},
    ).scalars():
        ddl(conn, f"REVOKE ALL ON SCHEMA {s} FROM {_grantee(grantee)}")
        if grantee is not None and grantee == user:
            ddl(conn, f"GRANT USAGE ON SCHEMA {s} TO {quote_name(grantee)}")


def _grantee(role: str | None) -> str:
    """An ACL's grantee in SQL (role 0, shown as NULL here, is PUBLIC)."""
    return "PUBLIC" if role is None else quote_name(role)


def is_superuser(conn: Connection) -> bool:
    return bool(conn.execute(sa.text("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")).scalar_one())


def plpython_usable(conn: Connection) -> bool:
    """Functions in PL/Python, an untrusted language, can only be created by a superuser."""
    installed, available, superuser = conn.execute(
        sa.text(
            "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'plpython3u'), "
            "EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'plpython3u'), "
            "(SELECT rolsuper FROM pg_roles WHERE rolname = current_user)"
        )
    ).one()
    return bool(superuser and (installed or available))


def enable_plpython(conn: Connection) -> None:
    ddl(conn, "CREATE EXTENSION IF NOT EXISTS plpython3u")


def database_name(conn: Connection) -> str:
    return str(conn.execute(sa.text("SELECT current_database()")).scalar_one())


def socket_directory(conn: Connection) -> str:
    """The server's first unix socket folder (readable by superusers only)."""
    found = conn.execute(sa.text("SELECT trim(split_part(current_setting('unix_socket_directories'), ',', 1))"))
    return str(found.scalar_one())


def relation_exists(conn: Connection, schema: str, name: str) -> bool:
    found = conn.execute(sa.text("SELECT to_regclass(:t) IS NOT NULL"), {"t": f"{quote_name(schema)}.{name}"})
    return bool(found.scalar_one())


# --- inside the server (PL/Python's `plpy`, by sqlanon.inserver) ------------------------------------------------------
def server_address(plpy: Any, schema: str, installation: str) -> dict[str, Any]:
    """This database's name (d), port and socket folder (socket: as the function `installation` of `schema`
    recorded it, or NULL)."""
    return dict(
        plpy.execute(
            "SELECT current_database() AS d, current_setting('port') AS port, i.socket_directory AS socket "
            f"FROM {quote_name(schema)}.{installation}() i"
        )[0]
    )


def call_in_server(plpy: Any, schema: str, name: str, arg: tuple[str, str], value: Any) -> Any:
    """The first row of the set-returning function s.name called with one named argument (name, type)."""
    plan = plpy.prepare(f"SELECT * FROM {quote_name(schema)}.{name}({arg[0]} => $1)", [arg[1]])
    return plpy.execute(plan, [value])[0]
