"""Frequency sets: (class codes a<attr>..., sensitive values s<j>..., cnt) of one node, one GROUP BY each.

Where a run reads many nodes (the search, metrics, analysis) it reads them from a packed cube (engine.checker,
engine.node_releases); a verb that reads one node (publication, `apply`, the report's chosen release) reads its
frequency set from `node_frequency_set`: the source joined with the run's dimension tables and grouped at the
node's levels. There are no roll-up tables and no parent-code lookups: a node's set is one GROUP BY.

Contract: reads the star schema (engine.star) and the criteria's SQL; writes nothing (callers store a set where
several statements read it).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.engine import Connection

from ..criteria import Criterion, KAnonymity
from ..criteria.view import FrequencySetView, SqlFragment
from . import histograms
from .star import StarSchema

COUNT = "cnt"
BATCH = 64  # frequency sets evaluated per statement


def class_column(attr: int) -> str:
    return f"a{attr}"


def node_frequency_set(star: StarSchema, node: Sequence[int]) -> str:
    """SELECT the classes of `node` (levels in QI order): a<attr> (codes), s<j> (the sensitive columns `star`
    carries) and cnt: a GROUP BY of the source joined with the dimension tables on its QI values (a scan of the
    table), for a verb that reads one node."""
    return _grouped(
        star, [(f"d{d.attr}.c{int(level)}", class_column(d.attr)) for d, level in zip(star.dimensions, node)]
    )


def population_set(star: StarSchema, codes: list[tuple[str, str]]) -> str:
    """A FROM item (alias p) of the population's classes (FrequencySetView.population): the population (the table
    a research subset was drawn from) joined with the dimensions and grouped on `codes` ((SQL, name) of each)."""
    return "(" + _grouped(star, codes, source=star.population_joins("t"), sensitive=[]) + ") AS p"


def _grouped(
    star: StarSchema,
    codes: list[tuple[str, str]],
    *,
    source: str | None = None,
    sensitive: list[tuple[str, str]] | None = None,
    count: str = "COUNT(*)",
) -> str:
    """One frequency set's GROUP BY: `source` (default: the table joined with every dimension table, as t) grouped
    on `codes` and the `sensitive` columns ((SQL, name) of each; default: the table's sensitive columns), `count`
    summing each class."""
    if sensitive is None:
        sensitive = [(f"t.{star.db.q(c)}", name) for c, name in star.sensitive_columns().items()]
    named = codes + sensitive
    select = ", ".join(f"{sql} AS {name}" for sql, name in named)
    group = ", ".join(sql for sql, _ in named)
    return f"SELECT {select}, {count} AS {COUNT} FROM {source or star.joins('t')} GROUP BY {group}"


def count_violations_batch(
    conn: Connection,
    views: list[FrequencySetView],
    criteria_sets: list[list[Criterion]],
    params: dict[str, object] | None = None,
) -> list[tuple[int, list[tuple[int, int]]]]:
    """For each view: its row count, and (violating classes, their tuples) per criteria set.

    A set's violators are the UNION of its criteria's violating classes. Every
    view and set is answered by one statement (views defined by a CTE are
    computed once each): per-statement overhead, not data, dominates small
    frequency sets, so the search evaluates whole waves of nodes this way.
    `params` binds names the views' definitions use.
    """
    if any(histograms.decided(criteria) for criteria in criteria_sets):
        return [_histogram_counts(conn, view, criteria_sets, dict(params or {})) for view in views]
    ctes, selects, params = [], [], dict(params or {})
    for j, view in enumerate(views):
        if view.definition:  # computed once, however many criteria read it
            ctes.append(f"{view.table} AS MATERIALIZED ({view.definition})")
        for i, criteria in enumerate(criteria_sets):
            violators = violating_classes_sql(view, criteria, f"{j}_{i}", params)
            size = f"(SELECT COUNT(*) FROM {view.table})" if i == 0 else "NULL"
            selects.append(
                f"SELECT {j} AS view_index, {i} AS criteria_set, {size} AS size, COUNT(*) AS classes, "
                f"COALESCE(SUM(n), 0) AS tuples FROM ({violators}) AS violators_{j}_{i}"
            )
    with_clause = f"WITH {', '.join(ctes)} " if ctes else ""
    rows = conn.execute(text(with_clause + " UNION ALL ".join(selects)), params).all()
    answers: list[tuple[int, list[tuple[int, int]]]] = [(0, []) for _ in views]
    for j, i, size, classes, tuples in sorted(rows, key=lambda r: (r[0], r[1])):
        rows_j = int(size) if i == 0 else answers[j][0]
        answers[j] = (rows_j, answers[j][1] + [(int(classes), int(tuples))])
    return answers


def _histogram_counts(
    conn: Connection, view: FrequencySetView, criteria_sets: list[list[Criterion]], params: dict[str, object]
) -> tuple[int, list[tuple[int, int]]]:
    """`count_violations_batch`'s answer for one view where a set holds a criterion decided by histogram: the other
    sets as the batch answers them, and a statement per set that holds one (the histogram of its classes)."""
    plain = [criteria for criteria in criteria_sets if histograms.decided(criteria) is None]
    # k-anonymity with k = 1 takes no class: the table's size, where no set is plain
    [(size, answered)] = count_violations_batch(conn, [view], plain or [[KAnonymity(1)]], params)
    found = iter(answered)
    with_clause = "WITH " + view.table + " AS (" + str(view.definition) + ") " if view.definition else ""
    answers = []
    for criteria in criteria_sets:
        criterion = histograms.decided(criteria)
        if criterion is None:
            answers.append(next(found))
            continue
        own = dict(params)
        nodes = histograms.read_histograms(conn, with_clause + histogram_statement(view, criteria, own), own, False)
        answers.append(histograms.violations(criterion, nodes).get(None, (0, 0)))
    return size, answers


def violating_classes_sql(
    view: FrequencySetView, criteria: list[Criterion], suffix: str, params: dict[str, object]
) -> str:
    """SELECT the class columns and n of every class violating any of the criteria (a UNION).

    A criterion that reads class sizes alone (k-anonymity) is tested on the
    statistic of another, which has every class and its size, rather than by a
    pass and a UNION of its own. A criterion on the whole release
    (`Criterion.whole_release`) bounds the classes the others leave: it takes
    those that fail a size bound itself, and reads the others' violators
    beside the class sizes. Parameters are renamed with `suffix` (a criterion
    appears once per view and set in a statement) and added to `params`.
    """
    sizes = [c for c in criteria if c.size_violation() is not None]
    release = [c for c in criteria if c.whole_release]
    others = [c for c in criteria if c not in sizes and c not in release]
    bounds = [v for v in (c.size_violation() for c in sizes) if v is not None]
    folded = None
    if bounds:
        folded = SqlFragment(
            " OR ".join(f"({a.sql})" for a in bounds), {k: v for a in bounds for k, v in a.params.items()}
        )
    if not others:
        fragments = [c.violating_classes(view, folded) for c in release] or [c.violating_classes(view) for c in sizes]
        return _union(fragments, suffix, params)
    violators = _union(
        [others[0].violating_classes(view, folded)] + [c.violating_classes(view) for c in others[1:]], suffix, params
    )
    if not release:
        return violators
    kept = _union([c.violating_classes(_kept_classes(view, violators)) for c in release], f"{suffix}r", params)
    return f"{violators} UNION ALL {kept}"


def _union(fragments: list[SqlFragment], suffix: str, params: dict[str, object]) -> str:
    return " UNION ".join(f"({fragment.bound(suffix, params)})" for fragment in fragments)


def flagged_classes(view: FrequencySetView, violators: str) -> str:
    """Per class of the view: n and taken (1: one of the classes `violators` SELECTs), every class's size beside
    the violators', grouped by class (a grouping matches NULL classes and hashes, where an anti-join on IS NOT
    DISTINCT FROM is a nested loop on PostgreSQL)."""
    return (
        f"SELECT {view.classes}, MAX(n) AS n, MAX(taken) AS taken FROM (SELECT {view.classes}, n, 0 AS taken FROM "
        f"({view.class_sizes()}) AS s UNION ALL SELECT {view.classes}, n, 1 FROM ({violators}) AS v) AS b "
        f"GROUP BY {view.classes}"
    )


def _kept_classes(view: FrequencySetView, violators: str) -> FrequencySetView:
    """The classes that are not among `violators`, as a set of class sizes (`flagged_classes`)."""
    kept = flagged_classes(view, violators) + " HAVING MAX(taken) = 0"
    return FrequencySetView(
        table=f"({kept}) AS kept",
        class_columns=view.class_columns,
        node_columns=view.node_columns,
        counts_only=view.counts_only,
        count_column="n",
        sensitive_columns={},
    )


def class_labels(star: StarSchema, node: tuple[int, ...], alias: str) -> tuple[list[str], str]:
    """The label columns of a class of `node` whose codes are in `alias`.a0.., and the joins that give them."""
    labels = [f"l{d.attr}.label" for d in star.dimensions]
    joins = " ".join(
        f"JOIN (SELECT DISTINCT c{node[d.attr]} AS code, l{node[d.attr]} AS label FROM {d.table}) "
        f"l{d.attr} ON l{d.attr}.code = {alias}.{class_column(d.attr)}"
        for d in star.dimensions
    )
    return labels, joins


def node_set_view(star: StarSchema, table: str, definition: str | None = None) -> FrequencySetView:
    """A node's frequency set as `node_frequency_set` makes it (class columns a<attr>, the star's sensitive
    columns, cnt), as the criteria see it under the name `table` (a CTE of `definition`, when given)."""
    return FrequencySetView(
        table=table,
        class_columns=[class_column(d.attr) for d in star.dimensions],
        count_column=COUNT,
        sensitive_columns=star.sensitive_columns(),
        definition=definition,
        held=star.held,
    )


def violating_classes_labelled(
    conn: Connection, star: StarSchema, node: tuple[int, ...], criteria: list[Criterion], limit: int
) -> list[tuple[list[object], int, int]]:
    """The node's first `limit` classes that violate `criteria` (fewest tuples first): each class's labels, its
    tuples, and how many classes violate in all."""
    definition = node_frequency_set(star, node)
    view = node_set_view(star, "node_fs", definition)
    params: dict[str, object] = {}
    criteria = resolve_histograms(conn, view, criteria, "WITH node_fs AS (" + definition + ") ", params)
    labels, joins = class_labels(star, node, "v")
    rows = conn.execute(
        text(
            f"WITH node_fs AS ({definition}) SELECT {', '.join(labels)}, v.n, COUNT(*) OVER () FROM "
            f"({violating_classes_sql(view, criteria, 'v', params)}) v {joins} ORDER BY v.n, {', '.join(labels)} "
            f"LIMIT {int(limit)}"
        ),
        params,
    ).all()
    return [(list(row[:-2]), int(row[-2]), int(row[-1])) for row in rows]


def histogram_statement(view: FrequencySetView, criteria: list[Criterion], params: dict[str, object]) -> str:
    """SELECT the view's node columns, n, taken (1: a class the criteria not decided by histogram take) and the
    number of such classes: the histogram of each node's classes (engine.histograms reads it)."""
    others = [c for c in criteria if not c.decided_by_histogram]
    # without others, no class is taken: the sizes themselves, none of them kept, stand for the violators
    taken = violating_classes_sql(view, others, "hist", params) if others else view.class_sizes() + " LIMIT 0"
    group = ", ".join([*view.node_columns, "n", "taken"])
    return f"SELECT {group}, COUNT(*) AS classes FROM ({flagged_classes(view, taken)}) AS f GROUP BY {group}"


def resolve_histograms(
    conn: Connection, view: FrequencySetView, criteria: list[Criterion], with_clause: str, params: dict[str, object]
) -> list[Criterion]:
    """`criteria`, the one decided by histogram bound to each node's cut (one statement: `with_clause`, the WITH
    clause defining the view's table, then the histogram of its classes); unchanged without one."""
    criterion = histograms.decided(criteria)
    if criterion is None:
        return criteria
    own: dict[str, object] = dict(params)
    statement = with_clause + histogram_statement(view, criteria, own)
    nodes = histograms.read_histograms(conn, statement, own, bool(view.node_columns))
    bound = histograms.bind(criterion, histograms.cuts(criterion, nodes))
    return [bound if c is criterion else c for c in criteria]
