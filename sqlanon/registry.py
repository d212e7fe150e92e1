"""Registered jobs: a configuration and its files stored in sqlanon's schema, run by name.

A DBA registers a job once (`sqlanon job register NAME FILE --db URL`); from
then on it runs against that database alone: the hierarchy and groups files it
names are stored in `job_files` and read from there (never from the disk of
the machine that runs it). A job belongs to the role that registered it, and
runs with that role's rights only. One run of a job at a time: on
PostgreSQL a session-level advisory lock, held by a dedicated connection for
the whole run, refuses a second one and vanishes with a killed client, which
is how an interrupted run is told from a live one.

A layer above `config` (it checks a stored configuration as a job file is checked); its rows are read and written
through the store's operations (`store.jobs`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from sqlalchemy.engine import Connection

from .backends import Database, normalize_url, open_database, quote_literal, quote_name
from .config import job_from_dict, read_config_file
from .errors import ConfigError, DataError, SqlanonError
from .model.hierarchies import stored_files
from .model.job import Job
from .publish.methods import METHODS
from .publish.ownership import TableName
from .store import Store, jobs, runs
from .store.migrate import migrate
from .store.records import LIVE_RUNS, now

#: what a registered job's file names are read against: a folder of no machine (see hierarchies.stored_files)
STORED_ROOT = Path("/stored-job")


@dataclass(kw_only=True)
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
        return {
            "run_id": self.run_id,
            "command": self.command,
            "status": self.status,
            "iteration": self.iteration,
            "nodes_checked": self.nodes_checked,
            "started_at": str(self.started_at),
            "finished_at": None if self.finished_at is None else str(self.finished_at),
            "error": self.error,
        }


class JobRegistry:
    """The registered jobs of one metadata schema (through the store's operations, sqlanon.store.jobs)."""

    def __init__(self, db: Database, schema: str, data: Database | None = None):
        """`db`: where sqlanon's tables are (the metadata store); `data`: the database the jobs read (by default
        the same)."""
        self.db, self.schema, self.store, self.data = db, schema, Store(db, schema), data or db

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

        The whole config is checked (as `job_from_dict` does, its files read from what was given) before anything
        is stored. A name another role registered is refused (PostgreSQL).
        """
        if not name or not isinstance(name, str):
            raise ConfigError("a job needs a non-empty name")
        if not isinstance(config, dict):
            raise ConfigError("the config must be a mapping (key: value)")
        _refuse_file_access(config)
        files = _rewrite_files(config, read)
        with stored_files(_stored_files(files)):
            job = job_from_dict(_on_database(config, self.data.url), STORED_ROOT, default_name=name)
            if not job.source.table:
                raise ConfigError("a registered job reads a table of its database: add source: {table: TABLE}")
            self._check_outputs(job)
        with self.db.begin() as conn:
            self.store.call(
                conn,
                jobs.REGISTER,
                job=name,
                config=json.dumps(config),  # key order: QI priority
                registered_at=now(),
                paths=list(files),
                contents=list(files.values()),
            )
        return len(files)

    def _check_outputs(self, job: Job) -> None:
        """An output that is the job's source (names compared as the database resolves them) is refused when the
        job is registered, not at its first run."""
        if job.output is None:
            return
        tables = METHODS[job.output.method].tables(job.output)
        schema = job.output.schema or job.source.schema
        with self.data.connect() as conn:
            source = TableName(self.data.resolved_schema(conn, job.source.schema), job.source.table)
            for table in tables:
                target = TableName(self.data.resolved_schema(conn, schema), table)
                if target.same_as(source, self.data):
                    raise ConfigError(
                        f"output table {str(target)!r} is the source table {str(source)!r} (names are "
                        f"compared as {self.data.name_rule}); sqlanon never writes over its source: "
                        "choose another output.table"
                    )

    @contextmanager
    def load(self, name: str, db_url: str) -> Iterator[Job]:
        """The registered job against `db_url` (a URL as `backends.normalize_url` gives it), its files read from the
        database while the context lasts.

        A job runs with the rights of the role that registered it, and only on that role's own connection: a
        session that switched to the role (SET ROLE) could switch back, so running a job another role registered
        with a DBA's session would run that role's views and functions with the DBA's rights. A DBA runs such a
        job in the server (CALL sqlanon.run_job), which connects as the registrant.
        """
        with self.db.connect() as conn:
            row = self.store.call(conn, jobs.DEFINITION, job=name).first()
            if row is None:
                raise ConfigError(
                    f"no job named {name!r} is registered in schema {self.schema!r}; "
                    f"register it with: sqlanon job register {name} FILE --db URL"
                )
            files = dict(self.store.call(conn, jobs.FILES, job=name).all())
            self._check_registrant(conn, name, row[1])
        config = json.loads(row[0])
        if not isinstance(config, dict):
            raise ConfigError(f"the stored config of job {name!r} is not a mapping; register the job again")
        _refuse_file_access(config)  # stored rows are data: checked again, whoever wrote them
        _check_file_references(name, config, files)
        with stored_files(_stored_files(files)):
            job = job_from_dict(_on_database(config, db_url), STORED_ROOT, default_name=name)
            yield replace(job, name=name).with_url(db_url)  # runs are recorded under the registered name

    def _check_registrant(self, conn: Connection, name: str, registrant: str | None) -> None:
        """Refuse a job registered by another role than the session's (PostgreSQL; see `load`)."""
        if not self.db.roles:
            return
        caller = self.db.session_role(conn)
        if registrant == caller:
            return
        raise DataError(
            f"job {name!r} was registered by role {registrant!r} and runs with that role's rights, on "
            f"a connection of that role only; connect as {registrant!r}, or run it in the server, which "
            f"connects as its registrant: CALL {quote_name(self.schema)}.run_job(job => "
            f"CAST({quote_literal(name)} AS text))"
        )

    # --- listing ----------------------------------------------------------------
    def jobs(self) -> list[dict[str, Any]]:
        """Every registered job (the caller's) with its latest run."""
        with self.db.connect() as conn:
            rows = self.store.call(conn, jobs.LIST).all()
        return [
            {
                "name": n,
                "registered_at": str(at),
                "last_run": run_id,
                "status": self._status(n, status, run_id) if status else None,
                "started_at": None if started is None else str(started),
            }
            for n, at, run_id, status, started in rows
        ]

    def runs(self, name: str, limit: int = 10) -> list[RunSummary]:
        """The job's latest runs, newest first."""
        with self.db.connect() as conn:
            rows = self.store.call(conn, jobs.RUNS, job=name, most=int(limit)).all()
        return [
            RunSummary(
                run_id=int(r[0]),
                command=r[1],
                status=self._status(name, r[2], int(r[0])),
                iteration=int(r[3]),
                nodes_checked=int(r[4]),
                started_at=r[5],
                finished_at=r[6],
                error=r[7],
            )
            for r in rows
        ]

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
                raise DataError(
                    f"job {name!r} is already running{which}; wait for it, or check it with: sqlanon job status {name}"
                )
            conn.commit()
            try:
                yield
            finally:
                self._unlock(conn, name)
                conn.commit()

    def _try_lock(self, conn: Connection, name: str) -> bool:
        return self.db.try_session_lock(conn, f"sqlanon:{self.schema}", name)

    def _unlock(self, conn: Connection, name: str) -> None:
        self.db.release_session_lock(conn, f"sqlanon:{self.schema}", name)

    def job_of_run(self, run_id: int) -> str:
        """The registered job a finished run belongs to."""
        with self.db.connect() as conn:
            row = self.store.call(conn, runs.OUTCOME, run=run_id).first()
        if row is None:
            raise DataError(f"there is no run {run_id} in schema {self.schema!r}")
        job_name, _, status, _ = row
        if status != "finished":
            raise DataError(f"run {run_id} is {status}, not finished; publish a node of a finished run")
        return str(job_name)

    def resumable_run(self, name: str) -> int:
        """The run a resume continues: the job's latest, when it did not finish.

        Called while holding the job's lock, so a run still marked running has no live session.
        """
        with self.db.connect() as conn:
            last = self.store.call(conn, jobs.LAST_RUN, job=name).first()
        if last is None:
            raise DataError(f"job {name!r} has never run; start it with: sqlanon job run {name}")
        if last[1] == "finished":
            raise DataError(f"the last run of job {name!r} (run {last[0]}) finished; nothing to resume")
        return int(last[0])

    def mark_interrupted(self, name: str, superseded_by: str) -> None:
        """Close runs left 'running' by a dead session as failed."""
        with self.db.begin() as conn:
            self.store.call(
                conn,
                jobs.FAIL_RUNNING,
                job=name,
                finished_at=now(),
                error=f"interrupted (no live session); {superseded_by}",
            )


@contextmanager
def opened_registry(db_url: str, schema: str) -> Iterator[JobRegistry]:
    """The registry of `schema` in the database at `db_url` (a URL or DuckDB path), migrated first."""
    db = open_database(normalize_url(db_url, Path.cwd()))
    try:
        migrate(db, schema)
        yield JobRegistry(db.metadata, schema, db)  # sqlanon's own tables: in the metadata store
    finally:
        db.dispose()


def _on_database(config: dict[str, Any], url: str) -> dict[str, Any]:
    """The config as it reads on the database it is registered in: a registered job runs there whatever its
    source.url says, so the URL may be left out (the stored config keeps what was given)."""
    source = config.get("source")
    if isinstance(source, dict) and source.get("url") is None:
        return {**config, "source": {**source, "url": url}}
    return config


def _refuse_file_access(config: dict[str, Any]) -> None:
    """A registered job reaches no file of the machine it runs on: no CSV or Parquet file to read, no spill
    folder, no key file (its hierarchies are its stored files)."""
    source = config["source"] if isinstance(config.get("source"), dict) else {}
    if source.get("csv"):
        raise ConfigError(
            "a registered job reads a table already in the database: load the file first "
            "(sqlanon load FILE --table T --db URL) and remove source.csv from the config"
        )
    for key in ("parquet", "temp_directory"):
        if source.get(key):
            raise ConfigError(
                f"a registered job reaches no file or folder of the machine that runs it: remove "
                f"source.{key} from the config"
            )
    identifying = config.get("identifying")
    actions = identifying.values() if isinstance(identifying, dict) else []
    if any(
        isinstance(a, dict) and isinstance(a.get("pseudonym"), dict) and "key_file" in a["pseudonym"] for a in actions
    ):
        raise ConfigError(
            "a registered job cannot read a pseudonym key from a file of the machine that runs it; "
            "use pseudonym: {key_env: VARIABLE}"
        )
    output = config.get("output")
    noise_key = output.get("noise_key") if isinstance(output, dict) else None
    if isinstance(noise_key, dict) and "key_file" in noise_key:
        raise ConfigError(
            "a registered job cannot read a noise key from a file of the machine that runs it; use noise_key: "
            "{key_env: VARIABLE}, or leave noise_key out for fresh noise on every run"
        )


def _file_references(config: dict[str, Any]) -> Iterator[tuple[Any, str, Callable[[str], None]]]:
    """Every file the config names: (its path, where, a setter that points it elsewhere)."""

    def setter(mapping: dict[str, Any], key: str) -> Callable[[str], None]:
        return lambda value: mapping.__setitem__(key, value)

    qis = config.get("quasi_identifiers")
    if isinstance(qis, dict):
        for column, spec in qis.items():
            if isinstance(spec, str):
                yield spec, f"quasi_identifiers.{column}", setter(qis, column)
            elif isinstance(spec, dict) and spec.get("hierarchy") is not None:
                yield spec["hierarchy"], f"quasi_identifiers.{column}.hierarchy", setter(spec, "hierarchy")
            elif isinstance(spec, dict) and spec.get("generate") == "groups" and isinstance(spec.get("groups"), str):
                yield spec["groups"], f"quasi_identifiers.{column}.groups", setter(spec, "groups")  # a mapping file
    criteria = config.get("criteria")
    if isinstance(criteria, dict):
        for criterion, spec in criteria.items():
            if isinstance(spec, dict) and spec.get("hierarchy") is not None:
                yield spec["hierarchy"], f"criteria.{criterion}.hierarchy", setter(spec, "hierarchy")


def _rewrite_files(config: dict[str, Any], read: Callable[[str, str], str]) -> dict[str, str]:
    """Point the config's file references at stored names; returns stored name -> the file's text."""
    found: dict[str, str] = {}
    for original, where, point_to in list(_file_references(config)):
        if not isinstance(original, str):
            raise ConfigError(f"{where} must be a file path")
        stored = f"files/{len(found)}_{PurePosixPath(original.replace(chr(92), '/')).name}"
        found[stored] = read(original, where)
        point_to(stored)
    return found


def _check_file_references(name: str, config: dict[str, Any], files: dict[str, str]) -> None:
    """Every file a stored config names is one of its stored files (never a path of the server's)."""
    for path, where, _ in _file_references(config):
        if path not in files:
            raise ConfigError(
                f"job {name!r}: {where} names {path!r}, which is not among the job's stored files; "
                "register the job again (sqlanon job register)"
            )


def _stored_files(files: dict[str, str]) -> dict[Path, str]:
    """A registered job's files by the path its config, read against STORED_ROOT, names them with. Stored names
    are data: each must be a plain relative path (none is ever written to disk: see hierarchies.stored_files)."""
    found = {}
    for stored, content in files.items():
        parts = PurePosixPath(stored).parts if isinstance(stored, str) else ()
        if (
            not parts
            or PurePosixPath(stored).is_absolute()
            or "\\" in stored
            or any(part in ("", ".", "..") for part in parts)
            or "\0" in stored
        ):
            raise ConfigError(f"stored job file {stored!r} is not a plain relative path; register the job again")
        found[(STORED_ROOT / stored).resolve()] = content
    return found


__all__ = ["JobRegistry", "RunSummary", "SqlanonError"]
