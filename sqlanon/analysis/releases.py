"""Analysing one release in SQL: a node of a search (its classes from the run's star schema) or a published
table, for `sqlanon analyze` and `sqlanon report`: the attacks of `attacks` over its frequency set, the
Bayes-optimal audit's cells, ARX's utility figures, the report's least diverse classes.

Contract: reads through a search's context (`search.SearchContext`) and its star schema; writes scratch tables
only, dropped before it returns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Connection

from ..analysis.attacks import (
    AnalysisSettings,
    BayesSettings,
    TableAnalysis,
    analyze_frequency_set,
    analyze_frequency_sets,
)
from ..backends import Database
from ..criteria import Criterion
from ..engine import attacks as attack_sql
from ..engine.checker import WaveChecker
from ..engine.metrics import MetricsEvaluator
from ..engine.node_releases import ClassSums, NodeBatch, NodeReleases, population_sets
from ..engine.persons import persons_holding_several
from ..engine.star import StarSchema, uncovered_rows
from ..errors import ConfigError, DataError
from ..model.job import Job
from ..model.selection import node_label
from ..publish.anatomy import Anatomy
from ..search.strategies import SearchContext

WORST_CLASSES_SHOWN = 3  # the least diverse classes a report charts
DISTRIBUTION_SHOWN = 25  # the most frequent values (or labels) a report charts per attribute, each side
ANALYSIS_CUBE, POPULATION_CUBE = 1, 2  # the analysis' cubes among the run's (engine.checker's `part`)


@dataclass
class ChosenRelease:
    """What a report shows of the chosen node's release: its published classes' size histogram (size, classes),
    the least diverse of them with their value counts, and each attribute before and after (see
    `NodeAnalysis.chosen`)."""

    class_sizes: list[tuple[int, int]]
    worst_classes: list[tuple[str, list[tuple[str, int]]]]
    distributions: dict[str, tuple[list[tuple[str, int]], list[tuple[str, int]]]]


def published_release(
    db: Database, conn: Connection, job: Job, attribute: str | None, settings: AnalysisSettings
) -> tuple[TableAnalysis, ChosenRelease]:
    """A publication without a lattice (Mondrian, anatomy) as a report shows it, read from the table the job
    published (anatomy's QI table: exact QIs and a bucket, no sensitive value, so its risk is the QIs' own and
    the sensitive values keep the table's distribution, every value published in its bucket): its analysis,
    class sizes, and each attribute before and after, one grouping of each table."""
    assert job.output is not None, "a published table is the job's output"
    schema, table = job.output.schema or job.source.schema, job.output.table
    ref, anatomy = db.q(schema, table), job.output.method == Anatomy.name
    analysis = analyze_published_table(db, conn, job, schema, table, None if anatomy else attribute, settings)
    definition, classes = attack_sql.published_frequency_set(db, ref, job.qi_names, None)
    sizes = attack_sql.class_size_histogram(conn, definition, classes)
    columns = job.qi_names + job.sensitive
    source = db.q(job.source.schema, job.source.table)
    before = attack_sql.column_counts(db, conn, source, columns, DISTRIBUTION_SHOWN)
    after = attack_sql.column_counts(db, conn, ref, job.qi_names if anatomy else columns, DISTRIBUTION_SHOWN)
    after.update({s: before[s] for s in job.sensitive if anatomy})
    return analysis, ChosenRelease(sizes, [], {c: (before[c], after[c]) for c in columns})


def population_star(job: Job, ctx: SearchContext) -> StarSchema | None:
    """The job's population table seen through the run's hierarchies, after checking that it has the QI columns
    and that every one of its QI values is in the hierarchies (or a join would silently drop its tuples)."""
    if job.population is None:
        return None
    schema, table = job.population
    db, conn = ctx.db, ctx.conn
    columns = {db.name_key(c) for c in db.columns(conn, schema, table, "check population.table (and its schema)")}
    absent = [q for q in job.qi_names if db.name_key(q) not in columns]
    if absent:
        raise DataError(f"population table {table!r} has no column {absent[0]!r}; it needs the job's quasi-identifiers")
    star = dataclasses.replace(ctx.star, source=db.q(schema, table), sensitive=[])
    total, missing = uncovered_rows(db, conn, star)
    if missing:
        raise DataError(
            f"population table {table!r}: {missing} of its {total} rows have quasi-identifier "
            "values missing from the job's hierarchies; add them to the hierarchies"
        )
    return star


def analyzed_attribute(job: Job, sensitive: str | None) -> str | None:
    """The attribute the attacks analyze: `sensitive`, else the job's first; None for a job without one (its
    releases get the risk and utility figures, the attacks on a sensitive value do not apply)."""
    if sensitive is None:
        return job.sensitive[0] if job.sensitive else None
    if sensitive not in job.sensitive:
        raise ConfigError(
            f"{sensitive!r} is not a sensitive attribute of the job (its sensitive attributes: "
            f"{', '.join(job.sensitive) or 'none'})"
        )
    return sensitive


def analyze_published_table(
    db: Database,
    conn: Connection,
    job: Job,
    schema: str | None,
    table: str,
    attribute: str | None,
    settings: AnalysisSettings,
) -> TableAnalysis:
    """The attacks and risk of a table already published, its QI columns taken as they are (no lattice)."""
    unit, several = job.unit_column, 0
    if unit is not None and attribute is not None:  # each person's values counted once: a value's holders
        several = persons_holding_several(db, conn, db.q(schema, table), unit, attribute)
    definition, classes = attack_sql.published_frequency_set(
        db, db.q(schema, table), job.qi_names, attribute, job.unit_column, holders=bool(several)
    )
    return analyze_frequency_set(
        conn,
        label=table,
        sensitive=attribute,
        definition=definition,
        class_columns=classes,
        value_column="s",
        settings=settings,
        uniqueness=_uniqueness(job.criteria, lambda: db.count_rows(conn, db.q(schema, table))),
        persons="persons" if several else None,
    )


def _uniqueness(criteria: list[Criterion], rows: Callable[[], int]) -> Criterion | None:
    """The job's population uniqueness, whose estimate an analysis reports, fitted to the table's rows where its
    population is a sampling fraction of them and no search fitted it."""
    found = next((c for c in criteria if c.name == "population_uniqueness"), None)
    if found is not None and not getattr(found, "population", 0):
        found.fit_table(rows())
    return found


def analyze_nodes(
    ctx: SearchContext,
    nodes: list[tuple[int, ...]],
    attribute: str | None,
    settings: AnalysisSettings,
    metrics: dict[tuple[int, ...], dict[str, Any]],
    job_sensitive: list[str],
    population_star: StarSchema | None = None,
    bayes: BayesSettings | None = None,
) -> list[TableAnalysis]:
    """Each node's release (see `NodeAnalysis.analyze`), from a cube of the table made for them."""
    if not nodes:
        return []
    with node_analysis(ctx, attribute, job_sensitive, population_star) as analysis:
        return analysis.analyze(nodes, settings, metrics, bayes)


@contextmanager
def node_analysis(
    ctx: SearchContext, attribute: str | None, job_sensitive: list[str], population_star: StarSchema | None = None
) -> Iterator[NodeAnalysis]:
    """The analysis of nodes' releases over `attribute` while the block runs: the table grouped once into a
    packed cube (engine.checker) carrying every sensitive attribute of the job (`job_sensitive`, which KL
    divergence reads) and the criteria's, and with `population_star` the population's cube (the journalist and
    marketer risks). Its scratch tables are dropped when the block succeeded; after an error the caller's
    rollback takes them (a DROP there would fail in an aborted transaction and hide the error)."""
    criteria = ctx.criteria if ctx.max_suppressed else []
    read = [attribute] if attribute else []
    read += [a for c in criteria for a in c.sensitive_attributes()]
    star = dataclasses.replace(ctx.star, sensitive=list(dict.fromkeys(ctx.star.sensitive + job_sensitive + read)))
    if attribute:  # the analyzed attribute as codes where it can be: every grouping of the batches carries it
        star = star.with_domain(ctx.conn, attribute)
    cleanup = ExitStack()
    with ctx.db.hash_joins(ctx.conn):
        checker = _cube(cleanup, ctx, star, criteria, ANALYSIS_CUBE)
        population = _cube(cleanup, ctx, population_star, [], POPULATION_CUBE) if population_star else None
        releases = NodeReleases(checker, criteria, suppress=bool(ctx.max_suppressed), attribute=attribute)
        cleanup.callback(releases.close)
        yield NodeAnalysis(ctx, star, releases, population)
        cleanup.close()


class NodeAnalysis:
    """Nodes' releases read from the analysis' cube (see `node_analysis`): a few statements per batch of nodes,
    however many it holds (engine.node_releases)."""

    def __init__(
        self, ctx: SearchContext, star: StarSchema, releases: NodeReleases, population: WaveChecker | None
    ) -> None:
        self.ctx, self.star, self.releases, self.population = ctx, star, releases, population

    def analyze(
        self,
        nodes: list[tuple[int, ...]],
        settings: AnalysisSettings,
        metrics: dict[tuple[int, ...], dict[str, Any]],
        bayes: BayesSettings | None = None,
    ) -> list[TableAnalysis]:
        """Each node's release: its frequency set over the analyzed attribute, minus the classes the criteria
        suppress (and over the population, where there is one), with its metrics and ARX's utility figures. The
        metrics of nodes not yet in `metrics` are added to it, from the same class sums: a run that analyzes
        nodes does not group them a second time for their metrics. Without a suppression limit, those nodes must
        satisfy the criteria, as minimal nodes do (metrics suppress the classes that violate them, a release
        without a limit does not: steps.add_metrics gives any other node's)."""
        ctx, releases = self.ctx, self.releases
        evaluator = _metrics(ctx, self.star, releases, need=[node for node in nodes if node not in metrics])
        analyses: dict[tuple[int, ...], TableAnalysis] = {}
        done = 0
        for number, batch_nodes in enumerate(releases.batches(nodes)):
            ctx.progress("analysis", done, len(nodes))
            with releases.batch(batch_nodes, f"{ctx.run.run_id}_{number}") as batch:
                found = _analyze_batch(ctx, releases, batch, settings, metrics, evaluator, self.population, bayes)
                analyses.update(found)
            done += len(batch_nodes)
        ctx.progress("analysis", done, len(nodes))
        return [analyses[node] for node in nodes]

    def chosen(self, node: tuple[int, ...], sensitive: list[str]) -> ChosenRelease:
        """`node`'s release as a report shows it: its published classes' sizes, the least diverse of them (over
        the analyzed attribute, where there is one), and each QI and sensitive attribute of `sensitive` (a job's
        own) before and after. The node's frequency set is rolled up from the cube, its classes' labels read
        from a lookup of the dimension tables; the values before generalization are the table's columns
        grouped one by one (GROUPING SETS)."""
        ctx, releases = self.ctx, self.releases
        shown = [a for a in self.star.sensitive if a in sensitive]
        with releases.batch([node], f"{ctx.run.run_id}_chosen") as batch:
            labels = releases.labels(node)
            sizes = releases.class_size_counts(batch)
            after = releases.distributions(batch, node, labels, shown, DISTRIBUTION_SHOWN)
            worst = releases.least_diverse(batch, node, labels, WORST_CLASSES_SHOWN) if releases.attribute else []
            ctx.db.drop_table(ctx.conn, labels)
        names = [d.column for d in self.star.dimensions] + shown
        # the table's own values: each column grouped alone in one scan; grouping the table by every QI at
        # level 0 made a class per row of the hospital table (1M rows: 0.19 s against 0.08-0.11 s)
        before = attack_sql.column_counts(ctx.db, ctx.conn, self.star.source, names, DISTRIBUTION_SHOWN)
        return ChosenRelease(sizes, worst, {name: (before[name], after[name]) for name in names})


def _metrics(
    ctx: SearchContext, star: StarSchema, releases: NodeReleases, need: list[tuple[int, ...]]
) -> MetricsEvaluator | None:
    """The metrics of the analyzed nodes, from the analysis' class sums and the table's terms read from its cube
    (None: every node has its metrics)."""
    if not need:
        return None
    cells = ctx.cells_terms.get(frozenset(star.sensitive))
    return MetricsEvaluator(
        conn=ctx.conn,
        star=star,
        criteria=ctx.criteria,
        run=ctx.run,
        cells_term=releases.checker.cells_term() if cells is None else cells,
        marginal_terms=releases.marginal_terms(),
    )


def _cube(
    stack: ExitStack,
    ctx: SearchContext,
    star: StarSchema,
    criteria: list[Criterion],
    part: int,
) -> WaveChecker:
    """A packed cube of `star` for the analysis (`part`: its number among the run's cubes), closed with `stack`."""
    checker = WaveChecker(
        db=ctx.db,
        conn=ctx.conn,
        star=star,
        run=ctx.run,
        from_table=not ctx.use_cube,
        criteria=criteria,
        part=part,
    )
    stack.callback(checker.close)
    return checker


def _analyze_batch(
    ctx: SearchContext,
    releases: NodeReleases,
    batch: NodeBatch,
    settings: AnalysisSettings,
    metrics: dict[tuple[int, ...], dict[str, Any]],
    evaluator: MetricsEvaluator | None,
    population: WaveChecker | None,
    bayes: BayesSettings | None,
) -> dict[tuple[int, ...], TableAnalysis]:
    release, attribute = batch.release(), releases.attribute
    analyses = analyze_frequency_sets(
        ctx.conn,
        release,
        labels={(j,): node_label(node) for j, node in enumerate(batch.nodes)},
        sensitive=attribute,
        value_column=release.value,
        settings=settings,
        population=population_sets(population, releases, batch.nodes) if population else None,
        uniqueness=_uniqueness(ctx.criteria, lambda: ctx.star.rows),
    )
    sums = releases.class_sums(batch, evaluator.quality if evaluator else None)
    # the Bayes-optimal audit's adversary learns one value per person: not defined where persons hold several
    audited = attribute is not None and batch.members is None
    audits = releases.bayes_sums(batch, dataclasses.asdict(bayes or BayesSettings())) if audited else {}
    found = {}
    for (j,), analysis in analyses.items():
        node, node_sums = batch.nodes[j], sums.get(j, ClassSums())
        if node not in metrics:
            assert evaluator is not None, "the nodes without metrics have an evaluator"
            metrics[node] = evaluator.figures(node, node_sums)
        analysis.utility = {**metrics[node], **arx_utility(analysis, node_sums, len(node))}
        analysis.bayes = dict(zip(DISCLOSURES, audits.get(j, (0, 0, 0)))) if audited else {}
        found[node] = analysis
    return found


DISCLOSURES = ("positive_disclosure_tuples", "negative_disclosure_tuples", "rho_breach_tuples")


def arx_utility(analysis: TableAnalysis, sums: ClassSums, qis: int) -> dict[str, float]:
    """Utility as ARX defines it: DM* (every class counts n^2, suppressed ones too), AECS with the suppressed
    tuples as one class, and the normalized certainty penalty (loss): per tuple and QI, (leaves under its
    generalized value - 1) / (leaves of the hierarchy - 1), 1 for a suppressed tuple, averaged; from the sums
    of engine.node_releases."""
    rows = analysis.rows + analysis.suppressed
    return {
        "dm_star": sums.all_squares,
        "aecs": rows / (analysis.classes + (1 if analysis.suppressed else 0)) if rows else 0.0,
        "loss": sums.penalty / (rows * qis) if rows else 0.0,
    }
