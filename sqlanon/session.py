"""Sequencing a run: everything around a search or a publication, written once, in one run object.

A verb opens a `Run` and does its own work on it; the run does the rest. `lattice_run` opens the job's database
(DuckDB's memory settings applied; a file a failed command created is removed again), migrates sqlanon's
schema, checks the source (loading `source.csv` first) and every output target, cleans up the tables of runs
killed earlier, records the run, builds the star schema, and on the way out drops the run's scratch tables and
records how the run ended (finished, failed with its cause, or cancelled). `table_run` is the same for a
command without a lattice (anatomy, Mondrian, inference, a plugged-in method), and `table_reader` opens a
table that a command reads but never writes (audit, the analysis of a published table). The verbs in
`sqlanon.api` call these; nothing else sequences a run.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection

from .backends import CSV_OPTIONS, Database, duckdb_file, first_line, normalize_url, open_database, progress_file
from .criteria import Criterion
from .engine.star import (
    KeptDimension,
    KeptDimensions,
    StarSchema,
    build_star_schema,
    check_columns,
    check_one_row_per_person,
    generated_hierarchy,
    hierarchy_files,
    read_hierarchy_files,
)
from .errors import ConfigError, DataError, RunCancelled, SqlanonError, interrupted
from .model.frames import MEMORY_URL, SourceFrame
from .model.hierarchies import Hierarchy, HierarchyFile
from .model.job import Job, Output, require_lattice
from .model.progress import Progress
from .publish.generalize import check_output
from .publish.identifiers import Pseudonyms
from .publish.ledger import LEDGER
from .publish.ownership import FRAME_PATH, OwnedTable, Ownership, TableName, file_digest
from .registry import JobRegistry, opened_registry
from .search.strategies import SearchContext
from .store.migrate import DEFAULT_SCHEMA, migrate
from .store.records import RunRecord, cleanup_dead_runs, resumable_run


def on_db(job: Job, url: str | None) -> Job:
    """The job against the database at `url` (a URL or a bare DuckDB file path; None: the job's own). A job
    without a source of its own (no `source:` in its config) is refused here, before anything runs."""
    job = job.with_url(normalize_url(url, Path.cwd()) if url else None)
    if not job.source.url or not job.source.table:
        raise ConfigError(
            "the job has no source: add source: {url: DATABASE, table: TABLE} (or source.csv) to its config, "
            "or, from Python, pass a DataFrame as the source: search(job, source=frame)"
        )
    return job


@dataclass(kw_only=True)
class RunOptions:
    """How a job runs, beyond the job itself."""

    db_url: str | None = None
    metadata_schema: str = DEFAULT_SCHEMA
    keep: bool = False  # keep the run's dimension tables (its star schema) for inspection
    progress: Progress = field(default=lambda phase, done, total: None)
    metrics: bool = False  # compute utility metrics of every minimal node
    resume_run: int | None = None  # continue this interrupted run instead of starting one (see run_job)
    resume: bool = False  # continue the job's latest run of the same command, when it stopped unfinished
    memory_limit: str | None = None  # DuckDB: overrides source.memory_limit (config.check_memory_limit)
    temp_directory: Path | None = None  # DuckDB: overrides source.temp_directory


class Checked(Protocol):
    """Something a run writes, checked before the run starts (see `checked_source`)."""

    setting: str  # the job's setting that names it, for errors

    def check(self, db: Database, conn: Connection, ownership: Ownership, source: TableName | None) -> TableName | None:
        """Refuse a target that cannot be written (rights, not sqlanon's, the source); returns its resolved name."""


@dataclass(kw_only=True)
class Target:
    """Where a run publishes, checked before its search: the output, its resolved name, the pseudonym keys."""

    output: Output
    replace: bool
    setting: str = "output.table"
    pseudonyms: Pseudonyms = field(default_factory=Pseudonyms, repr=False)
    resolved: tuple[TableName, TableName] | None = None  # (output, source), once checked against the database

    @property
    def name(self) -> TableName:
        assert self.resolved is not None, "the target is checked before the run"
        return self.resolved[0]

    @property
    def source(self) -> TableName:
        assert self.resolved is not None, "the target is checked before the run"
        return self.resolved[1]

    def check(self, db: Database, conn: Connection, ownership: Ownership, source: TableName | None) -> TableName:
        assert source is not None, "a published table is made from the source"
        self.pseudonyms.check_held(db, conn, ownership.metadata_schema)
        self.resolved = (check_output(db, conn, ownership, self.output, source, self.replace), source)
        return self.resolved[0]


@dataclass(kw_only=True)
class Run:
    """An open run: the job (against the database it runs on), that database, the run's connection and record,
    and the source's columns and types (empty for a run that reads no source); a lattice run has its search
    context too. The verb's work goes on `conn`; `finish` records the run's summary."""

    job: Job
    options: RunOptions
    db: Database
    conn: Connection
    record: RunRecord
    columns: dict[str, str]
    search: SearchContext | None = None

    @property
    def id(self) -> int:
        return self.record.run_id

    @property
    def ownership(self) -> Ownership:
        """The record of the tables sqlanon made, in the run's metadata schema."""
        return Ownership(self.db, self.options.metadata_schema)

    @property
    def ctx(self) -> SearchContext:
        assert self.search is not None, "a lattice run (lattice_run) has a search context"
        return self.search

    def finish(self, summary: dict[str, Any]) -> None:
        self.record.finish(summary)


@contextmanager
def job_database(job: Job, options: RunOptions) -> Iterator[Database]:
    """The job's database for the block, with DuckDB's memory limit and spill folder from the options, else the
    job. A DuckDB file that does not exist yet is created only for a job that loads a file into it (a job without
    one reads a table the file would have), and is removed again when the block fails before anything of the
    user's was stored there: a failed command leaves no new file, sqlanon's schema alone included."""
    file = duckdb_file(job.source.url)
    new = file is not None and not file.exists()
    if new and not job.source.loads():
        raise DataError(
            f"database file {file} does not exist, and the job loads no file into it (source.csv): "
            "check source.url (or --db)"
        )
    memory = options.memory_limit or job.source.memory_limit
    temp = options.temp_directory or job.source.temp_directory
    db = open_database(job.source.url, memory, temp)
    if not db.memory_settings and (memory or temp):
        warnings.warn(
            "memory_limit and temp_directory apply to DuckDB; on PostgreSQL the server's settings "
            "(work_mem, temp_tablespaces) govern memory and spills",
            UserWarning,
            stacklevel=3,
        )
    try:
        yield db
    except BaseException:
        db.dispose()
        if new and file is not None:
            remove_if_unused(file, options.metadata_schema)
        raise
    finally:
        db.dispose()


def remove_if_unused(file: Path, schema: str) -> None:
    """Remove the DuckDB file a failed command created, when it holds no table but sqlanon's own."""
    import duckdb

    try:
        with duckdb.connect(str(file), read_only=True) as conn:
            users = conn.execute(
                "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema <> ?", [schema]
            ).fetchone()
    except duckdb.Error:
        return
    if users is not None and users[0] == 0:
        for path in (file, file.with_name(file.name + ".wal"), progress_file(f"duckdb:///{file}")):
            if path is not None:
                path.unlink(missing_ok=True)


@contextmanager
def lattice_run(
    job: Job,
    options: RunOptions,
    command: str,
    target: Target | None = None,
    extra_criteria: Sequence[Criterion] = (),
    companions: Sequence[Target] = (),
) -> Iterator[Run]:
    """A run with a lattice to search: checks, run record, star schema, cleanup.

    Everything that can be checked before the search is: the files, the
    pseudonym keys, the source's columns and their roles, and where the
    output goes (schema, rights, not the source, replaced only if sqlanon's), and where the method's `companions`
    (its second table) go.
    """
    job = on_db(job, options.db_url)
    require_lattice(job)
    files = hierarchy_files(job)  # a file that cannot be read fails before the database is touched
    if target is not None:
        target.pseudonyms = Pseudonyms.of(job)
    with job_database(job, options) as db:
        if target is not None and job.ledger is not None:  # refused before the search, not after it
            db.require_transactions(LEDGER)
        if job.sample is not None:  # its key goes through a session table, its two tables in one transaction
            db.require_transactions("a publication of a random sample (output.method differential_privacy)")
        kept = kept_dimensions(db, options.metadata_schema, files)  # malformed files fail before anything is written
        columns = checked_source(db, job, options, ([target] if target else []) + list(companions))
        cleanup_dead_runs(db, options.metadata_schema)  # tables of runs killed earlier
        config = run_config(job, files)
        resume_run = options.resume_run
        if resume_run is None and options.resume:
            resume_run = resumable_run(db, options.metadata_schema, job.name, command, config)
        star: StarSchema | None = None
        record: RunRecord | None = None
        ctx: SearchContext | None = None
        try:
            with db.connect() as conn:
                if resume_run is not None:
                    record = RunRecord.reopen(db, conn, options.metadata_schema, resume_run)
                else:
                    record = RunRecord.start(db, conn, options.metadata_schema, job.name, command, job.strategy, config)
                try:
                    star = build_star_schema(
                        db,
                        conn,
                        job,
                        files=files,
                        kept=kept,
                        schema=record.work_schema,
                        run_id=record.run_id,
                        columns=columns,
                        extra_criteria=extra_criteria,
                    )
                    star.record(conn, options.metadata_schema, record.run_id)
                    conn.commit()
                    max_suppressed = job.suppression.max_suppressed(star.rows)
                    for criterion in [*job.criteria, *(extra_criteria or [])]:
                        criterion.fit_limit(max_suppressed)
                    ctx = SearchContext(
                        db=db,
                        conn=conn,
                        star=star,
                        criteria=job.criteria,
                        run=record,
                        schema=options.metadata_schema,
                        use_cube=job.base == "cube",
                        progress=options.progress,
                        max_suppressed=max_suppressed,
                        # a publication by a policy (or a metric whose best node is minimal) reads no other node
                        minimal_only=command == "anonymize" and not job.select.reads_every_passing_node(max_suppressed),
                        rank=job.select.levels_rank(star.heights),
                        assume_monotone=job.assume_monotone,
                        resuming=resume_run is not None,
                        metrics_follow=command != "search" or options.metrics,
                        metrics_sensitive=job.sensitive,
                    )
                    yield Run(job=job, options=options, db=db, conn=conn, record=record, columns=columns, search=ctx)
                finally:
                    drop_run_tables(conn, star if not options.keep else None, ctx)
        except BaseException as exc:
            original = record_end(record, exc)
            if original is exc:
                raise
            raise original from None


def drop_run_tables(conn: Connection, star: StarSchema | None, ctx: SearchContext | None) -> None:
    """At a lattice run's end, its star schema (the dimension tables a run that succeeded may keep for later runs,
    see KeptDimensions) and the cube the metrics did not take. After an error (Ctrl-C included: it may have struck
    inside the driver, leaving the session's transaction half closed) a failing cleanup gives way to the error:
    the run's end (record_end) drops what is left, or the next run does."""
    failing = sys.exc_info()[0] is not None
    try:
        conn.rollback()  # whatever the run left open, or half closed
        if star is not None and not conn.invalidated:
            with conn.begin():
                if ctx is not None:
                    ctx.keep_cube(None)  # a search's cube the metrics did not take
                star.drop(conn, keep=not failing)
    except (sa_exc.SQLAlchemyError, KeyboardInterrupt):
        if not failing:
            raise


def run_config(job: Job, files: dict[str, HierarchyFile]) -> str:
    """The job as its run records it: its JSON record and a digest of each hierarchy file's text (a resume
    continues only the same job over the same hierarchies)."""
    record = json.loads(job.to_json())
    record["hierarchy_digests"] = {column: file.digest[:16] for column, file in files.items()}
    return json.dumps(record, sort_keys=True)


def kept_dimensions(db: Database, schema: str, files: dict[str, HierarchyFile]) -> dict[str, KeptDimension]:
    """The dimension tables the database keeps for the job's hierarchy files (read before anything is written), by
    column; every other file is parsed here, so that a malformed one fails before the run writes anything."""
    kept: dict[str, KeptDimension] = {}
    if db.keeps_dimensions:
        with db.connect() as conn:
            kept = KeptDimensions(db, schema).find(conn, files)
    for column, file in files.items():
        if column not in kept:
            file.load()
    return kept


@contextmanager
def table_run(
    job: Job,
    options: RunOptions,
    command: str,
    *,
    targets: Sequence[Checked],
    transactional: str,
    reads_source: bool = True,
) -> Iterator[Run]:
    """A run without a lattice that writes tables (anatomy, Mondrian, inference, a plugged-in method): the
    database, which must have transactions (`transactional` says for what, in its refusal), the source (unless
    the run does not read it) and every target checked, then the run recorded."""
    job = on_db(job, options.db_url)
    with job_database(job, options) as db:
        db.require_transactions(transactional)
        if reads_source:
            columns = checked_source(db, job, options, targets)
        else:
            columns = {}
            checked_targets(db, options, targets, None)
        with db.connect() as conn, recorded(db, conn, options, job, command) as record:
            yield Run(job=job, options=options, db=db, conn=conn, record=record, columns=columns)


@contextmanager
def table_reader(
    job: Job,
    options: RunOptions,
    schema: str | None,
    table: str,
    needed: Sequence[str],
    purpose: str,
    read: SourceFrame | None = None,
    missing: str | None = None,
) -> Iterator[tuple[Database, Connection]]:
    """The job's database and a connection, for reading `table` (which must have the `needed` columns: the error
    says which is missing and that `purpose` needs them); nothing is recorded or written. `read`: a DataFrame
    read as `table`, in a database in memory, beside the job's DataFrame source when it has one. `missing`: the
    error when `table` does not exist (else the catalog's)."""
    job = on_db(job, options.db_url)
    with job_database(job, options) as db, db.connect() as conn:
        frames = {name: frame for name, frame in ((job.source.table, job.source.frame), (table, read)) if frame}
        if frames and not db.in_memory:
            raise ConfigError("a DataFrame is read in memory here: leave RunOptions.db_url out")
        for name, frame in frames.items():  # tables of a database that ends with the block
            db.load_frame(conn, frame, db.q(None, name))
        if missing is not None and not db.table_exists(conn, schema, table):
            raise DataError(missing)
        require_columns(db, conn, schema, table, needed, purpose)
        yield db, conn


def require_columns(
    db: Database, conn: Connection, schema: str | None, table: str, needed: Sequence[str], purpose: str
) -> None:
    """Refuse (DataError) a table without the `needed` columns, naming the first missing and what needs it."""
    columns = db.columns(conn, schema, table, "check the table's name and schema (--table and --schema)")
    absent = [c for c in needed if c not in columns]
    if absent:
        raise DataError(f"table {table!r} has no column {absent[0]!r} (its columns: {', '.join(columns)}); {purpose}")


def record_end(run: RunRecord | None, exc: BaseException) -> BaseException:
    """Record how a run ended with `exc` (cancelled, or failed with the error's cause); returns the error to raise
    (see `original_error`)."""
    original = original_error(exc)
    if run is None:
        return original
    if interrupted(original):
        run.cancel("interrupted by the user (Ctrl-C)")
    elif isinstance(original, RunCancelled):
        run.cancel(str(original))
    elif isinstance(original, SqlanonError):
        run.fail(str(original))
    else:
        run.fail(error_record(original))
    with suppress(sa_exc.SQLAlchemyError):  # its scratch tables now (else the next run's start drops them)
        cleanup_dead_runs(run.data_db, run.schema)
    return original


def original_error(exc: BaseException) -> BaseException:
    """The error that ended a run, not a follow-up of it: when a session dies (pg_terminate_backend, a lost
    server), every later statement on it raises PendingRollbackError, and one raised while cleaning up replaces
    the cause it follows."""
    while isinstance(exc, sa_exc.PendingRollbackError) and exc.__context__ is not None:
        exc = exc.__context__
    return exc


def error_record(exc: BaseException) -> str:
    """How a run records an error that is not a SqlanonError: a database's in one line, with its cause."""
    if isinstance(exc, sa_exc.DBAPIError):
        return f"the run's database session failed: {first_line(exc.orig)}"
    return f"{type(exc).__name__}: {exc}"


def checked_source(db: Database, job: Job, options: RunOptions, targets: Sequence[Checked]) -> dict[str, str]:
    """Migrate, check the source's columns (loading source.csv first when named) and where each target goes;
    returns the source's columns and their types. A source loaded from a file stays only if every check passes."""
    columns = None
    if not job.source.loads() and job.source.parquet is None:  # a source the role cannot read is named first
        with db.connect() as conn:
            columns = check_columns(db, conn, job)
    migrate(db, options.metadata_schema)
    ownership = Ownership(db, options.metadata_schema)
    with db.connect() as conn, conn.begin():
        source = prepare_source(db, conn, job, ownership)
        if columns is None:  # the table loaded from the job's file
            columns = check_columns(db, conn, job)
        check_one_row_per_person(db, conn, job)
        check_each(db, conn, ownership, targets, source)
    return columns


def checked_targets(db: Database, options: RunOptions, targets: Sequence[Checked], source: TableName | None) -> None:
    """Migrate and check where each target goes, for a run that reads no source."""
    migrate(db, options.metadata_schema)
    with db.connect() as conn, conn.begin():
        check_each(db, conn, Ownership(db, options.metadata_schema), targets, source)


def check_each(
    db: Database, conn: Connection, ownership: Ownership, targets: Sequence[Checked], source: TableName | None
) -> None:
    """Check every target, and that no two of them name one table."""
    named: list[tuple[Checked, TableName]] = []
    for target in targets:
        name = target.check(db, conn, ownership, source)
        if name is None:
            continue
        for earlier, earlier_name in named:
            if name.same_as(earlier_name, db):
                raise ConfigError(
                    f"{earlier.setting} and {target.setting} both name {str(earlier_name)!r}; give each its own table"
                )
        named.append((target, name))


@contextmanager
def recorded(db: Database, conn: Connection, options: RunOptions, job: Job, command: str) -> Iterator[RunRecord]:
    """A run record for a command without a lattice search (after the cleanup of runs killed earlier, as every
    run starts); marked failed (with the error) when it raises."""
    cleanup_dead_runs(db, options.metadata_schema)
    run = RunRecord.start(db, conn, options.metadata_schema, job.name, command, command, job.to_json())
    try:
        yield run
    except BaseException as exc:
        original = record_end(run, exc)
        if original is exc:
            raise
        raise original from None


def job_hierarchies(job: Job) -> dict[str, Hierarchy]:
    """Every QI's hierarchy, in QI order: read from its file, or generated from the column's distinct values (see
    `sqlanon.api.hierarchies`). A source not loaded yet is read from source.csv into a temporary table that goes
    with the (never committed) transaction; a DuckDB file that does not exist yet is not created for this."""
    files = read_hierarchy_files(job)
    qis = [qi for qi in job.quasi_identifiers if qi.has_hierarchy]  # a QI published as is has none
    if all(qi.hierarchy for qi in qis):
        return {qi.column: files[qi.column] for qi in qis}
    file = duckdb_file(job.source.url)  # a DuckDB file that does not exist yet is not created for this
    src, db = job.source, open_database(MEMORY_URL if file and not file.exists() else job.source.url)
    try:
        with db.connect() as conn:  # never committed: a temporary table goes with the transaction
            if db.table_exists(conn, src.schema, src.table) or not src.loads():
                source = db.q(src.schema, src.table)
                check_columns(db, conn, job)
            else:
                source = db.scratch_ref("hierarchy_source")
                if src.frame is not None:
                    db.load_frame(conn, src.frame, source, temporary=True)
                else:
                    assert src.csv is not None, "a job loads a file or a frame"
                    db.load_csv(conn, src.csv, src.csv_options, source, temporary=True)
            found = {qi.column: files.get(qi.column) or generated_hierarchy(db, conn, source, qi) for qi in qis}
            conn.rollback()
    finally:
        db.dispose()
    return found


def load_table(
    db: Database, conn: Connection, ownership: Ownership, path: Path, options: dict[str, Any], target: TableName
) -> int:
    """Create `target` from the file and record it as sqlanon's, with the file's checksum."""
    rows = db.load_csv(conn, path, options, db.q(target.schema, target.table))
    ownership.record(
        conn, target, "source", rows, file_path=str(path.resolve()), file_sha256=file_digest(path, options)
    )
    return rows


def prepare_source(db: Database, conn: Connection, job: Job, ownership: Ownership) -> TableName:
    """The source's resolved name, after loading `source.csv` into it when the job names a file.

    A file goes into a new table (in the caller's transaction, committed only
    when the job's checks pass), or reuses the table sqlanon loaded from the
    same file (same checksum and options, same row count); any other existing
    table is refused, never replaced.
    """
    src = job.source
    source = ownership.resolve(conn, src.schema, src.table, "source.table")
    if src.parquet is not None:
        db.read_parquet(conn, src.parquet, src.table)
        return source
    if not src.loads():
        return source
    if not db.table_exists(conn, src.schema, src.table):
        ownership.check_target(conn, source, False, "source.table")  # its schema exists, and the role may create
        if src.frame is not None:
            rows = db.load_frame(conn, src.frame, db.q(src.schema, src.table))  # in the caller's transaction
            # the fingerprint recognizes the table in a later run: none reads a database in memory again
            digest = None if db.in_memory else src.frame.digest()
            ownership.record(conn, source, "source", rows, file_path=FRAME_PATH, file_sha256=digest)
        else:
            assert src.csv is not None, "a job loads a file or a frame"
            load_table(db, conn, ownership, src.csv, src.csv_options, source)
        return source
    owned = ownership.owned(conn, source)
    if src.frame is not None:
        return reused_frame_table(db, conn, source, src.frame, owned)
    assert src.csv is not None, "a job loads a file or a frame"
    delimiter = next((v for k, v in src.csv_options.items() if CSV_OPTIONS.get(k) == "delim"), None)  # any alias
    reload = (
        f"sqlanon load {src.csv} --table {src.table}{' --schema ' + src.schema if src.schema else ''}"
        f"{f' --delimiter {delimiter!r}' if delimiter else ''} --db URL --replace"  # the URL may hold a password
    )
    if owned is None or owned.kind != "source":
        raise DataError(
            f"table {str(source)!r} already exists and sqlanon did not load it from {src.csv.name}; "
            "sqlanon never replaces a table it did not create: remove source.csv to anonymize the "
            f"table as it is, name a new source.table, or replace it on purpose with: {reload}"
        )
    rows = db.count_rows(conn, db.q(src.schema, src.table))
    if not src.csv.is_file():
        raise DataError(f"CSV file not found: {src.csv}")
    if owned.file_sha256 != file_digest(src.csv, src.csv_options) or rows != owned.row_count:
        raise DataError(
            f"table {str(source)!r} was loaded by sqlanon from {owned.file_path}, and the file (or its "
            f"options, or the table: {rows} rows, {owned.row_count} loaded) changed since; reload it "
            f"with: {reload}, or remove source.csv to anonymize the table as it is"
        )
    return source


def reused_frame_table(
    db: Database, conn: Connection, source: TableName, frame: SourceFrame, owned: OwnedTable | None
) -> TableName:
    """The table sqlanon loaded from the same DataFrame earlier (same digest, same rows), or a refusal: a table
    of someone else's, or of another frame, is never replaced."""
    same = (
        owned is not None
        and owned.kind == "source"
        and owned.file_path == FRAME_PATH
        and owned.file_sha256 == frame.digest()
        and db.count_rows(conn, db.q(source.schema, source.table)) == owned.row_count
    )
    if not same:
        whose = "another DataFrame" if owned is not None and owned.file_path == FRAME_PATH else "something else"
        raise DataError(
            f"table {str(source)!r} already exists, loaded from {whose}; sqlanon never replaces a table it did not "
            "load from this frame: name another table in source.table, or run in memory (no RunOptions.db_url)"
        )
    return source


@contextmanager
def registered_jobs(db_url: str, options: RunOptions | None) -> Iterator[tuple[JobRegistry, str, RunOptions]]:
    """The registry of the database at `db_url` (as the caller's role), its normalized URL, and the options with
    that URL, for a verb on registered jobs."""
    url = normalize_url(db_url, Path.cwd())
    options = dataclasses.replace(options or RunOptions(), db_url=url)
    with opened_registry(url, options.metadata_schema) as registry:
        yield registry, url, options
