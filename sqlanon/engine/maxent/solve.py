"""One maximum-entropy solve: the pairs the releases allow, propagation, then IPF on what is left."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import and_, case, func, select
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
) -> tuple[sa.TableClause, dict[str, Any]]:
    """The maximum-entropy P(s | i) from the releases numbered in `subset` (default: all), as a scratch table
    `(person, value, p)`; returns it and the solve's figures. Raises DataError when the releases admit no
    solution, naming the constraint."""
    rs = subset or list(range(1, len(tables.releases) + 1))
    members, counts = tables.members, tables.counts
    sub_members = select(members).where(members.c.r.in_(rs)).subquery("sub_members")
    # (person, value) kept when the value is in the person's group of every release of the subset holding them
    m, c, h = sub_members.alias("m"), counts.alias("c"), sub_members.alias("h0")
    releases_of = select(h.c.person, func.count().label("held")).group_by(h.c.person).subquery("h")
    possible = tables.make(
        f"{name}_possible",
        select(m.c.person, c.c.value)
        .select_from(
            m.join(c, and_(c.c.r == m.c.r, c.c.grp == m.c.grp)).join(releases_of, releases_of.c.person == m.c.person)
        )
        .group_by(m.c.person, c.c.value, releases_of.c.held)
        .having(func.count() == releases_of.c.held),
    )
    possible, propagated, rounds = propagate(db, conn, tables, possible, sub_members, rs, name, progress)
    _check_solvable(db, conn, tables, possible, rs)
    # persons left with one value hold it: they leave the iteration, and their groups' counts shrink by them
    # every person has a possible value by now (_check_solvable), so the decided ones are those with exactly one:
    # read by a semi-join, not a NOT IN of the undecided (which PostgreSQL runs as a loop per row once the
    # subquery's rows outgrow work_mem)
    undecided = select(possible.c.person).group_by(possible.c.person).having(func.count() > 1)
    decided_persons = select(possible.c.person).group_by(possible.c.person).having(func.count() == 1)
    m, p = sub_members.alias("m"), possible.alias("p")
    held = tables.make(
        f"{name}_held",
        select(m.c.r, m.c.grp, p.c.value, func.count().label("n"))
        .join_from(m, p, p.c.person == m.c.person)
        .where(m.c.person.in_(decided_persons))
        .group_by(m.c.r, m.c.grp, p.c.value),
    )
    group_in = [func.max(case((members.c.r == r, members.c.grp))).label(f"b{r}") for r in rs]
    g = select(members.c.person, *group_in).where(members.c.r.in_(rs)).group_by(members.c.person).subquery("g")
    v = possible.alias("v")
    joined, left = v.join(g, g.c.person == v.c.person), []
    for r in rs:  # each value's count in the person's group of release r, less what decided persons hold
        cr, hr = counts.alias(f"c{r}"), held.alias(f"h{r}")
        group = g.c[f"b{r}"]
        joined = joined.outerjoin(cr, and_(cr.c.r == r, cr.c.grp == group, cr.c.value == v.c.value))
        joined = joined.outerjoin(hr, and_(hr.c.r == r, hr.c.grp == group, hr.c.value == v.c.value))
        left.append(sa.cast(cr.c.cnt - func.coalesce(hr.c.n, 0), sa.Double).label(f"c{r}"))
    uniform = sa.cast(1, sa.Double) / func.count().over(partition_by=v.c.person)
    x = tables.make(
        f"{name}_x",
        select(v.c.person, v.c.value, *(g.c[f"b{r}"] for r in rs), *left, uniform.label("x"))
        .select_from(joined)
        .where(v.c.person.in_(undecided)),
    )
    x, figures = iterate(db, conn, tables, x, rs, settings, name, progress)
    decided = select(possible.c.person, possible.c.value, sa.literal(1.0)).where(possible.c.person.in_(decided_persons))
    db.execute(conn, sa.insert(x).from_select(["person", "value", "p"], decided))
    tables.drop(held)
    figures["snapped"] += propagated
    figures["propagation_rounds"] = rounds
    return x, figures


def _check_solvable(
    db: Database, conn: Connection, tables: ReleaseTables, possible: sa.TableClause, rs: list[int]
) -> None:
    """Name the first person left without a possible value (a group value no person may hold is named by
    `_check_counts`, which propagation runs first)."""
    release = {r: tables.releases[r - 1].name for r in rs}
    members, persons = tables.members, tables.persons
    m = select(members.c.person).distinct().where(members.c.r.in_(rs)).subquery("m")
    row = db.execute(
        conn,
        select(persons.c.pseudonym)
        .join_from(m, persons, persons.c.person == m.c.person)
        .where(~sa.exists().where(possible.c.person == m.c.person))  # an anti-join (a NOT IN loops on PostgreSQL)
        .order_by(persons.c.pseudonym)
        .limit(1),
    ).first()
    if row:
        raise DataError(
            f"the releases are inconsistent: person {row[0]!r} has no sensitive value that every "
            f"release holding them allows ({', '.join(release.values())}); no solution exists"
        )
    tables.statements += 1
