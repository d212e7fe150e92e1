"""The store's routines on PostgreSQL: generated from the operations, installed by `sqlanon migrate`.

Each operation becomes a plpgsql routine of the store's schema, SECURITY DEFINER (it acts with the rights of the
schema's owner, on the owner's tables) with its search_path pinned to pg_catalog and pg_temp (every table it names is
schema-qualified, and PostgreSQL never looks for functions or operators in pg_temp), that first checks the run or
job it touches is the caller's (`GUARDS`), then runs the operation's statements with EXECUTE ... USING (values
travel as parameters, and each statement is planned with them, as when a client sends it). The caller is
`session_user`, the role that logged in: a session that switched roles with SET ROLE could switch back, so the
login is what it can act as.

Beside them, from the files under sql/: the functions DBAs call (`job_runs`, `run_nodes`, `passing_nodes`, `audit`),
`grant_runner` / `revoke_runner`, and with PL/Python the routines that run jobs inside the server. `installation()`
returns this schema's settings, written into its body when it is installed: the database's runner role, the
folders the server's Python imports sqlanon from and the server's socket folder. Only the routine's owner (the
installing superuser) can replace a routine, so no caller, however its transaction goes, changes what the server
imports; no table holds these settings for a grant to expose.

The routines are installed again whenever their definitions change (a digest of them is part of `installation()`):
DDL travels with the code, not with a migration revision. EXECUTE on every one of them is revoked from PUBLIC and
granted to the runner role only where a runner needs it (`RUNNER_ROUTINES`); the store's tables and sequence carry
no privilege for anyone but their owner.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection

from ..backends import PG_MAX_NAME_BYTES, PostgreSQL, driver_connection, quote_literal, quote_name
from ..errors import ConfigError
from .ops import ANALYZE, LATTICE_TABLES, PARAMETER, REFUSED, Insert, Op, render

#: the comment that marks a routine as sqlanon's (reinstalling drops exactly these)
MARKER = "sqlanon routine"
SETTINGS = "LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp"

#: what a guard checks before an operation runs (see Op.guard); the refusal names nothing of another role's
GUARDS = {
    "run": (
        "IF NOT EXISTS (SELECT 1 FROM {s}.runs r WHERE r.run_id = p_run AND {s}.is_mine(r.owner_role)) THEN "
        "RAISE EXCEPTION USING ERRCODE = '{refused}', MESSAGE = format('there is no run %s in schema %L', p_run, "
        "{schema}); END IF;"
    ),
    "job": (
        "IF NOT EXISTS (SELECT 1 FROM {s}.jobs j WHERE j.name = p_job AND {s}.is_mine(j.registered_by)) THEN "
        "RAISE EXCEPTION USING ERRCODE = '{refused}', MESSAGE = format('no job named %L is registered in schema "
        "%L; register it with: sqlanon job register %s FILE --db URL', p_job, {schema}, p_job); END IF;"
    ),
    "job_free": (
        "IF EXISTS (SELECT 1 FROM {s}.jobs j WHERE j.name = p_job AND NOT {s}.is_mine(j.registered_by)) "
        "THEN RAISE EXCEPTION USING ERRCODE = '{refused}', MESSAGE = format('a job named %L is registered "
        "by another role in schema %L; choose another name', p_job, {schema}); END IF;"
    ),
    # a record of another role's stays while its table still carries the record's token (see Ownership)
    "table_free": (
        "IF EXISTS (SELECT 1 FROM {s}.owned_tables o WHERE o.schema_name = p_schema_name AND "
        "o.table_name = p_table_name AND NOT {s}.is_mine(o.owner_role) AND strpos(COALESCE(obj_description("
        "to_regclass(quote_ident(o.schema_name) || '.' || quote_ident(o.table_name)), 'pg_class'), ''), "
        "o.token) > 0) THEN RAISE EXCEPTION USING ERRCODE = '{refused}', MESSAGE = format('table %I.%I "
        "is recorded as written by sqlanon for another role', p_schema_name, p_table_name); END IF;"
    ),
}


@dataclass(frozen=True)
class Installation:
    """A store's settings, kept in the body of its `installation()` routine."""

    runner_role: str | None = None  # the database's runner role (see grant_runner)
    python_path: str = ""  # folders the server's Python imports sqlanon from, separated by ':'
    socket_directory: str | None = None  # where in-server runs connect back to the server


def op_routine(op: Op | Insert, schema: str) -> str:
    """CREATE FUNCTION for one operation (see the module docstring)."""
    s = quote_name(schema)
    args = ", ".join(f"p_{name} {kind}" for name, kind in op.params)
    returns = getattr(op, "returns", ())
    result = f"TABLE ({', '.join(f'{quote_name(c)} {kind}' for c, kind in returns)})" if returns else "void"
    guard = GUARDS[op.guard].format(s=s, schema=quote_literal(schema), refused=REFUSED) if op.guard else ""
    body = _insert_body(op, s) if isinstance(op, Insert) else _statements_body(op, schema)
    return (
        f"CREATE FUNCTION {s}.{op.name}({args}) RETURNS {result} {SETTINGS} AS $routine$\n"
        f"#variable_conflict use_column\nBEGIN\n{guard}\n{body}\nEND\n$routine$"
    )


def _statements_body(op: Op, schema: str) -> str:
    statements = op.sql
    return "\n".join(
        _execute(statement, op, schema, i == len(statements) - 1) for i, statement in enumerate(statements)
    )


def _execute(statement: str, op: Op, schema: str, last: bool) -> str:
    """One statement as EXECUTE ... USING: its `:name` parameters become $1, $2, ... in order of appearance."""
    if statement == ANALYZE:
        return f"ANALYZE {', '.join(f'{quote_name(schema)}.{t}' for t in LATTICE_TABLES)};"
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    sql = PARAMETER.sub(number, render(statement, schema, PostgreSQL.store_spelling))
    using = f" USING {', '.join(f'p_{n}' for n in names)}" if names else ""
    quoted = f"$sql${sql}$sql$"
    if not (last and op.returns):
        return f"EXECUTE {quoted}{using};"
    if sql.lstrip().upper().startswith(("SELECT", "WITH")):
        return f"RETURN QUERY EXECUTE {quoted}{using};"
    return f"EXECUTE {quoted}{using} INTO {', '.join(quote_name(c) for c, _ in op.returns)};\nRETURN NEXT;"


def _insert_body(op: Insert, s: str) -> str:
    table = f"{s}.{op.table}"
    columns = ", ".join(["run_id"] + [quote_name(c) for c, _ in op.columns])
    arrays = ", ".join(f"${i + 2}" for i in range(len(op.columns)))
    using = ", ".join(["p_run"] + [f"p_{c}" for c, _ in op.columns])
    delete = f"EXECUTE 'DELETE FROM {table} WHERE run_id = $1' USING p_run;\n" if op.replace else ""
    return (
        f"{delete}EXECUTE $sql$INSERT INTO {table} ({columns}) SELECT $1, u.* FROM unnest({arrays}) AS u$sql$ "
        f"USING {using};"
    )


def _signature(op: Op | Insert, schema: str) -> str:
    return f"FUNCTION {quote_name(schema)}.{op.name}({', '.join(kind for _, kind in op.params)})"


#: routines from the files under sql/: (signature with {s}, whether the runner role may execute it)
FILE_ROUTINES = {
    "store_helpers.sql": (
        ("FUNCTION {s}.is_mine(text)", False),
        ("FUNCTION {s}.work_schema_of(name)", False),
        ("FUNCTION {s}.work_schema()", True),
    ),
    "job_functions.sql": (
        ("FUNCTION {s}.job_runs(text)", True),
        ("FUNCTION {s}.run_nodes(bigint)", True),
        ("FUNCTION {s}.passing_nodes(bigint)", True),
    ),
    "audit_function.sql": (("FUNCTION {s}.audit(regclass, text[], text[])", True),),
    "runner_roles.sql": (("PROCEDURE {s}.grant_runner(name)", False), ("PROCEDURE {s}.revoke_runner(name)", False)),
}
PLPYTHON_ROUTINES = {
    "plpython.sql": (
        ("FUNCTION {s}.load_sqlanon()", True),
        ("PROCEDURE {s}.run_job(text, boolean, json)", True),
        ("FUNCTION {s}.register_job(text, json, json)", True),
        ("PROCEDURE {s}.publish(bigint, text, text, text, json)", True),
        ("FUNCTION {s}.analyze_job(text, text)", True),
    ),
}
INSTALLATION = "FUNCTION {s}.installation()"


def runner_routines(schema: str, plpython: bool = True) -> list[str]:
    """Every routine the runner role may execute (what `sqlanon grant-runner` gives, as docs/postgresql.md lists it)."""
    from . import OPERATIONS

    s = quote_name(schema)
    files = {**FILE_ROUTINES, **(PLPYTHON_ROUTINES if plpython else {})}
    return (
        [_signature(op, schema) for op in OPERATIONS if not op.owner_only]
        + [INSTALLATION.format(s=s)]
        + [sig.format(s=s) for routines in files.values() for sig, runner in routines if runner]
    )


@functools.cache
def digest() -> str:
    """A digest of every routine's definition (settings aside): a store whose routines were installed from other
    definitions needs them installed again."""
    from . import OPERATIONS

    parts = [op_routine(op, "s") for op in OPERATIONS]
    parts += [
        resources.files("sqlanon.sql").joinpath(name).read_text() for name in (*FILE_ROUTINES, *PLPYTHON_ROUTINES)
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def file_sql(name: str, schema: str, settings: Installation) -> str:
    """sql/<name> for the store `schema`: its placeholders filled in."""
    body = resources.files("sqlanon.sql").joinpath(name).read_text()
    s = quote_name(schema)
    folders = [f for f in settings.python_path.split(":") if f]
    replacements = {
        "{s}": s,  # in SQL
        "{schema_literal_sql}": quote_literal(schema),
        "{schema_literal}": repr(schema),  # in Python bodies
        "{load_sql}": repr(f"SELECT {s}.load_sqlanon()"),
        "{python_folders}": repr(folders),
    }
    for placeholder, value in replacements.items():
        body = body.replace(placeholder, value)
    return body


def installation_routine(schema: str, version: str, settings: Installation) -> str:
    def literal(value: str | None) -> str:
        return "CAST(NULL AS text)" if value is None else quote_literal(value)

    values = ", ".join(
        literal(v) for v in (version, digest(), settings.runner_role, settings.python_path, settings.socket_directory)
    )
    return (
        f"CREATE FUNCTION {quote_name(schema)}.installation() RETURNS TABLE (version text, routines text, "
        "runner_role text, python_path text, socket_directory text) LANGUAGE sql IMMUTABLE "
        f"SET search_path = pg_catalog, pg_temp AS $installation$ SELECT {values} $installation$"
    )


def check_python_path(path: str) -> None:
    """Folders for the server's Python: absolute, with no character that could end the routine body they are
    written into (the routine checks again, when it runs, that only root or the server's user may write them)."""
    for folder in path.split(":"):
        if not folder.startswith("/") or re.search(r"[$'\"\\\x00-\x1f\x7f]", folder):
            raise ConfigError(
                f"--python-path folder {folder!r} must be an absolute path without quotes, backslashes, "
                "'$' or control characters (folders are separated by ':')"
            )


def installed(conn: Connection, schema: str, known: bool | None = None) -> tuple[str, str, Installation] | None:
    """The store's (version, routines digest, settings) as its installation() routine returns them; None without
    one (`known`: whether it exists, when the caller already asked). Any role with USAGE on the schema may ask."""
    if known is None:
        known = conn.execute(
            text("SELECT to_regprocedure(:f) IS NOT NULL"), {"f": f"{quote_name(schema)}.installation()"}
        ).scalar_one()
    if not known:
        return None
    row = conn.execute(text(f"SELECT * FROM {quote_name(schema)}.installation()")).one()
    return row[0], row[1], Installation(row[2], row[3] or "", row[4])


def legacy_settings(conn: Connection, schema: str) -> Installation:
    """The settings a store kept in its server_settings table before they moved into installation()."""
    if not conn.execute(
        text("SELECT to_regclass(:t) IS NOT NULL"), {"t": f"{quote_name(schema)}.server_settings"}
    ).scalar_one():
        return Installation()
    values: dict[str, str] = dict(
        conn.execute(text(f"SELECT name, value FROM {quote_name(schema)}.server_settings")).tuples().all()
    )
    return Installation(None, values.get("python_path") or "", values.get("socket_directory"))


def plpython_usable(conn: Connection) -> bool:
    """Functions in PL/Python, an untrusted language, can only be created by a superuser."""
    installed_, available, superuser = conn.execute(
        text(
            "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'plpython3u'), "
            "EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'plpython3u'), "
            "(SELECT rolsuper FROM pg_roles WHERE rolname = current_user)"
        )
    ).one()
    return bool(superuser and (installed_ or available))


def default_runner_role(conn: Connection) -> str | None:
    """`sqlanon_runner_<database>`: a role per database, so a runner of one database is a runner of no other
    (None when the database's name does not make a plain role name: give one with --runner-role)."""
    database = conn.execute(text("SELECT current_database()")).scalar_one()
    name = f"sqlanon_runner_{database}"
    return name if re.fullmatch(r"[a-z_][a-z0-9_]*", name) and len(name) <= PG_MAX_NAME_BYTES else None


def install(conn: Connection, schema: str, version: str, settings: Installation) -> Installation:
    """(Re)install every routine of the store in `schema`, in the caller's transaction; returns the settings used.

    The runner role is created when it does not exist and the installing role may create roles (PostgreSQL's
    roles are the cluster's: the name carries the database); PL/Python routines only where PL/Python is usable.
    """
    from . import OPERATIONS

    s = quote_name(schema)
    uninstall(conn, schema)
    runner = settings.runner_role or default_runner_role(conn)
    if runner is not None and not _ensure_role(conn, runner):
        runner = None
    superuser = conn.execute(text("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")).scalar_one()
    socket = settings.socket_directory
    if superuser:  # unix_socket_directories is readable by superusers only; runners read it from installation()
        socket = conn.execute(
            text("SELECT trim(split_part(current_setting('unix_socket_directories'), ',', 1))")
        ).scalar_one()
    settings = Installation(runner, settings.python_path, socket)
    plpython = plpython_usable(conn)
    files = {**FILE_ROUTINES, **(PLPYTHON_ROUTINES if plpython else {})}
    if plpython:
        _ddl(conn, "CREATE EXTENSION IF NOT EXISTS plpython3u")
    for name in files:
        _ddl(conn, file_sql(name, schema, settings))
    _ddl(conn, installation_routine(schema, version, settings))
    for op in OPERATIONS:
        _ddl(conn, op_routine(op, schema))
    signatures = (
        [INSTALLATION.format(s=s)]
        + [_signature(op, schema) for op in OPERATIONS]
        + [sig.format(s=s) for routines in files.values() for sig, _ in routines]
    )
    for signature in signatures:
        kind, routine = signature.split(" ", 1)
        _ddl(conn, f"COMMENT ON {kind} {routine} IS {quote_literal(MARKER)}")
        _ddl(conn, f"REVOKE ALL ON {kind} {routine} FROM PUBLIC")
    if runner is not None:
        _ddl(conn, f"GRANT USAGE ON SCHEMA {s} TO {quote_name(runner)}")
        for signature in runner_routines(schema, plpython):
            kind, routine = signature.split(" ", 1)
            _ddl(conn, f"GRANT EXECUTE ON {kind} {routine} TO {quote_name(runner)}")
    _lock_tables(conn, schema, runner)
    return settings


def uninstall(conn: Connection, schema: str) -> None:
    """Drop every routine of the store (those marked as sqlanon's; nothing else of the schema)."""
    for routine, kind in conn.execute(
        text(
            "SELECT CAST(CAST(p.oid AS regprocedure) AS text), p.prokind FROM pg_proc p JOIN pg_namespace n ON "
            "n.oid = p.pronamespace WHERE n.nspname = :s AND obj_description(p.oid, 'pg_proc') = :m"
        ),
        {"s": schema, "m": MARKER},
    ).all():
        _ddl(conn, f"DROP {'PROCEDURE' if kind == 'p' else 'FUNCTION'} {routine}")


def _ensure_role(conn: Connection, role: str) -> bool:
    """Whether the runner role exists, after creating it (NOLOGIN) where the installing role may."""
    exists, may_create = conn.execute(
        text(
            "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :r), (SELECT rolsuper OR "
            "rolcreaterole FROM pg_roles "
            "WHERE rolname = current_user)"
        ),
        {"r": role},
    ).one()
    if not exists and may_create:
        _ddl(conn, f"CREATE ROLE {quote_name(role)} NOLOGIN")
    return bool(exists or may_create)


def _lock_tables(conn: Connection, schema: str, runner: str | None) -> None:
    """No role but the owner holds a privilege on the store's tables or sequence, or CREATE on its schema; only
    the runner role holds USAGE on it (grants made by hand before, such as older instructions gave, are revoked)."""
    s = quote_name(schema)
    for kind, name, grantee in conn.execute(
        text(
            "SELECT DISTINCT c.relkind, c.relname, r.rolname FROM pg_class c JOIN pg_namespace n ON n.oid = "
            "c.relnamespace, aclexplode(c.relacl) a LEFT JOIN pg_roles r ON r.oid = a.grantee WHERE n.nspname = :s "
            "AND a.grantee <> c.relowner"
        ),
        {"s": schema},
    ).all():
        what = "SEQUENCE" if kind == "S" else "TABLE"
        _ddl(conn, f"REVOKE ALL ON {what} {s}.{quote_name(name)} FROM {_grantee(grantee)}")
    for grantee in conn.execute(
        text(
            "SELECT DISTINCT r.rolname FROM pg_namespace n, aclexplode(n.nspacl) a LEFT JOIN pg_roles r ON r.oid = "
            "a.grantee WHERE n.nspname = :s AND a.grantee <> n.nspowner AND (r.rolname IS DISTINCT FROM :runner OR "
            "a.privilege_type <> 'USAGE')"
        ),
        {"s": schema, "runner": runner},
    ).scalars():
        _ddl(conn, f"REVOKE ALL ON SCHEMA {s} FROM {_grantee(grantee)}")
        if grantee is not None and grantee == runner:
            _ddl(conn, f"GRANT USAGE ON SCHEMA {s} TO {quote_name(grantee)}")


def _ddl(conn: Connection, sql: str) -> None:
    """One statement as it is, on the driver's cursor: no parameters, so nothing in routine bodies (colons,
    percent signs) is read as a placeholder."""
    with driver_connection(conn).cursor() as cursor:
        cursor.execute(sql)


def _grantee(role: str | None) -> str:
    """An ACL's grantee in SQL (role 0, shown as NULL here, is PUBLIC)."""
    return "PUBLIC" if role is None else quote_name(role)


# --- the store's routines called from inside the server (PL/Python's `plpy`, by sqlanon.inserver) ---------------
def server_address(plpy: Any, schema: str) -> dict[str, Any]:
    """This database's name (d), port and socket folder (socket: as installation() recorded it, or NULL)."""
    return dict(
        plpy.execute(
            "SELECT current_database() AS d, current_setting('port') AS port, i.socket_directory AS socket "
            f"FROM {quote_name(schema)}.installation() i"
        )[0]
    )


def job_registrant(plpy: Any, schema: str, job: str) -> str:
    """The role that registered `job`, asked of the store as the caller: its routine refuses a job that is not the
    caller's (nor one of its roles')."""
    plan = plpy.prepare(f"SELECT registered_by FROM {quote_name(schema)}.job_definition(p_job => $1)", ["text"])
    return str(plpy.execute(plan, [job])[0]["registered_by"])


def job_of_run(plpy: Any, schema: str, run_id: int) -> str:
    """The job of run `run_id`, asked of the store as the caller (its routine refuses another role's run)."""
    plan = plpy.prepare(f"SELECT job_name FROM {quote_name(schema)}.run_outcome(p_run => $1)", ["bigint"])
    return str(plpy.execute(plan, [run_id])[0]["job_name"])
