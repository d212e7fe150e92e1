"""The SQL of the release ledger (sqlanon.publish.ledger): a release's persons and rows, the removal of persons at
stake (a repair), the value of a key probe, the values an earlier release published, and the m-invariance check
over the releases' integer-keyed tables (engine.maxent.ReleaseTables: members(r, person, grp), counts(r, grp,
value, cnt), persons, vals)."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..backends import Database
from .maxent import ReleaseTables


def persons_and_rows(db: Database, conn: Connection, schema: str, table: str, person: str) -> tuple[int, int]:
    """The distinct values of `person` in the table, and its rows."""
    t = sa.table(table, sa.column(person), schema=schema)
    persons, rows = db.execute(conn, sa.select(sa.func.count(t.c[person].distinct()), sa.func.count())).one()
    return int(persons), int(rows)


def remove_persons(db: Database, conn: Connection, table_ref: str, person: str, pseudonyms: str) -> None:
    """Delete every row of the table whose `person` is one of the scratch table `pseudonyms` (pseudonym)."""
    t = db.ref_table(table_ref, [person])
    listed = db.ref_table(pseudonyms, ["pseudonym"])
    db.execute(conn, db.as_text(conn, sa.delete(t).where(t.c[person].in_(sa.select(listed.c.pseudonym)))))


def value_of(db: Database, conn: Connection, expression: str) -> str:
    """The value of an SQL expression sqlanon built (a pseudonym of a fixed probe), as text."""
    return str(db.execute(conn, sa.select(sa.literal_column(expression))).scalar_one())


def published_values(schema: str, table: str, column: str) -> sa.Subquery:
    """The values of `column` as a release published them, beside their text (value, label)."""
    held = sa.table(table, sa.column(column), schema=schema)
    typed = sa.select(held.c[column].label("value"), sa.cast(held.c[column], sa.String).label("label"))
    return typed.distinct().subquery("typed")


def not_m_unique(db: Database, conn: Connection, tables: ReleaseTables, r: int, m: int) -> int:
    """The groups of release `r` with fewer than m values or a value twice (not m-unique)."""
    counts = tables.counts
    groups = (
        sa.select(counts.c.grp, sa.func.count().label("held"), sa.func.max(counts.c.cnt).label("most"))
        .where(counts.c.r == r)
        .group_by(counts.c.grp)
        .subquery("g")
    )
    found = sa.select(sa.func.count()).where(sa.or_(groups.c.held < m, groups.c.most > 1)).select_from(groups)
    return int(db.execute(conn, found).scalar_one())


@dataclass(frozen=True)
class ChangedSignatures:
    """How many persons of both releases would change signature, and one of them: their pseudonym, and their
    group's values before and now."""

    persons: int
    pseudonym: str
    before: list[str]
    now: list[str]


def changed_signatures(db: Database, conn: Connection, tables: ReleaseTables) -> ChangedSignatures | None:
    """The persons of both releases (1: the previous, 2: this one) whose group's set of values differs, and one
    of them; None when every one keeps theirs."""
    m, c = tables.members.alias("m"), tables.counts.alias("c")
    signature = (
        sa.select(m.c.r, m.c.person, c.c.value)
        .join_from(m, c, sa.and_(c.c.r == m.c.r, c.c.grp == m.c.grp))
        .subquery("s")
    )
    in_both = (
        sa.select(tables.members.c.person)
        .group_by(tables.members.c.person)
        .having(sa.func.count(sa.distinct(tables.members.c.r)) == 2)
    )
    held = sa.func.sum(sa.case((signature.c.r == 1, 1), else_=0))
    now = sa.func.sum(sa.case((signature.c.r == 2, 1), else_=0))
    differing = (
        sa.select(signature.c.person)
        .where(signature.c.person.in_(in_both))
        .group_by(signature.c.person, signature.c.value)
        .having(held != now)
        .subquery("d")
    )
    count, first = db.execute(
        conn, sa.select(sa.func.count(sa.distinct(differing.c.person)), sa.func.min(differing.c.person))
    ).one()
    if not count:
        return None
    v, p = tables.vals, tables.persons
    values = {
        r: sorted(
            db.execute(
                conn,
                sa.select(v.c.label)
                .join_from(signature, v, v.c.value == signature.c.value)
                .where(signature.c.person == first, signature.c.r == r),
            ).scalars()
        )
        for r in (1, 2)
    }
    pseudonym = db.execute(conn, sa.select(p.c.pseudonym).where(p.c.person == first)).scalar_one()
    return ChangedSignatures(int(count), str(pseudonym), values[1], values[2])
