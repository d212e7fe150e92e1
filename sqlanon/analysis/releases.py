"""Analysing one release in SQL: a node of a search (its classes from the run's star schema) or a published
table, for `sqlanon analyze` and `sqlanon report`: the attacks of `attacks` over its frequency set, the
Bayes-optimal audit's cells, ARX's utility figures, the report's least diverse classes.

Contract: reads through a search's context (`search.SearchContext`) and its star schema; writes scratch tables
only, dropped before it returns.
"""

from __future__ import annotations

import dataclasses
from contextlib import ExitStack
from typing import Any

from sqlalchemy.engine import Connection

from ..analysis.attacks import (
    AnalysisSettings,
    BayesSettings,
    TableAnalysis,
    analyze_frequency_set,
    bayes_audit,
)
from ..backends import Database
from ..engine import attacks as attack_sql
from ..engine.frequency import class_column, node_frequency_set
from ..engine.scratch import stored_select
from ..engine.star import (
    StarSchema,
)
from ..errors import ConfigError, DataError
from ..model.job import Job
from ..model.selection import node_label
from ..search.strategies import SearchContext

WORST_CLASSES_SHOWN = 3  # the least diverse classes a report charts


def chosen_classes(
    ctx: SearchContext, node: tuple[int, ...], attribute: str
) -> tuple[list[tuple[int, int]], list[tuple[str, list[tuple[str, int]]]]]:
    """The node's class-size histogram (size, classes), and its least diverse classes with their value counts."""
    star = dataclasses.replace(ctx.star, sensitive=[attribute])
    definition = node_frequency_set(star, node)
    sizes = attack_sql.class_size_histogram(ctx.conn, definition, [class_column(d.attr) for d in star.dimensions])
    worst = attack_sql.least_diverse_classes(
        ctx.conn,
        star=star,
        node=node,
        definition=definition,
        value=star.sensitive_columns()[attribute],
        shown=WORST_CLASSES_SHOWN,
    )
    return sizes, worst


def population_star(job: Job, ctx: SearchContext) -> StarSchema | None:
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
    total = star.db.count_rows(conn, star.source)
    matched = star.db.count_rows(conn, star.joins())
    if matched != total:
        raise DataError(
            f"population table {table!r}: {total - matched} of its {total} rows have quasi-identifier "
            "values missing from the job's hierarchies; add them to the hierarchies"
        )
    return star


def analyzed_attribute(job: Job, sensitive: str | None) -> str:
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


def analyze_published_table(
    db: Database,
    conn: Connection,
    job: Job,
    schema: str | None,
    table: str,
    attribute: str,
    settings: AnalysisSettings,
) -> TableAnalysis:
    """The attacks and risk of a table already published, its QI columns taken as they are (no lattice)."""
    definition, classes = attack_sql.published_frequency_set(db, db.q(schema, table), job.qi_names, attribute)
    return analyze_frequency_set(
        conn,
        label=table,
        sensitive=attribute,
        definition=definition,
        class_columns=classes,
        value_column="s",
        settings=settings,
    )


def analyze_node(
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
    star = dataclasses.replace(ctx.star, sensitive=[attribute])
    columns = [class_column(d.attr) for d in star.dimensions]
    tag = f"{ctx.run.run_id}_{'_'.join(map(str, node))}"
    with ExitStack() as scratch:
        # every statement below joins the stored frequency set, its classes and the cells on all the QIs' columns
        scratch.enter_context(ctx.db.hash_joins(ctx.conn))
        definition = scratch.enter_context(
            stored_select(ctx.db, ctx.conn, f"analysis_{tag}", node_frequency_set(star, node))
        )
        suppressed = None
        if ctx.max_suppressed:
            violators, params = attack_sql.suppressed_classes(ctx.star, node, ctx.criteria)
            suppressed = scratch.enter_context(stored_select(ctx.db, ctx.conn, f"suppressed_{tag}", violators, params))
        population = None
        if population_star is not None:
            population = node_frequency_set(population_star, node)
        analysis = analyze_frequency_set(
            ctx.conn,
            label=node_label(node),
            sensitive=attribute,
            definition=definition,
            class_columns=columns,
            value_column=star.sensitive_columns()[attribute],
            settings=settings,
            suppressed_classes=suppressed,
            population=population,
        )
        analysis.utility = {**metrics, **arx_utility(ctx, definition, node, analysis, suppressed)}
        analysis.bayes = bayes_audit(
            ctx.conn,
            attack_sql.bayes_cells(star, node, attribute),
            [f"q{d.attr}" for d in star.dimensions],
            columns,
            bayes or BayesSettings(),
            suppressed,
        )
    return analysis


def arx_utility(
    ctx: SearchContext, definition: str, node: tuple[int, ...], analysis: TableAnalysis, suppressed: str | None
) -> dict[str, float]:
    """Utility as ARX defines it: DM* (every class counts n^2, suppressed ones too), AECS with the suppressed
    tuples as one class, and the normalized certainty penalty (loss): per tuple and QI, (leaves under its
    generalized value - 1) / (leaves of the hierarchy - 1), 1 for a suppressed tuple, averaged."""
    dm_star, penalty = attack_sql.arx_utility_sums(
        ctx.conn, star=ctx.star, node=node, definition=definition, suppressed=suppressed
    )
    rows = analysis.rows + analysis.suppressed
    return {
        "dm_star": dm_star,
        "aecs": rows / (analysis.classes + (1 if analysis.suppressed else 0)) if rows else 0.0,
        "loss": penalty / (rows * len(ctx.star.dimensions)) if rows else 0.0,
    }
