"""Frequency sets: (class codes..., cnt) for one node, built by SQL.

A frequency set is defined either by one GROUP BY over the source joined with
the dimension tables (a base scan), or by rolling up a more specific,
materialized frequency set: map each code to its parent code (through the
dimension, StarSchema.parent_code) and sum the counts. A set is evaluated
straight from its definition (a CTE); only sets that later roll-ups need (the cube, super-roots,
failing nodes) are materialized as session-scoped scratch tables, and registered in `frequency_sets`.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.engine import Connection

from ..backends import Database
from ..criteria import Criterion
from ..model.view import FrequencySetView, SqlFragment
from ..store import Store, runs
from .star import StarSchema

COUNT = "cnt"
CANDIDATE = "candidate"  # CTE names of sets evaluated without a table
BATCH = 64  # frequency sets evaluated per statement


@dataclass(kw_only=True)
class FrequencySet:
    label: str
    levels: dict[int, int]  # attr -> level
    definition: str  # the SELECT that computes it
    origin: str  # base | rollup
    derived_from: str | None
    node_id: int | None = None
    ref: str | None = None  # quoted table reference once materialized
    rows: int = -1  # known once evaluated or materialized


def class_column(attr: int) -> str:
    return f"a{attr}"


class FrequencySets:
    """Defines, evaluates, materializes, registers and drops one run's frequency sets."""

    def __init__(
        self, *, db: Database, conn: Connection, star: StarSchema, schema: str, run_id: int, use_cube: bool = True
    ):
        """`schema`: the store's (where the sets are registered)."""
        self.db, self.conn, self.star, self.run_id, self.use_cube = db, conn, star, run_id, use_cube
        self.store = Store(db, schema)
        self.base_scans = 0
        self.rollups = 0
        self._cube: FrequencySet | None = None
        self._registry: list[tuple[object, ...]] = []  # entries not yet written
        self._dropped_since_flush: list[str] = []
        self._live: dict[str, FrequencySet] = {}

    # --- defining -------------------------------------------------------
    def base(self, levels: dict[int, int], label: str, node_id: int | None = None) -> FrequencySet:
        """A frequency set with no computed specialization to roll up from.

        With the cube (the default), the table is scanned once for the frequency
        set of all QIs at level 0, and every base set is rolled up from it;
        without, each base set is its own scan of the table.
        """
        if not self.use_cube:
            return self.from_table(levels, label, node_id)
        if self._cube is None:
            self._cube = self.materialize(self.from_table({d.attr: 0 for d in self.star.dimensions}, "cube"))
        return self.rollup(self._cube, levels, label, node_id)

    def from_table(self, levels: dict[int, int], label: str, node_id: int | None = None) -> FrequencySet:
        """GROUP BY over the source joined with the dimension tables of `levels`' attributes."""
        attrs = sorted(levels)
        dims = [self.star.dimensions[a] for a in attrs]
        joins = " ".join(f"JOIN {d.table} d{d.attr} ON {d.key(self.db, 't')} = d{d.attr}.v" for d in dims)
        select = [f"d{a}.c{levels[a]} AS {class_column(a)}" for a in attrs] + self.star.sensitive_select("t")
        group = [f"d{a}.c{levels[a]}" for a in attrs] + [f"t.{self.db.q(c)}" for c in self.star.sensitive]
        sql = (
            f"SELECT {', '.join(select)}, COUNT(*) AS {COUNT} FROM {self.star.source} t {joins} "
            f"GROUP BY {', '.join(group)}"
        )
        return FrequencySet(
            label=label, levels=dict(levels), definition=sql, origin="base", derived_from=None, node_id=node_id
        )

    def rollup(
        self, child: FrequencySet, levels: dict[int, int], label: str, node_id: int | None = None
    ) -> FrequencySet:
        """Roll a materialized `child` up to `levels` (each level >= the child's; attributes may be dropped)."""
        assert child.ref is not None, "roll-ups read materialized frequency sets"
        mapped, joins = [], []
        for a in sorted(levels):
            code, join = f"f.{class_column(a)}", ""
            if levels[a] != child.levels[a]:
                code, join = self.star.parent_code(a, child.levels[a], levels[a], code)
            mapped.append(f"{code} AS {class_column(a)}")
            joins.append(join)
        columns = [class_column(a) for a in sorted(levels)] + list(self.star.sensitive_columns().values())
        mapped += [f"f.{s} AS {s}" for s in self.star.sensitive_columns().values()]
        sql = (
            f"SELECT {', '.join(columns)}, SUM({COUNT}) AS {COUNT} FROM "
            f"(SELECT {', '.join(mapped)}, f.{COUNT} AS {COUNT} FROM {child.ref} f {' '.join(joins)}) AS mapped "
            f"GROUP BY {', '.join(columns)}"
        )
        return FrequencySet(
            label=label, levels=dict(levels), definition=sql, origin="rollup", derived_from=child.label, node_id=node_id
        )

    # --- computing ------------------------------------------------------
    def _executed(self, fs: FrequencySet) -> None:
        if fs.origin == "base":
            self.base_scans += 1
        else:
            self.rollups += 1

    def materialize(self, fs: FrequencySet) -> FrequencySet:
        """Store the set as a table (for roll-ups) and register it."""
        name = f"fs_{self.run_id}_{fs.label}"
        fs.ref = self.db.create_scratch(self.conn, name, fs.definition)  # private to this session
        self._executed(fs)
        if fs.rows < 0:
            fs.rows = self.db.execute(self.conn, f"SELECT COUNT(*) FROM {fs.ref}").scalar_one()
        self._live[fs.label] = fs
        self._registry.append((fs.node_id, fs.label, name, fs.origin, fs.derived_from, fs.rows, False))
        return fs

    def violations(self, batch: list[FrequencySet], criteria: list[Criterion]) -> list[tuple[int, int]]:
        """(violating classes, tuples in them) of each set under all criteria; records the sets' sizes.

        The batch is evaluated in statements of at most BATCH sets.
        """
        answers = []
        for start in range(0, len(batch), BATCH):
            chunk = batch[start : start + BATCH]
            views = []
            for j, fs in enumerate(chunk):
                columns = [class_column(a) for a in sorted(fs.levels)]
                sensitive = self.star.sensitive_columns()
                if fs.ref is not None:
                    views.append(
                        FrequencySetView(
                            table=fs.ref, class_columns=columns, count_column=COUNT, sensitive_columns=sensitive
                        )
                    )
                else:
                    views.append(
                        FrequencySetView(
                            table=f"{CANDIDATE}_{j}",
                            class_columns=columns,
                            count_column=COUNT,
                            sensitive_columns=sensitive,
                            definition=fs.definition,
                        )
                    )
                    self._executed(fs)
            for fs, (rows, [result]) in zip(chunk, count_violations_batch(self.conn, views, [criteria])):
                fs.rows = rows
                answers.append(result)
        return answers

    # --- cleaning up ----------------------------------------------------
    def drop(self, fs: FrequencySet) -> None:
        if fs.label not in self._live or fs.ref is None:
            return
        self.db.drop_table(self.conn, fs.ref)
        del self._live[fs.label]
        self._dropped_since_flush.append(fs.label)

    def drop_all(self) -> None:
        for fs in list(self._live.values()):
            self.drop(fs)
        self._cube = None

    def flush_registry(self) -> None:
        """Write the registry entries gathered since the last flush (once per iteration)."""
        meta_conn = self.db.metadata_connection(self.conn)
        if self._registry:
            self.store.insert(meta_conn, runs.FREQUENCY_SETS, self.run_id, self._registry)
            self._registry = []
        if self._dropped_since_flush:
            self.store.call(meta_conn, runs.FREQUENCY_SETS_DROPPED, run=self.run_id, labels=self._dropped_since_flush)
            self._dropped_since_flush = []


def count_violations_batch(
    conn: Connection,
    views: list[FrequencySetView],
    criteria_sets: list[list[Criterion]],
    params: dict[str, object] | None = None,
) -> list[tuple[int, list[tuple[int, int]]]]:
    """For each view: its row count, and (violating classes, their tuples) per criteria set.

    A set's violators are the UNION of its criteria's violating classes. Every
    view and set is answered by one statement (views defined by a CTE are
    computed once each): per-statement overhead, not data, dominates small
    frequency sets, so the search evaluates whole waves of nodes this way.
    `params` binds names the views' definitions use.
    """
    ctes, selects, params = [], [], dict(params or {})
    for j, view in enumerate(views):
        if view.definition:  # computed once, however many criteria read it
            ctes.append(f"{view.table} AS MATERIALIZED ({view.definition})")
        for i, criteria in enumerate(criteria_sets):
            violators = violating_classes_sql(view, criteria, f"{j}_{i}", params)
            size = f"(SELECT COUNT(*) FROM {view.table})" if i == 0 else "NULL"
            selects.append(
                f"SELECT {j} AS view_index, {i} AS criteria_set, {size} AS size, COUNT(*) AS classes, "
                f"COALESCE(SUM(n), 0) AS tuples FROM ({violators}) AS violators_{j}_{i}"
            )
    with_clause = f"WITH {', '.join(ctes)} " if ctes else ""
    rows = conn.execute(text(with_clause + " UNION ALL ".join(selects)), params).all()
    answers: list[tuple[int, list[tuple[int, int]]]] = [(0, []) for _ in views]
    for j, i, size, classes, tuples in sorted(rows, key=lambda r: (r[0], r[1])):
        rows_j = int(size) if i == 0 else answers[j][0]
        answers[j] = (rows_j, answers[j][1] + [(int(classes), int(tuples))])
    return answers


def violating_classes_sql(
    view: FrequencySetView, criteria: list[Criterion], suffix: str, params: dict[str, object]
) -> str:
    """SELECT the class columns and n of every class violating any of the criteria (a UNION).

    A criterion that reads class sizes alone (k-anonymity) is tested on the
    statistic of another, which has every class and its size, rather than by a
    pass and a UNION of its own. Parameters are renamed with `suffix` (a
    criterion appears once per view and set in a statement) and added to `params`.
    """
    sizes = [c for c in criteria if c.size_violation() is not None]
    others = [c for c in criteria if c.size_violation() is None]
    if others and sizes:
        also = [v for v in (c.size_violation() for c in sizes) if v is not None]
        folded = SqlFragment(" OR ".join(f"({a.sql})" for a in also), {k: v for a in also for k, v in a.params.items()})
        fragments = [others[0].violating_classes(view, folded)] + [c.violating_classes(view) for c in others[1:]]
    else:
        fragments = [c.violating_classes(view) for c in criteria]
    return " UNION ".join(f"({fragment.bound(suffix, params)})" for fragment in fragments)


def class_labels(star: StarSchema, node: tuple[int, ...], alias: str) -> tuple[list[str], str]:
    """The label columns of a class of `node` whose codes are in `alias`.a0.., and the joins that give them."""
    labels = [f"l{d.attr}.label" for d in star.dimensions]
    joins = " ".join(
        f"JOIN (SELECT DISTINCT c{node[d.attr]} AS code, l{node[d.attr]} AS label FROM {d.table}) "
        f"l{d.attr} ON l{d.attr}.code = {alias}.{class_column(d.attr)}"
        for d in star.dimensions
    )
    return labels, joins
