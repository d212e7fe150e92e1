"""Analysing one release in SQL: a node of a search (its classes from the run's star schema) or a published
table, for `sqlanon analyze` and `sqlanon report`: the attacks of `attacks` over its frequency set, the
Bayes-optimal audit's cells, ARX's utility figures, the report's least diverse classes.

Contract: reads through a search's context (`search.SearchContext`) and its star schema; writes scratch tables
only, dropped before it returns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection

from ..analysis.attacks import (
    AnalysisSettings,
    BayesSettings,
    TableAnalysis,
    analyze_frequency_set,
    bayes_audit,
)
from ..backends import Database
from ..criteria.view import FrequencySetView
from ..engine.frequency import COUNT, class_column, class_labels, node_frequency_set, violating_classes_sql
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
    columns = [class_column(d.attr) for d in star.dimensions]
    value = star.sensitive_columns()[attribute]
    sizes = ctx.conn.execute(
        text(
            f"WITH fs AS ({definition}) SELECT n, COUNT(*) FROM (SELECT SUM(cnt) AS n FROM fs GROUP BY "
            f"{', '.join(columns)}) c GROUP BY n ORDER BY n"
        )
    ).all()
    labels, joins = class_labels(star, node, "w")
    on = " AND ".join(f"fs.{c} = w.{c}" for c in columns)
    rows = ctx.conn.execute(
        text(
            f"WITH fs AS MATERIALIZED ({definition}), w AS (SELECT {', '.join(columns)}, COUNT(*) AS "
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
    qis = [db.q(c) for c in job.qi_names]
    classes = [f"g{i}" for i in range(len(qis))]
    definition = (
        f"SELECT {', '.join(f'{q} AS {g}' for q, g in zip(qis, classes))}, {db.q(attribute)} AS s, "
        f"COUNT(*) AS cnt FROM {db.q(schema, table)} GROUP BY {', '.join(qis + [db.q(attribute)])}"
    )
    return analyze_frequency_set(conn, table, attribute, definition, classes, "s", settings)


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
        definition = scratch.enter_context(scratch_table(ctx, f"analysis_{tag}", node_frequency_set(star, node)))
        suppressed = None
        if ctx.max_suppressed:
            checked = node_frequency_set(ctx.star, node)
            view = FrequencySetView(
                table="criteria_fs",
                class_columns=columns,
                count_column=COUNT,
                sensitive_columns=ctx.star.sensitive_columns(),
                definition=checked,
            )
            params: dict[str, object] = {}
            violators = violating_classes_sql(view, ctx.criteria, "a", params)
            suppressed = scratch.enter_context(
                scratch_table(
                    ctx,
                    f"suppressed_{tag}",
                    f"WITH criteria_fs AS ({checked}) SELECT {', '.join(columns)} FROM ({violators}) v",
                    params,
                )
            )
        population = None
        if population_star is not None:
            population = node_frequency_set(population_star, node)
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
        analysis.utility = {**metrics, **arx_utility(ctx, definition, node, analysis, suppressed)}
        analysis.bayes = bayes_audit(
            ctx.conn,
            bayes_cells(star, node, attribute),
            [f"q{d.attr}" for d in star.dimensions],
            columns,
            bayes or BayesSettings(),
            suppressed,
        )
    return analysis


@contextmanager
def scratch_table(ctx: SearchContext, name: str, sql: str, params: dict[str, object] | None = None) -> Iterator[str]:
    """`sql` stored once as a temporary table; yields a SELECT of it for the statements that read it, then drops
    it."""
    ref = ctx.db.create_scratch(ctx.conn, name, sql, params)
    try:
        yield f"SELECT * FROM {ref}"
    finally:
        ctx.db.drop_table(ctx.conn, ref)


def bayes_cells(star: StarSchema, node: tuple[int, ...], attribute: str) -> str:
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


def arx_utility(
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
