"""The SQL of randomized publications (sqlanon.publish.randomize; the random sample and the privacy table of
sqlanon.publish.differential_privacy) and of the reconstruction of a randomized
column's distribution (sqlanon.analysis.reconstruction).

Noise is drawn in the database, keyed: each row gets a key, md5 of the run's secret key (in a one-row session
table, `noise_key_table`: no statement's text or parameters hold it), the row's values and its occurrence among
identical rows; the first noised column reads the row's key, each other column j md5(row key '#' j), whose first
two 13-digit hexadecimal prefixes are two independent uniform fractions in [0, 1). The uniform noise of width w
is w (u1 - 1/2); the gaussian of deviation s is s sqrt(-2 ln(1 - u1)) cos(2 pi u2) (Box-Muller). The same key
and table give the same noise, row for row; without the key the noise cannot be told from random.

The reconstruction (Agrawal and Srikant, as the PPDM chapter's 20.2.1 states it) works on interval counts: the
perturbed values counted on a grid of k intervals (one scan of the table), then each iteration one INSERT over
the k x k pairs of intervals, returning the new estimate for the caller's stopping rule.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from ..backends import Database
from ..model.noise import Noise
from .scratch import Scratch

KEY_COLUMN = "noise_key"  # the key table's one column: the run's secret key (hex)
FRACTION = 2**52  # 13 hexadecimal digits, as a fraction of 1: exact in a double
ROW_KEY = "sqlanon_row_key"
# PostgreSQL raises on a product that underflows a double (1e-308): the gaussian's density is 0 beyond exp(-300)
# (5e-131, beyond 24 deviations) and an estimate's share below 1e-150 is 0, so that no product of the two does
LOWEST_EXPONENT, LOWEST_SHARE = (
    300.0,
    1e-150,
)  # the inner query's column of each row's key (renamed if the source has one)


def randomized_select(
    db: Database,
    conn: Connection,
    *,
    source: str,
    keys: str,
    columns: Sequence[str],
    noises: Sequence[Noise],
    select_other: Callable[[str, str], str | None],
) -> tuple[str, list[str]]:
    """The SELECT of the published table, reading the key from `keys` (see `noise_key_table`): every column of
    `source` in order, a noised one as its value (cast to double precision) plus its noise, the others as
    `select_other(column, its value in SQL)` says (None: not published); and the published names."""
    t, row_key = keyed_rows(db, source, keys, columns)
    noised = {db.name_key(n.column): (j, n) for j, n in enumerate(noises)}
    select_list: list[sa.ColumnElement[Any]] = []
    published = []
    for column in columns:
        q = db.q(column)
        value = select_other(column, f"t.{q}")
        if db.name_key(column) in noised:
            j, noise = noised[db.name_key(column)]
            value = f"CAST(t.{q} AS DOUBLE PRECISION) + {noise_of(db, noise, f't.{db.q(row_key)}', j)}"
        if value is None:
            continue
        select_list.append(sa.literal_column(value).label(column))
        published.append(column)
    return db.as_text(conn, select(*select_list).select_from(t)), published


def keyed_rows(db: Database, source: str, keys: str, columns: Sequence[str]) -> tuple[sa.Subquery, str]:
    """The rows of `source` (subquery t), each with its key (see the module) in a column of its own, and that
    column's name (ROW_KEY, lengthened until no column of the source has it)."""
    s = db.ref_table(source, columns).alias("s")
    row_key = ROW_KEY
    while any(db.same_name(row_key, c) for c in columns):
        row_key += "_"
    # a value's text prefixed with its length, NULL as '-': no two rows write one text
    items = [func.coalesce(_text(func.length(_text(s.c[c]))) + ":" + _text(s.c[c]), "-") for c in columns]
    occurrence = _text(func.row_number().over(partition_by=[s.c[c] for c in columns]))
    k = db.ref_table(keys, [KEY_COLUMN])
    key = select(k.c[KEY_COLUMN]).scalar_subquery()  # one value: a cross join with its table cost 0.15 s of 1M rows
    keyed = func.md5(func.concat_ws("|", key, *items, occurrence)).label(row_key)
    return select(*(s.c[c] for c in columns), keyed).subquery("t"), row_key


def sampled_select(db: Database, source: str, keys: str, columns: Sequence[str], probability: float) -> sa.Select[Any]:
    """SELECT the rows of `source` (its `columns`) that a random sample keeps, each with `probability`: those whose
    key's first fraction (see the module) is below it. The same key and table give the same sample."""
    t, row_key = keyed_rows(db, source, keys, columns)
    fraction: sa.ColumnElement[float] = sa.literal_column(uniform_fraction(db, f"t.{db.q(row_key)}", 1), sa.Double)
    return select(*(t.c[c] for c in columns)).select_from(t).where(fraction < sa.literal(probability, sa.Double))


def uniform_fraction(db: Database, hashed: str, start: int) -> str:
    """SQL of the uniform fraction in [0, 1) that the 13 hexadecimal digits of `hashed` (an md5 in SQL) from
    `start` on give."""
    return f"(CAST({db.hex_integer(f'substr({hashed}, {int(start)}, 13)')} AS DOUBLE PRECISION) / {FRACTION})"


def _text(value: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    return sa.cast(value, sa.String)


@contextmanager
def noise_key_table(db: Database, conn: Connection, key: bytes) -> Iterator[str]:
    """Within: a one-row session table holding `key` (hex, column KEY_COLUMN), loaded as pseudonym keys are (no
    statement's text or parameters, and so no log, hold it); its reference."""
    columns = [(KEY_COLUMN, "VARCHAR")]
    with db.secret_table(conn, f"sqlanon_noise_key_{uuid.uuid4().hex[:12]}", columns, [(key.hex(),)]) as ref:
        yield ref


def noise_of(db: Database, noise: Noise, row_key: str, j: int) -> str:
    """SQL of the noise of a row's `j`-th noised column, from the row's key (see the module): the first column's
    fractions are the key's own digits (a hash less per row: 0.1 s of 1M rows on DuckDB), the others' a hash of
    it."""
    drawn = row_key if j == 0 else f"md5({row_key} || '#{int(j)}')"
    u1, u2 = (uniform_fraction(db, drawn, start) for start in (1, 14))
    scale = f"CAST({float(noise.scale)!r} AS DOUBLE PRECISION)"
    if noise.distribution == "uniform":
        return f"({scale} * ({u1} - 0.5))"
    return f"({scale} * SQRT(-2 * LN(1 - {u1})) * COS(2 * PI() * {u2}))"


#: the noise table's columns: each noised column's name, its distribution, the uniform's width (else NULL) and the
#: noise's standard deviation
NOISE_COLUMNS = ("attribute", "distribution", "width", "sd")


def noise_table_select(noises: Sequence[Noise]) -> tuple[str, dict[str, Any]]:
    """The SELECT of the noise table (a row per noised column, NOISE_COLUMNS), its values bound, and its
    parameters."""
    rows: list[str] = []
    params: dict[str, Any] = {}
    for i, noise in enumerate(noises):
        width = noise.scale if noise.distribution == "uniform" else None
        params |= {f"a{i}": noise.column, f"d{i}": noise.distribution, f"w{i}": width, f"s{i}": noise.sd}
        rows.append(
            f"SELECT CAST(:a{i} AS VARCHAR) AS attribute, CAST(:d{i} AS VARCHAR) AS distribution, "
            f"CAST(:w{i} AS DOUBLE PRECISION) AS width, CAST(:s{i} AS DOUBLE PRECISION) AS sd"
        )
    return " UNION ALL ".join(rows), params


def described_noise(db: Database, conn: Connection, table: str) -> list[Noise]:
    """The noise a noise table (NOISE_COLUMNS) describes, by column name."""
    t = db.ref_table(table, list(NOISE_COLUMNS))
    found = []
    for column, distribution, width, sd in db.execute(conn, select(*(t.c[c] for c in NOISE_COLUMNS))):
        scale = width if distribution == "uniform" else sd
        found.append(Noise(str(column), str(distribution), float(scale)))
    return sorted(found, key=lambda n: n.column)


class Figures(NamedTuple):
    """A numeric column's values (not NULL), those that are finite numbers, and the least, greatest and mean of
    these."""

    values: int
    finite: int
    low: float | None
    high: float | None
    mean: float | None


def finite(value: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
    """True where `value` (a double) is a finite number: NaN is above infinity on both databases."""
    return sa.and_(value < float("inf"), value > float("-inf"))


def numeric_figures(db: Database, conn: Connection, table: str, columns: Sequence[str]) -> tuple[int, list[Figures]]:
    """The table's rows and each column's `Figures`, in one scan: what a randomized table's audit compares with its
    source's, and what a reconstruction's grid spans."""
    t = db.ref_table(table, list(columns))
    figures: list[Any] = [func.count()]
    for column in columns:
        value = sa.cast(t.c[column], sa.Double)
        kept = sa.case((finite(value), value))
        figures += [func.count(t.c[column]), func.count(kept), func.min(kept), func.max(kept), func.avg(kept)]
    found = db.execute(conn, select(*figures)).one()
    per_column = []
    for i in range(len(columns)):
        values, count, low, high, mean = found[1 + 5 * i : 6 + 5 * i]
        per_column.append(
            Figures(int(values), int(count), *(None if v is None else float(v) for v in (low, high, mean)))
        )
    return int(found[0]), per_column


def interval_of(value: sa.ColumnElement[Any], low: float, width: float, intervals: int) -> sa.ColumnElement[Any]:
    """The interval (0 .. intervals-1) of the grid from `low` in steps of `width` that `value` falls in; values
    beyond the grid go to its end intervals."""
    step = sa.cast(func.floor((sa.cast(value, sa.Double) - low) / width), sa.Integer)
    return func.least(func.greatest(step, 0), intervals - 1)


def interval_counts(
    db: Database, conn: Connection, table: str, column: str, low: float, width: float, intervals: int
) -> list[int]:
    """How many of `table`'s finite `column` values fall in each interval of the grid (one scan)."""
    t = db.ref_table(table, [column])
    value = sa.cast(t.c[column], sa.Double)
    bin_ = interval_of(value, low, width, intervals).label("bin")
    query = select(bin_, func.count()).where(finite(value)).group_by(bin_)
    counts = [0] * intervals
    for found, n in db.execute(conn, query):
        counts[int(found)] = int(n)
    return counts


def noise_weight(noise: Noise, distance: sa.ColumnElement[Any], width: float) -> sa.ColumnElement[Any]:
    """Proportional to the density of the noise moving a value of one interval's middle to a point of another
    interval `distance` away (their middles' distance): for the uniform, the share of that interval the noise can
    reach (exact on the grid: no interval of width `width` is missed or hit twice); for the gaussian, the density
    at the middle. Constant factors cancel in the reconstruction."""
    if noise.distribution == "uniform":
        half, reach = width / 2, noise.scale / 2
        return func.greatest(func.least(distance + half, reach) - func.greatest(distance - half, -reach), 0.0)
    exponent = -0.5 * (distance / noise.scale) * (distance / noise.scale)
    return sa.case((exponent < -LOWEST_EXPONENT, 0.0), else_=func.exp(exponent))


class Reconstruction:
    """The iterations of the reconstruction of one column's distribution, over the scratch tables of the interval
    counts and of the estimates (every iteration's, numbered)."""

    def __init__(self, db: Database, conn: Connection, prefix: str, counts: Sequence[int], noise: Noise, width: float):
        self.db, self.conn, self.intervals = db, conn, len(counts)
        self.scratch = Scratch(db, conn, prefix)
        self.observed = self.scratch.make_from_rows(
            "observed", [("bin", "INTEGER"), ("n", "BIGINT")], [(b, n) for b, n in enumerate(counts) if n]
        )
        start = [(0, b, 1 / self.intervals) for b in range(self.intervals)]  # the uniform distribution
        self.estimates = self.scratch.make_from_rows(
            "estimates", [("iteration", "INTEGER"), ("bin", "INTEGER"), ("f", "DOUBLE PRECISION")], start
        )
        self.step = self._step(noise, width)

    def _step(self, noise: Noise, width: float) -> sa.Insert:
        """One iteration: f'(a) proportional to the sum over observed intervals z of n_z K(z - a) f(a) / sum_b
        K(z - b) f(b), the new estimate inserted as iteration :iteration + 1 and returned."""
        o, e = self.observed, self.estimates
        current = select(e.c.bin, e.c.f).where(e.c.iteration == sa.bindparam("iteration")).subquery("e")
        distance = sa.cast(o.c.bin - current.c.bin, sa.Double) * width
        pairs = (
            select(
                o.c.bin.label("zb"),
                current.c.bin.label("xb"),
                o.c.n.label("n"),
                (noise_weight(noise, distance, width) * current.c.f).label("p"),
            )
            .select_from(o.join(current, sa.true()))  # every pair of intervals
            .cte("pairs")
        )
        total = func.sum(pairs.c.p)
        totals = select(pairs.c.zb, total.label("total")).group_by(pairs.c.zb).having(total > 0).cte("totals")
        # doubles throughout: SQLAlchemy casts a divisor to NUMERIC where it cannot tell its type
        summed = func.sum(_double(pairs.c.n * pairs.c.p) / _double(totals.c.total))
        new = (
            select(pairs.c.xb.label("bin"), summed.label("s"))
            .select_from(pairs.join(totals, pairs.c.zb == totals.c.zb))
            .group_by(pairs.c.xb)
            .subquery("new")
        )
        share = _double(new.c.s) / _double(func.sum(new.c.s).over())
        share = sa.case((share < LOWEST_SHARE, 0.0), else_=share)
        rows = select((sa.bindparam("iteration") + 1).label("iteration"), new.c.bin, share)
        insert = sa.insert(e).from_select(["iteration", "bin", "f"], rows)
        return insert.returning(e.c.bin, e.c.f)

    def iterate(self, iteration: int) -> list[float]:
        """Iteration `iteration` + 1 from iteration `iteration`'s estimate: the new estimate, per interval."""
        estimate = [0.0] * self.intervals
        for b, f in self.db.execute(self.conn, self.step, {"iteration": iteration}):
            estimate[int(b)] = float(f)
        self.scratch.statements += 1
        return estimate

    def drop(self) -> None:
        self.scratch.drop_all()


def _double(value: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    return sa.type_coerce(value, sa.Double)


def spread(counts: Sequence[float]) -> list[float]:
    """Counts as shares of their sum (all 0 when there are none)."""
    total = sum(counts)
    return [c / total if total else 0.0 for c in counts]


def l1_distance(a: Sequence[float], b: Sequence[float]) -> float:
    """The L1 distance between two distributions on one grid (0 to 2)."""
    return math.fsum(abs(x - y) for x, y in zip(a, b, strict=True))


#: the privacy table's columns and their types: the guarantee's parameters, the k and beta they imply, the search's
#: budget, steps and score (0, 0 and NULL where the job fixed the generalization) and the published node (QI=level)
PRIVACY_COLUMNS = {
    "epsilon": "DOUBLE PRECISION",
    "delta": "DOUBLE PRECISION",
    "k": "INTEGER",
    "beta": "DOUBLE PRECISION",
    "search_budget": "DOUBLE PRECISION",
    "search_steps": "INTEGER",
    "search_score": "VARCHAR",
    "node": "VARCHAR",
}
#: the privacy table's SELECT, its values bound (PRIVACY_COLUMNS' names)
PRIVACY_SELECT = "SELECT " + ", ".join(f"CAST(:{c} AS {t}) AS {c}" for c, t in PRIVACY_COLUMNS.items())
