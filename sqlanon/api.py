"""The Python API: search a job's lattice, or anonymize its table.

    >>> from sqlanon import load_job, search, anonymize
    >>> result = search(load_job("adult.yaml"))
    >>> result.minimal            # [(1, 0, 1, ...), ...] levels in QI config order

Each call migrates sqlanon's schema if needed, records a run, builds the star
schema, searches, and cleans its scratch tables up whatever happens.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator

import pandas as pd

from .audit import AuditReport, audit_table
from .backends import Database
from .config import Job, Output
from .dimensions import StarSchema, build_star_schema, check_columns, needed_sensitive, read_hierarchy_files
from .errors import ConfigError, DataError, SqlanonError
from .lattice import minimal_nodes
from .materialize import check_output_free, choose_node, materialize
from .metadata import DEFAULT_SCHEMA, RunRecord, migrate
from .criteria import Criterion
from .strategies import STRATEGIES, Exhaustive, Progress, SearchContext, SearchStats


@dataclass
class SearchResult:
    qi: list[str]
    heights: list[int]
    satisfying: list[tuple[int, ...]]
    minimal: list[tuple[int, ...]]
    stats: SearchStats
    run_id: int
    strategy: str
    rows: int

    def to_dict(self) -> dict[str, Any]:
        return {"qi": self.qi, "heights": self.heights, "minimal": [list(n) for n in self.minimal],
                "satisfying_count": len(self.satisfying), "stats": asdict(self.stats)}

    def minimal_frame(self) -> pd.DataFrame:
        """Minimal nodes as a DataFrame: one column per QI (its level) plus the height."""
        frame = pd.DataFrame(self.minimal, columns=self.qi)
        frame["height"] = frame.sum(axis=1)
        return frame


@dataclass
class AnonymizeResult:
    search: SearchResult
    node: tuple[int, ...]
    output: str
    audit: AuditReport

    def to_dict(self) -> dict[str, Any]:
        return {**self.search.to_dict(), "output": self.output, "node": list(self.node),
                "audit": self.audit.to_dict()}


@dataclass
class RunOptions:
    """How a job runs, beyond the job itself."""

    db_url: str | None = None
    metadata_schema: str = DEFAULT_SCHEMA
    keep: bool = False  # keep frequency-set and dimension tables for inspection
    progress: Progress = field(default=lambda phase, done, total: None)


def search(job: Job, options: RunOptions | None = None) -> SearchResult:
    """Find every node satisfying the job's criteria over the full QI set, and the minimal ones."""
    options = options or RunOptions()
    with _run(job, options, "search") as (ctx, finish):
        result = _search(job, ctx)
        finish(result.to_dict())
    return result


def anonymize(job: Job, options: RunOptions | None = None, replace: bool = False) -> AnonymizeResult:
    """Search, pick a minimal node (see choose_node), and write the audited output table."""
    options = options or RunOptions()
    if job.output is None:
        raise ConfigError("the config has no output: {table: NAME}; add one to write the anonymized table")
    output: Output = job.output
    if output.schema is None and job.source.schema is not None:
        output = Output(output.table, job.source.schema)
    with _run(job, options, "anonymize", output=output, replace=replace) as (ctx, finish):
        result = _search(job, ctx)
        node = choose_node(result.minimal)
        report = materialize(ctx.db, ctx.conn, ctx.star, node, output, job.criteria, ctx.run.run_id, replace)
        anonymized = AnonymizeResult(result, node, output.table, report)
        finish(anonymized.to_dict())
    return anonymized


def evaluate_every_node(job: Job, criteria_sets: list[list[Criterion]],
                        options: RunOptions | None = None) -> list[list[tuple[int, ...]]]:
    """Brute force: the satisfying nodes of the full lattice for each criteria set.

    Every node is one GROUP BY over the table, evaluated against all sets at
    once (so one pass answers several k). The oracle Incognito is tested against.
    """
    options = options or RunOptions()
    extra = [c for criteria in criteria_sets for c in criteria]
    with _run(job, options, "evaluate-every-node", extra_criteria=extra) as (ctx, finish):
        found = Exhaustive().evaluate(ctx, criteria_sets)
        finish({"satisfying_counts": [len(f) for f in found]})
    return found


def audit(job: Job, table: str, schema: str | None = None, options: RunOptions | None = None) -> AuditReport:
    """Evaluate the job's criteria on an existing table (published, or the source) without searching.

    The table needs the job's QI and sensitive columns; nothing is written.
    """
    options = options or RunOptions()
    job = job.with_url(options.db_url)
    db = Database(job.source.url)
    try:
        with db.connect() as conn:
            columns = db.columns(conn, schema, table)
            needed = job.qi_names + needed_sensitive(job.criteria)
            missing = [c for c in needed if c not in columns]
            if missing:
                raise DataError(f"table {table!r} has no column {missing[0]!r} (its columns: {', '.join(columns)}); "
                                "audit a table with the job's quasi-identifiers and sensitive attributes")
            return audit_table(db, conn, db.q(schema, table), job.qi_names, needed_sensitive(job.criteria),
                               job.criteria)
    finally:
        db.dispose()


def _search(job: Job, ctx: SearchContext) -> SearchResult:
    stats = SearchStats()
    started = time.perf_counter()
    satisfying = STRATEGIES[job.strategy]().search(ctx, stats)
    stats.seconds = round(time.perf_counter() - started, 3)
    return SearchResult(job.qi_names, ctx.star.heights, satisfying, minimal_nodes(satisfying), stats,
                        ctx.run.run_id, job.strategy, ctx.star.rows)


@contextmanager
def _run(job: Job, options: RunOptions, command: str, output: Output | None = None, replace: bool = False,
         extra_criteria: list[Criterion] = ()) -> Iterator[tuple[SearchContext, Any]]:
    """Everything around a search: checks, run record, star schema, cleanup."""
    job = job.with_url(options.db_url)
    files = read_hierarchy_files(job)  # malformed files fail before the database is touched
    db = Database(job.source.url)
    try:
        with db.connect() as conn:
            _prepare_source(db, conn, job)
            check_columns(db, conn, job)
            if output is not None:
                check_output_free(db, conn, output, replace)
            conn.commit()
        migrate(db, options.metadata_schema)
        run = RunRecord.start(db, options.metadata_schema, job.name, command, job.strategy, job.to_json())
        star: StarSchema | None = None
        try:
            with db.connect() as conn:
                try:
                    star = build_star_schema(db, conn, job, files, options.metadata_schema, run.run_id,
                                             extra_criteria)
                    star.record(conn, options.metadata_schema, run.run_id)
                    conn.commit()
                    ctx = SearchContext(db, conn, star, job.criteria, run, options.metadata_schema, options.keep,
                                        job.base == "cube", options.progress)
                    yield ctx, run.finish
                finally:
                    if conn.in_transaction():
                        conn.rollback()
                    if star is not None and not options.keep:
                        with conn.begin():
                            star.drop(conn)
        except SqlanonError as exc:
            run.fail(str(exc))
            raise
        except BaseException as exc:
            run.fail(f"{type(exc).__name__}: {exc}")
            raise
    finally:
        db.dispose()


def _prepare_source(db: Database, conn, job: Job) -> None:
    src = job.source
    if src.csv is not None:
        with conn.begin():
            db.load_csv(conn, src.csv, src.csv_options, src.schema, src.table)
