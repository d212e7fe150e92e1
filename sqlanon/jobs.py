"""Registered jobs: a configuration and its files stored in sqlanon's schema, run by name.

A DBA registers a job once (`sqlanon job register NAME FILE --db URL`); from
then on it runs against that database alone, whoever starts it: the
hierarchy files it names are stored in `job_files` and written to a private
temporary folder for the length of a run. One run of a job at a time: on
PostgreSQL a session-level advisory lock, held by a dedicated connection for
the whole run, refuses a second one and vanishes with a killed client, which
is how an interrupted run is told from a live one.
"""
from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterator

from sqlalchemy import text
from sqlalchemy.engine import Connection

from .backends import Database, open_database, with_role
from .config import Job, job_from_dict, normalize_url, read_config_file
from .errors import ConfigError, DataError, SqlanonError
from .metadata import LIVE_RUNS, migrate, now


@dataclass
class RunSummary:
    run_id: int
    command: str
    status: str  # running | finished | failed | interrupted (running, but no live session holds the job)
    iteration: int
    nodes_checked: int
    started_at: Any
    finished_at: Any
    error: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "command": self.command, "status": self.status, "iteration": self.iteration,
                "nodes_checked": self.nodes_checked, "started_at": str(self.started_at),
                "finished_at": None if self.finished_at is None else str(self.finished_at), "error": self.error}


class JobRegistry:
    """The `jobs` and `job_files` tables of one metadata schema."""

    def __init__(self, db: Database, schema: str):
        self.db, self.schema, self.s = db, schema, db.q(schema)

    # --- registering ------------------------------------------------------------
    def register(self, name: str, config_file: Path) -> int:
        """Store (or replace) the job `name` from a YAML file; returns how many files it names."""
        config_file = Path(config_file)
        config = read_config_file(config_file)
        folder = config_file.parent

        def read(path: str, where: str) -> str:
            if not (folder / path).is_file():
                raise ConfigError(f"{where}: file {path!r} not found (relative to {str(folder)!r})")
            return (folder / path).read_text()

        return self.register_config(name, config, read)

    def register_config(self, name: str, config: Any, read: Callable[[str, str], str]) -> int:
        """Store (or replace) the job `name` from a parsed config; `read(path, where)` gives a named file's text.

        The whole config is checked (as `job_from_dict` does) before anything is stored.
        """
        if not name or not isinstance(name, str):
            raise ConfigError("a job needs a non-empty name")
        if not isinstance(config, dict):
            raise ConfigError("the config must be a mapping (key: value)")
        _refuse_file_access(config)
        files = _rewrite_files(config, read)
        with _materialized(config, files) as folder:
            job_from_dict(config, folder, default_name=name)
        with self.db.begin() as conn:
            conn.execute(text(f"DELETE FROM {self.s}.job_files WHERE job_name = :n"), {"n": name})
            conn.execute(text(f"DELETE FROM {self.s}.jobs WHERE name = :n"), {"n": name})
            conn.execute(text(f"INSERT INTO {self.s}.jobs (name, config, registered_at) VALUES (:n, :c, :t)"),
                         {"n": name, "c": json.dumps(config), "t": now()})  # key order matters: QI priority
            if files:
                conn.execute(text(f"INSERT INTO {self.s}.job_files (job_name, path, content) VALUES (:n, :p, :c)"),
                             [{"n": name, "p": p, "c": c} for p, c in files.items()])
        return len(files)

    @contextmanager
    def load(self, name: str, db_url: str) -> Iterator[Job]:
        """The registered job against `db_url`, its files on disk while the context lasts."""
        with self.db.connect() as conn:
            row = conn.execute(text(f"SELECT config, registered_by FROM {self.s}.jobs WHERE name = :n"),
                               {"n": name}).first()
            if row is None:
                raise ConfigError(f"no job named {name!r} is registered in schema {self.schema!r}; "
                                  f"register it with: sqlanon job register {name} FILE --db URL")
            files = dict(conn.execute(text(f"SELECT path, content FROM {self.s}.job_files WHERE job_name = :n"),
                                      {"n": name}).all())
            run_as = self._registrant_role(conn, name, row[1])
        config = json.loads(row[0])
        if not isinstance(config, dict):
            raise ConfigError(f"the stored config of job {name!r} is not a mapping; register the job again")
        _refuse_file_access(config)  # stored rows are data: checked again, whoever wrote them
        _check_file_references(name, config, files)
        with _materialized(config, files) as folder:
            job = job_from_dict(config, folder, default_name=name)
            # runs are recorded under the registered name, and work with the rights of the job's registrant
            try:
                yield replace(job, name=name).with_url(with_role(db_url, run_as))
            except SqlanonError as exc:
                if run_as is None:
                    raise
                raise type(exc)(f"{exc} (job {name!r} runs as role {run_as!r}, who last registered or changed "
                                "it)") from None

    def _registrant_role(self, conn: Connection, name: str, registrant: str | None) -> str | None:
        """The role a run of the job must work as: whoever last wrote the job or its files (PostgreSQL).

        None when that is the calling role already. Whoever may write the job
        tables decides what a run drops, replaces and grants; so the run has
        that role's rights, never the caller's, and only a member of it may
        start it (a superuser is a member of every role).
        """
        if not self.db.roles:
            return None
        if registrant is None:
            raise ConfigError(f"job {name!r} was stored before sqlanon recorded who registers jobs; register it "
                              f"again: sqlanon job register {name} FILE --db URL")
        caller, exists, member = conn.execute(text(
            "SELECT current_user, r.oid IS NOT NULL, r.oid IS NOT NULL AND pg_has_role(current_user, r.oid, "
            "'MEMBER') FROM (SELECT 1) one LEFT JOIN pg_roles r ON r.rolname = :r"), {"r": registrant}).one()
        if registrant == caller:
            return None
        if not member:
            fix = (f"run it as {registrant!r}, or register the job again as {caller!r}" if exists else
                   f"no role of that name exists any more: register the job again as {caller!r}")
            raise DataError(f"job {name!r} was registered (or last changed) by role {registrant!r} and runs with "
                            f"that role's rights only; role {caller!r} is not a member of it: {fix}")
        return registrant

    # --- listing ----------------------------------------------------------------
    def jobs(self) -> list[dict[str, Any]]:
        """Every registered job with its latest run."""
        with self.db.connect() as conn:
            rows = conn.execute(text(
                f"SELECT j.name, j.registered_at, r.run_id, r.status, r.started_at FROM {self.s}.jobs j "
                f"LEFT JOIN (SELECT job_name, MAX(run_id) AS run_id FROM {self.s}.runs GROUP BY job_name) l "
                f"ON l.job_name = j.name LEFT JOIN {self.s}.runs r ON r.run_id = l.run_id ORDER BY j.name")).all()
        return [{"name": n, "registered_at": str(at), "last_run": run_id,
                 "status": self._status(n, status, run_id) if status else None,
                 "started_at": None if started is None else str(started)} for n, at, run_id, status, started in rows]

    def runs(self, name: str, limit: int = 10) -> list[RunSummary]:
        """The job's latest runs, newest first."""
        with self.db.connect() as conn:
            rows = conn.execute(text(
                f"SELECT run_id, command, status, iteration, nodes_checked, started_at, finished_at, error "
                f"FROM {self.s}.runs WHERE job_name = :n ORDER BY run_id DESC LIMIT {int(limit)}"), {"n": name}).all()
        return [RunSummary(int(r[0]), r[1], self._status(name, r[2], int(r[0])), int(r[3]), int(r[4]), r[5], r[6],
                           r[7]) for r in rows]

    def _status(self, name: str, status: str, run_id: int | None = None) -> str:
        """A run still marked running with no live session is shown as interrupted."""
        if status != "running":
            return status
        if self.db.concurrent_sessions:
            return "running" if self.is_held(name) else "interrupted"
        # DuckDB: one process writes the file at a time, so only this process's own runs can be live
        return "running" if (self.db.url, self.schema, run_id) in LIVE_RUNS else "interrupted"

    # --- one run at a time ------------------------------------------------------
    def is_held(self, name: str) -> bool:
        """Whether a live session runs the job (always False on DuckDB, where one process owns the file)."""
        if not self.db.concurrent_sessions:
            return False
        with self.db.connect() as conn:
            if self._try_lock(conn, name):
                self._unlock(conn, name)
                return False
            return True

    @contextmanager
    def exclusive(self, name: str) -> Iterator[None]:
        """Hold the job's advisory lock for the whole block, or refuse with the running run's number."""
        if not self.db.concurrent_sessions:  # DuckDB: a second process cannot open the file for writing
            yield
            return
        with self.db.connect() as conn:
            if not self._try_lock(conn, name):
                running = [r for r in self.runs(name, 1) if r.status == "running"]
                which = f" (run {running[0].run_id}, started {running[0].started_at})" if running else ""
                raise DataError(f"job {name!r} is already running{which}; wait for it, or check it with: "
                                f"sqlanon job status {name}")
            conn.commit()
            try:
                yield
            finally:
                self._unlock(conn, name)
                conn.commit()

    def _lock_keys(self, name: str) -> dict[str, str]:
        return {"space": f"sqlanon:{self.schema}", "name": name}

    def _try_lock(self, conn: Connection, name: str) -> bool:
        return bool(conn.execute(text("SELECT pg_try_advisory_lock(hashtext(:space), hashtext(:name))"),
                                 self._lock_keys(name)).scalar_one())

    def _unlock(self, conn: Connection, name: str) -> None:
        conn.execute(text("SELECT pg_advisory_unlock(hashtext(:space), hashtext(:name))"), self._lock_keys(name))

    def job_of_run(self, run_id: int) -> str:
        """The registered job a finished run belongs to."""
        with self.db.connect() as conn:
            row = conn.execute(text(f"SELECT job_name, status FROM {self.s}.runs WHERE run_id = :r"),
                               {"r": run_id}).first()
        if row is None:
            raise DataError(f"there is no run {run_id} in schema {self.schema!r}")
        if row[1] != "finished":
            raise DataError(f"run {run_id} is {row[1]}, not finished; publish a node of a finished run")
        return row[0]

    def resumable_run(self, name: str) -> int:
        """The run a resume continues: the job's latest, when it did not finish.

        Called while holding the job's lock, so a run still marked running has no live session.
        """
        with self.db.connect() as conn:
            last = conn.execute(text(f"SELECT run_id, status FROM {self.s}.runs WHERE job_name = :n "
                                     "ORDER BY run_id DESC LIMIT 1"), {"n": name}).first()
        if last is None:
            raise DataError(f"job {name!r} has never run; start it with: sqlanon job run {name}")
        if last[1] == "finished":
            raise DataError(f"the last run of job {name!r} (run {last[0]}) finished; nothing to resume")
        return int(last[0])

    def mark_interrupted(self, name: str, superseded_by: str) -> None:
        """Close runs left 'running' by a dead session as failed."""
        with self.db.begin() as conn:
            conn.execute(text(f"UPDATE {self.s}.runs SET status = 'failed', finished_at = :t, "
                              "error = :e WHERE job_name = :n AND status = 'running'"),
                         {"t": now(), "e": f"interrupted (no live session); {superseded_by}", "n": name})


@contextmanager
def opened_registry(db_url: str, schema: str) -> Iterator[JobRegistry]:
    """The registry of `schema` in the database at `db_url` (a URL or DuckDB path), migrated first."""
    db = open_database(normalize_url(db_url, Path.cwd()))
    try:
        migrate(db, schema)
        yield JobRegistry(db.metadata, schema)  # sqlanon's own tables: in the metadata store
    finally:
        db.dispose()


def _refuse_file_access(config: dict) -> None:
    """A registered job reaches no file of the machine it runs on: no CSV to load, no key file."""
    if (config.get("source") or {}).get("csv"):
        raise ConfigError("a registered job reads a table already in the database: load the file first "
                          "(sqlanon load FILE --table T --db URL) and remove source.csv from the config")
    identifying = config.get("identifying")
    actions = identifying.values() if isinstance(identifying, dict) else []
    if any(isinstance(a, dict) and isinstance(a.get("pseudonym"), dict) and "key_file" in a["pseudonym"]
           for a in actions):
        raise ConfigError("a registered job cannot read a pseudonym key from a file of the machine that runs it; "
                          "use pseudonym: {key_env: VARIABLE}")


def _file_references(config: dict) -> Iterator[tuple[Any, str, Callable[[str], None]]]:
    """Every file the config names: (its path, where, a setter that points it elsewhere)."""
    def setter(mapping: dict, key: str) -> Callable[[str], None]:
        return lambda value: mapping.__setitem__(key, value)

    qis = config.get("quasi_identifiers")
    if isinstance(qis, dict):
        for column, spec in qis.items():
            if isinstance(spec, str):
                yield spec, f"quasi_identifiers.{column}", setter(qis, column)
            elif isinstance(spec, dict) and spec.get("hierarchy") is not None:
                yield spec["hierarchy"], f"quasi_identifiers.{column}.hierarchy", setter(spec, "hierarchy")
    criteria = config.get("criteria")
    if isinstance(criteria, dict):
        for criterion, spec in criteria.items():
            if isinstance(spec, dict) and spec.get("hierarchy") is not None:
                yield spec["hierarchy"], f"criteria.{criterion}.hierarchy", setter(spec, "hierarchy")


def _rewrite_files(config: dict, read: Callable[[str, str], str]) -> dict[str, str]:
    """Point the config's file references at stored names; returns stored name -> the file's text."""
    found: dict[str, str] = {}
    for original, where, point_to in list(_file_references(config)):
        if not isinstance(original, str):
            raise ConfigError(f"{where} must be a file path")
        stored = f"files/{len(found)}_{PurePosixPath(original.replace(chr(92), '/')).name}"
        found[stored] = read(original, where)
        point_to(stored)
    return found


def _check_file_references(name: str, config: dict, files: dict[str, str]) -> None:
    """Every file a stored config names is one of its stored files (never a path of the server's)."""
    for path, where, _ in _file_references(config):
        if path not in files:
            raise ConfigError(f"job {name!r}: {where} names {path!r}, which is not among the job's stored files; "
                              "register the job again (sqlanon job register)")


def _stored_path(folder: Path, stored: str) -> Path:
    """Where a stored file goes: a plain relative path inside the job's folder, or an error."""
    if not isinstance(stored, str):
        raise ConfigError(f"stored job file {stored!r} is not a path; register the job again")
    parts = PurePosixPath(stored).parts
    if (not parts or PurePosixPath(stored).is_absolute() or "\\" in stored
            or any(part in ("", ".", "..") for part in parts) or "\0" in stored):
        raise ConfigError(f"stored job file {stored!r} is not a plain relative path; register the job again")
    return folder.joinpath(*parts)


@contextmanager
def _materialized(config: dict, files: dict[str, str]) -> Iterator[Path]:
    """A private temporary folder holding the job's stored files under their stored names.

    Stored names are data: each must be a plain relative path (no absolute
    path, no `..`), and files are created new (O_EXCL, no link followed), so
    nothing is written outside the folder.
    """
    with tempfile.TemporaryDirectory(prefix="sqlanon-job-") as folder:
        root = Path(folder)
        for stored, content in files.items():
            path = _stored_path(root, stored)
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.parent.resolve() != root.resolve() and root.resolve() not in path.parent.resolve().parents:
                raise ConfigError(f"stored job file {stored!r} would leave the job's folder")
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
            with os.fdopen(os.open(path, flags, 0o600), "w") as fh:
                fh.write(content)
        yield root


__all__ = ["JobRegistry", "RunSummary", "SqlanonError"]
