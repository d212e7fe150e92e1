"""sqlanon's own schema in the user's database: migrations and run records.

The schema (default `sqlanon`) is created and upgraded by the Alembic
migrations under migrations/, and on PostgreSQL its routines are installed
after them (sqlanon.store.postgres). Each search is a row in `runs`, with its
lattice nodes, edges and frequency-set registry in the tables beside it, all
reached through the store's operations (sqlanon.store).
"""

from __future__ import annotations

import functools
import re
from dataclasses import replace
from importlib import resources
from typing import Any

import sqlalchemy as sa
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from ..backends import PG_MAX_NAME_BYTES, Database
from ..errors import ConfigError, DataError
from . import postgres as routines

DEFAULT_SCHEMA = "sqlanon"


@functools.cache
def _teach_alembic_duckdb() -> None:
    from alembic.ddl.impl import DefaultImpl

    class DuckDBImpl(DefaultImpl):  # registered with Alembic by being defined
        """Alembic knows no DuckDB dialect; DuckDB runs DDL inside transactions like PostgreSQL."""

        __dialect__ = "duckdb"
        transactional_ddl = True


def _alembic(conn: Connection, schema: str) -> tuple[Any, Any]:
    """Alembic's commands and a configuration for `conn`. Imported here, when a schema is created or changed:
    importing Alembic is 0.2 s, a fifth of a whole `sqlanon search` process."""
    from alembic import command
    from alembic.config import Config

    _teach_alembic_duckdb()
    cfg = Config()
    cfg.set_main_option("script_location", str(resources.files("sqlanon.migrations")))
    cfg.attributes["connection"] = conn
    cfg.attributes["schema"] = schema
    return command, cfg


@functools.cache
def head_revision() -> str:
    """The newest migration's revision: the one no other migration names as its down_revision (read from the
    files, so that a schema already at head is checked without importing Alembic)."""
    revisions, parents = set(), set()
    for file in resources.files("sqlanon.migrations").joinpath("versions").iterdir():
        if file.name.endswith(".py"):
            body = file.read_text()
            revisions.update(re.findall(r'^revision\s*=\s*"([^"]+)"', body, re.M))
            parents.update(re.findall(r'^down_revision\s*=\s*"([^"]+)"', body, re.M))
    (head,) = revisions - parents
    return str(head)


def check_schema_name(schema: str) -> None:
    """sqlanon's own schema has a plain name: it appears in lock keys, sequence literals and stored functions."""
    if not isinstance(schema, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", schema):
        raise ConfigError(
            f"metadata schema name {schema!r} may hold only letters, digits and underscores (and "
            "not start with a digit); choose e.g. sqlanon_meta"
        )
    if len(schema) > PG_MAX_NAME_BYTES:
        raise ConfigError(
            f"metadata schema name {schema[:20]!r}... has {len(schema)} characters; use at most {PG_MAX_NAME_BYTES}"
        )


def migrate(
    db: Database,
    schema: str = DEFAULT_SCHEMA,
    revision: str = "head",
    runner_role: str | None = None,
    python_path: str | None = None,
) -> None:
    """Create or upgrade the metadata schema (idempotent), and on PostgreSQL (re)install the store's routines
    (see sqlanon.store.postgres): when they are missing or from another version, or when a setting is given
    (`runner_role`: the database's runner role; `python_path`: the folders the server's Python imports sqlanon from,
    which only a superuser may set)."""
    check_schema_name(schema)
    if python_path is not None:
        if not db.metadata.stored_routines:
            raise ConfigError("--python-path is for PostgreSQL with PL/Python (CALL sqlanon.run_job)")
        routines.check_python_path(python_path)
    db = db.metadata
    settings = runner_role is not None or python_path is not None
    try:
        if revision == "head" and not settings and _at_head(db, schema):
            return
        with db.begin() as conn:
            if python_path is not None and not db.is_superuser(conn):
                raise DataError(
                    "only a superuser may set the folders the server's Python imports sqlanon from "
                    "(they decide what code the server runs)"
                )
            previous = _settings(conn, schema) if db.stored_routines else None
            command, cfg = _alembic(conn, schema)
            command.upgrade(cfg, revision)
            if previous is not None and revision == "head":
                routines.install(
                    conn,
                    schema,
                    head_revision(),
                    replace(
                        previous,
                        runner_role=runner_role or previous.runner_role,
                        python_path=previous.python_path if python_path is None else python_path,
                    ),
                )
    except DBAPIError as exc:
        if getattr(exc.orig, "sqlstate", None) != "42501":  # insufficient_privilege
            raise
        user = db.engine.url.username or "the role"
        raise DataError(
            f"role {user!r} may not create or upgrade sqlanon's metadata schema {schema!r} "
            f"({str(exc.orig).strip().splitlines()[0]}); its owner upgrades it with: sqlanon migrate --db "
            f"URL --metadata-schema {schema} (or ask a DBA for: CREATE SCHEMA {db.q(schema)} "
            f"AUTHORIZATION {db.q(user)}, or pass --metadata-schema naming a schema the role owns)"
        ) from None


def grant_runner(db: Database, schema: str, role: str, revoke: bool = False) -> dict[str, str | None]:
    """Let `role` run sqlanon in `schema` (or no longer: `revoke`), through the schema's grant_runner routine with
    the caller's rights (PostgreSQL). Returns the runner role and the role's work schema."""
    check_schema_name(schema)
    if not db.metadata.roles:
        raise ConfigError(
            f"grant-runner is for PostgreSQL; {db.metadata.kind} has no roles (whoever opens the file has all of it)"
        )
    migrate(db, schema)
    db = db.metadata
    with db.begin() as conn:
        try:
            procedure = "revoke_runner" if revoke else "grant_runner"
            call = db.routine_call(schema, procedure, [("runner", "r", "name")], rows=False, procedure=True)
            conn.execute(text(call), {"r": role})
        except DBAPIError as exc:
            detail = getattr(exc.orig, "diag", None)
            raise DataError(str(getattr(detail, "message_primary", None) or exc.orig).strip().splitlines()[0]) from None
        work_schema_of = db.routine_call(schema, "work_schema_of", [("role", "r", "name")], rows=False)
        work = conn.execute(text(work_schema_of), {"r": role}).scalar()
        found = routines.installed(conn, schema)
    return {"runner_role": found[2].runner_role if found else None, "work_schema": work}


def _at_head(db: Database, schema: str) -> bool:
    """Whether the schema is at the newest revision, with the routines of this sqlanon (PostgreSQL: read from its
    installation() routine, which runners may call; only the schema's owner could upgrade it)."""
    if not db.stored_routines:
        return current_version(db, schema) == head_revision()
    with db.connect() as conn:
        user, exists, usable, installed = db.schema_access(conn, schema, f"{db.q(schema)}.installation()")
        if exists and not usable:
            raise DataError(
                f"role {user!r} may not use sqlanon's schema {schema!r}; a DBA sets the role up with: "
                f"sqlanon grant-runner {user} --db URL --metadata-schema {schema} (or pass "
                "--metadata-schema naming a schema of the role's own)"
            )
        found = routines.installed(conn, schema, known=installed)
        if found is None:
            return False
        version, digest, _ = found
        if (version, digest) == (head_revision(), routines.digest()):
            return True
        owner = db.member_of_schema_owner(conn, schema)
    if not owner:
        raise DataError(
            f"sqlanon's schema {schema!r} was installed by another version of sqlanon (schema "
            f"{version}, routines {digest}; this one needs {head_revision()}, {routines.digest()}); its "
            f"owner upgrades it with: sqlanon migrate --db URL --metadata-schema {schema}"
        )
    return False


def _settings(conn: Connection, schema: str) -> routines.Installation:
    """The store's settings as installed (or as an older schema kept them in its server_settings table)."""
    found = routines.installed(conn, schema)
    return found[2] if found is not None else routines.legacy_settings(conn, schema)


def downgrade(db: Database, schema: str = DEFAULT_SCHEMA, revision: str = "-1") -> None:
    """Downgrade the schema's tables; on PostgreSQL the store's routines go first (they read the newest tables;
    `migrate` installs them again)."""
    check_schema_name(schema)
    with db.metadata.begin() as conn:
        if db.metadata.stored_routines:
            routines.uninstall(conn, schema)
        command, cfg = _alembic(conn, schema)
        command.downgrade(cfg, revision)


def current_version(db: Database, schema: str = DEFAULT_SCHEMA) -> str | None:
    """The schema's migration revision, or None when it has none."""
    check_schema_name(schema)
    db = db.metadata
    with db.connect() as conn:
        if db.stored_routines:
            found = routines.installed(conn, schema)
            if found is not None:
                return found[0]
        if not db.table_exists(conn, schema, "alembic_version"):
            return None
        version = sa.table("alembic_version", sa.column("version_num"), schema=schema)
        return conn.execute(sa.select(version.c.version_num)).scalar()


def stored_routines(db: Database, schema: str = DEFAULT_SCHEMA) -> set[str]:
    """Names of the functions and procedures installed in the schema (PostgreSQL; empty elsewhere)."""
    if not db.stored_routines:
        return set()
    with db.connect() as conn:
        return db.routine_names(conn, schema)
