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
t-closeness against the whole table) plug in unchanged.

This module is the partitioning's SQL (scratch tables of the connection's
session) and the SELECT of the partitioned table; publication (staging, the
audit, ownership) is sqlanon.publish.mondrian.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Connection

from ..backends import ColumnKind, Database
from ..criteria import Criterion
from ..criteria.view import FrequencySetView, count_sum
from ..errors import DataError
from ..model.hierarchies import PIECE_BITS, Hierarchy, PathCodes
from ..model.progress import Progress, silent
from .frequency import violating_classes_sql
from .scratch import Scratch
from .star import check_null_mapping, hierarchy_key

MAX_ROUNDS = 200
# a round groups the open rows by partition two or three times; over rows stored in partition order that runs 2-3x
# faster (1M hospital rows, round 16: its figures 148 -> 54 ms), so the work table is rewritten sorted whenever the
# partitions have multiplied by SORT_GROWTH since the last sort (a sort costs about one round's figures). Between
# sorts a partition's rows stay within its ancestor's range: a join keeps the order in which it reads the rows
SORT_GROWTH = 256
WIDE_CUTS = 3  # from this many QIs to cut in a round, its parts are counted in one join (Mondrian._counted_parts)


@dataclass
class MondrianQI:
    column: str
    hierarchy: Hierarchy | None  # None: numeric, cut at the median
    kind: ColumnKind = ColumnKind.OTHER  # what a numeric QI's source column holds

    @property
    def sql_type(self) -> str:
        """What a numeric QI's values are cast to in the work table."""
        # a source column a 4-byte integer holds travels through the rounds as INTEGER, not DOUBLE PRECISION (1M
        # hospital rows, zip and birth date: rewriting the rows and their medians 4.5 -> 4.0 s)
        return "INTEGER" if self.kind is ColumnKind.SMALL_INTEGER else "DOUBLE PRECISION"

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
    ):
        self.db, self.conn, self.source, self.columns, self.qis = db, conn, source, columns, qis
        self.sensitive, self.criteria, self.relaxed = sensitive, criteria, relaxed
        self.progress, self.scratch = progress, Scratch(db, conn, prefix)
        self.work, self.parts, self.rows, self.done, self.whole = (
            self.scratch.ref(t) for t in ("work", "parts", "rows", "done", "whole")
        )
        self.numeric = [j for j, qi in enumerate(qis) if qi.numeric]  # the QIs cut at the median, by index
        self.categorical = [j for j, qi in enumerate(qis) if not qi.numeric]  # those cut along their hierarchy
        self.spans: dict[int, float] = {}
        self.codes: dict[int, PathCodes] = {}  # categorical QIs' path codes
        self.with_nulls: set[int] = set()  # categorical QIs with NULLs, which their hierarchies map
        self.cuttable: list[int] = []  # the QIs some open partition can cut (this round)
        self.open_parts = self.sorted_parts = 1  # partitions after the last round; when the rows were last sorted
        self.ids = "BIGINT"  # the SQL type of row and partition numbers (narrower once the rows are counted)

    # --- setup ----------------------------------------------------------
    def _create(self, ref: str, select: str, params: dict[str, Any] | None = None) -> None:
        """Create (or replace) the scratch table `ref` from `select`, which may read the table it replaces.

        Analyzed, as every scratch table: PostgreSQL plans the next round's joins with these tables' statistics
        (1M hospital rows 52.7 s -> 46.1 s, of which 2.6 s of ANALYZE; analyzing only the work and candidate
        tables left the move at 15.8 s instead of 8.0 s)."""
        self.scratch.replace(ref, select, params)

    @property
    def statements(self) -> int:
        return self.scratch.statements

    def drop(self) -> None:
        self.scratch.drop_all()

    def prepare(self) -> int:
        """The work table (checked: numeric QIs are numbers, categorical values are in their hierarchies, NULLs
        only where a hierarchy maps them), every hierarchy node's code, label and leaves, and one partition
        holding every row."""
        db, q = self.db, self.db.q
        labels, joins = [], []
        for j, qi in enumerate(self.qis):
            self._check_values(j, qi)
            value = self._row(qi.column)
            if qi.numeric:
                labels.append(f"CAST({value} AS {qi.sql_type}) AS v{j}")
                continue
            self.codes[j] = qi.tree.path_codes
            if self.codes[j].bits > PIECE_BITS:  # a code travels through the rounds as one integer
                raise DataError(
                    f"the hierarchy of {qi.column!r} is too wide for Mondrian's {PIECE_BITS}-bit path "
                    f"codes ({self.codes[j].bits} bits); give it fewer values per node"
                )
            mapping = self._code_tables(j, self.codes[j])
            self._check_in_hierarchy(qi, mapping)
            joins.append(f"JOIN {mapping} h{j} ON h{j}.value = {hierarchy_key(f'CAST({value} AS VARCHAR)', qi.tree)}")
            labels.append(f"CAST(h{j}.code AS {_integer(self.codes[j].bits)}) AS c{j}")
        # the rows as they are, numbered, apart: each round rewrites only the narrow work table (rid, partition,
        # QI codes, the sensitive columns the criteria read; 1M hospital rows: 0.8 s of 2 s a round otherwise).
        # Every table of Mondrian's names its columns itself (u<k>: the source's k-th column, s<i>: the i-th
        # sensitive one), so no name of the source's, `rid` included, is ever one of Mondrian's
        originals = ", ".join(f"t.{q(c)} AS u{k}" for k, c in enumerate(self.columns))
        self._create(self.rows, f"SELECT ROW_NUMBER() OVER () AS rid, {originals} FROM {self.source} t")
        rows = db.count_rows(self.conn, self.rows)
        if rows == 0:
            raise DataError("the source table is empty; there is nothing to anonymize")
        # row and partition numbers (a partition tree has fewer than 2 x rows nodes) as narrow as they can be:
        # 4-byte integers made the rounds' rewrites cheaper (5M hospital rows: 37.3 s -> 31.4 s)
        self.ids = _integer(rows.bit_length() + 1)
        sensitive = "".join(f", {self._row(c)} AS s{i}" for i, c in enumerate(self.sensitive))
        self._create(
            self.work,
            f"SELECT CAST(t.rid AS {self.ids}) AS rid, CAST(1 AS {self.ids}) AS part, "
            f"{', '.join(labels)}{sensitive} FROM {self.rows} t {' '.join(joins)}",
        )
        levels = ", ".join(f"{qi.height} AS lev{j}" for j, qi in enumerate(self.qis))
        self._create(self.parts, f"SELECT CAST(1 AS {self.ids}) AS part, {levels}")
        # rows of closed partitions leave the work table for `done`: later rounds read only open partitions
        self._create(self.done, f"SELECT * FROM {self.work} w WHERE 1 = 0")
        if self.numeric:  # each numeric QI's range over the whole table, what widths are normalized by
            spans = db.execute(
                self.conn, "SELECT " + ", ".join(f"MAX(v{j}) - MIN(v{j})" for j in self.numeric) + f" FROM {self.work}"
            ).one()
            self.spans = {j: float(span or 0) for j, span in zip(self.numeric, spans)}
        if self.sensitive:  # the whole table's distribution of the sensitive values (t-closeness)
            columns = ", ".join(f"s{i}" for i in range(len(self.sensitive)))
            self._create(self.whole, f"SELECT {columns}, COUNT(*) AS cnt FROM {self.work} GROUP BY {columns}")
        self._check_whole_table()
        return rows

    def _row(self, column: str) -> str:
        """Source column `column` in the rows table (alias t)."""
        keys = [self.db.name_key(c) for c in self.columns]
        return f"t.u{keys.index(self.db.name_key(column))}"

    def _nodes_ref(self, j: int) -> str:
        return self.scratch.ref(f"nodes{j}")

    def _code_tables(self, j: int, codes: PathCodes) -> str:
        """Scratch tables of QI j's hierarchy: (value, code) of every value, and (level, node, label, leaves) of
        every node; returns the first."""
        values, nodes = self.scratch.ref(f"h{j}"), self._nodes_ref(j)
        self.scratch.create_from_rows(values, [("value", "VARCHAR"), ("code", "BIGINT")], list(codes.code.items()))
        node_columns = [("level", "INTEGER"), ("node", "BIGINT"), ("label", "VARCHAR"), ("leaves", "BIGINT")]
        self.scratch.create_from_rows(nodes, node_columns, codes.nodes())
        return values

    def _check_values(self, j: int, qi: MondrianQI) -> None:
        db, column = self.db, self.db.q(qi.column)
        nulls, empty = db.execute(
            self.conn,
            f"SELECT COUNT(*) - COUNT({column}), COUNT(CASE WHEN CAST({column} AS VARCHAR) = '' THEN 1 END) "
            f"FROM {self.source}",
        ).one()
        if nulls and qi.numeric:
            raise DataError(
                f"quasi-identifier {qi.column!r} is NULL in {nulls} row(s); Mondrian places every row in a "
                "partition by its values: give it a hierarchy that maps NULL (a line whose value is empty, or "
                "`null: LABEL` for a generated one), fill them in, or remove those rows first"
            )
        if not qi.numeric:
            check_null_mapping(qi.column, qi.tree, nulls, empty)  # as the search reads it
        if nulls:
            self.with_nulls.add(j)
        if qi.numeric:
            bad = db.execute(
                self.conn,
                f"SELECT CAST({column} AS VARCHAR) FROM {self.source} WHERE {db.not_a_number(column)} LIMIT 1",
            ).first()
            if bad is not None:
                raise DataError(
                    f"quasi-identifier {qi.column!r} has no hierarchy, so Mondrian cuts it at its "
                    f"median as a number, but it holds {bad[0]!r}; give it a hierarchy (a categorical "
                    "QI is split along it) or fix the value"
                )

    def _check_in_hierarchy(self, qi: MondrianQI, mapping: str) -> None:
        """Every value of a categorical QI is a leaf of its hierarchy: an anti-join with the stored (value, code)
        table `mapping`, which hashes (a NOT IN list of the leaves bound as parameters took 3.1 s of Mondrian's
        4.6 on 200k hospital rows, whose birth dates' hierarchy has 34,400 leaves)."""
        text = f"CAST(t.{self.db.q(qi.column)} AS VARCHAR)"
        stray = self.db.execute(
            self.conn,
            f"SELECT {text} FROM {self.source} t LEFT JOIN {mapping} h ON h.value = {text} "
            f"WHERE {text} IS NOT NULL AND h.value IS NULL LIMIT 1",
        ).first()
        if stray is not None:
            raise DataError(
                f"value {stray[0]!r} of {qi.column!r} is not in its hierarchy; add it to the hierarchy "
                "file (or fix the value)"
            )

    def _check_whole_table(self) -> None:
        view = self._view(
            "SELECT part, 0 AS child, 0 AS dim, " + self._sensitive("w") + f"COUNT(*) AS cnt "
            f"FROM {self.work} w GROUP BY part{self._sensitive_group('w')}"
        )
        params: dict[str, object] = {}
        bad = self.db.execute(
            self.conn,
            f"WITH fs AS ({view.definition}) SELECT COUNT(*) FROM "
            f"({violating_classes_sql(view, self.criteria, 'all', params)}) v",
            params,
        ).scalar_one()
        self.scratch.statements += 1
        if bad:
            raise DataError(
                "the criteria do not hold even for the whole table as one class, so no partitioning "
                "can satisfy them; relax the criteria (a smaller k or l, a larger t)"
            )

    # --- rounds -----------------------------------------------------------
    def run(self) -> MondrianResult:
        for rounds in range(1, MAX_ROUNDS + 1):
            self._candidates()
            open_parts = self.open_parts
            split = self._choose()
            self.progress("Mondrian: rounds", rounds, None)
            if split < open_parts:  # some partition is final (none is, in the early rounds: no pass for nothing)
                self._close(f"WHERE NOT EXISTS (SELECT 1 FROM {self.choice} c WHERE c.part = w.part)")
            if not split:
                break
            self._apply()
        else:  # out of rounds: the partitions made so far are final (each satisfies the criteria)
            self._close("")
        partitions, smallest, largest = self.db.execute(
            self.conn,
            (f"SELECT COUNT(*), MIN(n), MAX(n) FROM (SELECT COUNT(*) AS n FROM {self.done} e GROUP BY part) s"),
        ).one()
        return MondrianResult(
            partitions=int(partitions),
            rounds=rounds,
            statements=self.statements,
            smallest=int(smallest),
            largest=int(largest),
        )

    def _sensitive(self, alias: str) -> str:
        return "".join(f"{alias}.s{i}, " for i in range(len(self.sensitive)))

    def _sensitive_group(self, alias: str) -> str:
        return "".join(f", {alias}.s{i}" for i in range(len(self.sensitive)))

    def _view(self, definition: str) -> FrequencySetView:
        reference = f"{self.whole} AS whole_table" if self.sensitive else None
        return FrequencySetView(
            table="fs",
            class_columns=["part", "dim", "child"],
            count_column="cnt",
            sensitive_columns={c: f"s{i}" for i, c in enumerate(self.sensitive)},
            definition=definition,
            reference=reference,
        )

    def _shift(self, j: int, level: str) -> str:
        """How far to shift QI j's path codes right to reach their node at `level` (SQL, a level)."""
        shifts = " ".join(f"WHEN {lv} THEN {shift}" for lv, shift in enumerate(self.codes[j].shifts))
        return f"CASE {level} {shifts} END"

    def _node(self, j: int, code: str, level: str) -> str:
        """The code of the node at `level` (SQL, a level of QI j's hierarchy) above the value of path `code`."""
        return f"({code} >> {self._shift(j, level)})"

    def _child(self, j: int, qi: MondrianQI, suffix: str = "") -> str:
        """The part of row `w` under a cut of QI j (an integer), the cut's columns in `c`: cut (the median), n (the
        partition's rows) and shift (a categorical QI's: to its children's level), each named with `suffix`
        (c.cut{suffix}) except n."""
        if qi.numeric:
            if self.relaxed:  # one cut per partition and row: ranked within the partition
                return (
                    f"CASE WHEN 2 * ROW_NUMBER() OVER (PARTITION BY w.part ORDER BY w.v{j}, w.rid) <= c.n + 1 "
                    "THEN 0 ELSE 1 END"
                )
            return f"CASE WHEN w.v{j} <= c.cut{suffix} THEN 0 ELSE 1 END"
        return f"(w.c{j} >> c.shift{suffix})"

    def _piece(self, dims: list[int]) -> str:
        """The part of the row under the cut of candidate `c` on whichever QI of `dims` it cuts."""
        cases = " ".join(f"WHEN {j} THEN {self._child(j, self.qis[j])}" for j in dims)
        return f"CASE c.dim {cases} END"

    def _candidates(self) -> None:
        """(part, dim, width, cut, n, shift): the cut each open partition would make on each QI that can be cut,
        from one grouping of the open rows by partition. Path codes in code order have their ancestors in order
        too, so a partition's rows fall under two children or more exactly when its smallest and largest codes do:
        no distinct count, and no level per row."""
        figures = []
        for j, qi in enumerate(self.qis):
            # relaxed cuts split the sorted rows by rank: no median (an ordered aggregate, most of this statement)
            median = self.db.lower_median(f"w.v{j}") if not self.relaxed else "CAST(NULL AS DOUBLE PRECISION)"
            median = f", {median} AS cut{j}" if qi.numeric else ""
            figures.append(f"MIN(w.{self._qi_column(j)}) AS low{j}, MAX(w.{self._qi_column(j)}) AS high{j}{median}")
        figures_ref = self.scratch.ref("figures")
        self._create(
            figures_ref, f"SELECT w.part, COUNT(*) AS n, {', '.join(figures)} FROM {self.work} w GROUP BY w.part"
        )
        parts = []
        for j, qi in enumerate(self.qis):
            if qi.numeric:
                span = repr(self.spans[j])
                parts.append(
                    f"SELECT part, {j} AS dim, CASE WHEN {span} > 0 THEN (high{j} - low{j}) / {span} ELSE 0 END "
                    f"AS width, cut{j} AS cut, n, 0 AS shift FROM {figures_ref} WHERE high{j} > low{j}"
                    # strict: the cut must leave rows above it (the lower median can be the largest value)
                    + ("" if self.relaxed else f" AND high{j} > cut{j}")
                )
                continue
            level, kids = f"p.lev{j}", f"p.lev{j} - 1"
            parts.append(
                f"SELECT g.part, {j} AS dim, CAST(nd.leaves AS DOUBLE PRECISION) / {len(qi.tree.values)} "
                f"AS width, CAST(NULL AS DOUBLE PRECISION) AS cut, g.n, {self._shift(j, kids)} AS shift "
                f"FROM {figures_ref} g JOIN {self.parts} p ON p.part = g.part JOIN {self._nodes_ref(j)} nd "
                f"ON nd.level = {level} AND nd.node = {self._node(j, f'g.low{j}', level)} WHERE {level} > 0 AND "
                f"{self._node(j, f'g.low{j}', kids)} < {self._node(j, f'g.high{j}', kids)}"
            )
        self._create(self.candidates, " UNION ALL ".join(parts))
        # the QIs some partition can still cut (late rounds: the numeric ones alone): the only ones a round counts
        cut = self.db.execute(self.conn, f"SELECT DISTINCT dim FROM {self.candidates}").scalars().all()
        self.cuttable = sorted(int(j) for j in cut) or [0]  # none: any one (its join is empty)
        self.scratch.statements += 1
        self.scratch.drop(figures_ref)

    def _qi_column(self, j: int) -> str:
        return f"v{j}" if self.qis[j].numeric else f"c{j}"

    @property
    def candidates(self) -> str:
        return self.scratch.ref("cand")

    @property
    def choice(self) -> str:
        return self.scratch.ref("choice")

    @property
    def pieces(self) -> str:
        return self.scratch.ref("pieces")

    def _choose(self) -> int:
        """Each open partition's cut: the widest QI whose parts all satisfy the criteria, and the new partitions
        its parts become (numbered after every partition so far); returns how many partitions split."""
        cells, definition = self._counted_parts()
        view = self._view(definition)
        params: dict[str, object] = {}
        bad = violating_classes_sql(view, self.criteria, "cut", params)
        allowed = (
            f"SELECT c.part, c.dim, c.width FROM {self.candidates} c WHERE NOT EXISTS (SELECT 1 FROM bad b "
            "WHERE b.part = c.part AND b.dim = c.dim)"
        )
        best = (
            "SELECT part, dim FROM (SELECT part, dim, ROW_NUMBER() OVER (PARTITION BY part ORDER BY width DESC, "
            f"dim) AS rank FROM ({allowed}) a) ranked WHERE rank = 1"
        )
        chosen = (
            f"SELECT DISTINCT f.part, f.dim, f.child FROM fs f JOIN ({best}) x ON x.part = f.part AND x.dim = f.dim"
        )
        numbered = (
            f"CAST((SELECT MAX(part) FROM {self.parts}) + ROW_NUMBER() OVER (ORDER BY g.part, g.child) "
            f"AS {self.ids}) AS new_part"
        )
        self._create(
            self.pieces,
            f"WITH {cells}fs AS MATERIALIZED ({view.definition}), bad AS ({bad}) "
            "SELECT g.part, g.dim, "
            f"g.child, c.cut, c.n, c.shift, {numbered} FROM ({chosen}) g "
            f"JOIN {self.candidates} c ON c.part = g.part AND c.dim = g.dim",
            params,
        )
        self._create(
            self.choice,
            f"SELECT part, dim, cut, n, shift, MIN(new_part) AS first FROM {self.pieces} "
            "GROUP BY part, dim, cut, n, shift",
        )
        split, self.open_parts = self.db.execute(
            self.conn, f"SELECT (SELECT COUNT(*) FROM {self.choice}), (SELECT COUNT(*) FROM {self.pieces})"
        ).one()
        self.scratch.statements += 1
        return int(split)

    def _counted_parts(self) -> tuple[str, str]:
        """The rows of every part of every candidate cut (part, dim, child, sensitive values, cnt): the SELECT, and
        the CTE it reads, if any ("name AS (...), ").

        With few QIs to cut (late rounds: the numeric ones), one join of the rows with the candidates per QI.
        With WIDE_CUTS or more, one join of the rows with all their partition's cuts counts the rows by the part
        each cut would put them in (`_cells`), and each QI's parts are sums of those. Measured (1M hospital rows on
        DuckDB, 200k on PostgreSQL): the one join took the early rounds 40 -> 29 ms but the late ones, with two
        QIs to cut, 55 -> 85 ms on DuckDB, and 3.1 -> 1.8 s of all rounds on PostgreSQL; both ways as here: DuckDB
        as before within noise, PostgreSQL 1.7 s (the whole partitioning 10.3 -> 9.3 s)."""
        sensitive = "".join(f", s{i}" for i in range(len(self.sensitive)))
        if len(self.cuttable) >= WIDE_CUTS:
            return f"cells AS MATERIALIZED ({self._cells()}), ", " UNION ALL ".join(
                f"SELECT part, {j} AS dim, k{j} AS child{sensitive}, {count_sum('cnt')} AS cnt FROM cells "
                f"WHERE k{j} IS NOT NULL GROUP BY part, k{j}{sensitive}"
                for j in self.cuttable
            )
        rows = " UNION ALL ".join(
            f"SELECT w.part, c.dim, {self._child(j, self.qis[j])} AS child, {self._sensitive('w')}w.rid "
            f"FROM {self.work} w JOIN {self.candidates} c ON c.part = w.part AND c.dim = {j}"
            for j in self.cuttable
        )
        return "", (
            f"SELECT part, dim, child{sensitive}, COUNT(*) AS cnt FROM ({rows}) r GROUP BY part, dim, child{sensitive}"
        )

    def _cells(self) -> str:
        """The open rows counted by partition, the part every candidate cut would put them in (k<j>: NULL where the
        partition has no cut of QI j) and the sensitive values."""
        pivot = ", ".join(
            f"MAX(CASE WHEN dim = {j} THEN {value} END) AS {name}{j}"
            for j in self.cuttable
            for name, value in (("has", "1"), ("cut", "cut"), ("shift", "shift"))
        )
        cuts = f"SELECT part, MAX(n) AS n, {pivot} FROM {self.candidates} GROUP BY part"
        children = ", ".join(
            f"CASE WHEN c.has{j} = 1 THEN {self._child(j, self.qis[j], str(j))} END AS k{j}" for j in self.cuttable
        )
        keys = ", ".join([f"k{j}" for j in self.cuttable] + [f"s{i}" for i in range(len(self.sensitive))])
        return (
            f"SELECT part, {keys}, COUNT(*) AS cnt FROM (SELECT {self._sensitive('w')}w.part, {children} "
            f"FROM {self.work} w JOIN ({cuts}) c ON c.part = w.part) r GROUP BY part, {keys}"
        )

    def _close(self, where: str) -> None:
        """Rows of the work table (`where` says which) to the done table: their partitions are final."""
        columns = ", ".join(self._work_columns())
        self.db.execute(self.conn, f"INSERT INTO {self.done} ({columns}) SELECT {columns} FROM {self.work} w {where}")
        self.scratch.statements += 1

    def _apply(self) -> None:
        """The rows of split partitions to their new partitions, which replace the split ones."""

        def moved(part: str) -> str:
            return ", ".join(f"{part} AS part" if c == "part" else f"w.{c}" for c in self._work_columns())

        def cut_by(dims: list[int]) -> str:  # each row's piece (a window for relaxed cuts, so computed first)
            return (
                f"(SELECT w.*, {self._piece(dims)} AS child, c.first FROM {self.work} w JOIN {self.choice} c "
                f"ON c.part = w.part AND c.dim IN ({', '.join(map(str, dims))})) w"
            )

        # a numeric cut's two parts were numbered in a row (left, right), so its rows need no look-up of their
        # new partition; a categorical cut's parts are its children present (1M rows on PostgreSQL: a join less
        # in every round that cuts numbers alone)
        branches = [f"SELECT {moved('w.first + w.child')} FROM {cut_by(self.numeric)}"] if self.numeric else []
        if self.categorical:
            branches.append(
                f"SELECT {moved('n.new_part')} FROM {cut_by(self.categorical)} JOIN {self.pieces} n "
                "ON n.part = w.part AND n.child = w.child"
            )
        order = ""
        if self.open_parts >= SORT_GROWTH * self.sorted_parts:
            order, self.sorted_parts = " ORDER BY part", self.open_parts
        self._create(self.work, " UNION ALL ".join(branches) + order)
        levels = ", ".join(
            f"p.lev{j} - CASE WHEN n.dim = {j} THEN {0 if qi.numeric else 1} ELSE 0 END AS lev{j}"
            for j, qi in enumerate(self.qis)
        )
        same = ", ".join(f"lev{j}" for j in range(len(self.qis)))
        self._create(
            self.parts,
            f"SELECT part, {same} FROM {self.parts} WHERE part NOT IN (SELECT part FROM "
            f"{self.choice}) UNION ALL SELECT n.new_part, {levels} FROM {self.pieces} n "
            f"JOIN {self.parts} p ON p.part = n.part",
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
        labels = self.scratch.ref("labels")
        self._create(labels, self._labels(mean))
        return labels

    def _labels(self, mean: bool) -> str:
        figures = [
            f"MIN(e.v{j}) AS low{j}, MAX(e.v{j}) AS high{j}, AVG(CAST(e.v{j} AS DOUBLE PRECISION)) AS mean{j}"
            for j in self.numeric
        ]  # (PostgreSQL's AVG of integers is a NUMERIC, printed with 16 decimals)
        figures += [f"MIN(e.c{j}) AS low{j}" for j in self.categorical]  # any row's code has the partition's node
        grouped = f"SELECT e.part, {', '.join(figures)} FROM {self.done} e GROUP BY e.part"
        published = [
            self.published_qi(j, qi, mean, j in self.with_nulls) + f" AS q{j}" for j, qi in enumerate(self.qis)
        ]
        nodes = " ".join(
            f"JOIN {self._nodes_ref(j)} n{j} ON n{j}.level = p.lev{j} AND n{j}.node = "
            f"{self._node(j, f'g.low{j}', f'p.lev{j}')}"
            for j in self.categorical
        )
        return (
            f"SELECT g.part, {', '.join(published)} FROM ({grouped}) g JOIN {self.parts} p ON p.part = g.part {nodes}"
        )

    @staticmethod
    def published_qi(j: int, qi: MondrianQI, mean: bool, nulls: bool = False) -> str:
        """The published text of QI j from its partition's figures (`g`: low, high, mean, node). A partition of
        NULLs only, at level 0 of a hierarchy that maps them (`nulls`: the column has some, so no empty string),
        publishes NULL, as a generalization's level 0 does."""
        if not qi.numeric:
            return (
                f"CASE WHEN p.lev{j} = 0 AND n{j}.label = '' THEN NULL ELSE n{j}.label END" if nulls else f"n{j}.label"
            )
        if mean:
            return f"CAST(g.mean{j} AS VARCHAR)"
        low, high = _number_text(f"g.low{j}"), _number_text(f"g.high{j}")
        return f"CASE WHEN g.low{j} = g.high{j} THEN {low} ELSE '[' || {low} || '-' || {high} || ']' END"


def _integer(bits: int) -> str:
    """The narrowest SQL integer type that holds non-negative numbers of `bits` bits."""
    return "INTEGER" if bits <= 31 else "BIGINT"


def _number_text(value: str) -> str:
    """A number as text, whole numbers without a decimal point (so an integer column reads [30-39])."""
    return (
        f"CASE WHEN {value} = FLOOR({value}) THEN CAST(CAST({value} AS BIGINT) AS VARCHAR) "
        f"ELSE CAST({value} AS VARCHAR) END"
    )


def published_rows(
    db: Database, mondrian: Mondrian, select_other: Callable[[str, str], str | None], mean: bool
) -> tuple[str, list[str]]:
    """The SELECT of the published table (every source column in order, QIs as their partition's range (or mean)
    or hierarchy node, the others as `select_other(column, its value in SQL)` says, None: not published) and the
    published names. Stores the partitions' labels first (`Mondrian.store_labels`), which the SELECT reads."""
    by_column = {db.name_key(qi.column): j for j, qi in enumerate(mondrian.qis)}
    select, published = [], []
    for k, column in enumerate(mondrian.columns):
        value: str | None = f"g.q{by_column[db.name_key(column)]}" if db.name_key(column) in by_column else None
        if value is None:
            value = select_other(column, f"t.u{k}")
            if value is None:
                continue
        select.append(f"{value} AS {db.q(column)}")
        published.append(column)
    return (
        f"SELECT {', '.join(select)} FROM {mondrian.rows} t JOIN {mondrian.done} w ON w.rid = t.rid "
        f"JOIN {mondrian.store_labels(mean)} g ON g.part = w.part"
    ), published
