"""Iterative proportional fitting over the pairs propagation left, several passes per statement."""

from __future__ import annotations

import itertools
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy import and_, case, func, select
from sqlalchemy.engine import Connection

from ...backends import Database
from ...errors import DataError
from ...model.job import InferenceSettings
from ...model.progress import Progress, silent
from ..scratch import MATERIALIZED
from .parts import connected_parts
from .releases import ReleaseTables, progress_label

PASSES_PER_STATEMENT = 16  # IPF passes in one statement (the violation is checked after each statement)
FIRST_PASSES = (4, 4, 8)  # ... but fewer in the first ones: most parts settle within a few passes


def _passes_next(done: int) -> int:
    """The passes of the next statement after `done`."""
    for first in itertools.accumulate(FIRST_PASSES):
        if done < first:
            return first - done
    return PASSES_PER_STATEMENT


class _Solver:
    """IPF passes over a variables table (`current`, one name throughout), made anew after each statement of
    passes. The statements of passes and of the parts' violations are built and compiled once (`Scratch.once`)."""

    def __init__(
        self, *, db: Database, conn: Connection, tables: ReleaseTables, x: sa.TableClause, rs: list[int], name: str
    ):
        self.db, self.conn, self.tables, self.rs = db, conn, tables, rs
        self.columns = ["person", "value", "part"] + [f"b{r}" for r in rs] + [f"c{r}" for r in rs]
        self.name, self.passes, self.statements = name, 0, 0
        self.snapped = self.tables_made = 0
        parts = connected_parts(tables, _links(x, rs), f"{name}_ipf")
        every = [parts.c.part if c == "part" else x.c[c] for c in self.columns] + [x.c.x]
        self.current = tables.make(f"{name}_vars", select(*every).join_from(x, parts, parts.c.node == x.c.person))
        tables.drop(parts)
        tables.drop(x)
        self.settled = self._new(select(self.current).where(sa.false()))
        self.offs: sa.TableClause | None = None  # each part's violation after the last run

    def run(self, passes: int) -> float:
        """Run `passes` passes in one statement; returns the largest constraint violation after them."""
        tables, current = self.tables, self.current
        query, text = tables.once(
            (self.name, "passes", passes), lambda: _passes(current, passes, self.columns, self.rs)
        )
        self.passes += passes
        tables.remake(current, query, text)
        if self.offs is not None:
            self.drop(self.offs)
        query, text = tables.once((self.name, "violations"), lambda: _part_violations(current, self.rs))
        self.offs = offs = tables.make(f"{self.name}_offs", query, text)
        self.statements += 1  # the largest violation (the tables count what they create)
        largest = select(func.coalesce(func.max(offs.c.off), 0))
        return float(self.db.execute(self.conn, largest).scalar_one())

    def settle(self, tolerance: float) -> None:
        """Set aside the parts within `tolerance` after the last run: IPF on one part does not move another's
        probabilities, so they are final (on two releases of 100,000 hospital records, most parts settle in a
        few dozen passes while a few take hundreds)."""
        assert self.offs is not None
        current, offs = self.current, self.offs
        # a semi-join and an anti-join: PostgreSQL runs a NOT IN over a subquery larger than its work_mem as a
        # loop per row
        settled = sa.exists().where(offs.c.part == current.c.part, offs.c.off <= tolerance)
        every = [current.c[c] for c in self.columns] + [current.c.x]
        insert = sa.insert(self.settled).from_select(self.columns + ["x"], select(*every).where(settled))
        self.db.execute(self.conn, insert)
        self._replace(select(*every).where(~settled))
        self.statements += 1

    def _replace(self, query: sa.SelectBase) -> None:
        self.tables.remake(self.current, query)

    def copy(self) -> sa.TableClause:
        return self._new(select(self.current))

    def _new(self, query: sa.SelectBase) -> sa.TableClause:
        self.tables_made += 1
        return self.tables.make(f"{self.name}_x{self.tables_made}", query)

    def drop(self, table: sa.TableClause) -> None:
        self.tables.drop(table)

    def restore(self, saved: sa.TableClause) -> None:
        self._replace(select(saved))

    def snap(self, earlier: sa.TableClause) -> int:
        """Remove the variables that halved since `earlier` (twice fewer passes ago) and are small: the way a
        probability the constraints force to 0 approaches it (like 1 / passes), while the others settle."""
        x, e = self.current.alias("x"), earlier.alias("e")
        before = self.tables.count(self.current)
        halved = and_(x.c.x < SNAP_BELOW, x.c.x < SNAP_RATIO * e.c.x)
        self._replace(
            select(*(x.c[c] for c in self.columns), x.c.x)
            .join_from(x, e, and_(e.c.person == x.c.person, e.c.value == x.c.value))
            .where(sa.not_(halved))
        )
        after = self.tables.count(self.current)
        self.statements += 2
        return before - after


SNAP_FROM = 32  # passes before the first look for probabilities forced to 0
SNAP_BELOW, SNAP_RATIO = 0.05, 0.6  # removed when below this and below this share of its value at half the passes


def iterate(
    db: Database,
    conn: Connection,
    tables: ReleaseTables,
    x: sa.TableClause,
    rs: list[int],
    settings: InferenceSettings,
    name: str,
    progress: Progress = silent,
) -> tuple[sa.TableClause, dict[str, Any]]:
    """IPF passes until the largest relation-constraint violation is within the tolerance; returns the table
    `(person, value, p)` of the solution (in place of `x`) and the figures.

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
        violation = solver.run(min(_passes_next(solver.passes), settings.max_iterations - solver.passes))
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
        if leftover is not None:
            solver.drop(leftover)
    current, settled = solver.current, solver.settled
    x = tables.make(
        f"{name}_x",
        sa.union_all(
            select(current.c.person, current.c.value, current.c.x.label("p")),
            select(settled.c.person, settled.c.value, settled.c.x),
        ),
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
    return x, {
        "iterations": solver.passes,
        "max_violation": violation,
        "converged": violation <= settings.tolerance,
        "seconds": time.perf_counter() - started,
        "statements": solver.statements,
        "snapped": solver.snapped,
    }


STALLED = 0.95  # a violation at least this share of the one at half the passes has stopped falling


def _passes(table: sa.TableClause, passes: int, columns: list[str], rs: list[int]) -> sa.Select[Any]:
    """`passes` IPF passes over `table`, as one statement: in each, every release's (group, value) sums are
    scaled to their counts, then every person's probabilities to one. Each step is a GROUP BY joined back
    (materialized common table expressions: on DuckDB about twice as fast as window functions); a person
    outside a release (b NULL) is left alone by its scaling."""
    step = select(*(table.c[c] for c in columns), table.c.x).cte("s0").prefix_with(MATERIALIZED)
    k = 0
    for _ in range(passes):
        for r in rs:
            k += 1
            group, count = step.c[f"b{r}"], step.c[f"c{r}"]
            sums = (
                select(group.label("b"), step.c.value, _sum(step.c.x).label("total"))
                .where(group.is_not(None))
                .group_by(group, step.c.value)
                .cte(f"g{k}")
                .prefix_with(MATERIALIZED)
            )
            scaled = case((group.is_(None), step.c.x), else_=step.c.x * count / sums.c.total)
            joined = step.outerjoin(sums, and_(sums.c.b == group, sums.c.value == step.c.value))
            step = _next_step(step, columns, scaled, joined, k)
        k += 1
        sums = (
            select(step.c.person, _sum(step.c.x).label("total"))
            .group_by(step.c.person)
            .cte(f"g{k}")
            .prefix_with(MATERIALIZED)
        )
        joined = step.join(sums, sums.c.person == step.c.person)
        step = _next_step(step, columns, step.c.x / sums.c.total, joined, k)
    return select(step)


def _sum(x: Any) -> Any:
    """SUM(x), typed DOUBLE PRECISION: a division by a sum of unknown type is compiled for PostgreSQL with the
    divisor cast to NUMERIC, a conversion per row (2M divisions: 3.3 s against 0.64 s without it) that also rounds
    the divisor to 15 digits (DuckDB's statements have no cast, and must not: its NUMERIC is DECIMAL(18,3))."""
    return func.sum(x, type_=sa.Double)


def _next_step(step: sa.CTE, columns: list[str], x: Any, joined: sa.Join, k: int) -> sa.CTE:
    """The variables after step k: `step`'s columns with `x` from `joined`."""
    return (
        select(*(step.c[c] for c in columns), x.label("x")).select_from(joined).cte(f"s{k}").prefix_with(MATERIALIZED)
    )


def _part_violations(x: sa.TableClause, rs: list[int]) -> sa.Select[Any]:
    """SELECT part, off: each part's largest |sum over a group's persons of P(s | i) - count of s in the group|
    (persons sum to one after every pass)."""
    offs = [
        select(x.c.part, func.abs(func.sum(x.c.x) - func.max(x.c[f"c{r}"])).label("off"))
        .where(x.c[f"b{r}"].is_not(None))
        .group_by(x.c.part, x.c[f"b{r}"], x.c.value)
        for r in rs
    ]
    v = sa.union_all(*offs).subquery("v")
    return select(v.c.part, func.max(v.c.off).label("off")).group_by(v.c.part)


def _links(x: sa.TableClause, rs: list[int]) -> sa.CompoundSelect[Any]:
    """SELECT u, v: the persons of `x` linked through the groups of every release (each to its group's first
    person) and to themselves."""
    groups = [
        select(
            x.c.person.label("u"), func.min(x.c.person).over(partition_by=[x.c[f"b{r}"], x.c.value]).label("v")
        ).where(x.c[f"b{r}"].is_not(None))
        for r in rs
    ]
    return sa.union_all(*groups, select(x.c.person.label("u"), x.c.person.label("v")))


def _worst_constraint(db: Database, conn: Connection, tables: ReleaseTables, p: sa.TableClause, rs: list[int]) -> str:
    parts = []
    for r in rs:
        m, c = tables.members.alias("m"), tables.counts.alias("c")
        parts.append(
            select(
                sa.literal(r, literal_execute=True).label("r"),
                m.c.grp,
                p.c.value,
                func.abs(func.sum(p.c.p) - func.max(c.c.cnt)).label("off"),
            )
            .select_from(
                p.join(m, and_(m.c.person == p.c.person, m.c.r == r)).join(
                    c, and_(c.c.r == r, c.c.grp == m.c.grp, c.c.value == p.c.value)
                )
            )
            .group_by(m.c.grp, p.c.value)
        )
    w, v = sa.union_all(*parts).subquery("w"), tables.vals
    row = db.execute(
        conn,
        select(w.c.r, w.c.grp, v.c.label).join_from(w, v, v.c.value == w.c.value).order_by(w.c.off.desc()).limit(1),
    ).first()
    return f"release {tables.releases[row[0] - 1].name!r}, bucket {row[1]}, value {row[2]!r}"
