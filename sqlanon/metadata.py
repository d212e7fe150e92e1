"""sqlanon's own schema in the user's database: migrations and run records.

The schema (default `sqlanon`) is created and upgraded by the Alembic
migrations under migrations/. Each search is a row in `runs`, with its lattice
nodes, edges and frequency-set registry in the tables beside it.
"""
from __future__ import annotations

import datetime as dt
import json
from importlib import resources
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.ddl.impl import DefaultImpl
from sqlalchemy import text
from sqlalchemy.engine import Connection

from .backends import Database

DEFAULT_SCHEMA = "sqlanon"


class DuckDBImpl(DefaultImpl):
    """Alembic knows no DuckDB dialect; DuckDB runs DDL inside transactions like PostgreSQL."""

    __dialect__ = "duckdb"
    transactional_ddl = True


def _alembic_config(conn: Connection, schema: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(resources.files("sqlanon.migrations")))
    cfg.attributes["connection"] = conn
    cfg.attributes["schema"] = schema
    return cfg


def migrate(db: Database, schema: str = DEFAULT_SCHEMA, revision: str = "head") -> None:
    """Create or upgrade the metadata schema (idempotent)."""
    with db.begin() as conn:
        command.upgrade(_alembic_config(conn, schema), revision)


def downgrade(db: Database, schema: str = DEFAULT_SCHEMA, revision: str = "-1") -> None:
    with db.begin() as conn:
        command.downgrade(_alembic_config(conn, schema), revision)


def current_version(db: Database, schema: str = DEFAULT_SCHEMA) -> str | None:
    """The schema's migration revision, or None when it has none."""
    with db.connect() as conn:
        if not db.table_exists(conn, schema, "alembic_version"):
            return None
        return conn.execute(text(f"SELECT version_num FROM {db.q(schema)}.alembic_version")).scalar()


def stored_sql(name: str, schema: str, quoted_schema: str) -> str:
    """sql/<name> for the metadata schema: its placeholders filled in (migrations install these files)."""
    body = resources.files("sqlanon.sql").joinpath(name).read_text()
    replacements = {
        "{s}": quoted_schema,  # in SQL
        "{schema_literal_sql}": "'" + schema.replace("'", "''") + "'",
        "{schema_literal}": repr(schema),  # in Python bodies
        "{load_sql}": repr(f"SELECT {quoted_schema}.load_sqlanon()"),
    }
    for placeholder, value in replacements.items():
        body = body.replace(placeholder, value)
    return body


def stored_routines(db: Database, schema: str = DEFAULT_SCHEMA) -> set[str]:
    """Names of the functions and procedures installed in the schema (PostgreSQL; empty elsewhere)."""
    if db.kind != "postgresql":
        return set()
    with db.connect() as conn:
        return set(conn.execute(text("SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                                     "WHERE n.nspname = :s"), {"s": schema}).scalars())


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


class RunRecord:
    """One row of `runs`: created when a search starts, closed when it ends."""

    def __init__(self, db: Database, schema: str, run_id: int):
        self.db, self.schema, self.run_id = db, schema, run_id

    @classmethod
    def start(cls, db: Database, schema: str, job_name: str, command_name: str, strategy: str,
              config_json: str) -> "RunRecord":
        s = db.q(schema)
        with db.begin() as conn:
            run_id = conn.execute(text(f"SELECT nextval('{schema_literal(schema)}.run_ids')")).scalar_one()
            conn.execute(text(f"INSERT INTO {s}.runs (run_id, job_name, command, strategy, config, status, "
                              "started_at) VALUES (:r, :j, :c, :st, :cfg, 'running', :t)"),
                         {"r": run_id, "j": job_name, "c": command_name, "st": strategy, "cfg": config_json,
                          "t": now()})
        return cls(db, schema, int(run_id))

    @classmethod
    def reopen(cls, db: Database, schema: str, run_id: int) -> "RunRecord":
        """Mark an interrupted or failed run as running again (a resume continues it)."""
        with db.begin() as conn:
            conn.execute(text(f"UPDATE {db.q(schema)}.runs SET status = 'running', finished_at = NULL, error = NULL "
                              "WHERE run_id = :r"), {"r": run_id})
            conn.execute(text(f"DELETE FROM {db.q(schema)}.run_attributes WHERE run_id = :r"), {"r": run_id})
        return cls(db, schema, run_id)

    def progress(self, conn: Connection, iteration: int, nodes_checked: int) -> None:
        conn.execute(text(f"UPDATE {self.db.q(self.schema)}.runs SET iteration = :i, nodes_checked = :n "
                          "WHERE run_id = :r"), {"i": iteration, "n": nodes_checked, "r": self.run_id})

    def finish(self, result: dict[str, Any]) -> None:
        self._close("finished", json.dumps(result), None)

    def fail(self, error: str) -> None:
        self._close("failed", None, error)

    def _close(self, status: str, result: str | None, error: str | None) -> None:
        with self.db.begin() as conn:
            conn.execute(text(f"UPDATE {self.db.q(self.schema)}.runs SET status = :s, finished_at = :t, "
                              "result = :res, error = :e WHERE run_id = :r"),
                         {"s": status, "t": now(), "res": result, "e": error, "r": self.run_id})


def schema_literal(schema: str) -> str:
    """The schema name as it appears inside a regclass string literal: nextval('"schema".seq')."""
    return '"' + schema.replace('"', '""').replace("'", "''") + '"'
