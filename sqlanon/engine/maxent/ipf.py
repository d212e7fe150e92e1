"""Iterative proportional fitting over the pairs propagation left, several passes per statement."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy.engine import Connection

from ...backends import Database
from ...errors import DataError
from ...model.job import InferenceSettings
from ...model.progress import Progress, silent
from .parts import connected_parts
from .releases import ReleaseTables, progress_label

PASSES_PER_STATEMENT = 16  # IPF passes in one statement (the violation is checked after each statement)


class _Solver:
    """IPF passes over a variables table, replaced by a new table after each statement of passes."""

    def __init__(self, *, db: Database, conn: Connection, tables: ReleaseTables, x: str, rs: list[int], name: str):
        self.db, self.conn, self.tables, self.rs = db, conn, tables, rs
        self.columns = ["person", "value", "part"] + [f"b{r}" for r in rs] + [f"c{r}" for r in rs]
        self.name, self.passes, self.statements = name, 0, 0
        self.snapped = self.tables_made = 0
        self.current = self._new_name()
        parts = connected_parts(tables, _links(x, rs), f"{name}_ipf")
        every = ", ".join(self.columns) + ", x"
        tables.create(self.current, f"SELECT {every} FROM {x} t JOIN {parts} p ON p.node = t.person")
        tables.drop(parts)
        tables.drop(x)
        self.settled = self._new_name()
        tables.create(self.settled, f"SELECT {every} FROM {self.current} WHERE 1 = 0")
        self.offs: str | None = None  # each part's violation after the last run

    def run(self, passes: int) -> float:
        """Run `passes` passes in one statement; returns the largest constraint violation after them."""
        query = _passes(self.current, passes, self.columns, self.rs)
        self.passes += passes
        self._replace(query)
        if self.offs:
            self.drop(self.offs)
        self.offs = self._new_name()
        self.tables.create(self.offs, _part_violations(self.current, self.rs))
        self.statements += 1  # the largest violation (the tables count what they create)
        return float(self.db.execute(self.conn, f"SELECT COALESCE(MAX(off), 0) FROM {self.offs}").scalar_one())

    def settle(self, tolerance: float) -> None:
        """Set aside the parts within `tolerance` after the last run: IPF on one part does not move another's
        probabilities, so they are final (on two releases of 100,000 hospital records, most parts settle in a
        few dozen passes while a few take hundreds)."""
        done, within = f"(SELECT part FROM {self.offs} WHERE off <= :tolerance)", {"tolerance": tolerance}
        columns = ", ".join(self.columns)
        self.db.execute(
            self.conn,
            f"INSERT INTO {self.settled} SELECT {columns}, x FROM {self.current} WHERE part IN {done}",
            within,
        )
        self._replace(f"SELECT {columns}, x FROM {self.current} WHERE part NOT IN {done}", within)
        self.statements += 1

    def _replace(self, query: str, params: dict[str, Any] | None = None) -> None:
        following = self._new_name()
        self.tables.create(following, query, params)
        self.drop(self.current)
        self.current = following

    def copy(self) -> str:
        saved = self._new_name()
        self.tables.create(saved, f"SELECT * FROM {self.current}")
        return saved

    def _new_name(self) -> str:
        self.tables_made += 1
        return self.tables.ref(f"{self.name}_x{self.tables_made}")

    def drop(self, ref: str) -> None:
        self.tables.drop(ref)

    def restore(self, saved: str) -> None:
        self._replace(f"SELECT * FROM {saved}")

    def snap(self, earlier: str) -> int:
        """Remove the variables that halved since `earlier` (twice fewer passes ago) and are small: the way a
        probability the constraints force to 0 approaches it (like 1 / passes), while the others settle."""
        columns = ", ".join(f"x.{c}" for c in self.columns)
        before = self.db.count_rows(self.conn, self.current)
        self._replace(
            f"SELECT {columns}, x.x FROM {self.current} x JOIN {earlier} e ON e.person = x.person AND "
            f"e.value = x.value WHERE NOT (x.x < {SNAP_BELOW} AND x.x < {SNAP_RATIO} * e.x)"
        )
        after = self.db.count_rows(self.conn, self.current)
        self.statements += 2
        return int(before - after)


SNAP_FROM = 32  # passes before the first look for probabilities forced to 0
SNAP_BELOW, SNAP_RATIO = 0.05, 0.6  # removed when below this and below this share of its value at half the passes


def iterate(
    db: Database,
    conn: Connection,
    tables: ReleaseTables,
    x: str,
    rs: list[int],
    settings: InferenceSettings,
    name: str,
    progress: Progress = silent,
) -> dict[str, Any]:
    """IPF passes until the largest relation-constraint violation is within the tolerance.

    Plain IPF approaches a probability forced to 0 (or 1) only like
    1 / passes. At every doubling of the passes, the variables that halved
    meanwhile and are small are taken as forced to 0 and removed, after which
    convergence is faster again; if the violation at twice the passes is
    worse than before the removal, it is undone and no more removals are
    tried. After each statement of passes (no removal being judged), the
    parts within the tolerance are set aside (`_Solver.settle`), so the
    violation is that of the parts still iterating and `iterations` the
    passes of the slowest part. A violation that no longer falls between two
    doublings means the constraints have no solution; one still falling when
    max_iterations is reached is reported as not converged.
    """
    started = time.perf_counter()
    solver = _Solver(db=db, conn=conn, tables=tables, x=x, rs=rs, name=name)
    violation, checkpoint, trial, snapping, stalled = float("inf"), None, None, True, False
    at_doubling: dict[int, float] = {}
    while solver.passes < settings.max_iterations and violation > settings.tolerance:
        violation = solver.run(min(PASSES_PER_STATEMENT, settings.max_iterations - solver.passes))
        progress(f"iterating, {progress_label(name)}: passes", solver.passes, settings.max_iterations)
        if trial is not None and solver.passes >= trial[1]:  # judge the last removal
            saved, _, before = trial
            if violation > before:
                solver.restore(saved)
                violation, snapping = before, False
            solver.drop(saved)
            trial = None
        if trial is None and violation > settings.tolerance:
            solver.settle(settings.tolerance)
        if solver.passes < SNAP_FROM or solver.passes & (solver.passes - 1) or violation <= settings.tolerance:
            continue  # look again at the next power of two
        at_doubling[solver.passes] = violation
        earlier = at_doubling.get(solver.passes // 2)
        if trial is None and earlier is not None and violation >= STALLED * earlier and violation > 0.01:
            stalled = True
            break
        if checkpoint is not None and snapping and trial is None:
            saved = solver.copy()
            removed = solver.snap(checkpoint)
            if removed:
                solver.snapped += removed
                trial = (saved, solver.passes * 2, violation)
            else:
                solver.drop(saved)
        if checkpoint is not None:
            solver.drop(checkpoint)
        checkpoint = solver.copy()
    for leftover in [checkpoint, solver.offs] + ([trial[0]] if trial else []):
        if leftover:
            solver.drop(leftover)
    tables.create(
        x, f"SELECT person, value, x AS p FROM {solver.current} UNION ALL SELECT person, value, x FROM {solver.settled}"
    )
    solver.drop(solver.current)
    solver.drop(solver.settled)
    if stalled:
        worst = _worst_constraint(db, conn, tables, x, rs)
        raise DataError(
            f"the releases admit no solution: after {solver.passes} passes {worst} is still off by "
            f"{violation:.3g} and no longer improves; check that the releases describe the same persons "
            "and values"
        )
    return {
        "iterations": solver.passes,
        "max_violation": violation,
        "converged": violation <= settings.tolerance,
        "seconds": time.perf_counter() - started,
        "statements": solver.statements,
        "snapped": solver.snapped,
    }


STALLED = 0.95  # a violation at least this share of the one at half the passes has stopped falling


def _passes(table: str, passes: int, columns: list[str], rs: list[int]) -> str:
    """`passes` IPF passes over `table`, as one statement: in each, every release's (group, value) sums are
    scaled to their counts, then every person's probabilities to one. Each step is a GROUP BY joined back
    (materialized common table expressions: on DuckDB about twice as fast as window functions); a person
    outside a release (b NULL) is left alone by its scaling."""
    keep = ", ".join(f"t.{c}" for c in columns)
    steps, k = [f"s0 AS MATERIALIZED (SELECT {', '.join(columns)}, x FROM {table})"], 0
    for _ in range(passes):
        for r in rs:
            k += 1
            steps += [
                f"g{k} AS MATERIALIZED (SELECT b{r} AS b, value, SUM(x) AS total FROM s{k - 1} "
                f"WHERE b{r} IS NOT NULL GROUP BY b{r}, value)",
                f"s{k} AS MATERIALIZED (SELECT {keep}, CASE WHEN t.b{r} IS NULL THEN t.x ELSE t.x * t.c{r} / "
                f"g.total END AS x FROM s{k - 1} t LEFT JOIN g{k} g ON g.b = t.b{r} AND g.value = t.value)",
            ]
        k += 1
        steps += [
            f"g{k} AS MATERIALIZED (SELECT person, SUM(x) AS total FROM s{k - 1} GROUP BY person)",
            f"s{k} AS MATERIALIZED (SELECT {keep}, t.x / g.total AS x FROM s{k - 1} t JOIN g{k} g "
            "ON g.person = t.person)",
        ]
    return f"WITH {', '.join(steps)} SELECT * FROM s{k}"


def _part_violations(x: str, rs: list[int]) -> str:
    """SELECT part, off: each part's largest |sum over a group's persons of P(s | i) - count of s in the group|
    (persons sum to one after every pass)."""
    offs = [
        f"SELECT part, ABS(SUM(x) - MAX(c{r})) AS off FROM {x} WHERE b{r} IS NOT NULL GROUP BY part, b{r}, value"
        for r in rs
    ]
    return f"SELECT part, MAX(off) AS off FROM ({' UNION ALL '.join(offs)}) v GROUP BY part"


def _links(x: str, rs: list[int]) -> str:
    """SELECT u, v: the persons of `x` linked through the groups of every release (each to its group's first
    person) and to themselves."""
    groups = [
        f"SELECT person AS u, MIN(person) OVER (PARTITION BY b{r}, value) AS v FROM {x} WHERE b{r} IS NOT NULL"
        for r in rs
    ]
    return " UNION ALL ".join(groups + [f"SELECT person, person FROM {x}"])


def _worst_constraint(db: Database, conn: Connection, tables: ReleaseTables, p: str, rs: list[int]) -> str:
    parts = [
        f"SELECT {r} AS r, m.grp, p.value, ABS(SUM(p.p) - MAX(c.cnt)) AS off FROM {p} p JOIN {tables.members} m "
        f"ON m.person = p.person AND m.r = {r} JOIN {tables.counts} c ON c.r = {r} AND c.grp = m.grp "
        "AND c.value = p.value GROUP BY m.grp, p.value"
        for r in rs
    ]
    row = db.execute(
        conn,
        f"SELECT w.r, w.grp, v.label FROM ({' UNION ALL '.join(parts)}) w JOIN {tables.vals} v "
        "ON v.value = w.value ORDER BY w.off DESC LIMIT 1",
    ).first()
    return f"release {tables.releases[row[0] - 1].name!r}, bucket {row[1]}, value {row[2]!r}"
