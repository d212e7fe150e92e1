"""The SQL of full-domain generalization's publication (sqlanon.publish.generalize): the node's rows as published,
each QI at its level, and the classes that violate the criteria (removed or masked with suppression)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..backends import Database
from ..criteria import Criterion
from ..criteria.view import FrequencySetView
from ..errors import ConfigError, DataError
from ..model.hierarchies import NULL_VALUE
from .frequency import population_set, resolve_histograms, violating_classes_sql
from .star import Dimension, StarSchema


def violating_classes(
    db: Database,
    conn: Connection,
    star: StarSchema,
    node: tuple[int, ...],
    criteria: list[Criterion],
    params: dict[str, object],
) -> tuple[str, str]:
    """A WITH clause naming the node's violating classes `bad`, and the LEFT JOIN that flags their tuples (b.n is
    NULL for a tuple of a class that satisfies the criteria). A criterion decided by histogram reads the node's
    class sizes first (one statement: engine.histograms)."""
    codes = [f"d{d.attr}.c{level}" for d, level in zip(star.dimensions, node)]
    select = [f"{code} AS a{i}" for i, code in enumerate(codes)] + star.sensitive_select("t")
    group = codes + [f"t.{db.q(c)}" for c in star.sensitive]
    reads_population = star.population is not None and any(c.reads_population for c in criteria)
    view, holders = FrequencySetView(
        table="node_classes",
        class_columns=[f"a{i}" for i in range(len(codes))],
        count_column="cnt",
        sensitive_columns=star.sensitive_columns(),
        held=star.held,
        population=population_set(star, [(c, f"a{i}") for i, c in enumerate(codes)]) if reads_population else None,
    ).with_stored_holders()  # where persons hold several values, their holders read once
    stored = "".join(f", {name} AS MATERIALIZED ({sql})" for name, sql in holders)
    classes = (
        f"WITH node_classes AS (SELECT {', '.join(select)}, COUNT(*) AS cnt FROM {star.joins('t')} "
        f"GROUP BY {', '.join(group)}){stored}"
    )
    criteria = resolve_histograms(conn, view, criteria, f"{classes} ", params)
    with_clause = classes + ", bad AS (" + violating_classes_sql(view, criteria, "pub", params) + ") "
    on = " AND ".join(f"b.a{i} = {code}" for i, code in enumerate(codes))
    return with_clause, f" LEFT JOIN bad b ON {on}"


def published_population(db: Database, conn: Connection, star: StarSchema, node: tuple[int, ...]) -> str:
    """A FROM item (alias p) of the population's classes as the node publishes them (FrequencySetView.population,
    for the audit): per class, its QIs' published values (g0..), cnt, its rows in the population (the table the
    research subset was drawn from), and withheld, its rows of the subset before any suppression. Both tables are
    labelled as `generalized_value` writes the published table."""
    labels: list[sa.ColumnElement[Any]] = [
        sa.literal_column(generalized_value(db, d.column, d, level, False)) for d, level in zip(star.dimensions, node)
    ]

    def rows(joins: str, population: bool) -> sa.Select[Any]:
        counts: tuple[sa.ColumnElement[Any], ...] = (
            sa.literal_column("1" if population else "0"),
            sa.literal_column("0" if population else "1"),
        )
        return sa.select(
            *(label.label(f"g{i}") for i, label in enumerate(labels)), counts[0].label("p"), counts[1].label("s")
        ).select_from(sa.text(joins))

    union = sa.union_all(rows(star.population_joins("t"), True), rows(star.joins("t"), False)).subquery("u")
    classes = [union.c[f"g{i}"] for i in range(len(labels))]
    query = sa.select(*classes, sa.func.sum(union.c.p).label("cnt"), sa.func.sum(union.c.s).label("withheld")).group_by(
        *classes
    )
    return "(" + db.as_text(conn, query) + ") AS p"


def node_of_published_table(
    db: Database,
    conn: Connection,
    star: StarSchema,
    table_ref: str,
    masked_top: dict[str, list[str]] | None,
    given: tuple[int, ...] | None = None,
) -> tuple[int, ...]:
    """The node a table of the star's QIs was published at, found from its values (an audit of a table that compares
    it with the population needs the population's classes as the table labels them): per QI, the level of its
    hierarchy whose labels hold every value the table publishes (the rows masked as suppressed, every QI at its
    top label, left out). Where several levels do and they label the values alike, the lowest; refused where none
    does (DataError: the table was not published from these hierarchies) and where levels that label the values
    otherwise both do (ConfigError: the node must be given). A `given` node is checked the same way: each QI's
    values must be labels of its level."""
    values = _published_values(db, conn, star, table_ref, masked_top)
    # a level-0 value of persons' common ancestors is a label of a level above: any level may hold such a column
    levels = [
        list(range(d.height + 1)) if d.ancestors else _published_levels(d, v) for d, v in zip(star.dimensions, values)
    ]
    if given is not None:
        wrong = next((i for i, (level, fits) in enumerate(zip(given, levels)) if level not in fits), None)
        if wrong is not None:
            raise DataError(
                f"the table's values of {star.dimensions[wrong].column!r} are not labels of level {given[wrong]} of "
                f"its hierarchy{f' (they are of level {levels[wrong][0]})' if levels[wrong] else ''}: give the node "
                "the table was published at"
            )
        return given
    return tuple(_published_level(d, fits) for d, fits in zip(star.dimensions, levels))


def _published_values(
    db: Database, conn: Connection, star: StarSchema, table_ref: str, masked_top: dict[str, list[str]] | None
) -> list[set[str | None]]:
    """Per QI, the distinct values of `table_ref`'s column (as text) outside its masked rows: at most one more than
    its hierarchy's labels (a column with more is at no level of it), one statement."""
    columns = [d.column for d in star.dimensions]
    table = db.ref_table(table_ref, columns)
    masked = [sa.func.coalesce(table.c[c].in_(tops), False) for c, tops in (masked_top or {}).items() if tops]
    released = sa.not_(sa.and_(*masked)) if masked else sa.true()
    parts = []
    for index, d in enumerate(star.dimensions):
        value = sa.cast(table.c[d.column], sa.String)
        labels = sum(len(set(level)) for level in d.hierarchy.columns)
        distinct = sa.select(value.label("v")).where(released).distinct().limit(labels + 1).subquery(f"v{index}")
        parts.append(sa.select(sa.literal(index).label("qi"), distinct.c.v))
    found: list[set[str | None]] = [set() for _ in star.dimensions]
    for index, value in conn.execute(sa.union_all(*parts)):
        found[index].add(value)
    return found


def _published_levels(dim: Dimension, values: set[str | None]) -> list[int]:
    """The levels of `dim`'s hierarchy whose labels hold `values` (a NULL is a value of level 0 alone)."""
    published = {NULL_VALUE if v is None else v for v in values}
    return [
        level
        for level, labels in enumerate(dim.hierarchy.columns)
        if published <= set(labels) and (None not in values or level == 0)
    ]


def _published_level(dim: Dimension, levels: list[int]) -> int:
    """The level of `dim`'s hierarchy its published values are of, among the `levels` whose labels hold them (see
    `node_of_published_table`)."""
    if dim.ancestors:
        raise ConfigError(
            f"the persons' common ancestors of {dim.column!r} leave the level of its published values open; give "
            "the node the table was published at (--node)"
        )
    if not levels:
        raise DataError(
            f"column {dim.column!r} of the table holds values of no one level of its hierarchy: it was not "
            "published from the job's hierarchies; audit it with the job that published it"
        )
    columns = dim.hierarchy.columns
    alike = [level for level in levels if columns[level] == columns[levels[0]]]
    if alike != levels:
        raise ConfigError(
            f"the values of {dim.column!r} are labels of levels {levels[0]} and {levels[len(alike)]} of its "
            "hierarchy, which group the population otherwise; give the node the table was published at (--node)"
        )
    return levels[0]


def generalized_value(db: Database, column: str, dim: Dimension, level: int, masking: bool) -> str:
    """A QI's published value: its label at `level`, always text (VARCHAR), so the column's type is the same
    whichever node is published (level 0 is the original value as text; NULL stays NULL); with `masking`, the
    top label for a tuple of a violating class."""
    # a dimension holding persons' common ancestors labels them at level 0 (and a NULL as NULL)
    value = f"d{dim.attr}.l{level}" if level > 0 or dim.ancestors else f"CAST(t.{db.q(column)} AS VARCHAR)"
    if masking:
        value = f"CASE WHEN b.n IS NULL THEN {value} ELSE d{dim.attr}.l{dim.height} END"
    return value


def generalized_rows(
    star: StarSchema, node: tuple[int, ...], select: list[str], violating: tuple[str, str] | None, remove: bool
) -> str:
    """The SELECT of the published table: `select` (the published columns over the source `t` and its dimensions
    `d<attr>`) with, given `violating` (see `violating_classes`), the violating classes' tuples flagged, and left
    out when `remove`."""
    with_clause, flagged = violating or ("", "")
    # the dimensions whose labels are published (a QI at level 0 is its own value, unless it holds persons' common
    # ancestors), all of them when the violating classes are flagged by their codes (PostgreSQL, Adult x 33 = 1M
    # rows, the bottom node: the table written in 0.85 s instead of 2.43 s; DuckDB's writes cost the same either way)
    attrs = None if violating else {d.attr for d, level in zip(star.dimensions, node) if level > 0 or d.ancestors}
    joins = star.joins("t", attrs, rows=True)
    where = " WHERE b.n IS NULL" if violating and remove else ""
    return f"{with_clause}SELECT {', '.join(select)} FROM {joins}{flagged}{where}"
