"""The Python API: search a job's lattice, or anonymize its table.

    >>> from sqlanon import load_job, search, anonymize
    >>> result = search(load_job("adult.yaml"))
    >>> result.minimal            # [(1, 0, 1, ...), ...] levels in QI config order

Each call migrates sqlanon's schema if needed, records a run, builds the star
schema, searches, and cleans its scratch tables up whatever happens.
"""

from __future__ import annotations

import dataclasses
import json
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import exc as sa_exc
from sqlalchemy import text
from sqlalchemy.engine import Connection

from .analysis.attacks import (
    AnalysisReport,
    AnalysisSettings,
    BayesSettings,
    TableAnalysis,
    analyze_frequency_set,
    bayes_audit,
)
from .analysis.inference import InferenceReport, analyze_releases
from .analysis.report import ReportData, check_report_path, write_report
from .backends import Database, duckdb_file, normalize_url, open_database, progress_file
from .criteria import Criterion
from .engine.frequency import COUNT, FrequencySets, class_column, violating_classes_sql
from .engine.metrics import MetricsEvaluator
from .engine.star import (
    StarSchema,
    build_star_schema,
    check_columns,
    check_one_row_per_person,
    generated_hierarchy,
    needed_sensitive,
    read_hierarchy_files,
    types_by_key,
)
from .errors import AuditError, ConfigError, DataError, RunCancelled, SqlanonError
from .model.hierarchies import GENERATED_TOP, Hierarchy
from .model.job import Job, Output, require_lattice
from .model.lattice import minimal_nodes
from .model.progress import Progress
from .model.selection import METRICS, best_node, level_metrics, needs_every_passing_node, node_label, selection_metric
from .model.view import FrequencySetView
from .publish.anatomy import AnatomyReport
from .publish.anatomy import bucketize as anatomy_publish
from .publish.audit import AuditReport, audit_table, check_published_values
from .publish.generalize import Publication, check_output, check_published_columns, materialize, unchanged_columns
from .publish.identifiers import Pseudonyms
from .publish.mondrian import Mondrian, MondrianQI, MondrianReport
from .publish.mondrian import published_rows as mondrian_rows
from .publish.ownership import Ownership, TableName, file_digest
from .registry import opened_registry
from .search.strategies import STRATEGIES, Exhaustive, SearchContext, SearchStats
from .store import Store
from .store import runs as store_runs
from .store.migrate import DEFAULT_SCHEMA, migrate
from .store.records import RunRecord, cleanup_dead_runs

if TYPE_CHECKING:  # pandas is imported where a DataFrame is asked for: it costs a CLI run 0.3 s to import
    import pandas as pd


def _on_db(job: Job, url: str | None) -> Job:
    """The job against the database at `url` (a URL or a bare DuckDB file path; None: the job's own)."""
    return job.with_url(normalize_url(url, Path.cwd()) if url else None)


HEURISTIC_WARNING = (
    "search.assume_monotone pruned on criteria that are not monotone under suppression: "
    "the result may miss passing nodes"
)


@dataclass(kw_only=True)
class SearchResult:
    qi: list[str]
    heights: list[int]
    satisfying: list[tuple[int, ...]]  # every passing node the strategy reports
    minimal: list[tuple[int, ...]]
    stats: SearchStats
    run_id: int
    strategy: str
    rows: int
    max_suppressed: int = 0
    heuristic: bool = False  # pruning was assumed sound, not proven: passing nodes may be missing
    metrics: dict[tuple[int, ...], dict[str, Any]] = field(default_factory=dict)
    level_examples: list[list[list[str]]] = field(default_factory=list)  # per QI, per level: a few labels

    def describe(self, node: tuple[int, ...]) -> dict[str, dict[str, Any]]:
        """Each QI's level in `node`, with its hierarchy's height and a few labels of that level."""
        return {
            qi: {
                "level": level,
                "height": height,
                "examples": self.level_examples[i][level] if self.level_examples else [],
            }
            for i, (qi, level, height) in enumerate(zip(self.qi, node, self.heights))
        }

    def to_dict(self) -> dict[str, Any]:
        data = {
            "run_id": self.run_id,
            "qi": self.qi,
            "heights": self.heights,
            "minimal": [list(n) for n in self.minimal],
            "satisfying_count": len(self.satisfying),
            "stats": asdict(self.stats),
            "max_suppressed": self.max_suppressed,
            "heuristic": self.heuristic,
        }
        if self.heuristic:
            data["warning"] = HEURISTIC_WARNING
        if self.metrics:
            data["metrics"] = {node_label(n): m for n, m in sorted(self.metrics.items())}
        if self.level_examples:
            data["level_examples"] = dict(zip(self.qi, self.level_examples))
        return data

    def metrics_frame(self) -> pd.DataFrame:
        """The computed metrics, one row per node (levels as columns, then the metrics)."""
        import pandas as pd

        rows = [{**dict(zip(self.qi, node)), **values} for node, values in sorted(self.metrics.items())]
        return pd.DataFrame(rows)

    def minimal_frame(self) -> pd.DataFrame:
        """Minimal nodes as a DataFrame: one column per QI (its level) plus the height."""
        import pandas as pd

        frame = pd.DataFrame(self.minimal, columns=self.qi)
        frame["height"] = frame.sum(axis=1)
        return frame


@dataclass(kw_only=True)
class AnonymizeResult:
    search: SearchResult
    node: tuple[int, ...]
    output: str
    audit: AuditReport
    selection: str = ""  # the rule that chose the node
    suppressed: int = 0  # tuples removed or masked in the output
    preview: list[dict[str, Any]] = field(default_factory=list)  # the first rows of the published table

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.search.to_dict(),
            "output": self.output,
            "node": list(self.node),
            "node_levels": self.search.describe(self.node),
            "selection": self.selection,
            "suppressed": self.suppressed,
            "audit": self.audit.to_dict(),
            "preview": [{k: _plain(v) for k, v in row.items()} for row in self.preview],
        }

    def preview_frame(self) -> pd.DataFrame:
        """The first rows of the published table."""
        import pandas as pd

        return pd.DataFrame(self.preview)


def _plain(value: Any) -> Any:
    """A value JSON can carry (numbers and text as they are, anything else as text)."""
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


@dataclass(kw_only=True)
class RunOptions:
    """How a job runs, beyond the job itself."""

    db_url: str | None = None
    metadata_schema: str = DEFAULT_SCHEMA
    keep: bool = False  # keep frequency-set and dimension tables for inspection
    progress: Progress = field(default=lambda phase, done, total: None)
    metrics: bool = False  # compute utility metrics of every minimal node
    resume_run: int | None = None  # continue this interrupted run instead of starting one (see run_job)
    memory_limit: str | None = None  # DuckDB: overrides source.memory_limit (config.check_memory_limit)
    temp_directory: Path | None = None  # DuckDB: overrides source.temp_directory


def search(job: Job, options: RunOptions | None = None) -> SearchResult:
    """Find every node satisfying the job's criteria over the full QI set, and the minimal ones."""
    options = options or RunOptions()
    with _run(job, options, "search") as (ctx, finish):
        result = _search(job, ctx)
        if options.metrics:
            _add_metrics(job, ctx, result, result.minimal)
            _record_metrics(ctx, result, None)
        finish(result.to_dict())
    return result


def anonymize(job: Job, options: RunOptions | None = None, replace: bool = False) -> AnonymizeResult:
    """Search, pick the node by the job's selection rule, and write the audited output table.

    Suppressed tuples are removed or masked as the job says; the output is
    audited (criteria on the released classes, suppressed count within the
    limit) before it is committed."""
    options = options or RunOptions()
    if job.output is None:
        raise ConfigError("the config has no output: {table: NAME}; add one to write the anonymized table")
    if job.output.bucketized:
        raise ConfigError(
            "output.method anatomy publishes two tables: call bucketize(job) (the CLI's anonymize does this by itself)"
        )
    if job.output.partitioned:
        raise ConfigError("output.method mondrian: call partition(job) (the CLI's anonymize does this by itself)")
    output: Output = job.output
    if output.schema is None and job.source.schema is not None:
        output = dataclasses.replace(output, schema=job.source.schema)
    target = _Target(output=output, replace=replace)
    with _run(job, options, "anonymize", target) as (ctx, finish):
        result = _search(job, ctx)
        node = _select(job, ctx, result)
        anonymized = _publish(job, ctx, target, result, node, job.select.describe())
        finish(anonymized.to_dict())
    return anonymized


def _publish(
    job: Job, ctx: SearchContext, target: _Target, result: SearchResult, node: tuple[int, ...], selection: str
) -> AnonymizeResult:
    """Write `node` (its metrics already in `result`) as the audited output, suppressing as the job says."""
    ctx.progress("publish", 0, 1)  # the last point where a cancel stops the run before anything is written
    plan = Publication(
        node=node,
        output=target.output,
        target=target.name,
        source=target.source,
        mode=job.suppression.mode,
        max_suppressed=ctx.max_suppressed,
        replace=target.replace,
        identifying=tuple(job.identifying),
        published_as_is=tuple(job.sensitive + job.insensitive),
        pseudonyms=target.pseudonyms,
    )
    report = materialize(ctx.db, ctx.conn, ctx.star, plan, job.criteria, ctx.run.run_id, Ownership(ctx.db, ctx.schema))
    preview = (
        ctx.conn.execute(text(f"SELECT * FROM {ctx.db.q(target.name.schema, target.name.table)} LIMIT {PREVIEW_ROWS}"))
        .mappings()
        .all()
    )
    return AnonymizeResult(
        search=result,
        node=node,
        output=target.output.table,
        audit=report,
        selection=selection,
        suppressed=result.metrics[node]["suppressed"],
        preview=[dict(row) for row in preview],
    )


PREVIEW_ROWS = 5  # rows of the published table an anonymize result shows


@dataclass(kw_only=True)
class _Target:
    """Where a run publishes, checked before its search: the output, its resolved name, the pseudonym keys."""

    output: Output
    replace: bool
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


def hierarchies(job: Job, options: RunOptions | None = None) -> dict[str, Hierarchy]:
    """Every QI's hierarchy as a search would use it, in QI order: read from its file, or generated from the
    column's distinct values (read from the source table, or from source.csv when the table is not loaded
    yet: into a temporary table, dropped with the transaction). Nothing is written."""
    job = _on_db(job, (options or RunOptions()).db_url)
    files = read_hierarchy_files(job)
    qis = [qi for qi in job.quasi_identifiers if qi.has_hierarchy]  # a QI published as is has none
    if all(qi.hierarchy for qi in qis):
        return {qi.column: files[qi.column] for qi in qis}
    file = duckdb_file(job.source.url)  # a DuckDB file that does not exist yet is not created for this
    src, db = job.source, open_database("duckdb:///:memory:" if file and not file.exists() else job.source.url)
    try:
        with db.connect() as conn:  # never committed: a temporary table goes with the transaction
            if db.table_exists(conn, src.schema, src.table) or src.csv is None:
                source = db.q(src.schema, src.table)
                check_columns(db, conn, job)
            else:
                source = db.scratch_ref("hierarchy_source")
                db.load_csv(conn, src.csv, src.csv_options, source, temporary=True)
            found = {qi.column: files.get(qi.column) or generated_hierarchy(db, conn, source, qi) for qi in qis}
            conn.rollback()
    finally:
        db.dispose()
    return found


def node_metrics(
    job: Job, nodes: list[tuple[int, ...]], options: RunOptions | None = None
) -> dict[tuple[int, ...], dict[str, Any]]:
    """Utility metrics (see sqlanon.engine.metrics.METRICS) of any nodes, levels in QI config order, computed in SQL."""
    options = options or RunOptions()
    with _run(job, options, "metrics") as (ctx, finish):
        result = _empty_result(job, ctx, nodes)
        _add_metrics(job, ctx, result, list(nodes))
        finish({"nodes": len(result.metrics)})
    return result.metrics


def _empty_result(job: Job, ctx: SearchContext, nodes: list[tuple[int, ...]]) -> SearchResult:
    """A result without a search, for metrics or publication of given nodes (checked to be in the lattice)."""
    for node in nodes:
        if len(node) != len(ctx.star.heights) or not all(0 <= lv <= h for lv, h in zip(node, ctx.star.heights)):
            raise ConfigError(
                f"node {node_label(node)} is not in the lattice: give one level per QI "
                f"({', '.join(job.qi_names)}), each between 0 and its height "
                f"({node_label(tuple(ctx.star.heights))})"
            )
    return SearchResult(
        qi=job.qi_names,
        heights=ctx.star.heights,
        satisfying=[],
        minimal=[],
        stats=SearchStats(),
        run_id=ctx.run.run_id,
        strategy="none",
        rows=ctx.star.rows,
        max_suppressed=ctx.max_suppressed,
        level_examples=_level_examples(ctx.star),
    )


def evaluate_every_node(
    job: Job, criteria_sets: list[list[Criterion]], options: RunOptions | None = None
) -> list[list[tuple[int, ...]]]:
    """Brute force: the passing nodes of the full lattice for each criteria set (the job's suppression
    limit applies). The oracle the searches are tested against."""
    violations, max_suppressed = every_node_violations(job, criteria_sets, options)
    return [sorted(n for n, tuples in found.items() if tuples <= max_suppressed) for found in violations]


def every_node_violations(
    job: Job, criteria_sets: list[list[Criterion]], options: RunOptions | None = None
) -> tuple[list[dict[tuple[int, ...], int]], int]:
    """Brute force: every node's violating tuples per criteria set, and the job's MaxSup.

    Every node is one GROUP BY over the table, evaluated against all sets at
    once, so one pass answers several k and any suppression limit.
    """
    options = options or RunOptions()
    extra = [c for criteria in criteria_sets for c in criteria]
    with _run(job, options, "evaluate-every-node", extra_criteria=extra) as (ctx, finish):
        found = Exhaustive().evaluate(ctx, criteria_sets)
        finish({"nodes": len(found[0]) if found else 0})
    return found, ctx.max_suppressed


def audit(job: Job, table: str, schema: str | None = None, options: RunOptions | None = None) -> AuditReport:
    """Evaluate the job's criteria on an existing table (published, or the source) without searching.

    The table needs the job's QI and sensitive columns; nothing is written.
    With a suppression limit, masked tuples (every QI at its hierarchy's top)
    are counted instead of checked (mask mode), or the tuples missing from the
    source are (remove mode, when the source is there); the audit fails when
    they exceed the limit.
    """
    options = options or RunOptions()
    job = _on_db(job, options.db_url)
    with _job_database(job, options) as db, db.connect() as conn:
        columns = db.columns(conn, schema, table)
        needed = job.qi_names + needed_sensitive(job.criteria)
        missing = [c for c in needed if c not in columns]
        if missing:
            raise DataError(
                f"table {table!r} has no column {missing[0]!r} (its columns: {', '.join(columns)}); "
                "audit a table with the job's quasi-identifiers and sensitive attributes"
            )
        masked_top, reference, source_rows = _suppression_audit(db, conn, job, (schema, table))
        report = audit_table(
            db,
            conn,
            db.q(schema, table),
            job.qi_names,
            needed_sensitive(job.criteria),
            job.criteria,
            masked_top,
            reference,
        )
        if source_rows is not None and report.suppressed is None:
            report.suppressed = source_rows - report.rows
        if report.suppressed is not None:
            report.max_suppressed = job.suppression.max_suppressed(source_rows or report.rows)
        return report


def _metrics_evaluator(ctx: SearchContext, sensitive: list[str], nodes: int) -> MetricsEvaluator:
    """Frequency sets carrying every sensitive attribute of the job (KL reads them all), for `nodes` nodes:
    one node is one scan of the table grouped at its levels (a cube at level 0 first, then its roll-up,
    took 0.5 s more on 5M hospital rows, where level 0 is nearly unique)."""
    star = dataclasses.replace(ctx.star, sensitive=list(dict.fromkeys(ctx.star.sensitive + list(sensitive))))
    fsets = FrequencySets(
        db=ctx.db,
        conn=ctx.conn,
        star=star,
        schema=ctx.schema,
        run_id=ctx.run.run_id,
        use_cube=ctx.use_cube and nodes > 1,
    )
    return MetricsEvaluator(
        fsets=fsets,
        criteria=ctx.criteria,
        heights=star.heights,
        cells_term=ctx.cells_terms.get(frozenset(star.sensitive)),
    )


def _suppression_audit(
    db: Database, conn: Connection, job: Job, target: tuple[str | None, str]
) -> tuple[dict[str, list[str]] | None, str | None, int | None]:
    """How the audit sees suppressed tuples: top labels (mask), or the source as reference (remove)."""
    if not job.suppression.limit and job.suppression.mode == "remove":
        return None, None, None
    src = job.source
    source = TableName(db.resolved_schema(conn, src.schema), src.table)
    audited = TableName(db.resolved_schema(conn, target[0]), target[1])
    source_there = not source.same_as(audited, db) and db.table_exists(conn, src.schema, src.table)
    source_rows = (
        conn.execute(text(f"SELECT COUNT(*) FROM {db.q(src.schema, src.table)}")).scalar_one() if source_there else None
    )
    if job.suppression.mode == "mask":
        files = read_hierarchy_files(job)
        for hierarchy in files.values():
            hierarchy.check_masking()
        tops = {
            qi.column: files[qi.column].top_labels if qi.column in files else [GENERATED_TOP]
            for qi in job.quasi_identifiers
        }
        return tops, None, source_rows
    return None, (db.q(src.schema, src.table) if source_there else None), source_rows


def _search(job: Job, ctx: SearchContext) -> SearchResult:
    stats = SearchStats()
    started = time.perf_counter()
    satisfying = STRATEGIES[job.strategy]().search(ctx, stats)
    stats.seconds = round(time.perf_counter() - started, 3)
    if ctx.heuristic:
        warnings.warn(HEURISTIC_WARNING, UserWarning, stacklevel=2)
    minimal = minimal_nodes(satisfying, ctx.star.heights)
    return SearchResult(
        qi=job.qi_names,
        heights=ctx.star.heights,
        satisfying=satisfying,
        minimal=minimal,
        stats=stats,
        run_id=ctx.run.run_id,
        strategy=job.strategy,
        rows=ctx.star.rows,
        max_suppressed=ctx.max_suppressed,
        heuristic=ctx.heuristic,
        level_examples=_level_examples(ctx.star),
    )


def _level_examples(star: StarSchema) -> list[list[list[str]]]:
    return [[d.hierarchy.examples(level) for level in range(d.height + 1)] for d in star.dimensions]


def _select(job: Job, ctx: SearchContext, result: SearchResult) -> tuple[int, ...]:
    """The node to publish by the job's selection rule (see sqlanon.engine.metrics.best_node for ties).

    Policies and metrics that cannot improve above a minimal node choose among
    the minimal nodes; others among every passing node the search returned.
    """
    if not result.minimal:
        raise DataError(
            "no generalization satisfies the criteria; relax them (e.g. a smaller k or a higher suppression limit)"
        )
    metric = selection_metric(job.select.policy, job.select.metric)
    wide = needs_every_passing_node(metric, job.select.policy is not None, result.max_suppressed)
    candidates = result.satisfying if wide else result.minimal
    if metric.levels_only:  # chosen by the levels alone: the data's figures are needed for the chosen node only
        node = best_node(metric, {n: level_metrics(n, result.heights) for n in candidates})
        _add_metrics(job, ctx, result, [node])
    else:
        _add_metrics(job, ctx, result, candidates)
        node = best_node(metric, {n: result.metrics[n] for n in candidates})
    _record_metrics(ctx, result, node)
    return node


def _add_metrics(job: Job, ctx: SearchContext, result: SearchResult, nodes: list[tuple[int, ...]]) -> None:
    todo = [n for n in nodes if n not in result.metrics]
    evaluator = _metrics_evaluator(ctx, job.sensitive, len(todo))
    try:
        result.metrics.update(evaluator.evaluate(todo, lambda done, total: ctx.progress("metrics", done, total)))
    finally:
        evaluator.close()
        ctx.conn.commit()


def _record_metrics(ctx: SearchContext, result: SearchResult, selected: tuple[int, ...] | None) -> None:
    """Store the computed metrics in node_metrics (replacing the run's earlier rows)."""
    minimal = set(result.minimal)
    rows = [
        (node_label(node), node in minimal, node == selected, *[values[name] for name in METRICS])
        for node, values in sorted(result.metrics.items())
    ]
    ctx.run.store.insert(ctx.meta_conn, store_runs.NODE_METRICS, ctx.run.run_id, rows)
    ctx.conn.commit()


@contextmanager
def _job_database(job: Job, options: RunOptions) -> Iterator[Database]:
    """The job's database for the block, with DuckDB's memory limit and spill folder from the options, else the
    job. A DuckDB file that does not exist yet is created only for a job that loads a file into it (a job without
    one reads a table the file would have), and is removed again when the block fails before anything of the
    user's was stored there: a failed command leaves no new file, sqlanon's schema alone included."""
    file = duckdb_file(job.source.url)
    new = file is not None and not file.exists()
    if new and job.source.csv is None:
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
            _remove_if_unused(file, options.metadata_schema)
        raise
    finally:
        db.dispose()


def _remove_if_unused(file: Path, schema: str) -> None:
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
def _run(
    job: Job, options: RunOptions, command: str, target: _Target | None = None, extra_criteria: Sequence[Criterion] = ()
) -> Iterator[tuple[SearchContext, Any]]:
    """Everything around a search: checks, run record, star schema, cleanup.

    Everything that can be checked before the search is: the files, the
    pseudonym keys, the source's columns and their roles, and where the
    output goes (schema, rights, not the source, replaced only if sqlanon's).
    """
    job = _on_db(job, options.db_url)
    require_lattice(job)
    files = read_hierarchy_files(job)  # malformed files fail before the database is touched
    if target is not None:
        target.pseudonyms = Pseudonyms.of(job)
    with _job_database(job, options) as db:
        columns = _checked_source(db, job, options, [target] if target else [])
        cleanup_dead_runs(db, options.metadata_schema)  # tables of runs killed earlier
        star: StarSchema | None = None
        run: RunRecord | None = None
        try:
            with db.connect() as conn:
                if options.resume_run is not None:
                    run = RunRecord.reopen(db, conn, options.metadata_schema, options.resume_run)
                else:
                    run = RunRecord.start(
                        db, conn, options.metadata_schema, job.name, command, job.strategy, job.to_json()
                    )
                try:
                    star = build_star_schema(db, conn, job, files, run.work_schema, run.run_id, columns, extra_criteria)
                    star.record(conn, options.metadata_schema, run.run_id)
                    conn.commit()
                    ctx = SearchContext(
                        db=db,
                        conn=conn,
                        star=star,
                        criteria=job.criteria,
                        run=run,
                        schema=options.metadata_schema,
                        keep=options.keep,
                        use_cube=job.base == "cube",
                        progress=options.progress,
                        max_suppressed=job.suppression.max_suppressed(star.rows),
                        assume_monotone=job.assume_monotone,
                        resuming=options.resume_run is not None,
                        metrics_follow=command != "search" or options.metrics,
                    )
                    yield ctx, run.finish
                finally:
                    if conn.in_transaction():
                        conn.rollback()
                    if star is not None and not options.keep and not conn.invalidated:  # else: the next cleanup
                        with conn.begin():
                            star.drop(conn)
        except BaseException as exc:
            original = _record_end(run, exc)
            if original is exc:
                raise
            raise original from None


def _record_end(run: RunRecord | None, exc: BaseException) -> BaseException:
    """Record how a run ended with `exc` (cancelled, or failed with the error's cause); returns the error to raise
    (see `_original_error`)."""
    original = _original_error(exc)
    if run is None:
        return original
    if isinstance(original, RunCancelled):
        run.cancel(str(original))
    elif isinstance(original, SqlanonError):
        run.fail(str(original))
    else:
        run.fail(_error_record(original))
    return original


def _original_error(exc: BaseException) -> BaseException:
    """The error that ended a run, not a follow-up of it: when a session dies (pg_terminate_backend, a lost
    server), every later statement on it raises PendingRollbackError, and one raised while cleaning up replaces
    the cause it follows."""
    while isinstance(exc, sa_exc.PendingRollbackError) and exc.__context__ is not None:
        exc = exc.__context__
    return exc


def _error_record(exc: BaseException) -> str:
    """How a run records an error that is not a SqlanonError: a database's in one line, with its cause."""
    if isinstance(exc, sa_exc.DBAPIError):
        first = (str(exc.orig).strip().splitlines() or [type(exc.orig).__name__])[0]
        return f"the run's database session failed: {first}"
    return f"{type(exc).__name__}: {exc}"


def _checked_source(db: Database, job: Job, options: RunOptions, targets: list[_Target]) -> dict[str, str]:
    """Migrate, check the source's columns (loading source.csv first when named) and where each target goes;
    returns the source's columns and their types. A source loaded from a file stays only if every check passes."""
    columns = None
    if job.source.csv is None and job.source.parquet is None:  # a source the role cannot read is named first
        with db.connect() as conn:
            columns = check_columns(db, conn, job)
    migrate(db, options.metadata_schema)
    ownership = Ownership(db, options.metadata_schema)
    with db.connect() as conn, conn.begin():
        source = _prepare_source(db, conn, job, ownership)
        if columns is None:  # the table loaded from the job's file
            columns = check_columns(db, conn, job)
        check_one_row_per_person(db, conn, job)
        for target in targets:
            target.resolved = (check_output(db, conn, ownership, target.output, source, target.replace), source)
    return columns


@contextmanager
def _recorded(db: Database, conn: Connection, options: RunOptions, job: Job, command: str) -> Iterator[RunRecord]:
    """A run record for a command without a lattice search (after the cleanup of runs killed earlier, as every
    run starts); marked failed (with the error) when it raises."""
    cleanup_dead_runs(db, options.metadata_schema)
    run = RunRecord.start(db, conn, options.metadata_schema, job.name, command, command, job.to_json())
    try:
        yield run
    except BaseException as exc:
        original = _record_end(run, exc)
        if original is exc:
            raise
        raise original from None


def _method_output(job: Job, method: str, extra: str = "") -> Output:
    """The job's output, which must use `method`; in the source's schema unless it names its own."""
    output = job.output
    if output is None or output.method != method:
        raise ConfigError(f"this needs output: {{table: NAME, method: {method}{', ' + extra if extra else ''}}}")
    if output.schema is None and job.source.schema is not None:
        output = dataclasses.replace(output, schema=job.source.schema)
    return output


def bucketize(job: Job, options: RunOptions | None = None, replace: bool = False) -> AnatomyReport:
    """Publish the job's table bucketized (output.method anatomy): a QI table and a sensitive table, written
    and audited in one transaction. Suppression, criteria and the lattice play no part."""
    options = options or RunOptions()
    job = _on_db(job, options.db_url)
    output = _method_output(job, "anatomy", "l: L")
    qi_target = _Target(output=output, replace=replace, pseudonyms=Pseudonyms.of(job))
    sa_target = _Target(output=dataclasses.replace(output, table=output.sensitive_table_name), replace=replace)
    with _job_database(job, options) as db:
        db.require_transactions("an anatomy publication")
        columns = list(_checked_source(db, job, options, [qi_target, sa_target]))
        if qi_target.name.same_as(sa_target.name, db):
            raise ConfigError(
                f"output.table and output.sensitive_table both name {str(qi_target.name)!r}; give the "
                "sensitive table its own name"
            )
        with db.connect() as conn, _recorded(db, conn, options, job, "anatomy") as run:
            report = anatomy_publish(
                db,
                conn,
                job,
                qi_target.source,
                qi_target.name,
                sa_target.name,
                qi_target.pseudonyms,
                columns,
                run.run_id,
                Ownership(db, options.metadata_schema),
                replace,
            )
            run.finish(report.to_dict())
        return report


def partition(job: Job, options: RunOptions | None = None, replace: bool = False) -> MondrianReport:
    """Publish the job's table partitioned by Mondrian (output.method mondrian): QIs with a hierarchy split
    along it, the others at their median, every partition satisfying the criteria; written and audited in one
    transaction."""
    options = options or RunOptions()
    job = _on_db(job, options.db_url)
    output = _method_output(job, "mondrian")
    target = _Target(output=output, replace=replace, pseudonyms=Pseudonyms.of(job))
    found = hierarchies(job, options)
    with _job_database(job, options) as db:
        db.require_transactions("Mondrian partitioning")
        columns = _checked_source(db, job, options, [target])
        types = types_by_key(db, columns)
        sensitive = needed_sensitive(job.criteria)
        with db.connect() as conn, _recorded(db, conn, options, job, "mondrian") as run:
            # the output appears whole and audited, or not at all; the rounds sort and group a table's every row
            with conn.begin(), db.large_sorts(conn), target.pseudonyms.loaded(db, conn) as pseudonyms:
                src = target.source
                qis = [
                    MondrianQI(
                        qi.column, found.get(qi.column), "" if qi.column in found else types[db.name_key(qi.column)]
                    )
                    for qi in job.quasi_identifiers
                ]
                work = Mondrian(
                    db=db,
                    conn=conn,
                    source=db.q(src.schema, src.table),
                    columns=list(columns),
                    qis=qis,
                    sensitive=sensitive,
                    criteria=job.criteria,
                    prefix=f"mondrian_{run.run_id}",
                    relaxed=output.relaxed,
                    progress=options.progress,
                )
                started = time.perf_counter()
                rows = work.prepare()
                result = work.run()
                partitioned = time.perf_counter()
                ownership = Ownership(db, options.metadata_schema)
                final = db.q(target.name.schema, target.name.table)
                replacing = ownership.check_target(conn, target.name, replace, "output table", target.source)
                select, published = mondrian_rows(
                    db,
                    work,
                    lambda column, value: pseudonyms.select(db, job.identifying, column, value),
                    output.numeric == "mean",
                )
                with db.staged_output(conn, final, select, {}, replacing) as written:
                    check_published_columns(db, conn, written, str(target.name), published)
                    check_published_values(
                        db,
                        conn,
                        written,
                        str(target.name),
                        db.q(src.schema, src.table),
                        unchanged_columns(
                            db,
                            pseudonyms,
                            job.identifying,
                            [c for c in published if db.name_key(c) not in {db.name_key(q) for q in job.qi_names}],
                        ),
                        every_row=True,
                    )
                    report = audit_table(db, conn, written, job.qi_names, job.sensitive, job.criteria)
                    if not report.ok or report.rows != rows:
                        failed = ", ".join(name for name, ok in report.holds.items() if not ok) or "row count"
                        raise AuditError(f"the partitioned table failed its audit ({failed}); nothing was written")
                work.drop()
                ownership.record(conn, target.name, "output", rows, run.run_id)
                for role in output.grant_to:
                    db.execute(conn, f"GRANT SELECT ON {final} TO {db.q(role)}")
                preview = db.execute(conn, f"SELECT * FROM {final} LIMIT {PREVIEW_ROWS}").mappings().all()
            published_report = MondrianReport(
                output=str(target.name),
                rows=rows,
                result=result,
                audit=report,
                preview=[dict(r) for r in preview],
                partitioning_seconds=partitioned - started,
                publishing_seconds=time.perf_counter() - partitioned,
            )
            run.finish(published_report.to_dict())
        return published_report


def inference(job: Job, options: RunOptions | None = None, replace: bool = False) -> InferenceReport:
    """Maximum-entropy inference across the job's releases (`releases:`), solved in the database.

    P(s | person) goes to `inference.table` when the job names one (written
    and recorded in one transaction; replaced only with `replace` and only if
    sqlanon wrote it); the report lists the entropies and the disclosures."""
    options = options or RunOptions()
    job = _on_db(job, options.db_url)
    if job.releases is None:
        raise ConfigError(
            "the config has no releases; add releases: {pseudonym: COLUMN, series: [{name: N, table: "
            "T, sensitive_table: S}, ...]}"
        )
    if len(job.sensitive) != 1:
        raise ConfigError(
            f"inference follows one sensitive column; the job lists {len(job.sensitive)} "
            f"({', '.join(job.sensitive) or 'none'}): list exactly one under sensitive"
        )
    generalized = any(not r.bucketized for r in job.releases.releases)
    found = hierarchies(job, options) if generalized else {}
    settings = job.inference
    with _job_database(job, options) as db:
        db.require_transactions("inference across releases")
        migrate(db, options.metadata_schema)
        ownership = Ownership(db, options.metadata_schema)
        with db.connect() as conn:
            target = None
            if settings.table is not None:
                target = ownership.resolve(
                    conn, settings.schema or job.source.schema, settings.table, "inference.table"
                )
            _check_release_tables(db, conn, job, target)
            if target is not None:
                ownership.check_target(conn, target, replace, "inference.table")  # before any work
            conn.commit()
            with _recorded(db, conn, options, job, "inference") as run:
                with conn.begin():  # the probability table appears whole, or not at all
                    output = None
                    if target is not None:
                        if ownership.check_target(conn, target, replace, "inference.table"):
                            db.drop_table(conn, db.q(target.schema, target.table))
                        output = db.q(target.schema, target.table)
                    report = analyze_releases(
                        db,
                        conn,
                        job.releases,
                        job.sensitive[0],
                        found,
                        list(found),
                        settings,
                        f"inference_{run.run_id}",
                        output,
                        options.progress,
                    )
                    if target is not None:
                        report.table = str(target)
                        ownership.record(conn, target, "output", report.persons, run.run_id)
                run.finish(report.to_dict())
        return report


def _check_release_tables(db: Database, conn: Connection, job: Job, target: TableName | None) -> None:
    """A release is a table sqlanon published: not the job's source; and inference.table is a table of its own,
    none of the releases' (names compared as the database resolves them)."""
    assert job.releases is not None
    source = TableName(db.resolved_schema(conn, job.source.schema), job.source.table)
    for release in job.releases.releases:
        for table in filter(None, (release.table, release.sensitive_table)):
            name = TableName(db.resolved_schema(conn, release.schema), table)
            if name.same_as(source, db):
                raise ConfigError(
                    f"release {release.name!r}: table {str(name)!r} is the job's source table; a "
                    "release is a table sqlanon published (generalized, or a bucketized pair): name the "
                    "published tables under releases.series"
                )
            if target is not None and name.same_as(target, db):
                raise ConfigError(
                    f"inference.table {str(target)!r} is a table of release {release.name!r}; write "
                    "the probabilities to a table of their own"
                )


def register_job(name: str, config_file: str | Path, db_url: str, metadata_schema: str = DEFAULT_SCHEMA) -> int:
    """Store a job (its config and the hierarchy files it names) in the database; returns the file count."""
    with opened_registry(db_url, metadata_schema) as registry:
        return registry.register(name, Path(config_file))


def register_job_config(
    name: str, config: dict[str, Any], read: Any, db_url: str, metadata_schema: str = DEFAULT_SCHEMA
) -> int:
    """Register a parsed config; `read(path, where)` returns the text of a file it names (see JobRegistry)."""
    with opened_registry(db_url, metadata_schema) as registry:
        return registry.register_config(name, config, read)


def publish_node(
    run_id: int,
    node: tuple[int, ...],
    table: str,
    schema: str | None,
    db_url: str,
    options: RunOptions | None = None,
    replace: bool = False,
) -> AnonymizeResult:
    """Write any node of a finished run's job as an audited table (the job's suppression applies).

    The node need not be the one the run chose; the audit refuses one that
    does not satisfy the criteria, and nothing is written then.
    """
    url = normalize_url(db_url, Path.cwd())
    options = dataclasses.replace(options or RunOptions(), db_url=url)
    with opened_registry(url, options.metadata_schema) as registry:
        with registry.load(registry.job_of_run(run_id), url) as job:
            grants = job.output.grant_to if job.output else []
            target = _Target(
                output=Output(table=table, schema=schema or job.source.schema, grant_to=grants), replace=replace
            )
            with _run(job, options, "publish", target) as (ctx, finish):
                result = _empty_result(job, ctx, [node])
                _add_metrics(job, ctx, result, [node])
                published = _publish(job, ctx, target, result, node, f"node of run {run_id}")
                _record_metrics(ctx, result, node)
                finish(published.to_dict())
    return published


def apply(
    job: Job,
    batch: str,
    node: tuple[int, ...] | None = None,
    run_id: int | None = None,
    output: str | None = None,
    batch_schema: str | None = None,
    options: RunOptions | None = None,
    replace: bool = False,
) -> AnonymizeResult:
    """Publish `batch` (a new table with the source's columns) generalized at the node run `run_id` published, or
    at `node`, through the same audited, atomic path as `anonymize` (the job's suppression limit applies, to the
    batch's rows). A batch that violates the criteria at that node beyond the limit is refused, nothing written,
    and the error names the tuples and the classes. The output defaults to `<batch>_anon`."""
    options = options or RunOptions()
    if (node is None) == (run_id is None):
        raise ConfigError(
            "give the transformation to apply: a run that published one (--run ID) or a node (--node 0,1,...), not both"
        )
    job = _on_db(job, options.db_url)
    src = dataclasses.replace(job.source, table=batch, schema=batch_schema or job.source.schema, csv=None)
    batch_job = dataclasses.replace(job, source=src)
    if node is None:
        assert run_id is not None
        node = _published_node(batch_job, run_id, options.metadata_schema)
    grants = job.output.grant_to if job.output else []
    target = _Target(
        output=Output(table=output or f"{batch}_anon", schema=src.schema, grant_to=grants), replace=replace
    )
    with _run(batch_job, options, "apply", target) as (ctx, finish):
        result = _empty_result(batch_job, ctx, [node])
        _add_metrics(batch_job, ctx, result, [node])
        _refuse_violating_batch(ctx, node, batch, result.metrics[node]["suppressed"])
        source = f"node of run {run_id}" if run_id is not None else "the given node"
        published = _publish(batch_job, ctx, target, result, node, f"{source}, applied to {batch}")
        _record_metrics(ctx, result, node)
        finish(published.to_dict())
    return published


def _published_node(job: Job, run_id: int, schema: str) -> tuple[int, ...]:
    """The node a finished anonymize (or publish, or apply) run of the same job wrote, checked to be over the job's
    QIs."""
    opened = open_database(job.source.url)
    db = opened.metadata
    try:
        with db.connect() as conn:
            if not db.schema_exists(conn, schema):
                raise ConfigError(f"run {run_id} not found: the database has no sqlanon schema {schema!r}")
            migrate(opened, schema)
            row = Store(db, schema).call(conn, store_runs.OUTCOME, run=run_id).one_or_none()
    finally:
        opened.dispose()
    if row is None:
        raise ConfigError(
            f"run {run_id} not found in {schema}.runs; `sqlanon job status` or the runs table lists the runs"
        )
    job_name, command, status, result = row
    found = json.loads(result) if result else {}
    if job_name != job.name:
        raise ConfigError(
            f"run {run_id} is a run of job {job_name!r}, not of this job ({job.name!r}): apply a run of "
            "the same job, or the node itself with --node"
        )
    if status != "finished" or "node" not in found:
        raise ConfigError(
            f"run {run_id} ({command}, {status}) published no table; give a finished anonymize run, "
            "or the node itself with --node"
        )
    qis = found.get("qi", [])  # the node's levels are in this order
    if qis != job.qi_names:
        raise ConfigError(
            f"run {run_id} generalized {', '.join(qis)}, this job {', '.join(job.qi_names)}: apply a "
            "run of the same job"
        )
    return tuple(found["node"])


def _refuse_violating_batch(ctx: SearchContext, node: tuple[int, ...], batch: str, violating: int) -> None:
    """A batch whose violating tuples at `node` exceed the suppression limit: the error says how many, and which
    classes (their labels), before anything is written."""
    if violating <= ctx.max_suppressed:
        return
    star, db = ctx.star, ctx.db
    fs = FrequencySets(
        db=db, conn=ctx.conn, star=star, schema=ctx.schema, run_id=ctx.run.run_id, use_cube=False
    ).from_table(dict(enumerate(node)), "apply")
    view = FrequencySetView(
        table="apply_fs",
        class_columns=[class_column(d.attr) for d in star.dimensions],
        count_column=COUNT,
        sensitive_columns=star.sensitive_columns(),
        definition=fs.definition,
    )
    params: dict[str, object] = {}
    labels, joins = _class_labels(star, node, "v")
    rows = ctx.conn.execute(
        text(
            f"WITH apply_fs AS ({fs.definition}) SELECT {', '.join(labels)}, v.n, COUNT(*) OVER () FROM "
            f"({violating_classes_sql(view, ctx.criteria, 'v', params)}) v {joins} ORDER BY v.n, {', '.join(labels)} "
            f"LIMIT {VIOLATING_CLASSES_SHOWN}"
        ),
        params,
    ).all()
    shown = "; ".join("(" + ", ".join(map(str, r[:-2])) + f"): {r[-2]} tuple(s)" for r in rows)
    limit = f"the job's suppression limit of {ctx.max_suppressed}" if ctx.max_suppressed else "no suppression"
    raise DataError(
        f"batch {batch!r} alone violates the criteria at node {node_label(node)}: {violating} tuple(s) "
        f"in {rows[0][-1] if rows else '?'} class(es), with {limit}; e.g. {shown}. Nothing was written: "
        "raise the job's suppression limit, apply a more general node (--node), or publish the batch "
        "together with more rows"
    )


VIOLATING_CLASSES_SHOWN = 3  # classes an apply error names


def _class_labels(star: StarSchema, node: tuple[int, ...], alias: str) -> tuple[list[str], str]:
    """The label columns of a class of `node` whose codes are in `alias`.a0.., and the joins that give them."""
    labels = [f"l{d.attr}.label" for d in star.dimensions]
    joins = " ".join(
        f"JOIN (SELECT DISTINCT c{node[d.attr]} AS code, l{node[d.attr]} AS label FROM {d.table}) "
        f"l{d.attr} ON l{d.attr}.code = {alias}.{class_column(d.attr)}"
        for d in star.dimensions
    )
    return labels, joins


def report(
    job: Job,
    out: str | Path,
    options: RunOptions | None = None,
    sensitive: str | None = None,
    settings: AnalysisSettings | None = None,
    replace: bool = False,
    job_file: Path | None = None,
) -> Path:
    """Write the HTML report of the job's releases to `out` (see sqlanon.analysis.report): the lattice, the chosen
    release (by the job's selection rule), the minimal releases' metrics and their attacks and risk. An existing
    file is overwritten only with `replace`, and only when sqlanon wrote it (never the job's file `job_file` or
    its database)."""
    options, settings = options or RunOptions(), settings or AnalysisSettings()
    attribute = _analyzed_attribute(job, sensitive)
    out = Path(out)
    database = duckdb_file(_on_db(job, options.db_url).source.url)
    protected = {
        path: what
        for path, what in ((job_file, "the job's file"), (database, "the job's database"))
        if path is not None
    }
    check_report_path(out, replace, protected)  # before any work
    with _run(job, options, "report") as (ctx, finish):
        result = _search(job, ctx)
        chosen = _select(job, ctx, result)
        _add_metrics(job, ctx, result, result.minimal)
        tables = [_analyze_node(ctx, n, attribute, settings, result.metrics[n]) for n in result.minimal]
        sizes, worst = _chosen_classes(ctx, chosen, attribute)
        data = ReportData(
            job_name=job.name,
            job_json=json.dumps(json.loads(job.to_json()), indent=2),
            qi=job.qi_names,
            heights=result.heights,
            satisfying=result.satisfying,
            minimal=result.minimal,
            chosen=chosen,
            selection=job.select.describe(),
            metrics=result.metrics,
            analysis=AnalysisReport(attribute, settings, tables),
            class_sizes=sizes,
            worst_classes=worst,
        )
        path = write_report(data, out)
        finish({"report": str(path), "node": list(chosen)})
    return path


WORST_CLASSES_SHOWN = 3  # the least diverse classes a report charts


def _chosen_classes(
    ctx: SearchContext, node: tuple[int, ...], attribute: str
) -> tuple[list[tuple[int, int]], list[tuple[str, list[tuple[str, int]]]]]:
    """The node's class-size histogram (size, classes), and its least diverse classes with their value counts."""
    star = dataclasses.replace(ctx.star, sensitive=[attribute])
    fs = FrequencySets(
        db=ctx.db, conn=ctx.conn, star=star, schema=ctx.schema, run_id=ctx.run.run_id, use_cube=False
    ).from_table(dict(enumerate(node)), "report")
    columns = [class_column(d.attr) for d in star.dimensions]
    value = star.sensitive_columns()[attribute]
    sizes = ctx.conn.execute(
        text(
            f"WITH fs AS ({fs.definition}) SELECT n, COUNT(*) FROM (SELECT SUM(cnt) AS n FROM fs GROUP BY "
            f"{', '.join(columns)}) c GROUP BY n ORDER BY n"
        )
    ).all()
    labels, joins = _class_labels(star, node, "w")
    on = " AND ".join(f"fs.{c} = w.{c}" for c in columns)
    rows = ctx.conn.execute(
        text(
            f"WITH fs AS MATERIALIZED ({fs.definition}), w AS (SELECT {', '.join(columns)}, COUNT(*) AS "
            "d, SUM(cnt) AS n "
            f"FROM fs GROUP BY {', '.join(columns)} ORDER BY d, n, {', '.join(columns)} LIMIT {WORST_CLASSES_SHOWN}) "
            f"SELECT {', '.join(labels)}, CAST(fs.{value} AS VARCHAR), fs.cnt, w.d, w.n FROM w {joins} JOIN fs ON {on} "
            f"ORDER BY w.d, w.n, {', '.join(labels)}, fs.cnt DESC"
        )
    ).all()
    worst: dict[str, list[tuple[str, int]]] = {}
    for row in rows:
        label = "(" + ", ".join(map(str, row[: len(labels)])) + ")"
        worst.setdefault(label, []).append(
            ("NULL" if row[len(labels)] is None else row[len(labels)], int(row[len(labels) + 1]))
        )
    return [(int(n), int(c)) for n, c in sizes], list(worst.items())


def analyze(
    job: Job,
    options: RunOptions | None = None,
    node: tuple[int, ...] | None = None,
    sensitive: str | None = None,
    settings: AnalysisSettings | None = None,
    bayes: BayesSettings | None = None,
) -> AnalysisReport:
    """Attacks, risk and utility of every minimal node of the job (or of `node`), computed in SQL.

    `sensitive` is the attribute the attacks target (default: the job's first sensitive attribute). With a
    suppression limit, the classes the criteria suppress are left out of each release. Nothing is written
    but the run's records."""
    options, settings = options or RunOptions(), settings or AnalysisSettings()
    attribute = _analyzed_attribute(job, sensitive)
    with _run(job, options, "analyze") as (ctx, finish):
        if node is not None:
            result = _empty_result(job, ctx, [node])
            nodes = [node]
        else:
            result = _search(job, ctx)
            nodes = result.minimal
        _add_metrics(job, ctx, result, nodes)
        population = _population_star(job, ctx)
        tables = []
        for j, levels in enumerate(nodes):
            ctx.progress("analysis", j, len(nodes))
            tables.append(_analyze_node(ctx, levels, attribute, settings, result.metrics[levels], population, bayes))
        report = AnalysisReport(attribute, settings, tables)
        finish(report.summary())
    return report


def analyze_registered(
    name: str,
    db_url: str,
    options: RunOptions | None = None,
    node: tuple[int, ...] | None = None,
    settings: AnalysisSettings | None = None,
) -> AnalysisReport:
    """`analyze` of a job registered in the database (as its registrant, one run of the job at a time)."""
    url = normalize_url(db_url, Path.cwd())
    options = dataclasses.replace(options or RunOptions(), db_url=url)
    with opened_registry(url, options.metadata_schema) as registry:
        with registry.exclusive(name), registry.load(name, url) as job:
            return analyze(job, options, node, settings=settings)


def analyze_table(
    job: Job,
    table: str,
    schema: str | None = None,
    options: RunOptions | None = None,
    sensitive: str | None = None,
    settings: AnalysisSettings | None = None,
) -> AnalysisReport:
    """The attacks and risk of a table already published (its QI columns as they are), without the lattice."""
    options, settings = options or RunOptions(), settings or AnalysisSettings()
    job = _on_db(job, options.db_url)
    attribute = _analyzed_attribute(job, sensitive)
    with _job_database(job, options) as db, db.connect() as conn:
        columns = db.columns(conn, schema, table)
        missing = [c for c in job.qi_names + [attribute] if c not in columns]
        if missing:
            raise DataError(
                f"table {table!r} has no column {missing[0]!r} (its columns: {', '.join(columns)}); "
                "analyze a table with the job's quasi-identifiers and the sensitive attribute"
            )
        qis = [db.q(c) for c in job.qi_names]
        classes = [f"g{i}" for i in range(len(qis))]
        definition = (
            f"SELECT {', '.join(f'{q} AS {g}' for q, g in zip(qis, classes))}, {db.q(attribute)} AS s, "
            f"COUNT(*) AS cnt FROM {db.q(schema, table)} GROUP BY {', '.join(qis + [db.q(attribute)])}"
        )
        return AnalysisReport(
            attribute, settings, [analyze_frequency_set(conn, table, attribute, definition, classes, "s", settings)]
        )


def _population_star(job: Job, ctx: SearchContext) -> StarSchema | None:
    """The job's population table seen through the run's hierarchies, after checking that it has the QI columns
    and that every one of its QI values is in the hierarchies (or a join would silently drop its tuples)."""
    if job.population is None:
        return None
    schema, table = job.population
    db, conn = ctx.db, ctx.conn
    columns = {db.name_key(c) for c in db.columns(conn, schema, table)}
    missing = [q for q in job.qi_names if db.name_key(q) not in columns]
    if missing:
        raise DataError(
            f"population table {table!r} has no column {missing[0]!r}; it needs the job's quasi-identifiers"
        )
    star = dataclasses.replace(ctx.star, source=db.q(schema, table), sensitive=[])
    total = conn.execute(text(f"SELECT COUNT(*) FROM {star.source}")).scalar_one()
    matched = conn.execute(text(f"SELECT COUNT(*) FROM {star.joins()}")).scalar_one()
    if matched != total:
        raise DataError(
            f"population table {table!r}: {total - matched} of its {total} rows have quasi-identifier "
            "values missing from the job's hierarchies; add them to the hierarchies"
        )
    return star


def _analyzed_attribute(job: Job, sensitive: str | None) -> str:
    if sensitive is None:
        if not job.sensitive:
            raise ConfigError(
                "the job has no sensitive attribute to analyze; list one under sensitive: or name it with --sensitive"
            )
        return job.sensitive[0]
    if sensitive not in job.sensitive:
        raise ConfigError(
            f"{sensitive!r} is not a sensitive attribute of the job (its sensitive attributes: "
            f"{', '.join(job.sensitive) or 'none'})"
        )
    return sensitive


def _analyze_node(
    ctx: SearchContext,
    node: tuple[int, ...],
    attribute: str,
    settings: AnalysisSettings,
    metrics: dict[str, Any],
    population_star: StarSchema | None = None,
    bayes: BayesSettings | None = None,
) -> TableAnalysis:
    """One node's release: its frequency set over `attribute`, minus the classes the criteria suppress
    (and, with `population_star`, the same node over the population for the journalist and marketer risks).

    The frequency set and the suppressed classes are stored once, as temporary tables, for the four statements
    that read them (figures, revealed values, utility, Bayes audit), instead of scanning the table for each."""
    levels = dict(enumerate(node))
    star = dataclasses.replace(ctx.star, sensitive=[attribute])
    columns = [class_column(a) for a in sorted(levels)]
    tag = f"{ctx.run.run_id}_{'_'.join(map(str, node))}"
    with ExitStack() as scratch:
        fs = FrequencySets(
            db=ctx.db, conn=ctx.conn, star=star, schema=ctx.schema, run_id=ctx.run.run_id, use_cube=False
        ).from_table(levels, "analysis")
        definition = scratch.enter_context(_scratch_table(ctx, f"analysis_{tag}", fs.definition))
        suppressed = None
        if ctx.max_suppressed:
            checked = FrequencySets(
                db=ctx.db, conn=ctx.conn, star=ctx.star, schema=ctx.schema, run_id=ctx.run.run_id, use_cube=False
            ).from_table(levels, "criteria")
            view = FrequencySetView(
                table="criteria_fs",
                class_columns=columns,
                count_column=COUNT,
                sensitive_columns=ctx.star.sensitive_columns(),
                definition=checked.definition,
            )
            params: dict[str, object] = {}
            violators = violating_classes_sql(view, ctx.criteria, "a", params)
            suppressed = scratch.enter_context(
                _scratch_table(
                    ctx,
                    f"suppressed_{tag}",
                    f"WITH criteria_fs AS ({checked.definition}) SELECT {', '.join(columns)} FROM ({violators}) v",
                    params,
                )
            )
        population = None
        if population_star is not None:
            population = (
                FrequencySets(
                    db=ctx.db,
                    conn=ctx.conn,
                    star=population_star,
                    schema=ctx.schema,
                    run_id=ctx.run.run_id,
                    use_cube=False,
                )
                .from_table(levels, "population")
                .definition
            )
        analysis = analyze_frequency_set(
            ctx.conn,
            node_label(node),
            attribute,
            definition,
            columns,
            star.sensitive_columns()[attribute],
            settings,
            suppressed,
            population,
        )
        analysis.utility = {**metrics, **_arx_utility(ctx, definition, node, analysis, suppressed)}
        analysis.bayes = bayes_audit(
            ctx.conn,
            _bayes_cells(star, node, attribute),
            [f"q{a}" for a in sorted(levels)],
            columns,
            bayes or BayesSettings(),
            suppressed,
        )
    return analysis


@contextmanager
def _scratch_table(ctx: SearchContext, name: str, sql: str, params: dict[str, object] | None = None) -> Iterator[str]:
    """`sql` stored once as a temporary table; yields a SELECT of it for the statements that read it, then drops
    it."""
    ref = ctx.db.create_scratch(ctx.conn, name, sql, params)
    try:
        yield f"SELECT * FROM {ref}"
    finally:
        ctx.db.drop_table(ctx.conn, ref)


def _bayes_cells(star: StarSchema, node: tuple[int, ...], attribute: str) -> str:
    """Per original QI values (q0..), the node's class (a0..) and value s of `attribute`: the tuples (cnt)."""
    exact = [f"d{d.attr}.c0" for d in star.dimensions]
    published = [f"d{d.attr}.c{node[d.attr]}" for d in star.dimensions]
    value = f"t.{star.db.q(attribute)}"
    select = [f"{c} AS q{d.attr}" for c, d in zip(exact, star.dimensions)] + [
        f"{c} AS {class_column(d.attr)}" for c, d in zip(published, star.dimensions)
    ]
    return (
        f"SELECT {', '.join(select)}, {value} AS s, COUNT(*) AS cnt FROM {star.joins()} "
        f"GROUP BY {', '.join(exact + published + [value])}"
    )


def _arx_utility(
    ctx: SearchContext, definition: str, node: tuple[int, ...], analysis: TableAnalysis, suppressed: str | None
) -> dict[str, float]:
    """Utility as ARX defines it: DM* (every class counts n^2, suppressed ones too), AECS with the suppressed
    tuples as one class, and the normalized certainty penalty (loss): per tuple and QI, (leaves under its
    generalized value - 1) / (leaves of the hierarchy - 1), 1 for a suppressed tuple, averaged."""
    dims = ctx.star.dimensions
    columns = [class_column(d.attr) for d in dims]
    areas = " ".join(
        f"JOIN (SELECT c{node[d.attr]} AS code, COUNT(*) AS area FROM {d.table} GROUP BY "
        f"c{node[d.attr]}) ar{d.attr} ON ar{d.attr}.code = c.{class_column(d.attr)}"
        for d in dims
    )
    penalty = " + ".join(f"(ar{d.attr}.area - 1.0) / {max(len(d.hierarchy.paths) - 1, 1)}" for d in dims)
    out = "0"
    if suppressed:
        on = " AND ".join(f"x.{col} = c.{col}" for col in columns)
        out = f"CASE WHEN EXISTS (SELECT 1 FROM ({suppressed}) x WHERE {on}) THEN 1 ELSE 0 END"
    row = ctx.conn.execute(
        text(
            f"WITH fs AS ({definition}), classes AS (SELECT {', '.join(columns)}, SUM(cnt) AS n FROM fs GROUP BY "
            f"{', '.join(columns)}) SELECT SUM(CAST(c.n AS DOUBLE PRECISION) * c.n), "
            f"SUM(CASE WHEN {out} = 1 THEN c.n * {len(dims)}.0 ELSE c.n * ({penalty}) END) FROM classes c {areas}"
        )
    ).one()
    rows = analysis.rows + analysis.suppressed
    return {
        "dm_star": float(row[0] or 0),
        "aecs": rows / (analysis.classes + (1 if analysis.suppressed else 0)) if rows else 0.0,
        "loss": float(row[1] or 0) / (rows * len(dims)) if rows else 0.0,
    }


def run_job(
    name: str, db_url: str, options: RunOptions | None = None, resume: bool = False
) -> SearchResult | AnonymizeResult:
    """Run a registered job by name: anonymize when it has an output, else search.

    One run of a job at a time (PostgreSQL advisory lock). A run left behind by
    a killed client is closed as failed when a new run starts; `resume=True`
    continues it instead, from its last completed Incognito iteration (other
    strategies start over).
    """
    url = normalize_url(db_url, Path.cwd())
    options = dataclasses.replace(options or RunOptions(), db_url=url)
    with opened_registry(url, options.metadata_schema) as registry:
        with registry.exclusive(name), registry.load(name, url) as job:
            if resume:
                options = dataclasses.replace(options, resume_run=registry.resumable_run(name))
            else:
                registry.mark_interrupted(name, "a new run started")
            if job.output is not None:
                return anonymize(job, options, replace=True)
            return search(job, options)


def load_csv(
    csv: str | Path,
    table: str,
    db_url: str,
    schema: str | None = None,
    csv_options: dict[str, Any] | None = None,
    replace: bool = False,
    metadata_schema: str = DEFAULT_SCHEMA,
) -> int:
    """Load a CSV file into a new table `schema.table` (atomically); returns its row count.

    The way to put data into the database before registering a job (a
    registered job reads tables, not files). DuckDB reads the file, whatever
    the target: type detection and `csv_options` are those of `source.csv`.
    An existing table is refused unless `replace` (the one way sqlanon
    overwrites a table it did not create: you name it here). The file's
    checksum is recorded, so a job whose `source.csv` names it reuses the table.
    """
    db = open_database(normalize_url(db_url, Path.cwd()))
    path, options = Path(csv), csv_options or {}
    try:
        migrate(db, metadata_schema)
        ownership = Ownership(db, metadata_schema)
        with db.connect() as conn, conn.begin():
            target = ownership.resolve(conn, schema, table, "table")
            if ownership.check_target(conn, target, replace, "table", replace_any=True):
                db.drop_table(conn, db.q(schema, table))
            return _load(db, conn, ownership, path, options, target)
    finally:
        db.dispose()


def _load(
    db: Database, conn: Connection, ownership: Ownership, path: Path, options: dict[str, Any], target: TableName
) -> int:
    """Create `target` from the file and record it as sqlanon's, with the file's checksum."""
    rows = db.load_csv(conn, path, options, db.q(target.schema, target.table))
    ownership.record(
        conn, target, "source", rows, file_path=str(path.resolve()), file_sha256=file_digest(path, options)
    )
    return rows


def _prepare_source(db: Database, conn: Connection, job: Job, ownership: Ownership) -> TableName:
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
    if src.csv is None:
        return source
    if not db.table_exists(conn, src.schema, src.table):
        _load(db, conn, ownership, src.csv, src.csv_options, source)  # in the caller's transaction
        return source
    owned = ownership.owned(conn, source)
    reload = f"sqlanon load {src.csv} --table {src.table}{' --schema ' + src.schema if src.schema else ''} --replace"
    if owned is None or owned.kind != "source":
        raise DataError(
            f"table {str(source)!r} already exists and sqlanon did not load it from {src.csv.name}; "
            "sqlanon never replaces a table it did not create: remove source.csv to anonymize the "
            f"table as it is, name a new source.table, or replace it on purpose with: {reload}"
        )
    rows = db.execute(conn, f"SELECT COUNT(*) FROM {db.q(src.schema, src.table)}").scalar_one()
    if not src.csv.is_file():
        raise DataError(f"CSV file not found: {src.csv}")
    if owned.file_sha256 != file_digest(src.csv, src.csv_options) or rows != owned.row_count:
        raise DataError(
            f"table {str(source)!r} was loaded by sqlanon from {owned.file_path}, and the file (or its "
            f"options, or the table: {rows} rows, {owned.row_count} loaded) changed since; reload it "
            f"with: {reload}, or remove source.csv to anonymize the table as it is"
        )
    return source
