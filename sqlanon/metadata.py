"""sqlanon's own schema in the user's database: migrations and run records.

The schema (default `sqlanon`) is created and upgraded by the Alembic
migrations under migrations/. Each search is a row in `runs`, with its lattice
nodes, edges and frequency-set registry in the tables beside it.
"""
from __future__ import annotations

import datetime as dt
import functools
import json
import os
import re
from importlib import resources
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from .backends import PG_MAX_NAME_BYTES, Database, progress_file
from .errors import ConfigError, DataError

DEFAULT_SCHEMA = "sqlanon"
#: the role that may call the PL/Python routines (granted by a DBA to the roles that run jobs from SQL)
RUNNER_ROLE = "sqlanon_runner"


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
    return head


def check_schema_name(schema: str) -> None:
    """sqlanon's own schema has a plain name: it appears in lock keys, sequence literals and stored functions."""
    if not isinstance(schema, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", schema):
        raise ConfigError(f"metadata schema name {schema!r} may hold only letters, digits and underscores (and "
                          "not start with a digit); choose e.g. sqlanon_meta")
    if len(schema) > PG_MAX_NAME_BYTES:
        raise ConfigError(f"metadata schema name {schema[:20]!r}... has {len(schema)} characters; use at most "
                          f"{PG_MAX_NAME_BYTES}")


def migrate(db: Database, schema: str = DEFAULT_SCHEMA, revision: str = "head") -> None:
    """Create or upgrade the metadata schema (idempotent)."""
    check_schema_name(schema)
    db = db.metadata
    try:
        if revision == "head" and current_version(db, schema) == head_revision():
            return
        with db.begin() as conn:
            command, cfg = _alembic(conn, schema)
            command.upgrade(cfg, revision)
    except DBAPIError as exc:
        if getattr(exc.orig, "sqlstate", None) != "42501":  # insufficient_privilege
            raise
        user = db.engine.url.username or "the role"
        raise DataError(f"role {user!r} may not create or upgrade sqlanon's metadata schema {schema!r} "
                        f"({str(exc.orig).strip().splitlines()[0]}); ask a DBA for: CREATE SCHEMA {db.q(schema)} "
                        f"AUTHORIZATION {db.q(user)}, or pass --metadata-schema naming a schema the role owns"
                        ) from None


def set_python_path(db: Database, schema: str, path: str) -> None:
    """Where the server's Python finds sqlanon (PL/Python), in the table only its owner may write."""
    check_schema_name(schema)
    if not db.stored_routines:
        raise ConfigError("--python-path is for PostgreSQL with PL/Python (CALL sqlanon.run_job)")
    with db.begin() as conn:
        if not db.table_exists(conn, schema, "server_settings"):
            raise DataError(f"schema {schema!r} has no server_settings table: PL/Python routines are installed only "
                            "when a superuser migrates a server with PL/Python (postgresql-plpython3-NN)")
        try:
            with conn.begin_nested():
                conn.execute(text(f"DELETE FROM {db.q(schema)}.server_settings WHERE name = 'python_path'"))
                conn.execute(text(f"INSERT INTO {db.q(schema)}.server_settings VALUES ('python_path', :p)"),
                             {"p": path})
        except DBAPIError:
            raise DataError(f"only the owner of {schema}.server_settings (the superuser who installed sqlanon) may "
                            "set the server's Python path") from None


def downgrade(db: Database, schema: str = DEFAULT_SCHEMA, revision: str = "-1") -> None:
    check_schema_name(schema)
    with db.metadata.begin() as conn:
        command, cfg = _alembic(conn, schema)
        command.downgrade(cfg, revision)


def current_version(db: Database, schema: str = DEFAULT_SCHEMA) -> str | None:
    """The schema's migration revision, or None when it has none."""
    check_schema_name(schema)
    db = db.metadata
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
        "{settings_table}": repr(f"{quoted_schema}.server_settings"),
    }
    for placeholder, value in replacements.items():
        body = body.replace(placeholder, value)
    return body


def stored_routines(db: Database, schema: str = DEFAULT_SCHEMA) -> set[str]:
    """Names of the functions and procedures installed in the schema (PostgreSQL; empty elsewhere)."""
    if not db.stored_routines:
        return set()
    with db.connect() as conn:
        return set(conn.execute(text("SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                                     "WHERE n.nspname = :s"), {"s": schema}).scalars())


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


#: runs going on in this process, (database URL, schema, run id): on DuckDB the only live ones
LIVE_RUNS: set[tuple[str, str, int]] = set()


class RunRecord:
    """One row of `runs`: created when a search starts, closed when it ends."""

    def __init__(self, db: Database, schema: str, run_id: int):
        """`db`: the database the run works in; its record lives in `db.metadata`."""
        self.data_db, self.db, self.schema, self.run_id = db, db.metadata, schema, run_id

    @classmethod
    def start(cls, db: Database, conn: Connection, schema: str, job_name: str, command_name: str, strategy: str,
              config_json: str) -> "RunRecord":
        """A new run, recorded with the session `conn` (the one that will do its work)."""
        meta, conn = db.metadata, db.metadata_connection(conn)
        s = meta.q(schema)
        with conn.begin():
            run_id = conn.execute(text(f"SELECT nextval('{schema_literal(schema)}.run_ids')")).scalar_one()
            conn.execute(text(f"INSERT INTO {s}.runs (run_id, job_name, command, strategy, config, status, "
                              "started_at) VALUES (:r, :j, :c, :st, :cfg, 'running', :t)"),
                         {"r": run_id, "j": job_name, "c": command_name, "st": strategy, "cfg": config_json,
                          "t": now()})
            cls._attach(meta, conn, schema, int(run_id))
        LIVE_RUNS.add((meta.url, schema, int(run_id)))
        return cls(db, schema, int(run_id))

    @classmethod
    def reopen(cls, db: Database, conn: Connection, schema: str, run_id: int) -> "RunRecord":
        """Mark an interrupted or failed run as running again in session `conn` (a resume continues it)."""
        meta, conn = db.metadata, db.metadata_connection(conn)
        with conn.begin():
            conn.execute(text(f"UPDATE {meta.q(schema)}.runs SET status = 'running', finished_at = NULL, error = NULL "
                              "WHERE run_id = :r"), {"r": run_id})
            conn.execute(text(f"DELETE FROM {meta.q(schema)}.run_attributes WHERE run_id = :r"), {"r": run_id})
            cls._attach(meta, conn, schema, run_id)
        LIVE_RUNS.add((meta.url, schema, run_id))
        return cls(db, schema, run_id)

    @staticmethod
    def _attach(db: Database, conn: Connection, schema: str, run_id: int) -> None:
        """Record the run's session (PostgreSQL: backend pid and start time), how liveness is told later."""
        if not db.concurrent_sessions:
            return
        conn.execute(text(f"UPDATE {db.q(schema)}.runs SET backend_pid = pg_backend_pid(), backend_start = "
                          "(SELECT CAST(backend_start AS TEXT) FROM pg_stat_activity WHERE pid = pg_backend_pid()) "
                          "WHERE run_id = :r"), {"r": run_id})

    def progress(self, conn: Connection, iteration: int, nodes_checked: int) -> None:
        """Recorded with the session's connection `conn` (its metadata connection where that is another)."""
        conn = self.data_db.metadata_connection(conn)
        conn.execute(text(f"UPDATE {self.db.q(self.schema)}.runs SET iteration = :i, nodes_checked = :n "
                          "WHERE run_id = :r"), {"i": iteration, "n": nodes_checked, "r": self.run_id})
        self._write_side_file("running", iteration=iteration, nodes_checked=nodes_checked)

    def _write_side_file(self, status: str, **figures: Any) -> None:
        """DuckDB: the run's status also in a small file beside the database, which another process can read
        while this one holds the database's lock (see `side_file_status`)."""
        path = progress_file(self.db.url)
        if path is None:
            return
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps({"run_id": self.run_id, "status": status, "pid": os.getpid(),
                                       "updated_at": now().isoformat(sep=" ", timespec="seconds") + " UTC", **figures}))
        os.replace(partial, path)  # readers see the old state or the new one, never half of it

    def finish(self, result: dict[str, Any]) -> None:
        self._close("finished", json.dumps(result), None)

    def fail(self, error: str) -> None:
        self._close("failed", None, error)

    def cancel(self, reason: str) -> None:
        self._close("cancelled", None, reason)

    def _close(self, status: str, result: str | None, error: str | None) -> None:
        LIVE_RUNS.discard((self.db.url, self.schema, self.run_id))
        self._write_side_file(status, error=error)
        with self.db.begin() as conn:
            conn.execute(text(f"UPDATE {self.db.q(self.schema)}.runs SET status = :s, finished_at = :t, "
                              "result = :res, error = :e WHERE run_id = :r"),
                         {"s": status, "t": now(), "res": result, "e": error, "r": self.run_id})


def cleanup_dead_runs(db: Database, schema: str = DEFAULT_SCHEMA) -> tuple[list[int], list[str]]:
    """Close the runs whose session died (status interrupted) and drop the dimension tables of every run
    that ended without finishing.

    PostgreSQL: a run is dead when no backend with its pid and start time is
    alive. DuckDB: one process writes the file at a time, so a run still
    marked running when this process holds it is dead. Returns the runs
    closed and the tables dropped.
    """
    db = db.metadata
    s = db.q(schema)
    with db.begin() as conn:
        if db.concurrent_sessions:
            dead = conn.execute(text(
                f"SELECT run_id FROM {s}.runs r WHERE status = 'running' AND NOT EXISTS (SELECT 1 FROM "
                # another role's backend_start may be hidden (NULL): then the pid alone keeps the run alive
                "pg_stat_activity a WHERE a.pid = r.backend_pid AND (a.backend_start IS NULL OR "
                "CAST(a.backend_start AS TEXT) = r.backend_start)) ORDER BY run_id")).scalars().all()
        else:
            running = conn.execute(text(f"SELECT run_id FROM {s}.runs WHERE status = 'running' ORDER BY run_id")
                                   ).scalars().all()
            dead = [r for r in running if (db.url, schema, int(r)) not in LIVE_RUNS]
        tables = conn.execute(text("SELECT table_name FROM information_schema.tables WHERE table_schema = :s "
                                   "AND table_catalog = current_database()"), {"s": schema}).scalars().all()
        ended = set(dead) | _ended_without_finishing(conn, s, tables)
        dropped = [t for t in tables if _run_of_table(t) in ended]
        for table in dropped:
            db.drop_table(conn, f"{s}.{db.q(table)}")
        if dead:
            conn.execute(text(f"UPDATE {s}.runs SET status = 'interrupted', finished_at = :t, error = "
                              "'its session ended before the run did (killed or disconnected)' "
                              f"WHERE run_id IN ({', '.join(str(int(r)) for r in dead)})"), {"t": now()})
    return [int(r) for r in dead], sorted(dropped)


def _run_of_table(name: str) -> int | None:
    """The run a dimension (dim_<run>_<attr>), parent-code (parents_<run>) or search scratch table
    (packed_cube_<run>, packed_rows_<run>: see Database.create_run_scratch) belongs to."""
    found = re.fullmatch(r"dim_(\d+)_\d+|parents_(\d+)|packed_(?:cube|rows)_(\d+)", name)
    return int(next(run for run in found.groups() if run)) if found else None


def _ended_without_finishing(conn: Connection, s: str, tables: list[str]) -> set[int]:
    """Failed, interrupted or cancelled runs that still own tables (their session died before its cleanup).
    Finished runs keep theirs: that is what --keep asks for."""
    runs = {r for r in map(_run_of_table, tables) if r is not None}
    if not runs:
        return set()
    return set(conn.execute(text(f"SELECT run_id FROM {s}.runs WHERE status IN ('failed', 'interrupted', "
                                 "'cancelled') AND "
                                 f"run_id IN ({', '.join(map(str, sorted(runs)))})")).scalars())


def schema_literal(schema: str) -> str:
    """The schema name as it appears inside a regclass string literal: nextval('"schema".seq')."""
    return '"' + schema.replace('"', '""').replace("'", "''") + '"'
