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

How a routine, a grant or a call is spelled in PostgreSQL is `backends.postgres_routines`'; this module says which
routines there are, what each checks and does, and installs them.

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

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..backends import PG_MAX_NAME_BYTES, PostgreSQL, quote_literal, quote_name
from ..backends import postgres_routines as pg
from ..errors import ConfigError
from .ops import ANALYZE, LATTICE_TABLES, REFUSED, Insert, Op, render

#: the comment that marks a routine as sqlanon's (reinstalling drops exactly these)
MARKER = "sqlanon routine"

#: what a guard checks before an operation runs (see Op.guard): (when it refuses, the message, its arguments); the
#: refusal names nothing of another role's
GUARDS = {
    "run": (
        "NOT EXISTS (SELECT 1 FROM {s}.runs r WHERE r.run_id = p_run AND {mine:r.owner_role})",
        "there is no run %s in schema %L",
        ("p_run", "{schema}"),
    ),
    "job": (
        "NOT EXISTS (SELECT 1 FROM {s}.jobs j WHERE j.name = p_job AND {mine:j.registered_by})",
        "no job named %L is registered in schema %L; register it with: sqlanon job register %s FILE --db URL",
        ("p_job", "{schema}", "p_job"),
    ),
    "job_free": (
        "EXISTS (SELECT 1 FROM {s}.jobs j WHERE j.name = p_job AND NOT {mine:j.registered_by})",
        "a job named %L is registered by another role in schema %L; choose another name",
        ("p_job", "{schema}"),
    ),
    # a record of another role's stays while its table still carries the record's token (see Ownership)
    "table_free": (
        "EXISTS (SELECT 1 FROM {s}.owned_tables o WHERE o.schema_name = p_schema_name AND o.table_name = "
        "p_table_name AND NOT {mine:o.owner_role} AND {carries_token:o})",
        "table %I.%I is recorded as written by sqlanon for another role",
        ("p_schema_name", "p_table_name"),
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
    returns = getattr(op, "returns", ())
    if isinstance(op, Insert):
        body = pg.insert_body(f"{s}.{op.table}", op.columns, op.replace)
    else:
        last = len(op.sql) - 1
        body = "\n".join(
            pg.analyze([f"{s}.{t}" for t in LATTICE_TABLES])
            if sql == ANALYZE
            else pg.execute(_render(sql, schema), returns if i == last else ())
            for i, sql in enumerate(op.sql)
        )
    return pg.function(schema, op.name, op.params, returns, _guard(op.guard, schema), body)


def _render(sql: str, schema: str) -> str:
    return render(sql, schema, PostgreSQL.store_spelling)


def _guard(kind: str | None, schema: str) -> pg.Guard | None:
    if kind is None:
        return None
    failing, message, args = GUARDS[kind]
    literal = quote_literal(schema)
    return pg.Guard(_render(failing, schema), message, tuple(a.replace("{schema}", literal) for a in args), REFUSED)


def _signature(op: Op | Insert, schema: str) -> str:
    return pg.signature(schema, op.name, [kind for _, kind in op.params])


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
    "pseudonym_keys.sql": (
        ("FUNCTION {s}.pseudonym_key_refused(text)", False),
        ("FUNCTION {s}.pseudonym(text, text)", True),
    ),
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
        "{load_sql}": repr(pg.call(schema, "load_sqlanon", (), rows=False)),
        "{python_folders}": repr(folders),
    }
    for placeholder, value in replacements.items():
        body = body.replace(placeholder, value)
    return body


#: what installation() returns: the version, the routines' digest, then the settings (Installation's fields)
INSTALLATION_COLUMNS = (
    ("version", "text"),
    ("routines", "text"),
    ("runner_role", "text"),
    ("python_path", "text"),
    ("socket_directory", "text"),
)


def installation_routine(schema: str, version: str, settings: Installation) -> str:
    values = (version, digest(), settings.runner_role, settings.python_path, settings.socket_directory)
    return pg.constant_function(schema, "installation", INSTALLATION_COLUMNS, values)


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
    row = pg.rows_of(conn, schema, "installation", known)
    if row is None:
        return None
    return row[0], row[1], Installation(row[2], row[3] or "", row[4])


def legacy_settings(conn: Connection, schema: str) -> Installation:
    """The settings a store kept in its server_settings table before they moved into installation()."""
    if not pg.relation_exists(conn, schema, "server_settings"):
        return Installation()
    table = sa.table("server_settings", sa.column("name"), sa.column("value"), schema=schema)
    values: dict[str, str] = dict(conn.execute(sa.select(table.c.name, table.c.value)).tuples().all())
    return Installation(None, values.get("python_path") or "", values.get("socket_directory"))


def default_runner_role(conn: Connection) -> str | None:
    """`sqlanon_runner_<database>`: a role per database, so a runner of one database is a runner of no other
    (None when the database's name does not make a plain role name: give one with --runner-role)."""
    name = f"sqlanon_runner_{pg.database_name(conn)}"
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
    if runner is not None and not pg.ensure_role(conn, runner):
        runner = None
    socket = settings.socket_directory
    if pg.is_superuser(conn):
        socket = pg.socket_directory(conn)  # readable by superusers only; runners read it from installation()
    settings = Installation(runner, settings.python_path, socket)
    plpython = pg.plpython_usable(conn)
    files = {**FILE_ROUTINES, **(PLPYTHON_ROUTINES if plpython else {})}
    if plpython:
        pg.enable_plpython(conn)
    for name in files:
        pg.ddl(conn, file_sql(name, schema, settings))
    pg.ddl(conn, installation_routine(schema, version, settings))
    for op in OPERATIONS:
        pg.ddl(conn, op_routine(op, schema))
    signatures = (
        [INSTALLATION.format(s=s)]
        + [_signature(op, schema) for op in OPERATIONS]
        + [sig.format(s=s) for routines in files.values() for sig, _ in routines]
    )
    for signature in signatures:
        pg.mark(conn, signature, MARKER)
    if runner is not None:
        pg.grant_execute(conn, runner_routines(schema, plpython), schema, runner)
    pg.keep_to_owner(conn, schema, runner)
    return settings


def uninstall(conn: Connection, schema: str) -> None:
    """Drop every routine of the store (those marked as sqlanon's; nothing else of the schema)."""
    pg.drop_marked(conn, schema, MARKER)


# --- the store's routines called from inside the server (PL/Python's `plpy`, by sqlanon.inserver) ---------------
def server_address(plpy: Any, schema: str) -> dict[str, Any]:
    """This database's name (d), port and socket folder (socket: as installation() recorded it, or NULL)."""
    return pg.server_address(plpy, schema, "installation")


def job_registrant(plpy: Any, schema: str, job: str) -> str:
    """The role that registered `job`, asked of the store as the caller: its routine refuses a job that is not the
    caller's (nor one of its roles')."""
    return str(pg.call_in_server(plpy, schema, "job_definition", ("p_job", "text"), job)["registered_by"])


def job_of_run(plpy: Any, schema: str, run_id: int) -> str:
    """The job of run `run_id`, asked of the store as the caller (its routine refuses another role's run)."""
    return str(pg.call_in_server(plpy, schema, "run_outcome", ("p_run", "bigint"), run_id)["job_name"])
