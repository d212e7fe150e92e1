"""The SQL of Anatomy's bucketized publication (sqlanon.publish.anatomy): the source's sensitive values, the bucket
of every record, the two published tables' SELECTs, and their audit from the two tables alone."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection

from ..backends import Database

BUCKET = "bucket"  # the bucket column of both published tables
COUNT_COLUMN = "count"  # the sensitive table's count column
VALUE = "value"  # the sensitive value beside the bucket, in the scratch table only (its other columns are u<k>)


def sensitive_figures(db: Database, conn: Connection, source: str, sensitive: str) -> tuple[int, int, int]:
    """The source's rows, its rows with a NULL `sensitive` value, and its different values."""
    s = db.q(sensitive)
    rows, nulls, values = db.execute(
        conn, f"SELECT COUNT(*), COUNT(*) - COUNT({s}), COUNT(DISTINCT {s}) FROM {source}"
    ).one()
    return int(rows), int(nulls), int(values)


def most_frequent_value(db: Database, conn: Connection, source: str, sensitive: str) -> tuple[Any, int]:
    """The source's most frequent `sensitive` value (the first in order among equals) and its records."""
    s = db.q(sensitive)
    value, largest = db.execute(
        conn, f"SELECT {s}, COUNT(*) AS n FROM {source} GROUP BY {s} ORDER BY n DESC, {s} LIMIT 1"
    ).one()
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


def published_selects(db: Database, assigned: str, published: list[str], sensitive: str) -> tuple[str, str]:
    """The SELECTs of the QI table (the `published` columns and the bucket) and of the sensitive table (bucket,
    value, count) from the scratch table `assigned` that `bucket_assignment` made."""
    kept = ", ".join(f"u{k} AS {db.q(c)}" for k, c in enumerate(published))
    counted = f"{BUCKET}, {VALUE} AS {db.q(sensitive)}, COUNT(*) AS {db.q(COUNT_COLUMN)}"
    return (
        f"SELECT {kept}, {BUCKET} FROM {assigned}",
        f"SELECT {counted} FROM {assigned} GROUP BY {BUCKET}, {VALUE}",
    )


def bucket_figures(
    db: Database, conn: Connection, *, qi_ref: str, sensitive_ref: str, sensitive: str, l: int
) -> dict[str, Any]:
    """From the two tables alone: buckets whose records and value counts differ (mismatched), buckets of fewer
    than `l` values (poor), buckets, records, the smallest bucket, the fewest values of a bucket and the largest
    share of one value in a bucket."""
    s, b, n = db.q(sensitive), BUCKET, db.q(COUNT_COLUMN)
    per_bucket = (
        f"SELECT COALESCE(q.{b}, v.{b}) AS {b}, q.rows AS records, v.total, v.values_held, v.largest "
        f"FROM (SELECT {b}, COUNT(*) AS rows FROM {qi_ref} GROUP BY {b}) q FULL JOIN "
        f"(SELECT {b}, SUM({n}) AS total, COUNT(DISTINCT {s}) AS values_held, MAX({n}) AS largest "
        f"FROM {sensitive_ref} GROUP BY {b}) v ON q.{b} = v.{b}"
    )
    row = db.execute(
        conn,
        (
            "SELECT SUM(CASE WHEN records IS NULL OR total IS NULL OR records <> total THEN 1 ELSE 0 END), "
            f"SUM(CASE WHEN values_held < {int(l)} THEN 1 ELSE 0 END), COUNT(*), SUM(records), MIN(records), "
            f"MIN(values_held), MAX(CAST(largest AS DOUBLE PRECISION) / records) FROM ({per_bucket}) AS buckets"
        ),
    ).one()
    names = ("mismatched", "poor", "buckets", "rows", "smallest", "fewest", "share")
    return dict(zip(names, row))


def value_count_differences(db: Database, conn: Connection, *, source: str, sensitive_ref: str, sensitive: str) -> int:
    """Sensitive values the sensitive table publishes a different number of times than `source` holds them."""
    s, n = db.q(sensitive), db.q(COUNT_COLUMN)
    return int(
        db.execute(
            conn,
            (
                f"SELECT COUNT(*) FROM (SELECT {s}, COUNT(*) AS n FROM {source} GROUP BY {s}) a FULL JOIN "
                f"(SELECT {s}, SUM({n}) AS n FROM {sensitive_ref} GROUP BY {s}) p ON a.{s} = p.{s} "
                "WHERE a.n IS NULL OR p.n IS NULL OR a.n <> p.n"
            ),
        ).scalar_one()
    )
