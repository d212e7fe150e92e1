"""Multidimensional anonymization (Mondrian, LeFevre, DeWitt, Ramakrishnan 2006), a depth per round.

The table is copied once, its rows numbered, and a narrow work table of
integers holds what the rounds read (the row number, the partition, each
numeric QI as a number, each categorical QI as its path code: the child index
at every level of its hierarchy packed into one BIGINT, so the node above a
value at level L is the code shifted right by the bits of the levels below L;
the sensitive columns); the other columns join back at publication. Only rows
of open partitions stay in the work table. Every round considers all the
partitions still open at once:
1. candidates: one grouping of the rows by partition gives, for each QI, the
   cut Mondrian would make: a numeric QI at its median (the ceil(n/2)-th
   smallest value: left <= median, right above; relaxed Mondrian splits the
   sorted rows in two halves instead, so equal values may go either way), a
   categorical QI into the children of the partition's node (possible when its
   rows' smallest and largest child codes differ); each with the QI's
   normalized width (numeric: the partition's range over the table's;
   categorical: the leaves under the node over all leaves);
2. the criteria's SQL over the candidate parts (classes: partition, QI,
   part): a cut is allowed only when every part satisfies every criterion;
   each partition takes its allowed cut of the widest QI (ties: QI order),
   and one without any is final; the chosen cuts' parts are numbered as the
   new partitions;
3. the rows move to their new partitions (the work table is rewritten in
   partition order whenever the partitions have multiplied enough: grouping
   rows by partition is much faster when they are), those of final ones to
   the done table.
So a table needs about log2(n / k) rounds of a few statements, however many
partitions each has. Criteria monotone under splitting's reverse (a union of
parts that satisfy them satisfies them: k-anonymity, the l-diversity family,
t-closeness and beta-likeness against the whole table) plug in unchanged; so
do the others (delta-disclosure, Grassberger's entropy), since every partition
published was checked as a part of the cut that made it.

This module is the partitioning's SQL (scratch tables of the connection's
session, its statements in SQLAlchemy Core; the criteria's, which read the
candidate parts as a frequency-set view, are text) and the SELECT of the
partitioned table; publication (staging, the audit, ownership) is
sqlanon.publish.mondrian.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy import and_, case, func, select
from sqlalchemy.engine import Connection
from sqlalchemy.sql.selectable import SelectBase

from ..backends import ColumnKind, Database
from ..criteria import Criterion
from ..criteria.view import FrequencySetView
from ..errors import DataError
from ..model.hierarchies import PIECE_BITS, Hierarchy, PathCodes
from ..model.progress import Progress, silent
from .frequency import violating_classes_sql
from .persons import published_leaves
from .scratch import MATERIALIZED, Scratch
from .star import check_null_mapping

MAX_ROUNDS = 200
# a round groups the open rows by partition two or three times; over rows stored in partition order that runs 2-3x
# faster (1M hospital rows, round 16: its figures 148 -> 54 ms), so the work table is rewritten sorted whenever the
# partitions have multiplied by SORT_GROWTH since the last sort (a sort costs about one round's figures). Between
# sorts a partition's rows stay within its ancestor's range: a join keeps the order in which it reads the rows
SORT_GROWTH = 256
MEAN_DECIMALS_OF_INTEGERS, MEAN_DECIMALS = 1, 4  # a published mean (numeric: mean), rounded
WIDE_CUTS = 3  # from this many QIs to cut in a round, its parts are counted in one join (Mondrian._counted_parts)
# a numeric QI's NULL in the work table: a value below every number (NaN and the infinities are refused in the
# source), so medians, cuts and ranks order NULLs first with no case of their own
NULL_NUMBER = sa.cast(sa.literal("-Infinity"), sa.Double)

Column = sa.ColumnElement[Any]


@dataclass
class MondrianQI:
    column: str
    hierarchy: Hierarchy | None  # None: numeric, cut at the median
    kind: ColumnKind = ColumnKind.OTHER  # what a numeric QI's source column holds

    @property
    def sql_type(self) -> type[sa.types.TypeEngine[Any]]:
        """What a numeric QI's values are cast to in the work table."""
        # a source column a 4-byte integer holds travels through the rounds as INTEGER, not DOUBLE PRECISION (1M
        # hospital rows, zip and birth date: rewriting the rows and their medians 4.5 -> 4.0 s)
        return sa.Integer if self.kind is ColumnKind.SMALL_INTEGER else sa.Double

    @property
    def tree(self) -> Hierarchy:
        """The hierarchy a categorical QI is split along (a numeric QI has none)."""
        assert self.hierarchy is not None, f"{self.column} is cut as a number"
        return self.hierarchy

    @property
    def numeric(self) -> bool:
        return self.hierarchy is None

    @property
    def height(self) -> int:
        return 0 if self.hierarchy is None else self.hierarchy.height


@dataclass(kw_only=True)
class MondrianResult:
    partitions: int
    rounds: int
    statements: int
    smallest: int
    largest: int


class Mondrian:
    """The partitioning of one table, built in scratch tables of the connection's session."""

    def __init__(
        self,
        *,
        db: Database,
        conn: Connection,
        source: str,
        columns: list[str],
        qis: list[MondrianQI],
        sensitive: list[str],
        criteria: list[Criterion],
        prefix: str,
        relaxed: bool = False,
        progress: Progress = silent,
        highs: dict[str, str] | None = None,
        held: dict[str, str] | None = None,
    ):
        """`source`: the table's reference (`Database.q`); `columns`: its columns, as the database names them;
        `highs`: per numeric QI whose rows are persons with a range of values, the column of the largest (the QI's
        own holds the smallest, which the cuts read; a partition publishes the range of both); `held`: per sensitive
        column whose persons may hold several values, the FROM item of its sets' members (the column holds each
        person's set; see FrequencySetView.held): a part's count of a value is then its persons who hold it."""
        self.db, self.conn, self.columns, self.qis = db, conn, columns, qis
        self.highs, self.held = highs or {}, held or {}
        self.source, self.source_ref = db.ref_table(source, columns), source
        self.sensitive, self.criteria, self.relaxed = sensitive, criteria, relaxed
        self.progress, self.scratch = progress, Scratch(db, conn, prefix)
        self.numeric = [j for j, qi in enumerate(qis) if qi.numeric]  # the QIs cut at the median, by index
        self.categorical = [j for j, qi in enumerate(qis) if not qi.numeric]  # those cut along their hierarchy
        self.spans: dict[int, float] = {}
        self.codes: dict[int, PathCodes] = {}  # categorical QIs' path codes
        self.nodes: dict[int, sa.TableClause] = {}  # categorical QIs' (level, node, label, leaves)
        self.with_nulls: set[int] = set()  # QIs with NULLs (categorical: their hierarchies map them)
        self.cuttable: list[int] = []  # the QIs some open partition can cut (this round)
        self.open_parts = self.sorted_parts = 1  # partitions after the last round; when the rows were last sorted
        self.ids: type[sa.Integer] = sa.BigInteger  # row and partition numbers (narrower once the rows are counted)
        # the scratch tables, made by `prepare` and the rounds: the source's rows, the open ones (work), those of
        # final partitions (done), the partitions' levels, the candidate cuts and the chosen ones, their parts
        self.rows = self.work = self.done = self.parts = self.whole = self.candidates = _none()
        self.choice = self.pieces = _none()

    # --- setup ----------------------------------------------------------
    def _create(self, name: str, query: SelectBase, text: str | None = None, **params: Any) -> sa.TableClause:
        """The scratch table `name` made (or made anew) from `query`, which may read the table it replaces; a
        Core table of the query's columns. With `text` (and its `params`), made from that text, whose columns
        are `query`'s.

        Analyzed, as every scratch table: PostgreSQL plans the next round's joins with these tables' statistics
        (1M hospital rows 52.7 s -> 46.1 s, of which 2.6 s of ANALYZE; analyzing only the work and candidate
        tables left the move at 15.8 s instead of 8.0 s)."""
        ref = self.scratch.ref(name)
        self.scratch.replace(ref, query if text is None else text, params)
        return self.scratch.table(ref, query)

    # every round runs the same statements over tables of the same names: each is built and compiled once per
    # run (`Scratch.once`)
    def _create_once(self, name: str, build: Callable[[], SelectBase]) -> sa.TableClause:
        """The scratch table `name` made anew from the round's statement `build` makes."""
        query, text = self.scratch.once(name, build)
        return self._create(name, query, text)

    def _run_once(self, key: Hashable, build: Callable[[], Any]) -> Any:
        """Run the round's statement `build` makes."""
        return self.db.execute(self.conn, self.scratch.once(key, build)[1])

    @property
    def statements(self) -> int:
        return self.scratch.statements

    def drop(self) -> None:
        self.scratch.drop_all()

    def prepare(self) -> int:
        """The work table (checked: numeric QIs are numbers or NULL, which travels as NULL_NUMBER; categorical
        values are in their hierarchies, NULLs only where a hierarchy maps them), every hierarchy node's code,
        label and leaves, and one partition holding every row."""
        # the rows as they are, numbered, apart: each round rewrites only the narrow work table (rid, partition,
        # QI codes, the sensitive columns the criteria read; 1M hospital rows: 0.8 s of 2 s a round otherwise).
        # Every table of Mondrian's names its columns itself (u<k>: the source's k-th column, s<i>: the i-th
        # sensitive one), so no name of the source's, `rid` included, is ever one of Mondrian's
        for j, qi in enumerate(self.qis):
            self._check_values(j, qi)
        originals = [self.source.c[c].label(f"u{k}") for k, c in enumerate(self.columns)]
        self.rows = rows = self._create("rows", select(func.row_number().over().label("rid"), *originals))
        count = self.scratch.count(rows)
        if count == 0:
            raise DataError("the source table is empty; there is nothing to anonymize")
        # row and partition numbers (a partition tree has fewer than 2 x rows nodes) as narrow as they can be:
        # 4-byte integers made the rounds' rewrites cheaper (5M hospital rows: 37.3 s -> 31.4 s)
        self.ids = _integer(count.bit_length() + 1)
        values: list[Column] = []
        joined: sa.FromClause = rows
        for j, qi in enumerate(self.qis):
            value = self._row(qi.column)
            if qi.numeric:
                number = func.coalesce(sa.cast(value, sa.Double), NULL_NUMBER) if j in self.with_nulls else value
                values.append(sa.cast(number, self._sql_type(j)).label(f"v{j}"))
                continue
            codes = self.codes[j] = qi.tree.path_codes
            if codes.bits > PIECE_BITS:  # a code travels through the rounds as one integer
                raise DataError(
                    f"the hierarchy of {qi.column!r} is too wide for Mondrian's {PIECE_BITS}-bit path "
                    f"codes ({codes.bits} bits); give it fewer values per node"
                )
            mapping = self._code_tables(j, codes)
            self._check_in_hierarchy(qi, mapping)
            h = mapping.alias(f"h{j}")
            joined = joined.join(h, h.c.value == _leaf_key(sa.cast(value, sa.String), qi.tree))
            values.append(sa.cast(h.c.code, _integer(codes.bits)).label(f"c{j}"))
        sensitive = [self._row(c).label(f"s{i}") for i, c in enumerate(self.sensitive)]
        first = sa.cast(sa.literal(1), self.ids)
        self.work = work = self._create(
            "work",
            select(sa.cast(rows.c.rid, self.ids).label("rid"), first.label("part"), *values, *sensitive).select_from(
                joined
            ),
        )
        levels = [sa.literal(qi.height).label(f"lev{j}") for j, qi in enumerate(self.qis)]
        self.parts = self._create("parts", select(first.label("part"), *levels))
        # rows of closed partitions leave the work table for `done`: later rounds read only open partitions
        self.done = self._create("done", select(work).where(sa.false()))
        if self.numeric:  # each numeric QI's range over the whole table, what widths are normalized by
            ranges = [func.max(work.c[f"v{j}"]) - func.min(self._number(j, work)) for j in self.numeric]
            spans = self.db.execute(self.conn, select(*ranges)).one()
            self.spans = {j: float(span or 0) for j, span in zip(self.numeric, spans)}
        if self.sensitive:  # the whole table's distribution of the sensitive values (t-closeness)
            columns = self._sensitive_columns(work)
            self.whole = self._create("whole", select(*columns, func.count().label("cnt")).group_by(*columns))
        self._check_whole_table()
        return count

    def _sql_type(self, j: int) -> type[sa.types.TypeEngine[Any]]:
        """What numeric QI j's values are cast to in the work table: DOUBLE where NULL_NUMBER stands for NULL."""
        return sa.Double if j in self.with_nulls else self.qis[j].sql_type

    def _number(self, j: int, table: sa.FromClause) -> Column:
        """Numeric QI j's value in `table` (a NULL where the source has one, not NULL_NUMBER): what its smallest
        number, a range's or width's low end, and a mean read."""
        value = table.c[f"v{j}"]
        return case((value > NULL_NUMBER, value)) if j in self.with_nulls else value

    def _row(self, column: str) -> Column:
        """Source column `column` in the rows table."""
        keys = [self.db.name_key(c) for c in self.columns]
        return self.rows.c[f"u{keys.index(self.db.name_key(column))}"]

    def _code_tables(self, j: int, codes: PathCodes) -> sa.TableClause:
        """Scratch tables of QI j's hierarchy: (value, code) of every value, and (level, node, label, leaves) of
        every node (`nodes`); returns the first."""
        values = self.scratch.make_from_rows(
            f"h{j}", [("value", "VARCHAR"), ("code", "BIGINT")], list(codes.code.items())
        )
        node_columns = [("level", "INTEGER"), ("node", "BIGINT"), ("label", "VARCHAR"), ("leaves", "BIGINT")]
        keys = published_leaves(self.qis[j].tree)  # a person's common ancestor publishes its label at level 0
        nodes = [
            (level, node, keys.get(label, label) if level == 0 else label, n) for level, node, label, n in codes.nodes()
        ]
        self.nodes[j] = self.scratch.make_from_rows(f"nodes{j}", node_columns, nodes)
        return values

    def _source_column(self, name: str) -> Column:
        """The source's column `name` (as the job spells it)."""
        by_key = {self.db.name_key(c): c for c in self.columns}
        return self.source.c[by_key[self.db.name_key(name)]]

    def _check_values(self, j: int, qi: MondrianQI) -> None:
        db, column = self.db, self._source_column(qi.column)
        text = sa.cast(column, sa.String)
        counts = select(func.count() - func.count(column), func.count(case((text == "", 1))))
        nulls, empty = db.execute(self.conn, counts).one()
        if not qi.numeric:
            check_null_mapping(qi.column, qi.tree.maps_null, qi.tree.origin, nulls, empty)  # as the search reads it
        if nulls:
            self.with_nulls.add(j)
        if qi.numeric:
            quoted = db.q(qi.column)  # the backend's test is text
            bad = db.execute(
                self.conn,
                f"SELECT CAST({quoted} AS VARCHAR) FROM {self.source_ref} "
                f"WHERE {quoted} IS NOT NULL AND {db.not_a_number(quoted)} LIMIT 1",
            ).first()
            if bad is not None:
                raise DataError(
                    f"quasi-identifier {qi.column!r} has no hierarchy, so Mondrian cuts it at its "
                    f"median as a number, but it holds {bad[0]!r}; give it a hierarchy (a categorical "
                    "QI is split along it) or fix the value"
                )

    def _check_in_hierarchy(self, qi: MondrianQI, mapping: sa.TableClause) -> None:
        """Every value of a categorical QI is a leaf of its hierarchy: an anti-join with the stored (value, code)
        table `mapping`, which hashes (a NOT IN list of the leaves bound as parameters took 3.1 s of Mondrian's
        4.6 on 200k hospital rows, whose birth dates' hierarchy has 34,400 leaves)."""
        text = sa.cast(self._source_column(qi.column), sa.String)
        stray = self.db.execute(
            self.conn,
            select(text)
            .select_from(self.source.outerjoin(mapping, mapping.c.value == text))
            .where(text.is_not(None), mapping.c.value.is_(None))
            .limit(1),
        ).first()
        if stray is not None:
            raise DataError(
                f"value {stray[0]!r} of {qi.column!r} is not in its hierarchy; add it to the hierarchy "
                "file (or fix the value)"
            )

    def _check_whole_table(self) -> None:
        work = self.work
        zero = sa.literal(0)
        sensitive = self._sensitive_columns(work)
        whole = select(work.c.part, zero.label("child"), zero.label("dim"), *sensitive, func.count().label("cnt"))
        violating = self._violating(whole.group_by(work.c.part, *sensitive), "all")
        self.scratch.statements += 1
        if self.db.execute(self.conn, violating).scalar_one():
            raise DataError(
                "the criteria do not hold even for the whole table as one class, so no partitioning "
                "can satisfy them; relax the criteria (a smaller k or l, a larger t)"
            )

    def _violating(self, parts: sa.Select[Any], suffix: str) -> sa.TextClause:
        """How many classes of the frequency set `parts` (part, child, dim, sensitive values, cnt) violate the
        criteria (the criteria's statement, text over the view `fs`)."""
        view = self._view(self.db.as_text(self.conn, parts))
        params: dict[str, Any] = {}
        violating = violating_classes_sql(view, self.criteria, suffix, params)
        return sa.text(f"WITH fs AS ({view.definition}) SELECT COUNT(*) FROM ({violating}) v").bindparams(**params)

    # --- rounds -----------------------------------------------------------
    def run(self) -> MondrianResult:
        for rounds in range(1, MAX_ROUNDS + 1):
            self._candidates()
            open_parts = self.open_parts
            split = self._choose()
            self.progress("Mondrian: rounds", rounds, None)
            if split < open_parts:  # some partition is final (none is, in the early rounds: no pass for nothing)
                self._close(every=False)
            if not split:
                break
            self._apply()
        else:  # out of rounds: the partitions made so far are final (each satisfies the criteria)
            self._close(every=True)
        done = self.done
        sizes = select(func.count().label("n")).select_from(done).group_by(done.c.part).subquery("s")
        partitions, smallest, largest = self.db.execute(
            self.conn, select(func.count(), func.min(sizes.c.n), func.max(sizes.c.n))
        ).one()
        return MondrianResult(
            partitions=int(partitions),
            rounds=rounds,
            statements=self.statements,
            smallest=int(smallest),
            largest=int(largest),
        )

    def _sensitive_columns(self, table: sa.FromClause) -> list[Column]:
        return [table.c[f"s{i}"] for i in range(len(self.sensitive))]

    def _view(self, definition: str) -> FrequencySetView:
        reference = self.scratch.ref_of(self.whole) if self.sensitive else None
        return FrequencySetView(
            table="fs",
            class_columns=["part", "dim", "child"],
            count_column="cnt",
            sensitive_columns={c: f"s{i}" for i, c in enumerate(self.sensitive)},
            definition=definition,
            reference=reference,
            held={c: m for c, m in self.held.items() if c in self.sensitive},
        )

    def _shift(self, j: int, level: Column) -> Column:
        """How far to shift QI j's path codes right to reach their node at `level` (a level)."""
        return case(dict(enumerate(self.codes[j].shifts)), value=level)

    def _node(self, j: int, code: Column, level: Column) -> Column:
        """The code of the node at `level` (a level of QI j's hierarchy) above the value of path `code`."""
        return code.op(">>")(self._shift(j, level))

    def _child(self, j: int, w: sa.FromClause, c: sa.FromClause, suffix: str = "") -> Column:
        """The part of row `w` under a cut of QI j (an integer), the cut's columns in `c`: cut (the median), n (the
        partition's rows) and shift (a categorical QI's: to its children's level), each named with `suffix`
        (c.cut{suffix}) except n."""
        if self.qis[j].numeric:
            if self.relaxed:  # one cut per partition and row: ranked within the partition
                rank = func.row_number().over(partition_by=w.c.part, order_by=[w.c[f"v{j}"], w.c.rid])
                return case((2 * rank <= c.c.n + 1, 0), else_=1)
            return case((w.c[f"v{j}"] <= c.c[f"cut{suffix}"], 0), else_=1)
        return w.c[f"c{j}"].op(">>")(c.c[f"shift{suffix}"])

    def _piece(self, dims: list[int], w: sa.FromClause, c: sa.FromClause) -> Column:
        """The part of row `w` under the cut of candidate `c` on whichever QI of `dims` it cuts."""
        return case({j: self._child(j, w, c) for j in dims}, value=c.c.dim)

    def _candidates(self) -> None:
        """(part, dim, width, cut, n, shift): the cut each open partition would make on each QI that can be cut,
        from one grouping of the open rows by partition. Path codes in code order have their ancestors in order
        too, so a partition's rows fall under two children or more exactly when its smallest and largest codes do:
        no distinct count, and no level per row."""
        f = self._create_once("figures", self._figures)
        self.candidates = cand = self._create_once("cand", lambda: self._cuts(f))
        # the QIs some partition can still cut (late rounds: the numeric ones alone): the only ones a round counts
        cut = self._run_once("dims", lambda: select(cand.c.dim).distinct()).scalars().all()
        self.cuttable = sorted(int(j) for j in cut) or [0]  # none: any one (its join is empty)
        self.scratch.statements += 1
        self.scratch.drop(f)

    def _figures(self) -> sa.Select[Any]:
        """Per open partition: its rows, each QI's smallest and largest value (or path code), and each numeric QI's
        lower median."""
        w, figures = self.work, []
        for j, qi in enumerate(self.qis):
            column = w.c[self._qi_column(j)]
            figures += [func.min(column).label(f"low{j}"), func.max(column).label(f"high{j}")]
            if j in self.with_nulls and qi.numeric:  # the smallest number, where a range's width starts
                figures.append(func.min(self._number(j, w)).label(f"least{j}"))
            if qi.numeric:
                # relaxed cuts split the sorted rows by rank: no median (an ordered aggregate, most of this statement)
                median = sa.cast(sa.null(), sa.Double) if self.relaxed else self.db.lower_median(column)
                figures.append(median.label(f"cut{j}"))
        return select(w.c.part, func.count().label("n"), *figures).group_by(w.c.part)

    def _cuts(self, f: sa.TableClause) -> SelectBase:
        """Every candidate cut, from the partitions' figures `f`."""
        parts = [
            self._numeric_cuts(f, j) if qi.numeric else self._categorical_cuts(f, j) for j, qi in enumerate(self.qis)
        ]
        return sa.union_all(*parts)

    def _numeric_cuts(self, f: sa.TableClause, j: int) -> sa.Select[Any]:
        """Each partition's cut of numeric QI j at its median, its width its range over the table's."""
        low, high, cut, span = f.c[f"low{j}"], f.c[f"high{j}"], f.c[f"cut{j}"], self.spans[j]
        least = f.c[f"least{j}"] if j in self.with_nulls else low  # NULLs (NULL_NUMBER) add nothing to the width
        width = (high - least) / span if span > 0 else sa.literal(0.0)
        cuts = select(f.c.part, sa.literal(j).label("dim"), width.label("width"), cut.label("cut"), f.c.n)
        cuts = cuts.add_columns(sa.literal(0).label("shift")).where(high > low)
        # strict: the cut must leave rows above it (the lower median can be the largest value)
        return cuts if self.relaxed else cuts.where(high > cut)

    def _categorical_cuts(self, f: sa.TableClause, j: int) -> sa.Select[Any]:
        """Each partition's cut of categorical QI j into the children of its node (when its rows fall under two
        or more), its width the node's leaves over all leaves."""
        p, nd = self.parts.alias("p"), self.nodes[j].alias("nd")
        level, low, high = p.c[f"lev{j}"], f.c[f"low{j}"], f.c[f"high{j}"]
        width = sa.cast(nd.c.leaves, sa.Double) / len(self.qis[j].tree.values)
        return (
            select(
                f.c.part,
                sa.literal(j).label("dim"),
                width.label("width"),
                sa.cast(sa.null(), sa.Double).label("cut"),
                f.c.n,
                self._shift(j, level - 1).label("shift"),
            )
            .select_from(
                f.join(p, p.c.part == f.c.part).join(
                    nd, and_(nd.c.level == level, nd.c.node == self._node(j, low, level))
                )
            )
            .where(level > 0, self._node(j, low, level - 1) < self._node(j, high, level - 1))
        )

    def _qi_column(self, j: int) -> str:
        return f"v{j}" if self.qis[j].numeric else f"c{j}"

    def _choose(self) -> int:
        """Each open partition's cut: the widest QI whose parts all satisfy the criteria, and the new partitions
        its parts become (numbered after every partition so far); returns how many partitions split."""
        cells, definition = self._counted_parts()
        view = self._view(definition)
        params: dict[str, object] = {}
        bad = violating_classes_sql(view, self.criteria, "cut", params)
        pieces, body = self.scratch.once("pieces", self._pieces)
        text = f"WITH {cells}fs AS {MATERIALIZED} ({definition}), bad AS ({bad}) {body}"
        self.pieces = p = self._create("pieces", pieces, text, **params)
        cut = [p.c.part, p.c.dim, p.c.cut, p.c.n, p.c.shift]
        self.choice = choice = self._create_once(
            "choice", lambda: select(*cut, func.min(p.c.new_part).label("first")).group_by(*cut)
        )

        def counts() -> sa.Select[Any]:
            return select(*(select(func.count()).select_from(t).scalar_subquery() for t in (choice, p)))

        split, self.open_parts = self._run_once("counts", counts).one()
        self.scratch.statements += 1
        return int(split)

    def _pieces(self) -> sa.Select[Any]:
        """(part, dim, child, cut, n, shift, new_part): each open partition's allowed cut of the widest QI (ties:
        QI order), its parts numbered after every partition so far; over the common table expressions of the
        criteria's statement, `fs` (the candidate parts) and `bad` (the parts that violate a criterion)."""
        fs, refused = (
            sa.table("fs", *map(sa.column, ("part", "dim", "child"))),
            sa.table("bad", *map(sa.column, ("part", "dim"))),
        )
        c = self.candidates.alias("c")
        allowed = (
            select(c.c.part, c.c.dim, c.c.width)
            .where(~sa.exists().where(refused.c.part == c.c.part, refused.c.dim == c.c.dim))
            .subquery("a")
        )
        place = func.row_number().over(partition_by=allowed.c.part, order_by=[allowed.c.width.desc(), allowed.c.dim])
        ranked = select(allowed.c.part, allowed.c.dim, place.label("place")).subquery("ranked")
        best = select(ranked.c.part, ranked.c.dim).where(ranked.c.place == 1).subquery("x")
        f = fs.alias("f")
        chosen = (
            select(f.c.part, f.c.dim, f.c.child)
            .distinct()
            .join_from(f, best, and_(best.c.part == f.c.part, best.c.dim == f.c.dim))
            .subquery("g")
        )
        last = select(func.max(self.parts.c.part)).scalar_subquery()
        numbered = sa.cast(last + func.row_number().over(order_by=[chosen.c.part, chosen.c.child]), self.ids)
        cand = self.candidates.alias("cc")
        return select(
            chosen.c.part, chosen.c.dim, chosen.c.child, cand.c.cut, cand.c.n, cand.c.shift, numbered.label("new_part")
        ).join_from(chosen, cand, and_(cand.c.part == chosen.c.part, cand.c.dim == chosen.c.dim))

    def _counted_parts(self) -> tuple[str, str]:
        """The rows of every part of every candidate cut (part, dim, child, sensitive values, cnt): the SELECT, and
        the common table expression it reads, if any ("name AS (...), "), as text for the criteria's statement.

        With few QIs to cut (late rounds: the numeric ones), one join of the rows with the candidates per QI.
        With WIDE_CUTS or more, one join of the rows with all their partition's cuts counts the rows by the part
        each cut would put them in (`_cells`), and each QI's parts are sums of those. Measured (1M hospital rows on
        DuckDB, 200k on PostgreSQL): the one join took the early rounds 40 -> 29 ms but the late ones, with two
        QIs to cut, 55 -> 85 ms on DuckDB, and 3.1 -> 1.8 s of all rounds on PostgreSQL; both ways as here: DuckDB
        as before within noise, PostgreSQL 1.7 s (the whole partitioning 10.3 -> 9.3 s)."""
        cuttable = tuple(self.cuttable)
        if len(cuttable) >= WIDE_CUTS:
            _, cells = self.scratch.once(("cells", cuttable), self._cells)
            _, counted = self.scratch.once(("counted", cuttable), self._summed_cells)
            return f"cells AS {MATERIALIZED} ({cells}), ", counted
        return "", self.scratch.once(("counted", cuttable), self._joined_cuts)[1]

    def _summed_cells(self) -> sa.Select[Any] | sa.CompoundSelect[Any]:
        """Each QI's parts as sums of the common table expression `cells` (`_cells`)."""
        cells_query = self._cells()
        cells = sa.table("cells", *(sa.column(c.key) for c in cells_query.selected_columns if c.key))
        sensitive = self._sensitive_columns(cells)
        return sa.union_all(
            *(
                select(cells.c.part, sa.literal(j).label("dim"), cells.c[f"k{j}"].label("child"), *sensitive)
                .add_columns(_count_sum(cells.c.cnt).label("cnt"))
                .where(cells.c[f"k{j}"].is_not(None))
                .group_by(cells.c.part, cells.c[f"k{j}"], *sensitive)
                for j in self.cuttable
            )
        )

    def _joined_cuts(self) -> sa.Select[Any]:
        """Each QI's parts from a join of the open rows with the partitions' candidate cuts of that QI."""
        branches = []
        for j in self.cuttable:
            w, c = self.work.alias("w"), self.candidates.alias("c")
            branches.append(
                select(
                    w.c.part, c.c.dim, self._child(j, w, c).label("child"), *self._sensitive_columns(w), w.c.rid
                ).join_from(w, c, and_(c.c.part == w.c.part, c.c.dim == j))
            )
        r = sa.union_all(*branches).subquery("r")
        keys = [r.c.part, r.c.dim, r.c.child, *self._sensitive_columns(r)]
        return select(*keys, func.count().label("cnt")).group_by(*keys)

    def _cells(self) -> sa.Select[Any]:
        """The open rows counted by partition, the part every candidate cut would put them in (k<j>: NULL where the
        partition has no cut of QI j) and the sensitive values."""
        cand = self.candidates
        pivot = [
            func.max(case((cand.c.dim == j, value))).label(f"{name}{j}")
            for j in self.cuttable
            for name, value in (("has", sa.literal(1)), ("cut", cand.c.cut), ("shift", cand.c.shift))
        ]
        c = select(cand.c.part, func.max(cand.c.n).label("n"), *pivot).group_by(cand.c.part).subquery("c")
        w = self.work.alias("w")
        children = [case((c.c[f"has{j}"] == 1, self._child(j, w, c, str(j)))).label(f"k{j}") for j in self.cuttable]
        r = select(*self._sensitive_columns(w), w.c.part, *children).join_from(w, c, c.c.part == w.c.part).subquery("r")
        keys = [r.c[f"k{j}"] for j in self.cuttable] + self._sensitive_columns(r)
        return select(r.c.part, *keys, func.count().label("cnt")).group_by(r.c.part, *keys)

    def _close(self, *, every: bool) -> None:
        """Rows of the work table to the done table: those of the partitions no cut was chosen for (`every`: all),
        which are final."""

        def insert() -> sa.Insert:
            columns, work = self._work_columns(), self.work
            final = sa.true() if every else ~sa.exists().where(self.choice.c.part == work.c.part)
            return sa.insert(self.done).from_select(columns, select(*(work.c[c] for c in columns)).where(final))

        self._run_once(("close", every), insert)
        self.scratch.statements += 1

    def _apply(self) -> None:
        """The rows of split partitions to their new partitions, which replace the split ones."""
        sorted_rows = self.open_parts >= SORT_GROWTH * self.sorted_parts
        if sorted_rows:
            self.sorted_parts = self.open_parts
        query, text = self.scratch.once(("move", sorted_rows), lambda: self._moved_rows(sorted_rows))
        self.work = self._create("work", query, text)
        self.parts = self._create_once("parts", self._levels)

    def _moved_rows(self, sorted_rows: bool) -> SelectBase:
        """The open rows, those of split partitions in their new partitions (in partition order: `sorted_rows`)."""

        def cut_by(dims: list[int]) -> sa.Subquery:  # each row's piece (a window for relaxed cuts, so computed first)
            work, choice = self.work, self.choice
            piece = self._piece(dims, work, choice).label("child")
            return (
                select(work, piece, choice.c.first)
                .join_from(work, choice, and_(choice.c.part == work.c.part, choice.c.dim.in_(dims)))
                .subquery("w")
            )

        def moved(w: sa.Subquery, part: Column) -> list[Column]:
            return [part.label("part") if c == "part" else w.c[c] for c in self._work_columns()]

        # a numeric cut's two parts were numbered in a row (left, right), so its rows need no look-up of their
        # new partition; a categorical cut's parts are its children present (1M rows on PostgreSQL: a join less
        # in every round that cuts numbers alone)
        branches = []
        if self.numeric:
            w = cut_by(self.numeric)
            branches.append(select(*moved(w, w.c.first + w.c.child)))
        if self.categorical:
            w, n = cut_by(self.categorical), self.pieces.alias("n")
            branches.append(
                select(*moved(w, n.c.new_part)).join_from(w, n, and_(n.c.part == w.c.part, n.c.child == w.c.child))
            )
        moving = sa.union_all(*branches)
        return moving.order_by(moving.selected_columns.part) if sorted_rows else moving

    def _levels(self) -> SelectBase:
        """The partitions' levels after the round: those not split as they were, the new ones one level below
        their parent's on the QI cut along its hierarchy."""
        parts, n = self.parts, self.pieces.alias("n")
        p = parts.alias("p")
        levels = [
            p.c[f"lev{j}"] if qi.numeric else (p.c[f"lev{j}"] - case((n.c.dim == j, 1), else_=0)).label(f"lev{j}")
            for j, qi in enumerate(self.qis)
        ]
        same = [parts.c[f"lev{j}"] for j in range(len(self.qis))]
        return sa.union_all(
            select(parts.c.part, *same).where(~sa.exists().where(self.choice.c.part == parts.c.part)),  # anti-join
            select(n.c.new_part, *levels).join_from(n, p, p.c.part == n.c.part),
        )

    def _work_columns(self) -> list[str]:
        qis = [self._qi_column(j) for j in range(len(self.qis))]
        return ["rid", "part"] + qis + [f"s{i}" for i in range(len(self.sensitive))]

    # --- output -------------------------------------------------------------
    def store_labels(self, mean: bool) -> str:
        """A scratch table of what each partition publishes for each QI (part, q<j>): a numeric QI's range (or
        mean) as text, a categorical QI's hierarchy node; returns its ref. Stored, so that each text is made once
        per partition: inside the publication's SELECT, DuckDB's join planner lifted these expressions above the
        joins and built them once per row (5M hospital rows: the publication's SELECT 2.3-3.9 s, 1.9-3.1 s with
        the labels stored first, 0.42-0.49 s of it to store them)."""
        return self.scratch.ref_of(self._create("labels", self._labels(mean)))

    def _labels(self, mean: bool) -> sa.Select[Any]:
        e = self.done.alias("e")
        rows: sa.FromClause = e
        if self.highs:  # the persons' largest values, beside their rows
            rows = e.join(self.rows, self.rows.c.rid == e.c.rid)
        figures = []
        for j in self.numeric:
            v = self._number(j, e)  # (PostgreSQL's AVG of integers is a NUMERIC, printed with 16 decimals)
            high = self._row(self.highs[self.qis[j].column]) if self.qis[j].column in self.highs else v
            figures += [func.min(v).label(f"low{j}"), func.max(high).label(f"high{j}")]
            figures.append(func.avg(sa.cast(v, sa.Double)).label(f"mean{j}"))
            if j in self.with_nulls:  # whether the partition holds NULLs
                figures.append(func.min(e.c[f"v{j}"]).label(f"lowest{j}"))
        # any row's code has the partition's node
        figures += [func.min(e.c[f"c{j}"]).label(f"low{j}") for j in self.categorical]
        g = select(e.c.part, *figures).select_from(rows).group_by(e.c.part).subquery("g")
        p = self.parts.alias("p")
        joined = g.join(p, p.c.part == g.c.part)
        nodes = {}
        for j in self.categorical:
            nodes[j] = n = self.nodes[j].alias(f"n{j}")
            level = p.c[f"lev{j}"]
            joined = joined.join(n, and_(n.c.level == level, n.c.node == self._node(j, g.c[f"low{j}"], level)))
        published = [
            self._published_qi(j, qi, mean, g, p, nodes.get(j)).label(f"q{j}") for j, qi in enumerate(self.qis)
        ]
        return select(g.c.part, *published).select_from(joined)

    def _published_qi(
        self, j: int, qi: MondrianQI, mean: bool, g: sa.Subquery, p: sa.FromClause, n: sa.FromClause | None
    ) -> Column:
        """The published text of QI j from its partition's figures (`g`: low, high, mean; `n`: its node). A
        partition of NULLs only, at level 0 of a hierarchy that maps them (the column has some, so no empty
        string), publishes NULL, as a generalization's level 0 does; so does a numeric QI's partition of NULLs
        only, and one of numbers and NULLs publishes its numbers' range (or mean) and " or NULL"."""
        if n is not None:
            if j in self.with_nulls:
                return case((and_(p.c[f"lev{j}"] == 0, n.c.label == ""), sa.null()), else_=n.c.label)
            return n.c.label
        if mean:  # one digit finer than whole numbers; other numbers to 4 decimals (same text on every database)
            places = MEAN_DECIMALS_OF_INTEGERS if qi.kind.integer else MEAN_DECIMALS
            numbers: Column = sa.cast(func.round(sa.cast(g.c[f"mean{j}"], sa.Numeric(38, 10)), places), sa.String)
        else:
            low, high = g.c[f"low{j}"], g.c[f"high{j}"]
            bracket = sa.literal("[") + _number_text(low) + sa.literal("-") + _number_text(high) + sa.literal("]")
            numbers = case((low == high, _number_text(low)), else_=bracket)
        if j not in self.with_nulls:
            return numbers
        # NULL where the partition holds NULLs only (no number: its range and mean are NULL)
        return case((g.c[f"lowest{j}"] == NULL_NUMBER, numbers + sa.literal(" or NULL")), else_=numbers)


def _none() -> sa.TableClause:
    """A table not made yet."""
    return sa.table("")


def _integer(bits: int) -> type[sa.Integer]:
    """The narrowest SQL integer type that holds non-negative numbers of `bits` bits."""
    return sa.Integer if bits <= 31 else sa.BigInteger


def _leaf_key(text: Column, hierarchy: Hierarchy) -> Column:
    """A column's value as text as a key into the hierarchy's leaves: a NULL is its empty line, where it has one
    (as `persons.hierarchy_key` writes it for the search)."""
    return func.coalesce(text, "") if hierarchy.maps_null else text


def _count_sum(column: Column) -> Column:
    """The SUM of a column of counts, kept BIGINT (as `criteria.view.count_sum` writes it for the criteria)."""
    return sa.cast(func.sum(column), sa.BigInteger)


def _number_text(value: Column) -> Column:
    """A number as text, whole numbers without a decimal point (so an integer column reads [30-39])."""
    return case(
        (value == func.floor(value), sa.cast(sa.cast(value, sa.BigInteger), sa.String)), else_=sa.cast(value, sa.String)
    )


@dataclass(frozen=True)
class PersonRows:
    """Where Mondrian partitioned a job's persons (one row each, `engine.persons.person_table`): the source whose
    rows are published (`ref`, its `columns`; a table or a FROM item), the `unit` column that names each row's
    person, and the column of `ref` that holds the unit as the persons' table does (`key`: the unit's own, or the
    unit as it is beside its pseudonym, see Persons.pseudonymized_rows)."""

    ref: str
    columns: list[str]
    unit: str
    key: str


def published_rows(
    db: Database,
    mondrian: Mondrian,
    select_other: Callable[[str, str], str | None],
    mean: bool,
    persons: PersonRows | None = None,
) -> tuple[str, list[str]]:
    """The SELECT of the published table (every source column in order, QIs as their partition's range (or mean)
    or hierarchy node, the others as `select_other(column, its value in SQL)` says, None: not published) and the
    published names. Stores the partitions' labels first (`Mondrian.store_labels`), which the SELECT reads. With
    `persons`, Mondrian's rows are the persons, and every row of the source goes to its person's partition."""
    by_column = {db.name_key(qi.column): j for j, qi in enumerate(mondrian.qis)}
    columns = mondrian.columns if persons is None else persons.columns
    select_list, published = [], []
    for k, column in enumerate(columns):
        value: str | None = f"g.q{by_column[db.name_key(column)]}" if db.name_key(column) in by_column else None
        if value is None:
            value = select_other(column, f"t.u{k}" if persons is None else f"t.{db.q(column)}")
            if value is None:
                continue
        select_list.append(f"{value} AS {db.q(column)}")
        published.append(column)
    rows, done = mondrian.scratch.ref_of(mondrian.rows), mondrian.scratch.ref_of(mondrian.done)
    rid, first = "t.rid", f"{rows} t"
    if persons is not None:  # each row of the source, by its person, to its person's row of Mondrian's
        unit = next(k for k, c in enumerate(mondrian.columns) if db.same_name(c, persons.unit))
        rid, first = "p.rid", f"{persons.ref} t JOIN {rows} p ON p.u{unit} = t.{db.q(persons.key)}"
    return (
        f"SELECT {', '.join(select_list)} FROM {first} JOIN {done} w ON w.rid = {rid} "
        f"JOIN {mondrian.store_labels(mean)} g ON g.part = w.part"
    ), published
