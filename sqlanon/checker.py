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
from .dimensions import STATISTICS_ROWS, StarSchema
from .frequency import REGISTRY_COLUMNS, violating_classes_sql

KEY_BITS = 63  # a signed BIGINT's non-negative range
ROWS_PER_STATEMENT = 4_000_000  # cube rows x wave nodes joined by one statement
MAX_WAVE = 256  # nodes per statement, however small the cube
GROUP_FIRST = 0.5  # a wave reads the cube grouped to its meet only when that is expected to halve it at least


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

    def __init__(self, db: Database, conn: Connection, star: StarSchema, run_id: int, schema: str,
                 from_table: bool = False):
        """`from_table`: no stored cube; every wave scans the source joined with the dimensions (for
        comparison: the cube is one scan for the whole search)."""
        self.db, self.conn, self.star, self.from_table = db, conn, star, from_table
        self.registry, self.run_id = f"{db.q(schema)}.frequency_sets", run_id
        self.level_sizes = [d.hierarchy.level_sizes() for d in star.dimensions]
        self.layout = KeyLayout.for_codes([max(sizes) - 1 for sizes in self.level_sizes])
        self.name = f"wide_cube_{run_id}"
        self.statements = self.scans = 0
        if from_table:
            self.ref = f"({self._shifted_codes(star.joins(), 'd', star.sensitive_select('t'), '1')})"
            self.rows = star.rows
        else:
            self.ref = db.scratch_ref(self.name)
            self.rows = self._create()

    def _shifted_codes(self, source: str, alias: str, sensitive: list[str], count: str) -> str:
        """SELECT every level's shifted code (k<attr>_<level>), the `sensitive` columns and `count` from
        `source`, where `alias`<attr> holds each attribute's codes c0..ch."""
        columns = [f"CAST({alias}{d.attr}.c{lv} AS BIGINT) * {1 << self.layout.offset[d.attr]} AS k{d.attr}_{lv}"
                   for d in self.star.dimensions for lv in range(d.height + 1)]
        return f"SELECT {', '.join(columns + sensitive)}, {count} AS cnt FROM {source}"

    def _create(self) -> int:
        """One scan of the table: grouped by level-0 codes, then every level's shifted code beside them."""
        star, db = self.star, self.db
        base = f"cube0_{self.name}"
        grouped = db.create_scratch(self.conn, base, "SELECT " + ", ".join(
            [f"d{d.attr}.c0 AS a{d.attr}" for d in star.dimensions] + star.sensitive_select("t"))
            + f", COUNT(*) AS cnt FROM {star.joins()} GROUP BY "
            + ", ".join([f"d{d.attr}.c0" for d in star.dimensions] + [f"t.{db.q(c)}" for c in star.sensitive]))
        joins = [f"JOIN (SELECT DISTINCT {', '.join(f'c{lv}' for lv in range(d.height + 1))} FROM {d.table}) "
                 f"m{d.attr} ON m{d.attr}.c0 = t.a{d.attr}" for d in star.dimensions]
        cube = self._shifted_codes(f"{grouped} t {' '.join(joins)}", "m",
                                   [f"t.{s}" for s in star.sensitive_columns().values()], "t.cnt")
        db.create_scratch(self.conn, self.name, cube)
        db.drop_table(self.conn, grouped)
        if star.rows >= STATISTICS_ROWS:
            db.analyze(self.conn, self.ref)  # the waves' plans depend on the cube's size
        self.statements += 3
        self.scans += 1
        rows = int(db.execute(self.conn, f"SELECT COUNT(*) FROM {self.ref}").scalar_one())
        db.metadata.insert_rows(db.metadata_connection(self.conn), self.registry, REGISTRY_COLUMNS,
                                [(self.run_id, None, "wide_cube", self.name, "base", None, rows, False)])
        return rows

    def violations(self, nodes: list[tuple[int, ...]], criteria: list[Criterion]) -> list[tuple[int, int]]:
        """(violating classes, tuples in them) of each node, in waves bounded by the rows they join."""
        # families (the attributes a node keeps) together, then by levels: a chunk shares a high meet
        order = sorted(range(len(nodes)), key=lambda j: (tuple(lv < 0 for lv in nodes[j]), nodes[j]), reverse=True)
        by_index: dict[int, tuple[int, int]] = {}
        for chunk in self._waves(order, nodes):
            by_index.update(zip(chunk, self._wave([nodes[j] for j in chunk], criteria)))
        return [by_index[j] for j in range(len(nodes))]

    def _waves(self, order: list[int], nodes: list[tuple[int, ...]]) -> list[list[int]]:
        """`order` cut into waves: a node joins the current wave while the wave's base (the cube grouped to the
        meet, as estimated by `_rows_at`) times its nodes stays within ROWS_PER_STATEMENT."""
        waves: list[list[int]] = []
        for j in order:
            if waves and len(waves[-1]) < MAX_WAVE:
                meet = self._meet([nodes[i] for i in waves[-1]] + [nodes[j]])
                if self._rows_at(meet) * (len(waves[-1]) + 1) <= ROWS_PER_STATEMENT:
                    waves[-1].append(j)
                    continue
            waves.append([j])
        return waves

    def _meet(self, nodes: list[tuple[int, ...]]) -> list[int]:
        """Each attribute at the lowest level of any of `nodes` (height + 1 when every node leaves it out)."""
        return [min((node[d.attr] for node in nodes if node[d.attr] >= 0), default=d.height + 1)
                for d in self.star.dimensions]

    def _rows_at(self, meet: list[int]) -> int:
        """At most how many rows the cube has once grouped to `meet`: the product of the levels' sizes (the
        sensitive columns ignored), never more than the cube."""
        rows = 1
        for d, level in zip(self.star.dimensions, meet):
            rows *= self.level_sizes[d.attr][level] if level <= d.height else 1
            if rows >= self.rows:
                return self.rows
        return rows

    @property
    def key_names(self) -> list[str]:
        return [f"key{key}" for key in range(self.layout.keys)]

    def _wave(self, nodes: list[tuple[int, ...]], criteria: list[Criterion]) -> list[tuple[int, int]]:
        definition = self._frequency_sets(nodes)
        view = FrequencySetView("wave", ["node"] + self.key_names, "cnt", self.star.sensitive_columns(), definition,
                                reference=self.ref)
        params: dict[str, object] = {}
        violators = violating_classes_sql(view, criteria, "w", params)
        rows = self.db.execute(self.conn, f"WITH wave AS MATERIALIZED ({definition}) SELECT node, COUNT(*), "
                               f"SUM(n) FROM ({violators}) AS violators GROUP BY node", params).all()
        self.statements += 1
        self.scans += self.from_table
        by_node = {int(node): (int(classes), int(tuples)) for node, classes, tuples in rows}
        return [by_node.get(j, (0, 0)) for j in range(len(nodes))]

    def _frequency_sets(self, nodes: list[tuple[int, ...]]) -> str:
        """SELECT node (its index in `nodes`), key(s), sensitive columns, cnt: the nodes' frequency sets."""
        dims = self.star.dimensions
        values = ", ".join("(" + ", ".join(map(str, (j, *node))) + ")" for j, node in enumerate(nodes))
        names = ", ".join(["node"] + [f"l{d.attr}" for d in dims])
        keys = []
        for key in range(self.layout.keys):
            parts = [self._code(d.attr, d.height) for d in dims if self.layout.key_of[d.attr] == key]
            keys.append(f"{' + '.join(parts)} AS key{key}")
        sensitive = [f"c.{s}" for s in self.star.sensitive_columns().values()]
        return (f"SELECT w.node, {', '.join(keys + sensitive)}, SUM(c.cnt) AS cnt "
                f"FROM {self._base(nodes)} c CROSS JOIN (VALUES {values}) AS w({names}) "
                f"GROUP BY {', '.join(['w.node'] + self.key_names + sensitive)}")

    def _base(self, nodes: list[tuple[int, ...]]) -> str:
        """What the wave reads: the cube, or the cube first grouped up to the wave's meet (each attribute at the
        lowest level of any of the wave's nodes), which has far fewer rows when every node is general."""
        meet = self._meet(nodes)  # an attribute every node leaves out needs no column at all
        if not any(meet) or self._rows_at(meet) > GROUP_FIRST * self.rows:
            return self.ref  # grouping first would hardly shrink it: a pass over the cube for nothing
        kept = [f"k{d.attr}_{lv}" for d in self.star.dimensions for lv in range(meet[d.attr], d.height + 1)]
        kept += list(self.star.sensitive_columns().values())
        # the lower levels' columns are not read by the wave; the kept ones depend on each attribute's meet level
        lower = [f"CAST(NULL AS BIGINT) AS k{d.attr}_{lv}"
                 for d in self.star.dimensions for lv in range(meet[d.attr])]
        return (f"(SELECT {', '.join(kept + lower)}, SUM(cnt) AS cnt FROM {self.ref} GROUP BY {', '.join(kept)})")

    @staticmethod
    def _code(attr: int, height: int) -> str:
        """The node's shifted code of `attr`: the cube column of the node's level."""
        cases = " ".join(f"WHEN {lv} THEN c.k{attr}_{lv}" for lv in range(height + 1))
        return f"CASE w.l{attr} {cases} ELSE 0 END"  # -1: the node leaves the attribute out

    def close(self) -> None:
        if not self.from_table:
            self.db.drop_table(self.conn, self.ref)
            self.db.metadata.execute(self.db.metadata_connection(self.conn), f"UPDATE {self.registry} SET dropped = "
                                     "TRUE WHERE run_id = :r AND label = 'wide_cube'", {"r": self.run_id})
