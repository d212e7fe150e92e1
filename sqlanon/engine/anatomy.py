"""The SQL of Anatomy's bucketized publication (sqlanon.publish.anatomy): the source's sensitive values, the bucket
of every record, the two published tables' SELECTs, and their audit from the two tables alone. The statements are
SQLAlchemy Core over the tables' references (`Database.ref_table`), but the bucket assignment's, which binds the
job's seed as a parameter (a CREATE TABLE AS from Core writes its values into the text)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import case, func, select
from sqlalchemy.engine import Connection

from ..backends import Database

BUCKET = "bucket"  # the bucket column of both published tables
COUNT_COLUMN = "count"  # the sensitive table's count column
VALUE = "value"  # the sensitive value beside the bucket, in the scratch table only (its other columns are u<k>)
COUNTERFEIT = "counterfeit"  # the counterfeits table's column numbering a bucket's counterfeits 1, 2, ...


def sensitive_figures(db: Database, conn: Connection, source: str, sensitive: str) -> tuple[int, int, int]:
    """The source's rows, its rows with a NULL `sensitive` value, and its different values."""
    s = db.ref_table(source, [sensitive]).c[sensitive]
    figures = select(func.count(), func.count() - func.count(s), func.count(s.distinct()))
    rows, nulls, values = db.execute(conn, figures).one()
    return int(rows), int(nulls), int(values)


def most_frequent_value(db: Database, conn: Connection, source: str, sensitive: str) -> tuple[Any, int]:
    """The source's most frequent `sensitive` value (the first in order among equals) and its records."""
    s = db.ref_table(source, [sensitive]).c[sensitive]
    n = func.count().label("n")  # the value is labeled too, so that no source column's name collides with n
    most = select(s.label("value"), n).group_by(s).order_by(n.desc(), s).limit(1)
    value, largest = db.execute(conn, most).one()
    return value, int(largest)


def bucket_assignment(
    db: Database, *, source: str, select: list[str], sensitive: str, others: list[str], buckets: int, seed: str
) -> tuple[str, dict[str, Any]]:
    """A SELECT of every record of `source` (alias t): `select` (its published columns, u<k>), its sensitive value
    (VALUE) and its bucket (BUCKET: record number p in value order, then in a keyed pseudo-random order over
    `others` and `seed`, goes to bucket p mod `buckets` + 1); and its parameters."""
    s = db.q(sensitive)
    keyed = ["CAST(:anatomy_seed AS VARCHAR)"] + [f"CAST({c} AS VARCHAR)" for c in others]
    shuffled = f"md5(concat_ws('|', {', '.join(keyed)}))"
    order = ", ".join([f"t.{s}", shuffled] + others)
    return (
        f"SELECT {', '.join(select)}, t.{s} AS {VALUE}, "
        f"MOD(ROW_NUMBER() OVER (ORDER BY {order}) - 1, {int(buckets)}) + 1 AS {BUCKET} FROM {source} t"
    ), {"anatomy_seed": seed}


def published_selects(
    db: Database,
    conn: Connection,
    assigned: str,
    published: list[str],
    sensitive: str,
    rows: tuple[str, list[str], str] | None = None,
    counterfeits: str | None = None,
) -> tuple[str, str]:
    """The SELECTs of the QI table (the `published` columns and the bucket) and of the sensitive table (bucket,
    value, count) from the scratch table `assigned` that `bucket_assignment` made. With `rows` (the source, the
    SQL of each published column over its rows, the unit column), `assigned` holds one row per person (u0: the
    unit, u1: its pseudonym, computed once per person), and every row of the source goes to its person's bucket.
    With `counterfeits` (a scratch table of BUCKET, VALUE: see engine.invariant), their values are counted in their
    buckets too."""
    t = db.ref_table(assigned, [f"u{k}" for k in range(max(len(published), 2))] + [VALUE, BUCKET])
    counted = [t.c[BUCKET], t.c[VALUE].label(sensitive), func.count().label(COUNT_COLUMN)]
    held: sa.SelectBase = select(*counted).group_by(t.c[BUCKET], t.c[VALUE])
    if counterfeits is not None:
        c = db.ref_table(counterfeits, [BUCKET, VALUE])
        faked = select(c.c[BUCKET], c.c[VALUE].label(sensitive), func.count().label(COUNT_COLUMN))
        held = sa.union_all(held, faked.group_by(c.c[BUCKET], c.c[VALUE]))
    if rows is None:
        qi_rows = select(*(t.c[f"u{k}"].label(c) for k, c in enumerate(published)), t.c[BUCKET])
    else:
        source, values, unit = rows
        r = db.ref_table(source, [unit]).alias("t")
        kept: list[Any] = [
            t.c.u1.label(c) if db.same_name(c, unit) else sa.literal_column(value).label(c)
            for value, c in zip(values, published)
        ]
        qi_rows = select(*kept, t.c[BUCKET]).select_from(r.join(t, t.c.u0 == r.c[unit]))
    return db.as_text(conn, qi_rows), db.as_text(conn, held)


def rows_of_persons(db: Database, conn: Connection, source: str, columns: list[str], unit: str, assigned: str) -> str:
    """A FROM item of the source's rows (its `columns`) with the `unit` column as its person's pseudonym, from the
    persons' buckets `assigned` (u0: the unit, u1: its pseudonym): what a QI table by persons is checked against."""
    r = db.ref_table(source, columns).alias("r")
    a = db.ref_table(assigned, ["u0", "u1"]).alias("a")
    selected = [a.c.u1.label(c) if db.same_name(c, unit) else r.c[c] for c in columns]
    return "(" + db.as_text(conn, select(*selected).select_from(r.join(a, a.c.u0 == r.c[unit]))) + ")"


def counterfeit_rows(db: Database, conn: Connection, counterfeits: str | None) -> str:
    """The SELECT of the published counterfeits table (bucket, counterfeit) from the scratch table of an m-invariant
    bucketization's counterfeits (see engine.invariant); none where there is no such table."""
    if counterfeits is None:
        empty = select(
            sa.cast(sa.null(), sa.BigInteger).label(BUCKET), sa.cast(sa.null(), sa.BigInteger).label(COUNTERFEIT)
        )
        return db.as_text(conn, empty.where(sa.false()))
    c = db.ref_table(counterfeits, [BUCKET, COUNTERFEIT])
    return db.as_text(conn, select(c.c[BUCKET], c.c[COUNTERFEIT]))


def bucket_figures(
    db: Database,
    conn: Connection,
    *,
    qi_ref: str,
    sensitive_ref: str,
    sensitive: str,
    l: int,
    unit: str | None = None,
    counterfeits_ref: str | None = None,
) -> dict[str, Any]:
    """From the two tables alone: buckets whose records and value counts differ (mismatched), buckets of fewer
    than `l` values (poor), buckets, records, the smallest bucket, the fewest values of a bucket and the largest
    share of one value in a bucket. With `unit` (the QI table's column naming each record's person), records are
    persons, each counted once in each bucket they are in. With `counterfeits_ref` (a published counterfeits
    table: BUCKET, COUNTERFEIT), a bucket's values are its records and its counterfeits."""
    qi, values = (
        db.ref_table(qi_ref, [BUCKET, *filter(None, [unit])]),
        db.ref_table(sensitive_ref, [BUCKET, sensitive, COUNT_COLUMN]),
    )
    records = func.count() if unit is None else func.count(qi.c[unit].distinct())
    q0 = select(qi.c[BUCKET], records.label("records")).group_by(qi.c[BUCKET]).subquery("q0")
    fakes: Any = sa.literal(0)
    joined: Any = q0
    if counterfeits_ref is not None:
        c = db.ref_table(counterfeits_ref, [BUCKET])
        f = select(c.c[BUCKET], func.count().label("fakes")).group_by(c.c[BUCKET]).subquery("f")
        fakes, joined = func.coalesce(f.c.fakes, 0), q0.outerjoin(f, f.c[BUCKET] == q0.c[BUCKET])
    q = select(q0.c[BUCKET], q0.c.records, fakes.label("fakes")).select_from(joined).subquery("q")
    v = (
        select(
            values.c[BUCKET],
            func.sum(values.c[COUNT_COLUMN]).label("total"),
            func.count(values.c[sensitive].distinct()).label("values_held"),
            func.max(values.c[COUNT_COLUMN]).label("largest"),
        )
        .group_by(values.c[BUCKET])
        .subquery("v")
    )
    b = (
        select(q.c.records, q.c.fakes, v.c.total, v.c.values_held, v.c.largest)
        .select_from(q.join(v, q.c[BUCKET] == v.c[BUCKET], full=True))
        .subquery("buckets")
    )
    mismatched = sa.or_(b.c.records.is_(None), b.c.total.is_(None), b.c.records + b.c.fakes != b.c.total)
    row = db.execute(
        conn,
        select(
            func.sum(case((mismatched, 1), else_=0)),
            func.sum(case((b.c.values_held < l, 1), else_=0)),
            func.count(),
            func.sum(b.c.records),
            func.min(b.c.records),
            func.min(b.c.values_held),
            func.max(sa.cast(b.c.largest, sa.Double) / (b.c.records + b.c.fakes)),
        ),
    ).one()
    names = ("mismatched", "poor", "buckets", "rows", "smallest", "fewest", "share")
    return dict(zip(names, row))


def value_count_differences(
    db: Database, conn: Connection, *, source: str, sensitive_ref: str, sensitive: str, counterfeits: str | None = None
) -> int:
    """Sensitive values the sensitive table publishes a different number of times than `source` holds them (and,
    with `counterfeits`, a scratch table of BUCKET, VALUE, than it holds them and counterfeits them)."""
    held, published = db.ref_table(source, [sensitive]), db.ref_table(sensitive_ref, [sensitive, COUNT_COLUMN])
    # the values labeled too, so that no source column's name collides with n
    every: sa.SelectBase = select(held.c[sensitive].label("value"))
    if counterfeits is not None:
        every = sa.union_all(every, select(db.ref_table(counterfeits, [VALUE]).c[VALUE].label("value")))
    e = every.subquery("e")
    a = select(e.c.value, func.count().label("n")).group_by(e.c.value).subquery("a")
    p = (
        select(published.c[sensitive].label("value"), func.sum(published.c[COUNT_COLUMN]).label("n"))
        .group_by(published.c[sensitive])
        .subquery("p")
    )
    differ = (
        select(func.count())
        .select_from(a.join(p, a.c.value == p.c.value, full=True))
        .where(sa.or_(a.c.n.is_(None), p.c.n.is_(None), a.c.n != p.c.n))
    )
    return int(db.execute(conn, differ).scalar_one())
