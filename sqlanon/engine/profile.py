"""The SQL of profiling a table before any job (sqlanon.analysis.profile): each column's figures in one statement,
and how many rows (or persons) each column and each small combination of columns singles out, many groupings per
statement (one branch of a UNION ALL each: a columnar database reads only the branch's columns). SQLAlchemy Core
over the table's reference (`Database.ref_table`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy import case, func, select
from sqlalchemy.engine import Connection

from ..backends import Database

GROUPINGS_PER_STATEMENT = 64  # branches of one UNION ALL


def column_figures(
    db: Database, conn: Connection, table: str, columns: Sequence[str], numeric: Sequence[str], unit: str | None
) -> tuple[int, int | None, dict[str, tuple[int, Any, Any]]]:
    """The table's rows, its persons (distinct `unit`, where given), and per column its NULLs and, for the
    `numeric` ones, their least and greatest values (else None, None)."""
    t = db.ref_table(table, [*columns, *filter(None, [unit])])
    figures: list[Any] = [func.count(), func.count(t.c[unit].distinct()) if unit else sa.null()]
    for column in columns:
        c = t.c[column]
        figures += [func.count() - func.count(c)]
        figures += [func.min(c), func.max(c)] if column in numeric else [sa.null(), sa.null()]
    found = db.execute(conn, db.as_text(conn, select(*figures))).one()
    rows, persons = int(found[0]), None if found[1] is None else int(found[1])
    per_column = {c: (int(found[2 + 3 * i]), found[3 + 3 * i], found[4 + 3 * i]) for i, c in enumerate(columns)}
    return rows, persons, per_column


def singled_out(
    db: Database, conn: Connection, table: str, groupings: Sequence[Sequence[str]], unit: str | None
) -> list[tuple[int, int]]:
    """Per grouping (a list of columns): its distinct combinations of values, and the rows (or persons, counted by
    `unit`) alone in theirs, that is, singled out by those columns."""
    used = sorted({c for grouping in groupings for c in grouping} | ({unit} if unit else set()))
    t = db.ref_table(table, used)
    found: dict[int, tuple[int, int]] = {}
    for start in range(0, len(groupings), GROUPINGS_PER_STATEMENT):
        branches = []
        for i, grouping in enumerate(groupings[start : start + GROUPINGS_PER_STATEMENT], start):
            keys = [t.c[c] for c in grouping]
            size = func.count() if unit is None else func.count(t.c[unit].distinct())
            g = select(*keys, size.label("n")).group_by(*keys).subquery(f"g{i}")
            alone = func.coalesce(func.sum(case((g.c.n == 1, 1), else_=0)), 0)
            branches.append(select(sa.literal_column(str(i)).label("i"), func.count(), alone))
        for i, combinations, alone_ in db.execute(conn, db.as_text(conn, sa.union_all(*branches))).all():
            found[int(i)] = (int(combinations), int(alone_))
    return [found[i] for i in range(len(groupings))]
