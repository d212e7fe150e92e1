"""Run records: a row of `runs` per search, opened when it starts and closed when it ends, and the cleanup of
runs whose session died (their status and their scratch tables)."""

from __future__ import annotations

import datetime as dt
import json
import os
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection

from ..backends import Database, progress_file
from ..errors import DataError
from ..model.names import run_of_table
from . import Store, runs
from .migrate import DEFAULT_SCHEMA


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


#: what a result shows its caller but a run record never keeps: published rows
UNRECORDED = ("preview",)
#: runs going on in this process, (database URL, schema, run id): on DuckDB the only live ones
LIVE_RUNS: set[tuple[str, str, int]] = set()


class RunRecord:
    """One row of `runs`: created when a search starts, closed when it ends. `work_schema` is where the run keeps
    its scratch tables (see Store.work_schema)."""

    def __init__(self, *, db: Database, schema: str, run_id: int, work_schema: str):
        """`db`: the database the run works in; its record lives in `db.metadata`."""
        self.data_db, self.db, self.schema, self.run_id = db, db.metadata, schema, run_id
        self.store, self.work_schema = Store(db, schema), work_schema

    @classmethod
    def start(
        cls,
        db: Database,
        conn: Connection,
        schema: str,
        job_name: str,
        command_name: str,
        strategy: str,
        config_json: str,
    ) -> RunRecord:
        """A new run, recorded with the session `conn` (the one that will do its work: on PostgreSQL the record
        keeps its backend, how a live run is told from a dead one)."""
        store, conn = Store(db, schema), db.metadata_connection(conn)
        with conn.begin():
            work = store.work_schema(conn)
            run_id = int(
                store.call(
                    conn,
                    runs.START,
                    job_name=job_name,
                    command=command_name,
                    strategy=strategy,
                    config=config_json,
                    started_at=now(),
                ).scalar_one()
            )
        LIVE_RUNS.add((store.db.url, schema, run_id))
        return cls(db=db, schema=schema, run_id=run_id, work_schema=work)

    @classmethod
    def reopen(cls, db: Database, conn: Connection, schema: str, run_id: int) -> RunRecord:
        """Mark an interrupted or failed run as running again in session `conn` (a resume continues it)."""
        store, conn = Store(db, schema), db.metadata_connection(conn)
        with conn.begin():
            work = store.work_schema(conn)
            store.call(conn, runs.REOPEN, run=run_id)
        LIVE_RUNS.add((store.db.url, schema, run_id))
        return cls(db=db, schema=schema, run_id=run_id, work_schema=work)

    def progress(self, conn: Connection, iteration: int, nodes_checked: int) -> None:
        """Recorded with the session's connection `conn` (its metadata connection where that is another)."""
        self.store.call(
            self.data_db.metadata_connection(conn),
            runs.PROGRESS,
            run=self.run_id,
            iteration=iteration,
            nodes_checked=nodes_checked,
        )
        self._write_side_file("running", iteration=iteration, nodes_checked=nodes_checked)

    def _write_side_file(self, status: str, **figures: Any) -> None:
        """DuckDB: the run's status also in a small file beside the database, which another process can read
        while this one holds the database's lock (see `side_file_status`)."""
        path = progress_file(self.db.url)
        if path is None:
            return
        partial = path.with_name(path.name + ".partial")
        partial.write_text(
            json.dumps(
                {
                    "run_id": self.run_id,
                    "status": status,
                    "pid": os.getpid(),
                    "updated_at": now().isoformat(sep=" ", timespec="seconds") + " UTC",
                    **figures,
                }
            )
        )
        os.replace(partial, path)  # readers see the old state or the new one, never half of it

    def finish(self, result: dict[str, Any]) -> None:
        """Close the run with its result, but for the first rows of what it published (`preview`): those belong
        to the output, which only its readers may read, not to a record of the run."""
        self._close("finished", json.dumps({k: v for k, v in result.items() if k not in UNRECORDED}), None)

    def fail(self, error: str) -> None:
        self._close("failed", None, error)

    def cancel(self, reason: str) -> None:
        self._close("cancelled", None, reason)

    def _close(self, status: str, result: str | None, error: str | None) -> None:
        LIVE_RUNS.discard((self.db.url, self.schema, self.run_id))
        self._write_side_file(status, error=error)
        with self.db.begin() as conn:
            self.store.call(
                conn, runs.CLOSE, run=self.run_id, status=status, finished_at=now(), result=result, error=error
            )


def resumable_run(db: Database, schema: str, job_name: str, command: str, config: str) -> int:
    """The run a resume continues: the caller's latest `command` run of the job, when it did not finish and ran
    the same job (`config`, the job's JSON record: a changed job would continue a search of another lattice or
    other criteria). Called after the runs of dead sessions were closed, so a run still marked running is live."""
    store = Store(db, schema)
    with db.metadata.connect() as conn:
        last = store.call(conn, runs.LAST_OF_JOB, job=job_name, command=command).first()
    start_over = "run it without --resume to start over"
    if last is None:
        raise DataError(f"job {job_name!r} has no earlier {command} run in this database to resume; {start_over}")
    run_id, status, recorded = int(last[0]), last[1], json.loads(last[2])
    if status == "finished":
        raise DataError(f"the last {command} run of job {job_name!r} (run {run_id}) finished; nothing to resume")
    if status == "running":
        raise DataError(f"run {run_id} of job {job_name!r} is still running; wait for it, or stop it first")
    changed = sorted(k for k, v in json.loads(config).items() if recorded.get(k) != v)
    if changed:
        raise DataError(
            f"job {job_name!r} changed since run {run_id} stopped ({', '.join(changed)}); a resume continues the "
            f"same job: {start_over}"
        )
    return run_id


def cleanup_dead_runs(db: Database, schema: str = DEFAULT_SCHEMA) -> tuple[list[int], list[str]]:
    """Close the runs whose session died (status interrupted) and drop the scratch tables (in the caller's work
    schema) of every run of the caller's that ended without finishing.

    PostgreSQL: a run is dead when no backend with its pid and start time is
    alive. DuckDB: one process writes the file at a time, so a run still
    marked running when this process holds it is dead. Returns the runs
    closed and the tables dropped.
    """
    store = Store(db, schema)
    db = db.metadata
    with db.begin() as conn:
        dead = [int(r) for r in store.call(conn, runs.DEAD).scalars()]
        if not db.concurrent_sessions:
            dead = [r for r in dead if (db.url, schema, r) not in LIVE_RUNS]
        if dead:
            store.call(
                conn,
                runs.INTERRUPT,
                ids=dead,
                finished_at=now(),
                error="its session ended before the run did (killed or disconnected)",
            )
        work = store.work_schema(conn)
        tables = (
            conn.execute(
                text(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = :s "
                    "AND table_catalog = current_database()"
                ),
                {"s": work},
            )
            .scalars()
            .all()
        )
        owners = {r for r in map(run_of_table, tables) if r is not None}
        ended = set(store.call(conn, runs.UNFINISHED, ids=sorted(owners)).scalars()) if owners else set()
        dropped = [t for t in tables if run_of_table(t) in ended]
        for table in dropped:
            db.drop_table(conn, f"{db.q(work)}.{db.q(table)}")
    return dead, sorted(dropped)
