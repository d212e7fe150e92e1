"""A wave of lattice nodes checked in one statement, over a wide cube with packed integer class keys.

The wide cube is the table grouped once at the bottom of the lattice (one row
per combination of level-0 codes and sensitive values, with its count), and it
carries, for every quasi-identifier and every level, that level's integer code
already shifted into the attribute's own bit field. A node's class key is then
the sum of one column per attribute: a single BIGINT (or one per group of
attributes when 63 bits do not hold them all), so grouping a node is grouping
one integer, not one column per attribute.

A wave joins the cube with a small VALUES list of its nodes and groups by
(node, key): one statement computes every node's frequency set, and the
criteria's SQL, which treats (node, key) as the class columns, reduces it to
one row per node with a violating class. Statements, not rows, dominate small
frequency sets; the wave's size is bounded by the rows the join produces.
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.engine import Connection

from .backends import Database
from .criteria import Criterion, FrequencySetView
from .dimensions import StarSchema
from .frequency import violating_classes_sql

KEY_BITS = 63  # a signed BIGINT's non-negative range
ROWS_PER_STATEMENT = 4_000_000  # cube rows x wave nodes joined by one statement
MAX_WAVE = 256  # nodes per statement, however small the cube


@dataclass(frozen=True)
class KeyLayout:
    """Where each attribute's code lives: its key column and its bit offset there."""

    bits: tuple[int, ...]  # per attribute: bits its largest code needs (over all levels)
    key_of: tuple[int, ...]  # per attribute: index of its key column
    offset: tuple[int, ...]  # per attribute: its shift inside that key

    @property
    def keys(self) -> int:
        return max(self.key_of, default=-1) + 1

    @staticmethod
    def for_codes(largest_codes: list[int]) -> "KeyLayout":
        """Attributes packed in order, a new key column whenever the next one would pass 63 bits."""
        bits = tuple(max(1, code.bit_length()) for code in largest_codes)
        key_of, offset, key, used = [], [], 0, 0
        for b in bits:
            if used + b > KEY_BITS:
                key, used = key + 1, 0
            key_of.append(key)
            offset.append(used)
            used += b
        return KeyLayout(bits, tuple(key_of), tuple(offset))


class WaveChecker:
    """Checks lists of nodes of the full lattice against the criteria, a wave per statement."""

    def __init__(self, db: Database, conn: Connection, star: StarSchema, run_id: int):
        self.db, self.conn, self.star = db, conn, star
        self.layout = KeyLayout.for_codes([max(d.hierarchy.level_sizes()) - 1 for d in star.dimensions])
        self.name = f"wide_cube_{run_id}"
        self.ref = db.scratch_ref(self.name)
        self.statements = 0
        self.rows = self._create()

    def _create(self) -> int:
        """One scan of the table: grouped by level-0 codes, then every level's shifted code beside them."""
        star, db = self.star, self.db
        base = f"cube0_{self.name}"
        sensitive = list(star.sensitive_columns().values())
        db.execute(self.conn, f"CREATE TEMP TABLE {db.q(base)} AS SELECT "
                   + ", ".join([f"d{d.attr}.c0 AS a{d.attr}" for d in star.dimensions] + star.sensitive_select("t"))
                   + f", COUNT(*) AS cnt FROM {star.joins()} GROUP BY "
                   + ", ".join([f"d{d.attr}.c0" for d in star.dimensions]
                               + [f"t.{db.q(c)}" for c in star.sensitive]))
        columns, joins = [], []
        for d in star.dimensions:
            shift = 1 << self.layout.offset[d.attr]
            levels = ", ".join(f"c{lv}" for lv in range(d.height + 1))
            joins.append(f"JOIN (SELECT DISTINCT {levels} FROM {d.table}) m{d.attr} ON m{d.attr}.c0 = f.a{d.attr}")
            columns += [f"CAST(m{d.attr}.c{lv} AS BIGINT) * {shift} AS k{d.attr}_{lv}" for lv in range(d.height + 1)]
        db.execute(self.conn, f"CREATE TEMP TABLE {db.q(self.name)} AS SELECT "
                   + ", ".join(columns + [f"f.{s}" for s in sensitive]) + f", f.cnt AS cnt "
                   f"FROM {db.scratch_ref(base)} f {' '.join(joins)}")
        db.drop_table(self.conn, db.scratch_ref(base))
        self.statements += 3
        return int(db.execute(self.conn, f"SELECT COUNT(*) FROM {self.ref}").scalar_one())

    def wave_size(self) -> int:
        return max(1, min(MAX_WAVE, ROWS_PER_STATEMENT // max(1, self.rows)))

    def violations(self, nodes: list[tuple[int, ...]], criteria: list[Criterion]) -> list[tuple[int, int]]:
        """(violating classes, tuples in them) of each node, in statements of `wave_size()` nodes."""
        found: list[tuple[int, int]] = []
        size = self.wave_size()
        for start in range(0, len(nodes), size):
            found += self._wave(nodes[start:start + size], criteria)
        return found

    def _wave(self, nodes: list[tuple[int, ...]], criteria: list[Criterion]) -> list[tuple[int, int]]:
        dims = self.star.dimensions
        values = ", ".join("(" + ", ".join(map(str, (j, *node))) + ")" for j, node in enumerate(nodes))
        names = ", ".join(["node"] + [f"l{d.attr}" for d in dims])
        keys = []
        for key in range(self.layout.keys):
            parts = [self._code(d.attr, d.height) for d in dims if self.layout.key_of[d.attr] == key]
            keys.append(f"{' + '.join(parts)} AS key{key}")
        sensitive = list(self.star.sensitive_columns().values())
        key_names = [f"key{key}" for key in range(self.layout.keys)]
        definition = (f"SELECT w.node, {', '.join(keys + [f'c.{s}' for s in sensitive])}, SUM(c.cnt) AS cnt "
                      f"FROM {self.ref} c CROSS JOIN (VALUES {values}) AS w({names}) "
                      f"GROUP BY {', '.join(['w.node'] + key_names + [f'c.{s}' for s in sensitive])}")
        view = FrequencySetView("wave", ["node"] + key_names, "cnt", self.star.sensitive_columns(), definition,
                                reference=self.ref)
        params: dict[str, object] = {}
        violators = violating_classes_sql(view, criteria, "w", params)
        rows = self.db.execute(self.conn, f"WITH wave AS MATERIALIZED ({definition}) SELECT node, COUNT(*), "
                               f"SUM(n) FROM ({violators}) AS violators GROUP BY node", params).all()
        self.statements += 1
        by_node = {int(node): (int(classes), int(tuples)) for node, classes, tuples in rows}
        return [by_node.get(j, (0, 0)) for j in range(len(nodes))]

    @staticmethod
    def _code(attr: int, height: int) -> str:
        """The node's shifted code of `attr`: the cube column of the node's level."""
        if height == 0:
            return f"c.k{attr}_0"
        cases = " ".join(f"WHEN {lv} THEN c.k{attr}_{lv}" for lv in range(height + 1))
        return f"CASE w.l{attr} {cases} END"

    def close(self) -> None:
        self.db.drop_table(self.conn, self.ref)
