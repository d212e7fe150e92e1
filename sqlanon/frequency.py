"""Frequency sets: one table per evaluated node, (class codes..., cnt).

A frequency set is built either by one GROUP BY over the source joined with the
dimension tables (a base scan) or by rolling up an already computed, more
specific frequency set: map each code to its parent code through the
dimension table and sum the counts. Tables are session-scoped scratch tables
unless the run keeps them; every one is registered in `frequency_sets`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy import bindparam, text
from sqlalchemy.engine import Connection

from .backends import Database
from .criteria import Criterion, FrequencySetView
from .dimensions import StarSchema

COUNT = "cnt"
REGISTRY_COLUMNS = ["run_id", "node_id", "label", "table_name", "origin", "derived_from", "row_count", "dropped"]


@dataclass
class FrequencySet:
    label: str
    ref: str
    levels: dict[int, int]  # attr -> level
    rows: int


def class_column(attr: int) -> str:
    return f"a{attr}"


class FrequencySets:
    """Builds, evaluates, registers and drops one run's frequency sets."""

    def __init__(self, db: Database, conn: Connection, star: StarSchema, schema: str, run_id: int,
                 keep: bool = False, use_cube: bool = True):
        self.db, self.conn, self.star, self.schema, self.run_id, self.keep = db, conn, star, schema, run_id, keep
        self.use_cube = use_cube
        self._cube: FrequencySet | None = None
        self.base_scans = 0
        self.rollups = 0
        self._registry: list[tuple] = []  # entries not yet written
        self._dropped_since_flush: list[str] = []
        self._pending: dict[str, tuple] = {}  # created, size not yet known
        self._live: dict[str, FrequencySet] = {}

    # --- building -------------------------------------------------------
    def base(self, levels: dict[int, int], label: str, node_id: int | None = None) -> FrequencySet:
        """A frequency set with no computed specialization to roll up from.

        With the cube (the default), the table is scanned once for the frequency
        set of all QIs at level 0, and every base set is rolled up from it;
        without, each base set is its own scan of the table.
        """
        if not self.use_cube:
            return self.from_table(levels, label, node_id)
        if self._cube is None:
            self._cube = self.measured(self.from_table({d.attr: 0 for d in self.star.dimensions}, "cube"))
        return self.rollup(self._cube, levels, label, node_id)

    def measured(self, fs: FrequencySet) -> FrequencySet:
        """Record the size of a set that is built but never evaluated (cube, super-roots)."""
        fs.rows = self.conn.exec_driver_sql(f"SELECT COUNT(*) FROM {fs.ref}").scalar_one()
        self._registry.append((*self._pending.pop(fs.label), fs.rows, False))
        return fs

    def from_table(self, levels: dict[int, int], label: str, node_id: int | None = None) -> FrequencySet:
        """GROUP BY over the source joined with the dimension tables of `levels`' attributes."""
        attrs = sorted(levels)
        dims = [self.star.dimensions[a] for a in attrs]
        joins = " ".join(f"JOIN {d.table} d{d.attr} ON {d.key(self.db, 't')} = d{d.attr}.v" for d in dims)
        select = ", ".join(f"d{a}.c{levels[a]} AS {class_column(a)}" for a in attrs)
        group = ", ".join(f"d{a}.c{levels[a]}" for a in attrs)
        sql = f"SELECT {select}, COUNT(*) AS {COUNT} FROM {self.star.source} t {joins} GROUP BY {group}"
        self.base_scans += 1
        return self._create(sql, levels, label, node_id, "base", None)

    def rollup(self, child: FrequencySet, levels: dict[int, int], label: str,
               node_id: int | None = None) -> FrequencySet:
        """Roll `child` up to `levels` (each level >= the child's; attributes may be dropped)."""
        select, joins, group = [], [], []
        for a in sorted(levels):
            col = class_column(a)
            if levels[a] == child.levels[a]:
                select.append(f"f.{col} AS {col}")
                group.append(f"f.{col}")
            else:
                dim = self.star.dimensions[a]
                joins.append(f"JOIN (SELECT DISTINCT c{child.levels[a]} AS code, c{levels[a]} AS parent "
                             f"FROM {dim.table}) m{a} ON f.{col} = m{a}.code")
                select.append(f"m{a}.parent AS {col}")
                group.append(f"m{a}.parent")
        sql = (f"SELECT {', '.join(select)}, SUM(f.{COUNT}) AS {COUNT} FROM {child.ref} f {' '.join(joins)} "
               f"GROUP BY {', '.join(group)}")
        self.rollups += 1
        return self._create(sql, levels, label, node_id, "rollup", child.label)

    def _create(self, select_sql: str, levels: dict[int, int], label: str, node_id: int | None, origin: str,
                derived_from: str | None) -> FrequencySet:
        name = f"fs_{self.run_id}_{label}"
        if self.keep:
            ref, create = self.db.q(self.schema, name), "CREATE TABLE"
        else:
            ref, create = self.db.scratch_ref(name), "CREATE TEMP TABLE"
        # names are unique within a run, and scratch tables are private to this session
        self.conn.exec_driver_sql(f"{create} {ref if self.keep else self.db.q(name)} AS {select_sql}")
        fs = FrequencySet(label, ref, dict(levels), -1)
        self._live[label] = fs
        self._pending[label] = (self.run_id, node_id, label, name, origin, derived_from)
        return fs

    # --- evaluating -----------------------------------------------------
    def violations(self, fs: FrequencySet, criteria: list[Criterion]) -> tuple[int, int]:
        """(violating classes, tuples in them) under all criteria at once; also records the set's size."""
        view = FrequencySetView(fs.ref, [class_column(a) for a in sorted(fs.levels)], COUNT, [])
        rows, classes, tuples = count_violations(self.conn, view, criteria)
        fs.rows = rows
        self._registry.append((*self._pending.pop(fs.label), rows, False))
        return classes, tuples

    # --- cleaning up ----------------------------------------------------
    def drop(self, fs: FrequencySet) -> None:
        if self.keep or fs.label not in self._live:
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
        s = self.db.q(self.schema)
        if self._registry:
            self.db.insert_rows(self.conn, f"{s}.frequency_sets", REGISTRY_COLUMNS, self._registry)
            self._registry = []
        if self._dropped_since_flush:
            update = text(f"UPDATE {s}.frequency_sets SET dropped = TRUE WHERE run_id = :r AND label IN :labels")
            self.conn.execute(update.bindparams(bindparam("labels", expanding=True)),
                              {"r": self.run_id, "labels": self._dropped_since_flush})
            self._dropped_since_flush = []


def count_violations(conn: Connection, view: FrequencySetView,
                     criteria: list[Criterion]) -> tuple[int, int, int]:
    """(rows of the frequency set, classes violating any criterion, tuples in them), in one query."""
    rows, [(classes, tuples)] = count_violations_per_set(conn, view, [criteria])
    return rows, classes, tuples


def count_violations_per_set(conn: Connection, view: FrequencySetView,
                             criteria_sets: list[list[Criterion]]) -> tuple[int, list[tuple[int, int]]]:
    """Rows of the frequency set, and (violating classes, their tuples) for each criteria set.

    A set's violators are the UNION of its criteria's violating classes. One
    statement answers every set; a view defined by a CTE is computed once.
    """
    selects, params = [], {}
    for i, criteria in enumerate(criteria_sets):
        parts = []
        for fragment in (c.violating_classes(view) for c in criteria):
            sql = fragment.sql
            for name, value in fragment.params.items():  # the same criterion may appear in several sets
                sql = re.sub(rf":{name}\b", f":{name}_{i}", sql)
                params[f"{name}_{i}"] = value
            parts.append(f"({sql})")
        size = f"(SELECT COUNT(*) FROM {view.table})" if i == 0 else "NULL"
        selects.append(f"SELECT {i} AS criteria_set, {size} AS size, COUNT(*) AS classes, "
                       f"COALESCE(SUM(n), 0) AS tuples FROM ({' UNION '.join(parts)}) AS violators{i}")
    with_clause = f"WITH {view.table} AS ({view.definition}) " if view.definition else ""
    result = conn.execute(text(with_clause + " UNION ALL ".join(selects)), params).all()
    result.sort(key=lambda row: row[0])
    return int(result[0][1]), [(int(r[2]), int(r[3])) for r in result]
