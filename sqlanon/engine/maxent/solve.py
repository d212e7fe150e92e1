"""One maximum-entropy solve: the pairs the releases allow, propagation, then IPF on what is left."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection

from ...backends import Database
from ...errors import DataError
from ...model.job import InferenceSettings
from ...model.progress import Progress, silent
from .ipf import iterate
from .propagation import propagate
from .releases import ReleaseTables


def solve(
    db: Database,
    conn: Connection,
    tables: ReleaseTables,
    settings: InferenceSettings,
    subset: list[int] | None = None,
    name: str = "p",
    progress: Progress = silent,
) -> tuple[str, dict[str, Any]]:
    """The maximum-entropy P(s | i) from the releases numbered in `subset` (default: all), as a scratch table
    `(person, value, p)`; returns its name and the solve's figures. Raises DataError when the releases admit
    no solution, naming the constraint."""
    rs = subset or list(range(1, len(tables.releases) + 1))
    members, counts = tables.members, tables.counts
    in_subset = f"r IN ({', '.join(map(str, rs))})"
    possible, x = tables.ref(f"{name}_possible"), tables.ref(f"{name}_x")
    # (person, value) kept when the value is in the person's group of every release of the subset holding them
    sub_members = f"(SELECT * FROM {members} WHERE {in_subset})"
    tables.create(
        possible,
        (
            f"SELECT m.person, c.value FROM {sub_members} m JOIN {counts} c ON c.r = m.r AND c.grp = m.grp "
            f"JOIN (SELECT person, COUNT(*) AS held FROM {sub_members} h0 GROUP BY person) h ON h.person = m.person "
            "GROUP BY m.person, c.value, h.held HAVING COUNT(*) = h.held"
        ),
    )
    possible, propagated, rounds = propagate(db, conn, tables, possible, sub_members, rs, name, progress)
    _check_solvable(db, conn, tables, possible, rs)
    # persons left with one value hold it: they leave the iteration, and their groups' counts shrink by them
    undecided = f"(SELECT person FROM {possible} GROUP BY person HAVING COUNT(*) > 1)"
    held = tables.ref(f"{name}_held")
    tables.create(
        held,
        f"SELECT m.r, m.grp, p.value, COUNT(*) AS n FROM {sub_members} m JOIN {possible} p "
        f"ON p.person = m.person WHERE m.person NOT IN {undecided} GROUP BY m.r, m.grp, p.value",
    )
    pivot = ", ".join(f"MAX(CASE WHEN r = {r} THEN grp END) AS b{r}" for r in rs)
    joins = " ".join(
        f"LEFT JOIN {counts} c{r} ON c{r}.r = {r} AND c{r}.grp = g.b{r} AND c{r}.value = v.value "
        f"LEFT JOIN {held} h{r} ON h{r}.r = {r} AND h{r}.grp = g.b{r} AND h{r}.value = v.value"
        for r in rs
    )
    tables.create(
        x,
        (
            f"SELECT v.person, v.value, {', '.join(f'g.b{r}' for r in rs)}, "
            f"{', '.join(f'CAST(c{r}.cnt - COALESCE(h{r}.n, 0) AS DOUBLE PRECISION) AS c{r}' for r in rs)}, "
            "CAST(1 AS DOUBLE PRECISION) / COUNT(*) OVER (PARTITION BY v.person) AS x "
            f"FROM {possible} v JOIN (SELECT person, {pivot} FROM {members} WHERE {in_subset} GROUP BY person) g "
            f"ON g.person = v.person {joins} WHERE v.person IN {undecided}"
        ),
    )
    figures = iterate(db, conn, tables, x, rs, settings, name, progress)
    db.execute(
        conn,
        f"INSERT INTO {x} (person, value, p) SELECT person, value, 1 FROM {possible} WHERE person NOT IN {undecided}",
    )
    tables.drop(held)
    figures["snapped"] += propagated
    figures["propagation_rounds"] = rounds
    return x, figures


def _check_solvable(db: Database, conn: Connection, tables: ReleaseTables, possible: str, rs: list[int]) -> None:
    """Name the first person left without a possible value (a group value no person may hold is named by
    `_check_counts`, which propagation runs first)."""
    release = {r: tables.releases[r - 1].name for r in rs}
    in_subset = f"r IN ({', '.join(map(str, rs))})"
    row = db.execute(
        conn,
        (
            f"SELECT p.pseudonym FROM (SELECT DISTINCT person FROM {tables.members} WHERE {in_subset}) m "
            f"JOIN {tables.persons} p ON p.person = m.person WHERE m.person NOT IN (SELECT person FROM {possible}) "
            "ORDER BY p.pseudonym LIMIT 1"
        ),
    ).first()
    if row:
        raise DataError(
            f"the releases are inconsistent: person {row[0]!r} has no sensitive value that every "
            f"release holding them allows ({', '.join(release.values())}); no solution exists"
        )
    tables.statements += 1
