"""Multidimensional anonymization (Mondrian, LeFevre, DeWitt, Ramakrishnan 2006), a depth per round.

The table is copied once, its rows numbered, and a narrow work table holds
what the rounds read (the row number, the partition, each numeric QI as a
number, each categorical QI's label at every level of its hierarchy, the
sensitive columns); the other columns join back at publication. Every round considers all the
partitions still open at once:
1. candidates: for each partition and QI, the cut Mondrian would make: a
   numeric QI at its median (the ceil(n/2)-th smallest value: left <= median,
   right above; relaxed Mondrian splits the sorted rows in two halves instead,
   so equal values may go either way), a categorical QI into the children of
   the partition's node (its rows' labels one level down); each with the QI's
   normalized width (numeric: the partition's range over the table's;
   categorical: the leaves under the node over all leaves);
2. the criteria's SQL over the candidate parts (classes: partition, QI,
   part): a cut is allowed only when every part satisfies every criterion;
   each partition takes its allowed cut of the widest QI (ties: QI order),
   and one without any is final;
3. the rows move to their new partitions.
So a table needs about log2(n / k) rounds of four statements, however many
partitions each has. Criteria monotone under splitting's reverse (a union of
parts that satisfy them satisfies them: k-anonymity, the l-diversity family,
t-closeness against the whole table) plug in unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from sqlalchemy.engine import Connection

from .backends import Database
from .criteria import Criterion, FrequencySetView
from .errors import DataError
from .frequency import violating_classes_sql
from .hierarchies import Hierarchy
from .scratch import Scratch

MAX_ROUNDS = 200


@dataclass
class MondrianQI:
    column: str
    hierarchy: Hierarchy | None  # None: numeric, cut at the median

    @property
    def numeric(self) -> bool:
        return self.hierarchy is None

    @property
    def height(self) -> int:
        return 0 if self.hierarchy is None else self.hierarchy.height


@dataclass
class MondrianResult:
    partitions: int
    rounds: int
    statements: int
    smallest: int
    largest: int


@dataclass
class MondrianReport:
    """What `partition` published: the table, its partitions, its audit and first rows."""

    output: str
    rows: int
    result: MondrianResult
    audit: Any
    preview: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        r = self.result
        return {"method": "mondrian", "output": self.output, "rows": self.rows, "partitions": r.partitions,
                "rounds": r.rounds, "statements": r.statements, "smallest_partition": r.smallest,
                "largest_partition": r.largest, "average_partition": self.rows / max(1, r.partitions),
                "audit": self.audit.to_dict(),
                "preview": [{k: v if v is None or isinstance(v, (int, float, str)) else str(v)
                             for k, v in row.items()} for row in self.preview]}


class Mondrian:
    """The partitioning of one table, built in scratch tables of the connection's session."""

    def __init__(self, db: Database, conn: Connection, source: str, columns: list[str], qis: list[MondrianQI],
                 sensitive: list[str], criteria: list[Criterion], prefix: str, relaxed: bool = False,
                 progress: Callable[[str, int, int | None], None] = lambda *_: None):
        self.db, self.conn, self.source, self.columns, self.qis = db, conn, source, columns, qis
        self.sensitive, self.criteria, self.relaxed = sensitive, criteria, relaxed
        self.progress, self.scratch = progress, Scratch(db, conn, prefix)
        self.work, self.parts, self.rows, self.done, self.whole = (
            self.scratch.ref(t) for t in ("work", "parts", "rows", "done", "whole"))
        self.spans: dict[int, float] = {}

    # --- setup ----------------------------------------------------------
    def _create(self, ref: str, select: str, params: dict[str, Any] | None = None) -> None:
        """Create (or replace) the scratch table `ref` from `select`, which may read the table it replaces."""
        self.scratch.replace(ref, select, params)

    @property
    def statements(self) -> int:
        return self.scratch.statements

    def drop(self) -> None:
        self.scratch.drop_all()

    def prepare(self) -> int:
        """The work table (checked: numeric QIs are numbers, categorical values are in their hierarchies, no
        NULL QI), the leaf counts of every hierarchy node, and one partition holding every row."""
        db, q = self.db, self.db.q
        labels, joins = [], []
        for j, qi in enumerate(self.qis):
            self._check_values(j, qi)
            if qi.numeric:
                labels.append(f"CAST(t.{q(qi.column)} AS DOUBLE PRECISION) AS v{j}")
                continue
            mapping = self._hierarchy_table(j, qi.hierarchy)
            joins.append(f"JOIN {mapping} h{j} ON h{j}.value = CAST(t.{q(qi.column)} AS VARCHAR)")
            labels += [f"h{j}.l{level} AS c{j}_{level}" for level in range(qi.height + 1)]
        # the rows as they are, numbered, apart: each round rewrites only the narrow work table (rid, partition,
        # QI codes, the sensitive columns the criteria read; 1M hospital rows: 0.8 s of 2 s a round otherwise)
        originals = ", ".join(f"t.{q(c)}" for c in self.columns)
        self._create(self.rows, f"SELECT ROW_NUMBER() OVER () AS rid, {originals} FROM {self.source} t")
        sensitive = "".join(f", t.{q(c)}" for c in self.sensitive)
        self._create(self.work, f"SELECT t.rid, 1 AS part, {', '.join(labels)}{sensitive} FROM {self.rows} t "
                                f"{' '.join(joins)}")
        levels = ", ".join(f"{qi.height} AS lev{j}" for j, qi in enumerate(self.qis))
        self._create(self.parts, f"SELECT 1 AS part, TRUE AS open, {levels}")
        for j, qi in enumerate(self.qis):  # the leaves under each node of each hierarchy, by level and label
            if not qi.numeric:
                h = self.scratch.ref(f"h{j}")
                self._create(self._leaves_ref(j),
                             " UNION ALL ".join(f"SELECT {lv} AS level, l{lv} AS label, COUNT(DISTINCT value) AS n "
                                                f"FROM {h} GROUP BY l{lv}" for lv in range(qi.height + 1)))
        # rows of closed partitions leave the work table for `done`: later rounds read only open partitions
        self._create(self.done, f"SELECT * FROM {self.work} w WHERE 1 = 0")
        numeric = [j for j, qi in enumerate(self.qis) if qi.numeric]
        if numeric:  # each numeric QI's range over the whole table, what widths are normalized by
            spans = db.execute(self.conn, "SELECT " + ", ".join(f"MAX(v{j}) - MIN(v{j})" for j in numeric)
                               + f" FROM {self.work}").one()
            self.spans = {j: float(span or 0) for j, span in zip(numeric, spans)}
        if self.sensitive:  # the whole table's distribution of the sensitive values (t-closeness)
            self._create(self.whole, f"SELECT {', '.join(f'{q(c)} AS s{i}' for i, c in enumerate(self.sensitive))}, "
                                     f"COUNT(*) AS cnt FROM {self.work} GROUP BY "
                                     f"{', '.join(q(c) for c in self.sensitive)}")
        rows = int(db.execute(self.conn, f"SELECT COUNT(*) FROM {self.work}").scalar_one())
        if rows == 0:
            raise DataError("the source table is empty; there is nothing to anonymize")
        self._check_whole_table()
        return rows

    def _leaves_ref(self, j: int) -> str:
        return self.scratch.ref(f"leaves{j}")

    def _hierarchy_table(self, j: int, hierarchy: Hierarchy) -> str:
        """(value, l0..lh) of a hierarchy as a scratch table, and the leaves under each node, per level."""
        ref = self.scratch.ref(f"h{j}")
        names = [("value", "VARCHAR")] + [(f"l{level}", "VARCHAR") for level in range(hierarchy.height + 1)]
        self.scratch.create(ref, "SELECT " + ", ".join(f"CAST(NULL AS {t}) AS {self.db.q(n)}" for n, t in names)
                            + " LIMIT 0")
        self.db.insert_rows(self.conn, ref, [n for n, _ in names], [(p[0], *p) for p in hierarchy.paths])
        self.scratch.statements += 1
        return ref

    def _check_values(self, j: int, qi: MondrianQI) -> None:
        db, column = self.db, self.db.q(qi.column)
        nulls = db.execute(self.conn, f"SELECT COUNT(*) FROM {self.source} WHERE {column} IS NULL").scalar_one()
        if nulls:
            raise DataError(f"quasi-identifier {qi.column!r} is NULL in {nulls} row(s); Mondrian places every "
                            "row in a partition by its values: fill them in or remove those rows first")
        if qi.numeric:
            bad = db.execute(self.conn, f"SELECT CAST({column} AS VARCHAR) FROM {self.source} WHERE "
                                        f"{db.not_a_number(column)} LIMIT 1").first()
            if bad is not None:
                raise DataError(f"quasi-identifier {qi.column!r} has no hierarchy, so Mondrian cuts it at its "
                                f"median as a number, but it holds {bad[0]!r}; give it a hierarchy (a categorical "
                                "QI is split along it) or fix the value")
            return
        values = sorted(qi.hierarchy.values)
        names = {f"hv{j}_{i}": v for i, v in enumerate(values)}
        stray = db.execute(self.conn, (
            f"SELECT CAST({column} AS VARCHAR) FROM {self.source} WHERE CAST({column} AS VARCHAR) NOT IN "
            f"({', '.join(':' + n for n in names)}) LIMIT 1"), names).first()
        if stray is not None:
            raise DataError(f"value {stray[0]!r} of {qi.column!r} is not in its hierarchy; add it to the hierarchy "
                            "file (or fix the value)")

    def _check_whole_table(self) -> None:
        view = self._view("SELECT part, '' AS child, 0 AS dim, " + self._sensitive("w") + f"COUNT(*) AS cnt "
                          f"FROM {self.work} w GROUP BY part{self._sensitive_group('w')}")
        params: dict[str, object] = {}
        bad = self.db.execute(self.conn, f"WITH fs AS ({view.definition}) SELECT COUNT(*) FROM "
                                         f"({violating_classes_sql(view, self.criteria, 'all', params)}) v",
                              params).scalar_one()
        self.scratch.statements += 1
        if bad:
            raise DataError("the criteria do not hold even for the whole table as one class, so no partitioning "
                            "can satisfy them; relax the criteria (a smaller k or l, a larger t)")

    # --- rounds -----------------------------------------------------------
    def run(self) -> MondrianResult:
        rounds = 0
        while rounds < MAX_ROUNDS:
            rounds += 1
            self._candidates()
            split = self._choose()
            self.progress("Mondrian: rounds", rounds, None)
            if not split:
                break
            self._apply()
        partitions, smallest, largest = self.db.execute(self.conn, (
            f"SELECT COUNT(*), MIN(n), MAX(n) FROM (SELECT COUNT(*) AS n FROM {self.every_row} e GROUP BY part) s"
        )).one()
        return MondrianResult(int(partitions), rounds, self.statements, int(smallest), int(largest))

    def _sensitive(self, alias: str) -> str:
        return "".join(f"{alias}.{self.db.q(c)} AS s{i}, " for i, c in enumerate(self.sensitive))

    def _sensitive_group(self, alias: str) -> str:
        return "".join(f", {alias}.{self.db.q(c)}" for c in self.sensitive)

    def _view(self, definition: str) -> FrequencySetView:
        reference = f"{self.whole} AS whole_table" if self.sensitive else None
        return FrequencySetView("fs", ["part", "dim", "child"], "cnt",
                                {c: f"s{i}" for i, c in enumerate(self.sensitive)}, definition, reference)

    def _child(self, j: int, qi: MondrianQI, alias: str = "w") -> str:
        """The part of the row under a cut of QI j (text), the candidate's columns in `c`."""
        if qi.numeric:
            if self.relaxed:
                return (f"CASE WHEN 2 * ROW_NUMBER() OVER (PARTITION BY {alias}.part ORDER BY {alias}.v{j}, "
                        f"{alias}.rid) <= c.n + 1 THEN 'L' ELSE 'R' END")
            return f"CASE WHEN {alias}.v{j} <= c.cut THEN 'L' ELSE 'R' END"
        cases = " ".join(f"WHEN {level} THEN {alias}.c{j}_{level - 1}" for level in range(1, qi.height + 1))
        return f"CASE p.lev{j} {cases} END"

    def _candidates(self) -> None:
        """(part, dim, width, cut, n): the cut each open partition would make on each QI that can be cut."""
        parts = []
        for j, qi in enumerate(self.qis):
            if qi.numeric:
                span = repr(self.spans[j])
                median = self.db.lower_median(f"w.v{j}")
                parts.append(
                    f"SELECT w.part, {j} AS dim, CASE WHEN {span} > 0 THEN (MAX(w.v{j}) - MIN(w.v{j})) / {span} ELSE 0 "
                    f"END AS width, {median} AS cut, COUNT(*) AS n FROM {self.work} w JOIN {self.parts} p "
                    f"ON p.part = w.part WHERE p.open GROUP BY w.part HAVING MAX(w.v{j}) > MIN(w.v{j})"
                    # strict: the cut must leave rows above it (the lower median can be the largest value)
                    + ("" if self.relaxed else f" AND MAX(w.v{j}) > {median}"))
                continue
            node = " ".join(f"WHEN {lv} THEN w.c{j}_{lv}" for lv in range(qi.height + 1))
            kids = " ".join(f"WHEN {lv} THEN w.c{j}_{lv - 1}" for lv in range(1, qi.height + 1))
            grouped = (f"SELECT w.part, p.lev{j} AS lev, MAX(CASE p.lev{j} {node} END) AS node, "
                       f"COUNT(DISTINCT CASE p.lev{j} {kids} END) AS kids, COUNT(*) AS n FROM {self.work} w "
                       f"JOIN {self.parts} p ON p.part = w.part WHERE p.open AND p.lev{j} > 0 "
                       f"GROUP BY w.part, p.lev{j}")
            parts.append(
                f"SELECT g.part, {j} AS dim, CAST(lv.n AS DOUBLE PRECISION) / {len(qi.hierarchy.values)} AS width, "
                f"CAST(NULL AS DOUBLE PRECISION) AS cut, g.n FROM ({grouped}) g JOIN {self._leaves_ref(j)} lv "
                "ON lv.level = g.lev AND lv.label = g.node WHERE g.kids > 1")
        if not parts:
            parts = ["SELECT 0 AS part, 0 AS dim, 0.0 AS width, 0.0 AS cut, 0 AS n WHERE 1 = 0"]
        self._create(self.candidates, " UNION ALL ".join(parts))

    @property
    def candidates(self) -> str:
        return self.scratch.ref("cand")

    @property
    def choice(self) -> str:
        return self.scratch.ref("choice")

    def _choose(self) -> int:
        """Each open partition's cut: the widest QI whose parts all satisfy the criteria; returns how many
        partitions split (the others are closed)."""
        pieces = []
        for j, qi in enumerate(self.qis):
            pieces.append(
                f"SELECT w.part, c.dim, {self._child(j, qi)} AS child, {self._sensitive('w')}w.rid FROM {self.work} w "
                f"JOIN {self.parts} p ON p.part = w.part JOIN {self.candidates} c ON c.part = w.part AND c.dim = {j}")
        rows = " UNION ALL ".join(pieces)
        sensitive = "".join(f", s{i}" for i in range(len(self.sensitive)))
        view = self._view(f"SELECT part, dim, child{sensitive}, COUNT(*) AS cnt FROM ({rows}) r "
                          f"GROUP BY part, dim, child{sensitive}")
        params: dict[str, object] = {}
        bad = violating_classes_sql(view, self.criteria, "cut", params)
        allowed = (f"SELECT c.part, c.dim, c.width FROM {self.candidates} c WHERE NOT EXISTS (SELECT 1 FROM bad b "
                   "WHERE b.part = c.part AND b.dim = c.dim)")
        best = ("SELECT part, dim FROM (SELECT part, dim, ROW_NUMBER() OVER (PARTITION BY part ORDER BY width DESC, "
                f"dim) AS rank FROM ({allowed}) a) ranked WHERE rank = 1")
        self._create(self.choice, f"WITH fs AS MATERIALIZED ({view.definition}), bad AS ({bad}) "
                                  f"SELECT x.part, x.dim, c.cut, c.n FROM ({best}) x JOIN {self.candidates} c "
                                  "ON c.part = x.part AND c.dim = x.dim", params)
        return int(self.db.execute(self.conn, f"SELECT COUNT(*) FROM {self.choice}").scalar_one())

    def _apply(self) -> None:
        """Rows to their new partitions; partitions without a cut are closed. New partitions are numbered over
        the (partition, part) pairs, a table of partitions, not of rows: the rows only join it (a sort of the
        rows to number them ran out of a 1 GB memory limit at 5M rows)."""
        child = " ".join(f"WHEN {j} THEN {self._child(j, qi)}" for j, qi in enumerate(self.qis))
        piece = f"COALESCE(CASE c.dim {child} END, '')"
        # each row's piece (a window for relaxed cuts, so computed in the select list, then grouped or joined)
        rows = (f"(SELECT w.*, {piece} AS piece, c.dim AS cut_dim FROM {self.work} w JOIN {self.parts} p "
                f"ON p.part = w.part LEFT JOIN {self.choice} c ON c.part = w.part) w")
        pieces = self.scratch.ref("pieces")
        # new ids follow every id used so far: closed partitions keep theirs (their rows are in `done`)
        self._create(pieces, f"SELECT g.part, g.piece, g.cut_dim, (SELECT MAX(part) FROM {self.parts}) + "
                             "ROW_NUMBER() OVER (ORDER BY g.part, g.piece) AS new_part FROM (SELECT part, piece, "
                             f"MAX(cut_dim) AS cut_dim FROM {rows} GROUP BY part, piece) g")
        keep = ", ".join(f"w.{c}" for c in self._work_columns() if c != "part")
        moved = (f"SELECT n.new_part AS part, {keep} FROM {rows} JOIN {pieces} n ON n.part = w.part "
                 "AND n.piece = w.piece")
        self.db.execute(self.conn, f"INSERT INTO {self.done} {moved} WHERE n.cut_dim IS NULL")
        self._create(self.work, f"{moved} WHERE n.cut_dim IS NOT NULL")
        levels = ", ".join(f"p.lev{j} - CASE WHEN n.cut_dim = {j} THEN {0 if qi.numeric else 1} ELSE 0 END AS lev{j}"
                           for j, qi in enumerate(self.qis))
        same = ", ".join(f"lev{j}" for j in range(len(self.qis)))
        self._create(self.parts, f"SELECT part, open, {same} FROM {self.parts} WHERE part NOT IN (SELECT part FROM "
                                 f"{pieces}) UNION ALL SELECT n.new_part, p.open AND n.cut_dim IS NOT NULL, {levels} "
                                 f"FROM {pieces} n JOIN {self.parts} p ON p.part = n.part")
        self.scratch.drop(pieces)

    def _work_columns(self) -> list[str]:
        names = ["rid", "part"]
        for j, qi in enumerate(self.qis):
            names += [f"v{j}"] if qi.numeric else [f"c{j}_{lv}" for lv in range(qi.height + 1)]
        return names + [self.db.q(c) for c in self.sensitive]

    # --- output -------------------------------------------------------------
    def published_qi(self, j: int, qi: MondrianQI, mean: bool) -> str:
        """The SELECT expression of QI j in the published table (work rows `w`, partitions `p`, ranges `g`)."""
        if not qi.numeric:
            return f"CASE p.lev{j} " + " ".join(f"WHEN {lv} THEN w.c{j}_{lv}" for lv in range(qi.height + 1)) + " END"
        if mean:
            return f"CAST(g.mean{j} AS VARCHAR)"
        low, high = _number_text(f"g.low{j}"), _number_text(f"g.high{j}")
        return f"CASE WHEN g.low{j} = g.high{j} THEN {low} ELSE '[' || {low} || '-' || {high} || ']' END"

    def ranges(self) -> str:
        """Per partition: each numeric QI's smallest, largest and mean value."""
        cols = ["part"] + [f"MIN(v{j}) AS low{j}, MAX(v{j}) AS high{j}, AVG(v{j}) AS mean{j}"
                           for j, qi in enumerate(self.qis) if qi.numeric]
        return f"(SELECT {', '.join(cols)} FROM {self.every_row} e GROUP BY part)"

    @property
    def every_row(self) -> str:
        """The rows of open and closed partitions."""
        return f"(SELECT * FROM {self.work} UNION ALL SELECT * FROM {self.done})"


def _number_text(value: str) -> str:
    """A number as text, whole numbers without a decimal point (so an integer column reads [30-39])."""
    return (f"CASE WHEN {value} = FLOOR({value}) THEN CAST(CAST({value} AS BIGINT) AS VARCHAR) "
            f"ELSE CAST({value} AS VARCHAR) END")


def publish(db: Database, conn: Connection, mondrian: Mondrian, final: str, select_other: Callable[[str], str | None],
            mean: bool, params: dict[str, object]) -> list[str]:
    """CREATE TABLE `final`: every source column in order, QIs as their partition's range (or mean) or
    hierarchy node, the others as `select_other` says (None: not published); returns the published names."""
    by_column = {db.name_key(qi.column): (j, qi) for j, qi in enumerate(mondrian.qis)}
    select, published = [], []
    for column in mondrian.columns:
        if db.name_key(column) in by_column:
            value = mondrian.published_qi(*by_column[db.name_key(column)], mean)
        else:
            value = select_other(column)
            if value is None:
                continue
        select.append(f"{value} AS {db.q(column)}")
        published.append(column)
    db.execute(conn, f"CREATE TABLE {final} AS SELECT {', '.join(select)} FROM {mondrian.rows} t "
                     f"JOIN {mondrian.every_row} w ON w.rid = t.rid JOIN {mondrian.parts} p ON p.part = w.part "
                     f"JOIN {mondrian.ranges()} g ON g.part = w.part", params)
    return published
