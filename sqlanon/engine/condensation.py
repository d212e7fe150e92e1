"""The SQL of condensation (Aggarwal and Yu; sqlanon.publish.condense): records grouped into groups of at least k
on the numeric quasi-identifiers, each group's condensed statistics, and synthetic records drawn from them.

Grouping, a depth per round: every group of at least 2k records is cut in two halves (floor and ceiling of n/2,
so both keep at least k) along the attribute of largest variance, normalized by that attribute's variance over
the table and compared to 1e-9 (ties: the first in QI order; at the top every one is 1, and the doubles'
rounding must not choose), its records in order of that attribute and then of all of them (equal records are
interchangeable, so the statistics do not depend on the database's order); groups under 2k are final. A
group's two halves are numbered 2g and 2g + 1. This is the k-d tree form of Aggarwal and Yu's nearest
neighbour grouping: a few statements per round for all groups at once, about log2(n / k) rounds, where the
record-by-record form costs a statement per group.

The condensed statistics of a group are its count n, first-order sums Fs_j and second-order sums Sc_ij: one
grouping of the records. Its covariance C = Sc / n - Fs Fs' / n^2 and eigen-decomposition (a d x d matrix) are
computed by the caller (numpy). Synthetic records, n per group: the mean plus, along each eigenvector e_l, a
uniform draw of variance lambda_l (range sqrt(12 lambda_l) centred at 0). Draw i of group g reads md5 of the
run's key (a session table, see engine.randomization.noise_key_table), g, i and a pair number: two 52-bit
fractions per hash.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from ..backends import Database
from ..errors import DataError
from ..model.progress import Progress, silent
from .randomization import FRACTION, KEY_COLUMN, finite
from .scratch import Scratch

SPREAD_STEPS = 1e9  # normalized variances are compared in steps of 1 / SPREAD_STEPS
MAX_ROUNDS = 64  # group numbers double each round: 2^63 is a BIGINT's limit (a table needs log2(n / k) rounds)


#: the groups table's column of the groups' label (`output.label`)
LABEL = "label"


def group_columns(d: int, labelled: bool = False) -> list[str]:
    """The groups table's columns for d attributes (1-based, in QI order): the group, its count, first-order sums,
    second-order sums (i <= j), mean, and each principal axis l: its unit vector and its width sqrt(12 lambda_l);
    then, where the groups are `labelled`, their label's value."""
    pairs = [(i, j) for i in range(1, d + 1) for j in range(i, d + 1)]
    return (
        ["grp", "n"]
        + [f"sum_{j}" for j in range(1, d + 1)]
        + [f"sum_{i}_{j}" for i, j in pairs]
        + [f"mean_{j}" for j in range(1, d + 1)]
        + [f"axis_{l}_{j}" for l in range(1, d + 1) for j in range(1, d + 1)]
        + [f"width_{l}" for l in range(1, d + 1)]
        + ([LABEL] if labelled else [])
    )


@dataclass(frozen=True)
class Statistics:
    """Groups' condensed statistics, as arrays (G groups, d attributes): numbers, counts, first-order sums (G x d)
    and second-order sums (G x d x d); with a label (`output.label`), each group's value of it."""

    grp: np.ndarray
    n: np.ndarray
    sums: np.ndarray
    products: np.ndarray
    labels: list[Any] | None = None

    @classmethod
    def of(cls, groups: Sequence[Group]) -> Statistics:
        return cls(
            np.array([g.grp for g in groups], dtype=np.int64),
            np.array([g.n for g in groups], dtype=np.int64),
            np.stack([g.sums for g in groups]),
            np.stack([g.products for g in groups]),
            [g.label for g in groups] if groups and groups[0].label is not None else None,
        )

    def rows(self) -> list[list[Any]]:
        """Rows of the groups table (`group_columns`, then the label where there is one): the statistics, the mean
        and the principal axes with their widths sqrt(12 lambda) (eigenvalues below 0, rounding's, as 0),
        decomposed together (numpy)."""
        if not len(self.grp):
            return []
        d, n = self.sums.shape[1], self.n[:, None].astype(float)
        means = self.sums / n
        covariances = self.products / n[:, :, None] - means[:, :, None] * means[:, None, :]
        values, vectors = np.linalg.eigh((covariances + covariances.transpose(0, 2, 1)) / 2)
        upper = np.triu_indices(d)
        columns = [
            self.sums,
            self.products[:, upper[0], upper[1]],
            means,
            vectors.transpose(0, 2, 1).reshape(len(self.grp), d * d),  # axis l's components: eigenvector l (a column)
            np.sqrt(12 * np.clip(values, 0, None)),
        ]
        figures = np.column_stack(columns).tolist()
        rows = [[int(g), int(c), *rest] for g, c, rest in zip(self.grp.tolist(), self.n.tolist(), figures, strict=True)]
        return rows if self.labels is None else [[*row, label] for row, label in zip(rows, self.labels, strict=True)]


@dataclass(frozen=True)
class Grouped:
    """What the grouping made: the groups' statistics (in group order), the rounds and statements."""

    statistics: Statistics
    rounds: int
    statements: int


#: a table's record count, each attribute's sum and each pair's sum of products (i <= j, in `_pairs` order)
Moments = tuple[int, list[float], list[float]]


def checked_moments(db: Database, conn: Connection, table: str, columns: Sequence[str]) -> Moments:
    """The table's records, each attribute's sum and each pair's sum of products (the audit's figures of the
    records), in one scan that also refuses the table where a record lacks a finite number in one of `columns`."""
    t = db.ref_table(table, list(columns))
    xs = [sa.cast(t.c[c], sa.Double) for c in columns]
    sums = moment_sums(xs)
    counts = [(func.count(t.c[c]), func.count(sa.case((finite(x), x)))) for c, x in zip(columns, xs, strict=True)]
    row = db.execute(conn, select(*sums, *(a for pair in counts for a in pair))).one()
    rows, moments, found = int(row[0]), [float(v or 0) for v in row[1 : len(sums)]], row[len(sums) :]
    for j, column in enumerate(columns):
        values, kept = found[2 * j], found[2 * j + 1]
        if kept != rows:
            missing = "NULL" if values != rows else "NaN or an infinity"
            raise DataError(
                f"column {column!r} holds {rows - kept} records without a number ({missing}); condensation "
                "needs a finite number in every record: fill or remove them"
            )
    d = len(columns)
    return rows, moments[:d], moments[d:]


def label_counts(db: Database, conn: Connection, table: str, label: str) -> dict[Any, int]:
    """The records of `table` per value of its column `label` (one grouping; NULL counted as None)."""
    t = db.ref_table(table, [label])
    return {value: int(n) for value, n in db.execute(conn, select(t.c[label], func.count()).group_by(t.c[label]))}


def check_labels(counts: dict[Any, int], label: str, k: int) -> None:
    """Refuse labels (`label_counts`) that cannot be condensed: NULL, or a value of fewer than k records."""
    if None in counts:
        raise DataError(
            f"column {label!r} (output.label) holds {counts[None]} records without a value (NULL); the label "
            "groups the records: fill or remove them"
        )
    value, fewest = min(counts.items(), key=lambda item: item[1])
    if fewest < k:
        raise DataError(
            f"column {label!r} (output.label): value {value!r} has {fewest} records, fewer than k = {k}, so no "
            f"group of k can hold them; choose k of at most {fewest}, or leave those records out of the source"
        )


class Grouping:
    """The k-d grouping of one table's records on `columns` (numeric, no NULLs), in scratch tables; with a `label`
    column, within each of its values (Aggarwal and Yu's condensation for classification): the value's first
    group numbered 2^D + its rank (D: bits enough for every value), so its halves' numbers are its own."""

    def __init__(
        self,
        db: Database,
        conn: Connection,
        source: str,
        columns: Sequence[str],
        k: int,
        prefix: str,
        label: str | None = None,
    ):
        self.db, self.conn, self.columns, self.k, self.label = db, conn, list(columns), k, label
        self.d = len(self.columns)
        self.source = db.ref_table(source, [*self.columns, *([label] if label else [])])
        self.source_ref = source
        self.scratch = Scratch(db, conn, prefix)
        self.counted: dict[Any, int] = {}  # the records per value of the label, as `check` counted them

    def check(self) -> Moments:
        """The source's `checked_moments`, refused where a record lacks a finite number or the table has fewer than
        k records, or where the label has a value that cannot be condensed (`check_labels`; its counts kept in
        `counted`, the audit's figures of the records per value)."""
        moments = checked_moments(self.db, self.conn, self.source_ref, self.columns)
        if moments[0] < self.k:
            rows = moments[0]
            raise DataError(f"k = {self.k} is above the table's {rows} records; choose k of at most {rows}")
        if self.label is not None:
            self.counted = label_counts(self.db, self.conn, self.source_ref, self.label)
            check_labels(self.counted, self.label, self.k)
        return moments

    def run(self, progress: Progress = silent) -> Grouped:
        """Group the records and return the groups' statistics."""
        x = [sa.cast(self.source.c[c], sa.Double).label(f"x{j}") for j, c in enumerate(self.columns)]
        labels, first, depth = self._labels()
        work = self.scratch.make("work", first.add_columns(*x))
        done = self.scratch.make("done", select(work).where(sa.false()))
        # each attribute's variance over the table, what a group's are normalized by (0: never cut along)
        spread = self.db.execute(self.conn, select(*(func.var_pop(work.c[f"x{j}"]) for j in range(self.d)))).one()
        weights = [1 / float(v) if v and v > 0 else 0.0 for v in spread]
        rounds = 0
        for rounds in range(1, MAX_ROUNDS - depth + 1):
            cuts = self.scratch.make("cuts", self._cuts(work, weights))
            progress("condense: grouping (rounds)", rounds, None)
            self.db.execute(self.conn, sa.insert(done).from_select(list(done.c.keys()), self._final(work, cuts)))
            self.scratch.statements += 1
            if self.scratch.count(cuts) == 0:
                break
            work = self.scratch.remake(work, self._halves(work, cuts))
            self.scratch.drop(cuts)
        else:
            raise DataError(f"the grouping did not end in {MAX_ROUNDS - depth} rounds")
        statistics = self._statistics(done, labels)
        self.scratch.drop_all()
        return Grouped(statistics=statistics, rounds=rounds, statements=self.scratch.statements)

    def _labels(self) -> tuple[dict[int, Any], sa.Select[int, int], int]:
        """The label's values by rank (none without a label), the select of each record's first group and rank
        (grp, lab; the records' attributes to be added), and the bits D the first groups' numbers take."""
        if self.label is None:
            one, zero = (sa.cast(sa.literal(v), sa.BigInteger) for v in (1, 0))
            return {}, select(one.label("grp"), zero.label("lab")).select_from(self.source), 0
        value = self.source.c[self.label]
        ranked = select(value.label("value"), (func.row_number().over(order_by=value) - 1).label("lab"))
        ranks = self.scratch.make("labels", ranked.group_by(value))
        labels = {int(lab): v for v, lab in self.db.execute(self.conn, select(ranks.c.value, ranks.c.lab))}
        depth = max(len(labels) - 1, 0).bit_length()
        first = select(
            sa.cast((1 << depth) + ranks.c.lab, sa.BigInteger).label("grp"),
            sa.cast(ranks.c.lab, sa.BigInteger).label("lab"),
        )
        return labels, first.select_from(self.source.join(ranks, ranks.c.value == value)), depth

    def _cuts(self, work: sa.TableClause, weights: Sequence[float]) -> sa.Select[Any]:
        """Per group of at least 2k records: its count and the attribute it is cut along."""
        # normalized variances compared to 1e-9: at the top every attribute's is 1, and the doubles' rounding (its
        # order the database's) must not pick the attribute cut along
        spreads = [func.floor(func.var_pop(work.c[f"x{j}"]) * weights[j] * SPREAD_STEPS + 0.5) for j in range(self.d)]
        g = (
            select(work.c.grp, func.count().label("n"), *(v.label(f"v{j}") for j, v in enumerate(spreads)))
            .group_by(work.c.grp)
            .having(func.count() >= 2 * self.k)
            .subquery("g")
        )
        widest = [
            (sa.and_(sa.true(), *(g.c[f"v{j}"] >= g.c[f"v{m}"] for m in range(j + 1, self.d))), j)
            for j in range(self.d - 1)
        ]
        dim = sa.case(*widest, else_=self.d - 1) if widest else sa.literal(0)
        return select(g.c.grp, g.c.n, dim.label("dim"))

    def _final(self, work: sa.TableClause, cuts: sa.TableClause) -> sa.Select[Any]:
        """The records of groups that are not cut (under 2k records): final."""
        cut = select(cuts.c.grp).where(cuts.c.grp == work.c.grp)
        return select(work).where(~cut.exists())

    def _halves(self, work: sa.TableClause, cuts: sa.TableClause) -> sa.Select[Any]:
        """The records of the groups cut: each to half 2g (the first floor(n/2) in order) or 2g + 1."""
        xs = [work.c[f"x{j}"] for j in range(self.d)]
        along = sa.case(*((cuts.c.dim == j, xs[j]) for j in range(self.d)))
        rank = func.row_number().over(partition_by=work.c.grp, order_by=[along, *xs])
        half = sa.case((2 * rank > cuts.c.n, 1), else_=0)
        halves = select((2 * work.c.grp + half).label("grp"), work.c.lab, *xs)
        return halves.select_from(work.join(cuts, cuts.c.grp == work.c.grp))

    def _statistics(self, done: sa.TableClause, labels: dict[int, Any]) -> Statistics:
        """Each group's count, first-order and second-order sums (one grouping of the records), and its label's
        value (of `labels`, by rank) where there is a label."""
        xs = [done.c[f"x{j}"] for j in range(self.d)]
        query = select(done.c.grp, done.c.lab, *moment_sums(xs)).group_by(done.c.grp, done.c.lab).order_by(done.c.grp)
        found = np.array([tuple(row) for row in self.db.execute(self.conn, query)], dtype=float)  # not Rows
        self.scratch.statements += 1
        products = np.zeros((len(found), self.d, self.d))
        for k, (i, j) in enumerate(_pairs(self.d)):
            products[:, i, j] = products[:, j, i] = found[:, 3 + self.d + k]
        return Statistics(
            found[:, 0].astype(np.int64),
            found[:, 2].astype(np.int64),
            found[:, 3 : 3 + self.d],
            products,
            [labels[int(lab)] for lab in found[:, 1]] if self.label is not None else None,
        )


def synthetic_select(
    db: Database,
    conn: Connection,
    *,
    groups: str,
    numbers: str,
    keys: str,
    names: Sequence[str],
    label: str | None = None,
    with_group: bool = False,
) -> str:
    """The SELECT of the synthetic records: n per group of the groups table `groups` (`group_columns`), the
    attributes published as `names`, drawn with the key of `keys` (see the module), and the group's label as
    `label` where the groups have one; `numbers`: a table of the whole numbers 1 .. the largest group (column i).
    `with_group`: each record's group too (grp), for analyses of the draws group by group (never published)."""
    d = len(names)
    g = db.ref_table(groups, group_columns(d, label is not None)).alias("g")
    r = db.ref_table(numbers, ["i"]).alias("r")
    key = select(db.ref_table(keys, [KEY_COLUMN]).c[KEY_COLUMN]).scalar_subquery()
    drawn = [
        func.md5(func.concat_ws("|", key, sa.cast(g.c.grp, sa.String), sa.cast(r.c.i, sa.String), str(m))).label(
            f"h{m}"
        )
        for m in range((d + 1) // 2)
    ]
    # each layer computed once: PostgreSQL would inline a plain subquery and compute a hash for every reference to
    # it (d x d per record: 24.7 s of 1M records' 4 attributes, against DuckDB's 1.2 s); OFFSET 0 keeps it apart
    hashed = select(g, *drawn).select_from(g.join(r, r.c.i <= g.c.n)).offset(0).subquery("h")
    fractions: list[sa.ColumnElement[Any]] = []
    for axis in range(d):  # two fractions per hash
        digits = f"substr(h.h{axis // 2}, {1 + 13 * (axis % 2)}, 13)"
        fraction = f"CAST({db.hex_integer(digits)} AS DOUBLE PRECISION) / {FRACTION} - 0.5"
        fractions.append(sa.literal_column(fraction).label(f"u{axis + 1}"))
    draws = select(hashed, *fractions).offset(0).subquery("t")
    values: list[sa.ColumnElement[Any]] = []
    for j in range(1, d + 1):
        moves = " + ".join(f"t.axis_{l}_{j} * t.width_{l} * t.u{l}" for l in range(1, d + 1))
        values.append(sa.literal_column(f"t.mean_{j} + {moves}").label(names[j - 1]))
    if label is not None:
        values.append(sa.literal_column(f"t.{LABEL}").label(label))
    if with_group:
        values.append(sa.literal_column("t.grp").label("grp"))
    return db.as_text(conn, select(*values).select_from(draws))


@dataclass(frozen=True)
class GroupFigures:
    """A groups table's figures (one scan of it): its groups, smallest and largest count, total count, the totals
    of its first-order sums and of its second-order sums (i <= j, in `group_columns` order), and per attribute
    the sum over groups of n C_jj (Sc_jj - Fs_j^2 / n: the variance the synthetic draws add to a mean of them)."""

    groups: int
    smallest: int
    largest: int
    total: int
    sums: list[float]
    products: list[float]
    spread: list[float]


def group_figures(db: Database, conn: Connection, groups: str, d: int) -> GroupFigures:
    """`GroupFigures` of the groups table `groups` (`group_columns` of d attributes)."""
    g = db.ref_table(groups, group_columns(d))
    pairs = [f"sum_{i}_{j}" for i in range(1, d + 1) for j in range(i, d + 1)]
    n = sa.cast(g.c.n, sa.Double)
    spread = [func.sum(g.c[f"sum_{j}_{j}"] - g.c[f"sum_{j}"] * g.c[f"sum_{j}"] / n) for j in range(1, d + 1)]
    query = select(
        func.count(),
        func.min(g.c.n),
        func.max(g.c.n),
        func.sum(g.c.n),
        *(func.sum(g.c[f"sum_{j}"]) for j in range(1, d + 1)),
        *(func.sum(g.c[p]) for p in pairs),
        *spread,
    )
    row = [0 if v is None else v for v in db.execute(conn, query).one()]
    floats = [float(v) for v in row[4:]]
    return GroupFigures(
        groups=int(row[0]),
        smallest=int(row[1]),
        largest=int(row[2]),
        total=int(row[3]),
        sums=floats[:d],
        products=floats[d : d + len(pairs)],
        spread=floats[d + len(pairs) :],
    )


def label_totals(db: Database, conn: Connection, groups: str, d: int) -> dict[Any, int]:
    """The records of the groups table `groups` (labelled, d attributes) per value of their label."""
    g = db.ref_table(groups, group_columns(d, True))
    query = select(g.c[LABEL], func.sum(g.c.n)).group_by(g.c[LABEL])
    return {value: int(n) for value, n in db.execute(conn, query)}


#: attributes a batch's records and the groups' means are laid on a grid by, to find the nearest group among
#: the 3^GRID_ATTRIBUTES cells around a record's
GRID_ATTRIBUTES = 3
#: the grids' cell sides, in units of the side that gives about one cell per group: a record whose nearest mean
#: the first grid cannot vouch for tries the next, then every group
GRID_SIDES = (1.0, 3.0)


def nearest_groups(
    scratch: Scratch,
    batch: str,
    columns: Sequence[str],
    groups: str,
    weights: Sequence[float],
    label: str | None = None,
) -> sa.TableClause:
    """A scratch table of `batch`'s records (x0 .., as doubles) with the group each joins (grp): the one whose mean
    is nearest, by the squared distance weighted per attribute (`weights`; ties: the lowest group number); with a
    `label` column, the nearest of the groups of the record's value of it (every value must have groups).

    Comparing every record with every group costs records x groups (10,000 records and 65,536 groups: 384 s on
    PostgreSQL). So the records and the means are laid on a grid of the first GRID_ATTRIBUTES attributes, scaled
    by the square roots of their weights, with cells of side s: a mean outside the 3 x 3 x 3 cells around a
    record's is further than s from it, so the nearest mean among those cells is the nearest of all wherever it
    is within s. The records for which it is not try a grid of larger cells (GRID_SIDES), and the rest (outliers)
    are compared with every group. Each comparison is two groupings (hashed, not sorted): the least distance per
    record, then the lowest group at that distance."""
    db, d = scratch.db, len(columns)
    m = min(d, GRID_ATTRIBUTES)
    g = db.ref_table(groups, group_columns(d, label is not None))
    unit = _cell_side(db, scratch.conn, g, weights[:m])
    source = db.ref_table(batch, [*columns, *([label] if label else [])])
    xs = [sa.cast(source.c[c], sa.Double).label(f"x{j}") for j, c in enumerate(columns)]
    tags = [source.c[label].label(LABEL)] if label else []
    b = scratch.make("batch", select(func.row_number().over().label("rid"), *xs, *tags))
    means = [g.c[c] for c in ["grp", *(f"mean_{j}" for j in range(1, d + 1)), *([LABEL] if label else [])]]
    placed = scratch.make("placed", select(*means))
    same = [placed.c[LABEL] == b.c[LABEL]] if label else []  # a hashable equality: labels hold no NULL
    offsets = scratch.make_from_rows(
        "offsets", [(f"o{j}", "INTEGER") for j in range(m)], list(itertools.product((-1, 0, 1), repeat=m))
    )

    def distance() -> sa.ColumnElement[Any]:
        return sum(
            (
                weights[j] * (b.c[f"x{j}"] - placed.c[f"mean_{j + 1}"]) * (b.c[f"x{j}"] - placed.c[f"mean_{j + 1}"])
                for j in range(d)
            ),
            sa.literal(0.0, sa.Double),
        )

    found: list[sa.TableClause] = []
    for k, factor in enumerate(GRID_SIDES):
        side = unit * factor
        scale = [math.sqrt(w) / side for w in weights[:m]]
        near = b.join(offsets, sa.true()).join(
            placed,
            sa.and_(
                *same,
                *(
                    _cell(placed.c[f"mean_{j + 1}"], scale[j]) == _cell(b.c[f"x{j}"], scale[j]) + offsets.c[f"o{j}"]
                    for j in range(m)
                ),
            ),
        )
        within = side * side * (1 - 1e-9)  # the grid's promise, with room for the doubles' rounding
        found.append(_nearest(scratch, f"near{k}", b, near, placed, distance, within, _unresolved(b, found)))
    everywhere = b.join(placed, sa.and_(sa.true(), *same))
    found.append(_nearest(scratch, "everywhere", b, everywhere, placed, distance, None, _unresolved(b, found)))
    chosen = sa.union_all(*(select(f.c.rid, f.c.grp) for f in found)).subquery("c")
    joined = select(chosen.c.grp, *(b.c[f"x{j}"] for j in range(d))).select_from(
        b.join(chosen, chosen.c.rid == b.c.rid)
    )
    return scratch.make("joined", joined)


def _unresolved(b: sa.TableClause, found: Sequence[sa.TableClause]) -> sa.ColumnElement[bool] | None:
    """The records of `b` that none of the `found` tables (rid, grp) holds (None: all)."""
    if not found:
        return None
    return sa.and_(*(~select(f.c.rid).where(f.c.rid == b.c.rid).exists() for f in found))


def _cell(value: sa.ColumnElement[Any], scale: float) -> sa.ColumnElement[Any]:
    return sa.cast(func.floor(value * scale), sa.BigInteger)


def _cell_side(db: Database, conn: Connection, g: sa.TableClause, weights: Sequence[float]) -> float:
    """The side of the grid's cells: the volume the groups' means span (scaled by the square roots of the
    weights), shared by about as many cells as groups."""
    spans = [func.max(g.c[f"mean_{j + 1}"]) - func.min(g.c[f"mean_{j + 1}"]) for j in range(len(weights))]
    groups, *found = db.execute(conn, select(func.count(), *spans)).one()
    widths = [float(span or 0) * math.sqrt(w) for span, w in zip(found, weights, strict=True)]
    kept = [w for w in widths if w > 0]
    if not kept:
        return 1.0
    return float(max(math.prod(kept) / max(int(groups), 1), 1e-300) ** (1 / len(kept)))


def _nearest(
    scratch: Scratch,
    name: str,
    b: sa.TableClause,
    pairs: sa.FromClause,
    placed: sa.TableClause,
    distance: Callable[[], sa.ColumnElement[Any]],
    within: float | None,
    only: sa.ColumnElement[bool] | None = None,
) -> sa.TableClause:
    """A scratch table of (rid, grp): for each record of `pairs` (of `only` those), the lowest group at the
    least distance, where that distance is at most `within` (None: any)."""
    least_query = select(b.c.rid, func.min(distance()).label("dist")).select_from(pairs)
    if only is not None:
        least_query = least_query.where(only)
    least_query = least_query.group_by(b.c.rid)
    if within is not None:
        least_query = least_query.having(func.min(distance()) <= within)
    least = scratch.make(f"{name}_least", least_query)
    at_least = pairs.join(least, sa.and_(least.c.rid == b.c.rid, least.c.dist == distance()))
    chosen = select(b.c.rid, func.min(placed.c.grp).label("grp")).select_from(at_least).group_by(b.c.rid)
    return scratch.make(name, chosen)


def group_deltas(
    db: Database, conn: Connection, joined: sa.TableClause, d: int
) -> dict[int, tuple[int, list[float], list[list[float]]]]:
    """Per group that records join (`nearest_groups`): their count, sums and sums of products (d x d)."""
    query = select(joined.c.grp, *moment_sums([joined.c[f"x{j}"] for j in range(d)])).group_by(joined.c.grp)
    found = {}
    for row in db.execute(conn, query):
        second = [[0.0] * d for _ in range(d)]
        for (i, j), v in zip(_pairs(d), row[2 + d :], strict=True):
            second[i][j] = second[j][i] = float(v)
        found[int(row[0])] = (int(row[1]), [float(v) for v in row[2 : 2 + d]], second)
    return found


def touched_groups(
    db: Database, conn: Connection, groups: str, joined: sa.TableClause, d: int, labelled: bool = False
) -> list[Group]:
    """The groups of the groups table that records join, as they stand (with their label, where `labelled`)."""
    g = db.ref_table(groups, group_columns(d, labelled))
    joins = select(joined.c.grp).where(joined.c.grp == g.c.grp).exists()
    found = []
    for row in db.execute(conn, select(g).where(joins)):
        values = row._mapping
        products = np.zeros((d, d))
        for i, j in _pairs(d):
            products[i, j] = products[j, i] = float(values[f"sum_{i + 1}_{j + 1}"])
        sums = np.array([float(values[f"sum_{j}"]) for j in range(1, d + 1)])
        found.append(Group(int(values["grp"]), int(values["n"]), sums, products, values[LABEL] if labelled else None))
    return found


def kept_groups(
    scratch: Scratch, groups: str, joined: sa.TableClause, d: int, labelled: bool = False
) -> sa.TableClause:
    """A scratch copy of the groups table's groups that no record joins (the caller adds the others)."""
    g = scratch.db.ref_table(groups, group_columns(d, labelled))
    joins = select(joined.c.grp).where(joined.c.grp == g.c.grp).exists()
    return scratch.make("groups", select(*(g.c[c] for c in group_columns(d, labelled))).where(~joins))


def moment_sums(xs: Sequence[sa.ColumnElement[Any]]) -> list[sa.ColumnElement[Any]]:
    """The aggregates a group's statistics are made of: its count, each attribute's sum and each pair's sum of
    products (i <= j, in `_pairs` order)."""
    d = len(xs)
    return [func.count(), *(func.sum(x) for x in xs), *(func.sum(xs[i] * xs[j]) for i, j in _pairs(d))]


def _pairs(d: int) -> list[tuple[int, int]]:
    """The attribute pairs (i <= j) whose products the statistics sum, in order."""
    return [(i, j) for i in range(d) for j in range(i, d)]


@dataclass
class Group:
    """A group's condensed statistics: its number, count, first-order sums (d) and second-order sums (d x d); and
    its label's value, where the groups are formed within a label's values."""

    grp: int
    n: int
    sums: np.ndarray
    products: np.ndarray
    label: Any = None

    @property
    def mean(self) -> np.ndarray:
        return self.sums / self.n

    @property
    def covariance(self) -> np.ndarray:
        """C_ij = Sc_ij / n - Fs_i Fs_j / n^2."""
        return self.products / self.n - np.outer(self.sums, self.sums) / self.n**2

    def halves(self, first: int, second: int) -> tuple[Group, Group]:
        """The group split in two along its largest eigenvector (the dynamic version, the PPDM chapter's exercise
        6), numbered `first` and `second`: floor(n/2) and ceil(n/2) records, spread uniformly along that axis over
        sqrt(12 lambda), so the halves' means lie sqrt(12 lambda) / 2 apart on it (each a quarter of the range from
        the middle when n is even), and its variance along the axis takes what the two means' spread adds, so that
        the halves' sums add up to the group's exactly."""
        values, vectors = np.linalg.eigh(self.covariance)
        lam, axis = max(float(values[-1]), 0.0), vectors[:, -1]
        n1, n2 = self.n // 2, self.n - self.n // 2
        apart = math.sqrt(12 * lam) / 2
        means = (self.mean - (n2 / self.n) * apart * axis, self.mean + (n1 / self.n) * apart * axis)
        shrunk = self.covariance - (n1 * n2 / self.n**2) * apart**2 * np.outer(axis, axis)
        return tuple(  # type: ignore[return-value]  # two
            Group(grp, n, n * m, n * (shrunk + np.outer(m, m)), self.label)
            for grp, n, m in zip((first, second), (n1, n2), means)
        )
