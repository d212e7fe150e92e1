"""The SQL of the attack analyses (sqlanon.analysis): one release's figures from its frequency set.

Every function reads a frequency set given as a SELECT (`definition`: the class columns, a sensitive value
column and cnt) and returns named figures; what they mean, and the checks on them, are `analysis.attacks`'.
`suppressed` (optional everywhere) is a SELECT of the class columns of the classes left out of the release:
their tuples are not released, so every figure but the table's total leaves them out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection

from ..backends import Database
from ..criteria import Criterion
from .frequency import class_column, class_labels, node_frequency_set, node_set_view, violating_classes_sql
from .star import StarSchema


@dataclass(frozen=True, kw_only=True)
class Release:
    """One release's frequency set: `definition` SELECTs the class columns `classes`, a sensitive value column and
    cnt; `suppressed` SELECTs the class columns of the classes left out (None: every class is released)."""

    definition: str
    classes: list[str]
    suppressed: str | None = None


def _released(classes: list[str], suppressed: str | None, alias: str = "c") -> str:
    """A WHERE clause keeping the classes (alias `alias`) not in `suppressed` (empty: every class)."""
    if not suppressed:
        return ""
    on = " AND ".join(f"x.{column} = {alias}.{column}" for column in classes)
    return f"WHERE NOT EXISTS (SELECT 1 FROM ({suppressed}) x WHERE {on})"


def release_figures(conn: Connection, release: Release, *, near: float, risk: float, background: int) -> dict[str, Any]:
    """One statement: released tuples and classes, every tuple, homogeneous and nearly homogeneous classes (the
    most frequent value holds `near` of the class) and their tuples, the highest prosecutor risk, the tuples
    above `risk`, the unique tuples, and the tuples disclosed to an adversary ruling out b values (b = 0 ..
    `background`: classes of at most b + 1 distinct values)."""
    definition, classes, suppressed = release.definition, release.classes, release.suppressed
    group = ", ".join(classes)
    disclosed = ", ".join(
        f"COALESCE(SUM(CASE WHEN distinct_values <= {b + 1} THEN n END), 0) AS b{b}" for b in range(background + 1)
    )
    row = conn.execute(
        text(
            f"WITH fs AS MATERIALIZED ({definition}), "
            f"all_classes AS (SELECT {group}, SUM(cnt) AS n, COUNT(*) AS distinct_values, MAX(cnt) AS top "
            f"FROM fs GROUP BY {group}), "
            f"released AS (SELECT * FROM all_classes c {_released(classes, suppressed)}) "
            "SELECT COALESCE(SUM(n), 0), COUNT(*), (SELECT COALESCE(SUM(n), 0) FROM all_classes), "
            "COALESCE(SUM(CASE WHEN distinct_values = 1 THEN 1 END), 0), "
            "COALESCE(SUM(CASE WHEN distinct_values = 1 THEN n END), 0), "
            "COALESCE(SUM(CASE WHEN top >= :near * n THEN 1 END), 0), "
            "COALESCE(SUM(CASE WHEN top >= :near * n THEN n END), 0), "
            "COALESCE(MAX(1.0 / n), 0), COALESCE(SUM(CASE WHEN 1.0 / n > :risk THEN n END), 0), "
            f"COALESCE(SUM(CASE WHEN n = 1 THEN 1 END), 0), {disclosed} FROM released"
        ),
        {"near": near, "risk": risk},
    ).one()
    names = ["rows", "classes", "every_tuple", "homogeneous_classes", "homogeneous_tuples"]
    names += ["nearly_homogeneous_classes", "nearly_homogeneous_tuples", "highest_risk", "records_at_risk", "unique"]
    figures: dict[str, Any] = {name: row[i] for i, name in enumerate(names)}
    figures["disclosed_by_background"] = {b: int(row[len(names) + b]) for b in range(background + 1)}
    return figures


def revealed_values(conn: Connection, release: Release, *, value: str, limit: int) -> list[str | None]:
    """The first `limit` sensitive values (column `value`, as text, in order) that a homogeneous released class
    reveals."""
    definition, classes, suppressed = release.definition, release.classes, release.suppressed
    group = ", ".join(classes)
    on = " AND ".join(f"fs.{column} = r.{column}" for column in classes)
    return list(
        conn.execute(
            text(
                f"WITH fs AS MATERIALIZED ({definition}), all_classes AS (SELECT {group}, COUNT(*) AS "
                f"distinct_values FROM fs GROUP BY {group}), released AS (SELECT * FROM all_classes c "
                f"{_released(classes, suppressed)}) SELECT DISTINCT CAST(fs.{value} AS VARCHAR) AS v FROM fs "
                f"JOIN released r ON {on} WHERE r.distinct_values = 1 ORDER BY v LIMIT {int(limit)}"
            )
        )
        .scalars()
        .all()
    )


def population_figures(conn: Connection, release: Release, *, population: str, risk: float) -> dict[str, Any]:
    """Each released class matched with its size in `population` (a SELECT of the class columns and cnt): the
    highest journalist risk, the tuples above `risk`, the sum of n / N (marketer), and the classes the population
    holds fewer tuples of than the release (a population that does not contain the release)."""
    definition, classes, suppressed = release.definition, release.classes, release.suppressed
    group = ", ".join(classes)
    on = " AND ".join(f"r.{column} = p.{column}" for column in classes)
    row = conn.execute(
        text(
            f"WITH fs AS ({definition}), all_classes AS (SELECT {group}, SUM(cnt) AS n FROM fs GROUP BY {group}), "
            f"released AS (SELECT * FROM all_classes c {_released(classes, suppressed)}), "
            f"pop AS (SELECT {group}, SUM(cnt) AS f FROM ({population}) q GROUP BY {group}) "
            "SELECT COALESCE(MAX(1.0 / p.f), 0), COALESCE(SUM(CASE WHEN 1.0 / p.f > :risk THEN r.n END), 0), "
            "COALESCE(SUM(r.n / CAST(p.f AS DOUBLE PRECISION)), 0), "
            f"COALESCE(SUM(CASE WHEN p.f IS NULL OR p.f < r.n THEN 1 END), 0) FROM released r LEFT JOIN pop p ON {on}"
        ),
        {"risk": risk},
    ).one()
    return {"highest_risk": row[0], "records_at_risk": row[1], "marketer_sum": row[2], "uncontained_classes": row[3]}


def bayes_figures(
    conn: Connection,
    *,
    cells: str,
    exact: list[str],
    classes: list[str],
    thresholds: dict[str, float],
    suppressed: str | None = None,
) -> tuple[int, int, int]:
    """Tuples with positive disclosure, negative disclosure and (rho1, rho2) breaches (`thresholds`: delta,
    epsilon, rho1, rho2), for an adversary whose prior is the table itself; `cells` SELECTs, per original QI
    values (`exact` columns), published class (`classes`) and sensitive value s: cnt. The posterior of value s
    for a person with QI q published in class q* is beta(q, s) = n(q*, s) f(s|q) / f(s|q*), normalized over the
    values s of q* (the l-diversity paper's Theorem 3.1), n counted in the release and f in the whole table."""
    q, g = ", ".join(exact), ", ".join(classes)
    by_q = " AND ".join(f"r.{c} = nq.{c}" for c in exact)
    by_g = " AND ".join(f"r.{c} = {{t}}.{c}" for c in classes)
    own = " AND ".join(f"o.{c} = r.{c}" for c in exact)
    positive, negative, breach = conn.execute(
        text(
            f"WITH cells AS MATERIALIZED ({cells}), released AS (SELECT * FROM cells c "
            f"{_released(classes, suppressed)}), "
            f"nq AS (SELECT {q}, SUM(cnt) AS n FROM cells GROUP BY {q}), "
            f"prior_gs AS (SELECT {g}, s, SUM(cnt) AS n FROM cells GROUP BY {g}, s), "
            f"prior_g AS (SELECT {g}, SUM(cnt) AS n FROM cells GROUP BY {g}), "
            f"pub AS (SELECT {g}, s, SUM(cnt) AS n FROM released GROUP BY {g}, s), "
            f"persons AS (SELECT {q}, {g}, SUM(cnt) AS n FROM released GROUP BY {q}, {g}), "
            "terms AS (SELECT r.*, p.s, COALESCE(o.cnt, 0) AS own, CAST(COALESCE(o.cnt, 0) AS DOUBLE PRECISION) "
            "/ nq.n AS alpha, p.n * (CAST(COALESCE(o.cnt, 0) AS DOUBLE PRECISION) / nq.n) / "
            "(CAST(pgs.n AS DOUBLE PRECISION) / pg.n) AS term "
            f"FROM persons r JOIN nq ON {by_q} JOIN pub p ON {by_g.format(t='p')} "
            f"JOIN prior_gs pgs ON {by_g.format(t='pgs')} AND pgs.s = p.s JOIN prior_g pg ON {by_g.format(t='pg')} "
            f"LEFT JOIN cells o ON {own} AND o.s = p.s), "
            f"beta AS (SELECT t.*, term / SUM(term) OVER (PARTITION BY {q}) AS beta FROM terms t), "
            f"per_q AS (SELECT {q}, MAX(n) AS n, "
            "SUM(CASE WHEN own > 0 AND beta > 1 - :delta THEN own ELSE 0 END) AS positive, "
            "MAX(CASE WHEN beta < :epsilon AND own < n THEN 1 ELSE 0 END) AS negative, "
            "MAX(CASE WHEN (alpha < :rho1 AND beta > :rho2) OR (alpha > 1 - :rho1 AND beta < 1 - :rho2) THEN 1 "
            f"ELSE 0 END) AS breach FROM beta GROUP BY {q}) "
            "SELECT COALESCE(SUM(positive), 0), COALESCE(SUM(negative * n), 0), COALESCE(SUM(breach * n), 0) "
            "FROM per_q"
        ),
        thresholds,
    ).one()
    return int(positive), int(negative), int(breach)


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


def published_frequency_set(db: Database, table: str, qis: list[str], attribute: str) -> tuple[str, list[str]]:
    """A published table's frequency set over `attribute` (as s), its QI columns taken as they are (g0..): the
    SELECT and its class columns."""
    quoted = [db.q(c) for c in qis]
    classes = [f"g{i}" for i in range(len(qis))]
    return (
        f"SELECT {', '.join(f'{q} AS {g}' for q, g in zip(quoted, classes))}, {db.q(attribute)} AS s, "
        f"COUNT(*) AS cnt FROM {table} GROUP BY {', '.join(quoted + [db.q(attribute)])}"
    ), classes


def suppressed_classes(
    star: StarSchema, node: tuple[int, ...], criteria: list[Criterion]
) -> tuple[str, dict[str, Any]]:
    """A SELECT of the class columns of the node's classes that violate `criteria` (suppressed in a release with
    suppression), and its bound parameters."""
    checked = node_frequency_set(star, node)
    view = node_set_view(star, "criteria_fs", checked)
    params: dict[str, Any] = {}
    violators = violating_classes_sql(view, criteria, "a", params)
    return f"WITH criteria_fs AS ({checked}) SELECT {', '.join(view.class_columns)} FROM ({violators}) v", params


def class_size_histogram(conn: Connection, definition: str, classes: list[str]) -> list[tuple[int, int]]:
    """(size, classes of that size) of a frequency set, by size."""
    group = ", ".join(classes)
    rows = conn.execute(
        text(
            f"WITH fs AS ({definition}) SELECT n, COUNT(*) FROM (SELECT SUM(cnt) AS n FROM fs GROUP BY {group}) c "
            "GROUP BY n ORDER BY n"
        )
    ).all()
    return [(int(n), int(count)) for n, count in rows]


def least_diverse_classes(
    conn: Connection, *, star: StarSchema, node: tuple[int, ...], definition: str, value: str, shown: int
) -> list[tuple[str, list[tuple[str, int]]]]:
    """The node's `shown` classes of fewest distinct values (then fewest tuples): each class's labels, with its
    values (column `value` of the frequency set, as text; NULL as "NULL") and their counts, most frequent first."""
    columns = [class_column(d.attr) for d in star.dimensions]
    group = ", ".join(columns)
    labels, joins = class_labels(star, node, "w")
    on = " AND ".join(f"fs.{c} = w.{c}" for c in columns)
    rows = conn.execute(
        text(
            f"WITH fs AS MATERIALIZED ({definition}), w AS (SELECT {group}, COUNT(*) AS d, SUM(cnt) AS n "
            f"FROM fs GROUP BY {group} ORDER BY d, n, {group} LIMIT {int(shown)}) "
            f"SELECT {', '.join(labels)}, CAST(fs.{value} AS VARCHAR), fs.cnt, w.d, w.n FROM w {joins} JOIN fs ON {on} "
            f"ORDER BY w.d, w.n, {', '.join(labels)}, fs.cnt DESC"
        )
    ).all()
    worst: dict[str, list[tuple[str, int]]] = {}
    for row in rows:
        label = "(" + ", ".join(map(str, row[: len(labels)])) + ")"
        found = row[len(labels)]
        worst.setdefault(label, []).append(("NULL" if found is None else found, int(row[len(labels) + 1])))
    return list(worst.items())


def arx_utility_sums(
    conn: Connection, *, star: StarSchema, node: tuple[int, ...], definition: str, suppressed: str | None
) -> tuple[float, float]:
    """Sums over the node's classes of ARX's utility: n^2 (DM*, suppressed classes too), and the certainty penalty
    summed over tuples and QIs ((leaves under the generalized value - 1) / (leaves of the hierarchy - 1), one per
    QI for a tuple of a suppressed class)."""
    dims = star.dimensions
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
    group = ", ".join(columns)
    row = conn.execute(
        text(
            f"WITH fs AS ({definition}), classes AS (SELECT {group}, SUM(cnt) AS n FROM fs GROUP BY {group}) "
            "SELECT SUM(CAST(c.n AS DOUBLE PRECISION) * c.n), "
            f"SUM(CASE WHEN {out} = 1 THEN c.n * {len(dims)}.0 ELSE c.n * ({penalty}) END) FROM classes c {areas}"
        )
    ).one()
    return float(row[0] or 0), float(row[1] or 0)
