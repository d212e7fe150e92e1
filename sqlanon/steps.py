"""The steps a run is made of, between opening it (`session`) and answering (`api`): the search, the choice of
the node to publish, the utility metrics, and the publication of a generalization; and the plain results they
return (`SearchResult`, `AnonymizeResult`). Each step reads the run's `SearchContext` and adds to the result.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection

from .backends import Database
from .engine.audit import AuditReport
from .engine.metrics import MetricsEvaluator
from .engine.persons import persons_from
from .engine.star import StarSchema, needed_sensitive, read_hierarchy_files, subset_select
from .errors import ConfigError, DataError
from .model.hierarchies import GENERATED_TOP
from .model.job import Job, Output
from .model.lattice import minimal_nodes
from .model.quality import QualitySettings
from .model.selection import METRICS, Metric, best_node, level_metrics, node_label, rank, selection_metric
from .publish.generalize import Publication, publish_generalization
from .publish.ledger import ReleaseLedger
from .publish.ownership import Ownership, TableName
from .publish.staging import PublishedTable, Released, plain_rows, preview
from .search.strategies import STRATEGIES, SearchContext, SearchStats
from .session import Target
from .store import runs as store_runs

if TYPE_CHECKING:  # pandas is imported where a DataFrame is asked for: it costs a CLI run 0.3 s to import
    import pandas as pd


HEURISTIC_WARNING = (
    "search.assume_monotone pruned on criteria that are not monotone under suppression: "
    "the result may miss passing nodes"
)


@dataclass(kw_only=True)
class SearchResult:
    qi: list[str]
    heights: list[int]
    satisfying: list[tuple[int, ...]]  # every passing node the strategy reports (see every_passing_node)
    minimal: list[tuple[int, ...]]
    stats: SearchStats
    run_id: int
    strategy: str
    rows: int
    max_suppressed: int = 0
    heuristic: bool = False  # pruning was assumed sound, not proven: passing nodes may be missing
    # False where the nodes above a passing one were left unchecked (SearchContext.minimal_only, where passing is
    # not closed under generalization): `satisfying` then holds the minimal nodes alone
    every_passing_node: bool = True
    # False where the nodes ranked after a passing one by a selection on the levels alone were left unchecked
    # (SearchContext.rank): `minimal` then holds those ranked before every other, the best among them
    every_minimal_node: bool = True
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
            "every_passing_node": self.every_passing_node,
            "every_minimal_node": self.every_minimal_node,
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

    def frame(self) -> pd.DataFrame:
        """The minimal nodes, one row each: each QI's level, the height, then the metrics where computed."""
        frame = self.minimal_frame()
        if not self.metrics:
            return frame
        metrics = self.metrics_frame()
        return frame.merge(metrics, on=[c for c in frame.columns if c in metrics.columns], how="left")

    def minimal_frame(self) -> pd.DataFrame:
        """Minimal nodes as a DataFrame: one column per QI (its level) plus the height."""
        import pandas as pd

        frame = pd.DataFrame(self.minimal, columns=self.qi)
        frame["height"] = frame.sum(axis=1)
        return frame


@dataclass(kw_only=True)
class AnonymizeResult(Released):
    search: SearchResult
    node: tuple[int, ...]
    output: str
    audit: AuditReport
    selection: str = ""  # the rule that chose the node
    suppressed: int = 0  # tuples removed or masked in the output
    preview: list[dict[str, Any]] = field(default_factory=list)  # the first rows of the published table
    publishing_seconds: float = 0.0  # after the search: the selection, the write and the independent audit
    selection_seconds: float = 0.0  # of which choosing the node (the metrics it reads)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.search.to_dict(),
            "output": self.output,
            "node": list(self.node),
            "node_levels": self.search.describe(self.node),
            "selection": self.selection,
            "suppressed": self.suppressed,
            "audit": self.audit.to_dict(),
            "publishing_seconds": round(self.publishing_seconds, 3),
            "selection_seconds": round(self.selection_seconds, 3),
            "ledger": self.ledger.to_dict() if self.ledger else None,
            "preview": plain_rows(self.preview),
        }

    def preview_frame(self) -> pd.DataFrame:
        """The first rows of the published table."""
        import pandas as pd

        return pd.DataFrame(self.preview)


def publish_node_of_run(
    job: Job,
    ctx: SearchContext,
    target: Target,
    result: SearchResult,
    node: tuple[int, ...],
    selection: str,
    beside: Callable[[], None] | None = None,
) -> AnonymizeResult:
    """Write `node` (its metrics already in `result`) as the audited output, suppressing as the job says (and
    `beside`'s companion table in the same transaction)."""
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
        unit=job.unit_column,
    )
    ledger = ReleaseLedger.of(ctx.db, ctx.schema, job, ctx.run.run_id)
    report = publish_generalization(
        ctx.db,
        ctx.conn,
        ctx.star,
        plan,
        job.criteria,
        ctx.run.run_id,
        Ownership(ctx.db, ctx.schema),
        ctx.progress,
        ledger,
        beside,
    )
    return AnonymizeResult(
        search=result,
        node=node,
        output=target.output.table,
        audit=report,
        selection=selection,
        suppressed=result.metrics[node]["suppressed"],
        preview=preview(ctx.db, ctx.conn, target.name),
        release=PublishedTable.of(ctx.db, target.name),
        ledger=ledger.outcome if ledger else None,
    )


def empty_result(job: Job, ctx: SearchContext, nodes: list[tuple[int, ...]]) -> SearchResult:
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
        level_examples=level_examples(ctx.star),
    )


def metrics_evaluator(
    ctx: SearchContext, sensitive: list[str], quality: QualitySettings | None = None
) -> MetricsEvaluator:
    """Frequency sets carrying every sensitive attribute of the job (KL reads them all), for the nodes: the
    search's cube of the table's rows where it carries them (the evaluator takes it, and drops it); else a packed
    cube stored for them, one node's too: three statements read it (the node's sets, the cells' c ln c, the
    marginal terms), and reading the table joined with the dimensions three times instead cost more (hospital
    1M, apply: PostgreSQL 6.7-6.9 s against 5.8-6.1 s with the cube, DuckDB 0.62 s against 0.60)."""
    star = dataclasses.replace(ctx.star, sensitive=list(dict.fromkeys(ctx.star.sensitive + list(sensitive))))
    cube = ctx.search_cube
    if cube is not None and cube.carrying() == star:
        cube.serve(star)
        ctx.search_cube = None  # the evaluator's now
    else:
        cube = None
    return MetricsEvaluator(
        conn=ctx.conn,
        star=star,
        criteria=ctx.criteria,
        run=ctx.run,
        cube=ctx.use_cube,
        cells_term=ctx.cells_terms.get(frozenset(star.sensitive)),
        checker=cube,
        quality=quality,
    )


def suppression_audit(
    db: Database, conn: Connection, job: Job, target: tuple[str | None, str]
) -> tuple[dict[str, list[str]] | None, str | None, int | None]:
    """How the audit sees suppressed tuples: top labels (mask), or the source as reference (remove)."""
    if not job.suppression.limit and job.suppression.mode == "remove":
        return None, None, None
    src = job.source
    source = TableName(db.resolved_schema(conn, src.schema), src.table)
    audited = TableName(db.resolved_schema(conn, target[0]), target[1])
    source_there = not source.same_as(audited, db) and db.table_exists(conn, src.schema, src.table)
    table = counted = db.q(src.schema, src.table)
    if job.subset is not None and source_there:  # the rows a publication of the job may hold: its subset's
        table = counted = "(" + db.as_text(conn, subset_select(db, conn, job, table)) + ") AS subset_rows"
    if job.unit_column:  # the audit counts persons: so do the source's figures it is compared with
        # a person may hold several sensitive values: one row each in the reference, counted once
        counted = persons_from(db, table, job.unit_column, [])
        table = persons_from(db, table, job.unit_column, needed_sensitive(job.criteria))
    source_rows = db.count_rows(conn, counted) if source_there else None
    if job.suppression.mode == "mask":
        files = read_hierarchy_files(job)
        for hierarchy in files.values():
            hierarchy.check_masking()
        tops = {
            qi.column: files[qi.column].top_labels if qi.column in files else [GENERATED_TOP]
            for qi in job.quasi_identifiers
        }
        return tops, None, source_rows
    return None, (table if source_there else None), source_rows


def run_search(job: Job, ctx: SearchContext) -> SearchResult:
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
        # the settled nodes above passing ones pass
        every_passing_node=stats.unchecked_above_passing == stats.unchecked_outranked == 0,
        every_minimal_node=stats.unchecked_outranked == 0,
        level_examples=level_examples(ctx.star),
    )


def level_examples(star: StarSchema) -> list[list[list[str]]]:
    return [[list(labels) for labels in d.shape.examples] for d in star.dimensions]


def select_node(job: Job, ctx: SearchContext, result: SearchResult) -> tuple[int, ...]:
    """The node to publish by the job's selection rule (see sqlanon.engine.metrics.best_node for ties).

    Policies and metrics that cannot improve above a minimal node choose among
    the minimal nodes; others among every passing node the search returned.
    """
    if not result.minimal:
        raise DataError(
            "no generalization satisfies the criteria; relax them (e.g. a smaller k or a higher suppression limit)"
        )
    metric = selection_metric(job.select.policy, job.select.metric)
    candidates = result.satisfying if job.select.reads_every_passing_node(result.max_suppressed) else result.minimal
    if metric.levels_only:  # chosen by the levels alone: the data's figures are needed for the chosen node only
        node = best_node(metric, {n: level_metrics(n, result.heights) for n in candidates})
        add_metrics(job, ctx, result, [node])
    else:
        add_metrics(job, ctx, result, candidates, best_by=metric)
        node = best_node(metric, {n: result.metrics[n] for n in candidates if n in result.metrics})
    record_metrics(ctx, result, node)
    return node


def add_metrics(
    job: Job, ctx: SearchContext, result: SearchResult, nodes: list[tuple[int, ...]], best_by: Metric | None = None
) -> None:
    """The metrics of `nodes` not computed yet. With `best_by`, a smaller-is-better metric the levels bound from
    below (model.quality.BOUNDED), only those finding the best node by it needs: the nodes best bound first,
    until the next bound is worse than the best figure found (exact: every node left is as bad or worse). On
    Adult's nine QIs with k=5 and 4% suppression, of 4,452 passing nodes ARX's loss read 31, its non-monotonic
    entropy 7, the monotonic one 1; with every tuple allowed to go, loss read 1,690 of 12,960 (13 s instead of
    about 60; bench/bench_quality.py)."""
    todo = [n for n in nodes if n not in result.metrics]
    evaluator = metrics_evaluator(ctx, job.sensitive, job.select.quality)
    bounds = evaluator.bounds(best_by.name, todo) if best_by is not None and todo else None
    # dropped when the statements succeeded; after an error the caller's rollback takes the tables (a DROP there
    # would fail in an aborted transaction and hide the error that stopped them)
    if bounds is None or best_by is None:
        result.metrics.update(evaluator.evaluate(todo, lambda done, total: ctx.progress("metrics", done, total)))
    else:
        todo.sort(key=lambda n: rank(best_by, bounds[n], n))
        # the first node alone, then twice as many each time up to a batch: where the bound is tight (the
        # monotonic entropy's is its figure) one node or a few are read; where it is loose, few statements more
        start, size, most, best = 0, 1, evaluator.batch_size(), None
        while start < len(todo) and not (best is not None and _surely_worse(bounds[todo[start]], best)):
            result.metrics.update(evaluator.evaluate(todo[start : start + size]))
            start, size = start + size, min(2 * size, most)
            ctx.progress("metrics", min(start, len(todo)), len(todo))
            evaluated = [n for n in nodes if n in result.metrics]
            best = result.metrics[best_node(best_by, {n: result.metrics[n] for n in evaluated})][best_by.name]
    evaluator.close()
    ctx.conn.commit()


def _surely_worse(bound: Any, best: Any, tolerance: float = 1e-9) -> bool:
    """Whether a lower bound of a smaller-is-better figure (a number, or ARX's rank aggregate: a list compared
    element by element) is worse than `best` beyond rounding: the bound and the figure add up the same terms
    in other orders."""
    pairs = zip(bound, best) if isinstance(bound, list) else [(bound, best)]
    for b, f in pairs:
        margin = tolerance * max(1.0, abs(f))
        if b > f + margin:
            return True
        if b < f - margin:
            return False
    return False


def record_metrics(ctx: SearchContext, result: SearchResult, selected: tuple[int, ...] | None) -> None:
    """Store the computed metrics in node_metrics (replacing the run's earlier rows)."""
    minimal = set(result.minimal)
    rows = [
        (node_label(node), node in minimal, node == selected, *[_stored(values[name]) for name in METRICS])
        for node, values in sorted(result.metrics.items())
    ]
    ctx.run.store.insert(ctx.meta_conn, store_runs.NODE_METRICS, ctx.run.run_id, rows)
    ctx.conn.commit()


def _stored(figure: Any) -> Any:
    """A metric as node_metrics stores it: ARX's rank aggregate (per-QI figures, largest first) by its largest."""
    return figure[0] if isinstance(figure, list) else figure


def method_output(job: Job, method: str, extra: str = "") -> Output:
    """The job's output, which must use `method`; in the source's schema unless it names its own."""
    output = job.output
    if output is None or output.method != method:
        raise ConfigError(f"this needs output: {{table: NAME, method: {method}{', ' + extra if extra else ''}}}")
    if output.schema is None and job.source.schema is not None:
        output = dataclasses.replace(output, schema=job.source.schema)
    return output
