"""The SQL of the attack analyses (sqlanon.analysis): one release's figures from its frequency set.

Every function reads a frequency set given as a SELECT (`definition`: the class columns, a sensitive value
column and cnt) and returns named figures; what they mean, and the checks on them, are `analysis.attacks`'.
`suppressed` (optional everywhere) is a SELECT of the class columns of the classes left out of the release:
their tuples are not released, so every figure but the table's total leaves them out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy import text
from sqlalchemy.engine import Connection

from ..backends import Database
from ..criteria.view import count_sum
from .persons import persons_from


def kept_flag(classes: list[str], suppressed: str | None) -> tuple[str, str]:
    """SQL for a class's `kept` flag (1: released, 0: one of the classes `suppressed` SELECTs), and the join it
    reads, for a FROM item aliased c with the columns `classes`."""
    if not suppressed:
        return "1", ""
    on = " AND ".join(f"x.{column} = c.{column}" for column in classes)
    return (
        "1 - COALESCE(x.out, 0)",
        f"LEFT JOIN (SELECT {', '.join(classes)}, 1 AS out FROM ({suppressed}) x0) x ON {on}",
    )


def flagged_classes(fs: str, classes: list[str], suppressed: str | None, extra: str = "", size: str = "cnt") -> str:
    """SELECT per class (its columns `classes`) of the frequency set `fs` (a FROM item of the class columns, a
    value column and cnt): n (the sum of its `size` column), distinct_values, top (the count of its most frequent
    value), the `extra` aggregates, and `kept` (1 if released, 0 if one of the classes `suppressed` SELECTs)."""
    group = ", ".join(classes)
    kept, joined = kept_flag(classes, suppressed)
    return (
        f"SELECT c.*, {kept} AS kept FROM (SELECT {group}, {count_sum(size)} AS n, COUNT(*) AS distinct_values, "
        f"MAX(cnt) AS top{extra} FROM {fs} GROUP BY {group}) c {joined}"
    )


@dataclass(frozen=True, kw_only=True)
class Release:
    """The frequency sets of one release or of several: `definition` SELECTs the class columns `classes`, a
    sensitive value column (`value`) and cnt; `by`, the first class columns, name the release a class belongs to (none:
    a single release); `suppressed` SELECTs the class columns of the classes left out (None: every class is
    released)."""

    definition: str
    classes: list[str]
    suppressed: str | None = None
    by: tuple[str, ...] = ()
    value: str = "s"  # the sensitive value column of the definition
    #: where the value column holds codes (StarSchema.sensitive_codes): SQL of the text of `fs`'s value, and the
    #: parameters it binds (None: the values are the column's own, read as text)
    decoded: tuple[str, dict[str, Any]] | None = None
    flagged: str | None = None  # a FROM item (a table) of `flagged_select`'s columns (None: grouped by each statement)
    #: where a person may hold several values (1:M data), the column of the definition whose sum over a class is its
    #: persons, and cnt a value's holders (one row per class and value); None: cnt's sum is the class's size
    persons: str | None = None

    def flagged_select(self) -> str:
        """SELECT per class of the frequency set `fs` (see `flagged_classes`)."""
        return flagged_classes("fs", self.classes, self.suppressed, size=self.persons or "cnt")

    @property
    def homogeneous(self) -> str:
        """The condition on a flagged class whose every person holds one value (its value disclosed): one value,
        or with several per person, a value all of its persons hold."""
        return "top = n" if self.persons else "distinct_values = 1"

    def with_classes(self, *, values: bool) -> str:
        """A WITH clause defining `flagged` (see `flagged_select`) and, where a statement reads the values too
        (`values`), `fs`, the frequency set materialized."""
        fs = f"fs AS MATERIALIZED ({self.definition})"
        if self.flagged:
            return f"WITH {fs + ', ' if values else ''}flagged AS (SELECT * FROM {self.flagged} f0)"
        return f"WITH {fs}, flagged AS ({self.flagged_select()})"

    def grouped(self, alias: str = "") -> tuple[str, str]:
        """The release columns to SELECT first (with a comma), and the GROUP BY clause, of a per-release result."""
        if not self.by:
            return "", ""
        columns = ", ".join(f"{alias}{column}" for column in self.by)
        return f"{columns}, ", f" GROUP BY {columns}"

    def keyed(self, rows: Any) -> dict[tuple[Any, ...], tuple[Any, ...]]:
        """Rows of a per-release result, by their release columns."""
        width = len(self.by)
        return {tuple(row[:width]): tuple(row[width:]) for row in rows}


def class_sizes(conn: Connection, release: Release) -> dict[tuple[Any, ...], dict[int, int]]:
    """Per release, its released classes by size (size -> classes): the histogram a model of the population reads
    (criteria.risk.PopulationUniqueness), one statement for every release."""
    flagged = sa.table("flagged", *(sa.column(c) for c in (*release.by, "n", "kept")))
    columns = [flagged.c[c] for c in (*release.by, "n")]
    query = sa.select(*columns, sa.func.count()).where(flagged.c.kept == 1).group_by(*columns)
    compiled = query.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True})
    found: dict[tuple[Any, ...], dict[int, int]] = {}
    for *key, n, classes in conn.execute(text(release.with_classes(values=False) + " " + str(compiled))).all():
        found.setdefault(tuple(key), {})[int(n)] = int(classes)
    return found


RELEASE_FIGURES = ["rows", "classes", "every_tuple", "homogeneous_classes", "homogeneous_tuples"]
RELEASE_FIGURES += ["nearly_homogeneous_classes", "nearly_homogeneous_tuples", "highest_risk", "records_at_risk"]
RELEASE_FIGURES += ["unique"]


def release_figures(
    conn: Connection, release: Release, *, near: float, risk: float, background: int
) -> dict[tuple[Any, ...], dict[str, Any]]:
    """One statement, per release (by its `by` values; () for a single one): released tuples and classes, every
    tuple, homogeneous and nearly homogeneous classes (the most frequent value holds `near` of the class) and
    their tuples, the highest prosecutor risk, the tuples above `risk`, the unique tuples, and the tuples
    disclosed to an adversary ruling out b values (b = 0 .. `background`: classes of at most b + 1 distinct
    values). A release without any class is left out."""
    select, group = release.grouped()

    def released(condition: str, value: str) -> str:
        return f"COALESCE(SUM(CASE WHEN kept = 1 AND {condition} THEN {value} END), 0)"

    disclosed = ", ".join(released(f"distinct_values <= {b + 1}", "n") for b in range(background + 1))
    rows = conn.execute(
        text(
            f"{release.with_classes(values=False)} SELECT {select}COALESCE(SUM(n * kept), 0), "
            "COALESCE(SUM(kept), 0), COALESCE(SUM(n), 0), "
            f"{released(release.homogeneous, '1')}, {released(release.homogeneous, 'n')}, "
            f"{released('top >= :near * n', '1')}, {released('top >= :near * n', 'n')}, "
            f"COALESCE(MAX(CASE WHEN kept = 1 THEN 1.0 / n END), 0), {released('1.0 / n > :risk', 'n')}, "
            f"{released('n = 1', '1')}, {disclosed} FROM flagged{group}"
        ),
        {"near": near, "risk": risk},
    ).all()
    figures: dict[tuple[Any, ...], dict[str, Any]] = {}
    for key, row in release.keyed(rows).items():
        figures[key] = {name: row[i] for i, name in enumerate(RELEASE_FIGURES)}
        figures[key]["disclosed_by_background"] = {b: int(row[len(RELEASE_FIGURES) + b]) for b in range(background + 1)}
    return figures


def revealed_values(
    conn: Connection, release: Release, *, value: str, limit: int
) -> dict[tuple[Any, ...], list[str | None]]:
    """Per release, the first `limit` sensitive values (column `value`, as text, in order) that a homogeneous
    released class reveals (with several values per person, those all of its persons hold)."""
    select, _ = release.grouped()
    partition = f"PARTITION BY {', '.join(release.by)} " if release.by else ""
    on = " AND ".join(f"fs.{column} = r.{column}" for column in release.classes)
    distinct = release.grouped("fs.")[0]
    value_text, params = release.decoded or (f"CAST(fs.{value} AS VARCHAR)", {})
    revealing = "fs.cnt = r.n" if release.persons else "r.distinct_values = 1"  # the value every person holds
    rows = conn.execute(
        text(
            f"{release.with_classes(values=True)} SELECT {select}v FROM (SELECT {select}v, "
            f"ROW_NUMBER() OVER ({partition}ORDER BY v) AS r FROM "
            f"(SELECT DISTINCT {distinct}{value_text} AS v FROM fs JOIN flagged r ON {on} "
            f"WHERE r.kept = 1 AND {revealing}) d) ranked WHERE r <= {int(limit)} ORDER BY {select}r"
        ),
        params,
    ).all()
    revealed: dict[tuple[Any, ...], list[str | None]] = {}
    width = len(release.by)
    for row in rows:
        revealed.setdefault(tuple(row[:width]), []).append(row[width])
    return revealed


def population_figures(
    conn: Connection, release: Release, *, population: str, risk: float
) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Per release, each released class matched with its size in `population` (a SELECT of the class columns
    and cnt): the highest journalist risk, the tuples above `risk`, the sum of n / N (marketer), and the classes
    the population holds fewer tuples of than the release (a population that does not contain the release)."""
    select, group = release.grouped("r.")
    classes = ", ".join(release.classes)
    on = " AND ".join(f"r.{column} = p.{column}" for column in release.classes)
    rows = conn.execute(
        text(
            f"{release.with_classes(values=False)}, "
            f"pop AS (SELECT {classes}, SUM(cnt) AS f FROM ({population}) q GROUP BY {classes}) "
            f"SELECT {select}COALESCE(MAX(1.0 / p.f), 0), "
            "COALESCE(SUM(CASE WHEN 1.0 / p.f > :risk THEN r.n END), 0), "
            "COALESCE(SUM(r.n / CAST(p.f AS DOUBLE PRECISION)), 0), "
            "COALESCE(SUM(CASE WHEN p.f IS NULL OR p.f < r.n THEN 1 END), 0) "
            f"FROM flagged r LEFT JOIN pop p ON {on} WHERE r.kept = 1{group}"
        ),
        {"risk": risk},
    ).all()
    names = ["highest_risk", "records_at_risk", "marketer_sum", "uncontained_classes"]
    return {key: dict(zip(names, row)) for key, row in release.keyed(rows).items()}


def published_frequency_set(
    db: Database, table: str, qis: list[str], attribute: str | None, unit: str | None = None, holders: bool = False
) -> tuple[str, list[str]]:
    """A published table's frequency set over `attribute` (as s; None: a constant, every class one cell), its QI
    columns taken as they are (g0..): the SELECT and its class columns. With `unit` (the column naming each row's
    person) it counts persons, each once; with `holders` too, a person may hold several values of `attribute`:
    cnt is then a value's holders, and `persons` adds up to each class's persons (1 on one row of each person's;
    see Release.persons)."""
    quoted = [db.q(c) for c in qis]
    classes = [f"g{i}" for i in range(len(qis))]
    value, grouped = (db.q(attribute), [db.q(attribute)]) if attribute else ("0", [])
    persons = ""
    if unit is not None:
        table = persons_from(db, table, unit, qis + ([attribute] if attribute else []))
    if unit is not None and holders:  # a person's first value in their class counts them
        person = ", ".join([db.q(unit), *quoted])
        first = f"CASE WHEN ROW_NUMBER() OVER (PARTITION BY {person} ORDER BY {value}) = 1 THEN 1 ELSE 0 END"
        table = f"(SELECT {', '.join(quoted + grouped)}, {first} AS first_value FROM {table}) AS held"
        persons = ", SUM(first_value) AS persons"
    return (
        f"SELECT {', '.join(f'{q} AS {g}' for q, g in zip(quoted, classes))}, {value} AS s, "
        f"COUNT(*) AS cnt{persons} FROM {table} GROUP BY {', '.join(quoted + grouped)}"
    ), classes


def most_frequent(counts: sa.Subquery, shown: int, every: Sequence[int] = ()) -> sa.Select[Any]:
    """SELECT a, v, n of `counts` (per attribute a, each value v with its count n): each attribute's `shown`
    most frequent values (ties by value), and all of those of the attributes `every`, by attribute, most
    frequent first."""
    rank = sa.func.row_number().over(partition_by=counts.c.a, order_by=(counts.c.n.desc(), counts.c.v))
    ranked = sa.select(counts.c.a, counts.c.v, counts.c.n, rank.label("r")).subquery("ranked")
    kept = sa.or_(ranked.c.r <= shown, ranked.c.a.in_(every)) if every else ranked.c.r <= shown
    return sa.select(ranked.c.a, ranked.c.v, ranked.c.n).where(kept).order_by(ranked.c.a, ranked.c.r)


def column_counts(
    db: Database, conn: Connection, table: str, columns: list[str], shown: int
) -> dict[str, list[tuple[str, int]]]:
    """Per column of `table` (a q() reference), its `shown` most frequent values as text (NULL as "NULL") with
    their rows, most frequent first: one grouping of the table (GROUPING SETS, a set per column)."""
    source = db.ref_table(table, columns)
    cols = [source.c[c] for c in columns]
    which = sa.case(*[(sa.func.grouping(col) == 0, i) for i, col in enumerate(cols)])
    value = sa.case(*[(sa.func.grouping(col) == 0, sa.cast(col, sa.String)) for col in cols])
    grouped = (
        sa.select(which.label("a"), value.label("v"), sa.func.count().label("n"))
        .group_by(sa.func.grouping_sets(*[sa.tuple_(col) for col in cols]))
        .subquery()
    )
    query = most_frequent(grouped, shown)
    found: dict[str, list[tuple[str, int]]] = {c: [] for c in columns}
    for column, found_value, count in db.execute(conn, db.as_text(conn, query)).all():  # text: names with % or :
        found[columns[column]].append(("NULL" if found_value is None else found_value, int(count)))
    return found


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
