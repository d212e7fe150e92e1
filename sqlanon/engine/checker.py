"""A wave of lattice nodes checked in one statement, over a cube with packed integer class keys.

Every value carries its path code (see PathCodes): its index among its
siblings at each level, in fixed bits, so two values share their node at level
L exactly when their codes agree from that level's bits up. The cube is the
table grouped once at the bottom of the lattice, each row's path codes packed
side by side into one BIGINT class key (or one per group of attributes when 63
bits do not hold them all), with the sensitive values and the count. A node's
class key is then that key ANDed with the node's mask (the bits of each
attribute's levels at and above the node's): no lookup, no CASE, and the same
AND rolls up any set grouped below the node.

A wave joins the cube with a small VALUES list of its nodes' masks and groups
by (node, key): one statement computes every node's frequency set, and the
criteria's SQL, which treats (node, key) as the class columns, reduces it to
one row per node with a violating class. Within the statement, the nodes are
taken in small clusters of neighbours on a small cube, each joined with the
cube grouped up to its own lowest levels (UNION ALL); on a large cube, from the
roll-ups planned for the wave (rollups.py: the cube grouped once to the meet of
many nodes, and that grouped again for the nodes that share higher levels).
Statements, not rows, dominate small frequency sets; a small cube's wave is
bounded by the rows its join produces.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..backends import Database
from ..criteria import Criterion
from ..criteria.view import FrequencySetView, count_sum, sum_c_ln_c
from ..model.names import cube_table, rows_table
from ..store import runs
from ..store.records import RunRecord
from . import histograms
from .frequency import histogram_statement, violating_classes_sql
from .rollups import RollUp, nodes_of, plan, statements
from .star import STATISTICS_ROWS, StarSchema

KEY_BITS = 63  # a signed BIGINT's non-negative range
ROWS_PER_STATEMENT = 4_000_000  # cube rows x wave nodes joined by one statement
MAX_WAVE = 256  # nodes per statement, however small the cube
# on a small cube a wave's nodes are read in clusters of CLUSTER, each from the cube grouped to its own meet (one
# statement, UNION ALL): on Adult at 2% suppression the 128-node waves joined 46.7M rows from the cube, 17.0M in
# clusters of 8 (and 5.9M rows of grouping passes); clusters of 4 joined fewer but grouped as many, 16 joined 24M
CLUSTER = 8
# up to this size a cube is read in clusters and grouped to a cluster's meet whatever the estimate says: a pass
# costs little next to the cluster's join, and the estimate (a product of level sizes) rarely foresees how far a
# sparse table shrinks. On a larger cube each pass counts, and a wave's roll-ups are planned to make few of them
SMALL_CUBE = 100_000
# a large table whose rows are estimated distinct at level 0 beyond this share keeps them ungrouped as its cube
KEYED_ROWS = 0.5
GROUP_FIRST = 0.5  # on a large cube a roll-up groups its parent only when that is expected to halve it at least
#: a cube of the population (the table a job's research subset is drawn from) is numbered its checker's part plus this
POPULATION_PART = 10


@dataclass(frozen=True)
class KeyLayout:
    """Where each field (a piece of an attribute's path code) lives: its key column and its bit offset there."""

    bits: tuple[int, ...]  # per field: its width
    key_of: tuple[int, ...]  # per field: index of its key column
    offset: tuple[int, ...]  # per field: its shift inside that key

    @property
    def keys(self) -> int:
        return max(self.key_of, default=-1) + 1

    @staticmethod
    def for_bits(widths: list[int]) -> KeyLayout:
        """Fields packed in order, a new key column whenever the next one would pass 63 bits."""
        bits = tuple(widths)
        key_of, offset, key, used = [], [], 0, 0
        for b in bits:
            if used + b > KEY_BITS:
                key, used = key + 1, 0
            key_of.append(key)
            offset.append(used)
            used += b
        return KeyLayout(bits, tuple(key_of), tuple(offset))


@dataclass(frozen=True)
class Field:
    """A piece of one attribute's path code: the dimension column `p<piece>` holding it, its levels."""

    attr: int
    piece: int
    levels: tuple[int, int]  # lowest, highest


class WaveChecker:
    """Checks lists of nodes of the full lattice against the criteria, a wave per statement."""

    def __init__(
        self,
        *,
        db: Database,
        conn: Connection,
        star: StarSchema,
        run: RunRecord,
        from_table: bool = False,
        criteria: list[Criterion] | None = None,
        part: int = 0,
        carry: Sequence[str] = (),
    ):
        """`from_table`: no stored cube; every wave scans the source joined with the dimensions (for
        comparison: the cube is one scan for the whole search). `criteria`: the job's (every wave checks them or
        a part of them): the sensitive values they name or order are carried as values; the others may be codes.
        `part`: the cube's number among the run's (0: the search's). `carry`: sensitive columns beyond the star's
        that a cube of the table's rows carries too (see `carrying`), for the metrics that follow a search; a
        grouped cube leaves them out, as they would multiply its rows."""
        self.db, self.conn, self.star, self.from_table = db, conn, star, from_table
        self.criteria = criteria or []
        self.run, self.run_id = run, run.run_id
        self.level_sizes = [list(d.shape.level_sizes) for d in star.dimensions]
        self.fields = [Field(d.attr, i, levels) for d in star.dimensions for i, levels in enumerate(d.layout.pieces())]
        codes = [star.dimensions[f.attr].layout for f in self.fields]
        self.layout = KeyLayout.for_bits([c.piece_bits(f.levels) for c, f in zip(codes, self.fields)])
        # per field: its attribute, its key column and its bits in place for each level from -1 (left out) up
        self.field_masks = [
            (
                f.attr,
                key,
                [c.piece_mask(f.levels, level) << offset for level in range(-1, star.dimensions[f.attr].height + 1)],
            )
            for f, c, key, offset in zip(self.fields, codes, self.layout.key_of, self.layout.offset)
        ]
        self.tops = [d.height + 1 for d in star.dimensions]  # a meet's level for an attribute no node keeps
        self.name, self.part = cube_table(run.run_id, part), part
        self.grouped = True  # one row per level-0 cell (and sensitive values), or one per row of the table
        self.statements = self.scans = 0
        self.rollups = 0  # roll-ups of the cube grouped for waves (each once per statement that reads it)
        self.sensitive_values = 1  # combinations of sensitive values a class may hold (at most)
        self.reference: str | None = None  # the sensitive values' counts over the table, once stored
        # the sensitive columns the cube carries as codes, each value's code (StarSchema.sensitive_codes)
        read_by_value = {attribute for c in self.criteria for attribute in c.reads_values()}
        self.codes = {} if from_table else star.sensitive_codes(read_by_value)
        self.registered: list[tuple[object, ...]] = []  # registry rows of the scratch tables (see `_register`)
        self.carry = list(carry)  # the columns a cube of the table's rows carries beyond the star's
        self._population: WaveChecker | None = None  # the population's cube, made when first read
        if from_table:
            self.grouped = False  # a row per row of the table
            keys = [f"{k} AS key{j}" for j, k in enumerate(self._packed_keys())]
            self.ref = f"(SELECT {', '.join(keys + star.sensitive_select('t'))}, 1 AS cnt FROM {star.joins()})"
            self.rows = star.rows
        else:
            self.rows = self._create()

    def _packed_keys(self, codes: dict[tuple[int, int], str] | None = None) -> list[str]:
        """Per key column: its fields, read from the dimensions (d<attr>.p<piece>, or `codes`), shifted into
        place."""
        parts: list[list[str]] = [[] for _ in range(self.layout.keys)]
        for f, key, offset in zip(self.fields, self.layout.key_of, self.layout.offset):
            code = (codes or {}).get((f.attr, f.piece), f"d{f.attr}.p{f.piece}")
            parts[key].append(f"CAST({code} AS BIGINT) * {1 << offset}")
        return [" + ".join(p) for p in parts]

    def attribute_keys(self, attr: int) -> list[str]:
        """Per key column: the fields of attribute `attr` only, read from its dimension (d<attr>), shifted into
        place (0 where the column holds none of them)."""
        parts: list[list[str]] = [[] for _ in range(self.layout.keys)]
        for f, key, offset in zip(self.fields, self.layout.key_of, self.layout.offset):
            if f.attr == attr:
                parts[key].append(f"CAST(d{f.attr}.p{f.piece} AS BIGINT) * {1 << offset}")
        return [" + ".join(p) or "0" for p in parts]

    def masks(self, node: tuple[int, ...]) -> list[int]:
        """Per key column: the bits that name the node's classes (-1 in `node`: the attribute left out)."""
        masks = [0] * self.layout.keys
        for attr, key, by_level in self.field_masks:
            masks[key] |= by_level[node[attr] + 1]
        return masks

    def attribute_masks(self, attr: int, level: int) -> list[int]:
        """Per key column: the bits of attribute `attr` that name its value at `level`."""
        masks = [0] * self.layout.keys
        for field_attr, key, by_level in self.field_masks:
            if field_attr == attr:
                masks[key] |= by_level[level + 1]
        return masks

    def _create(self) -> int:
        """One scan of the table: grouped by its packed keys at level 0 (and the sensitive columns), unless its
        rows are mostly distinct there (see `_keyed_rows`)."""
        star, db = self.star, self.db
        params: dict[str, object] = {}
        source, codes = star.coded(params)
        keys = self._packed_keys(codes)
        columns = [f"{k} AS key{j}" for j, k in enumerate(keys)] + star.sensitive_select("t", self.codes, params)
        with db.parallel_plans(self.conn):
            stored, rows = self._keyed_rows(columns, source, params)
            if not stored:
                # grouped by every column, by position: the packed keys' expressions written twice cost their
                # binding twice
                ordinals = ", ".join(str(i + 1) for i in range(len(columns)))
                self.ref, rows = self._store(
                    self.name, f"SELECT {', '.join(columns)}, COUNT(*) AS cnt FROM {source} GROUP BY {ordinals}", params
                )
                self.statements += 1
        if star.rows >= STATISTICS_ROWS:
            db.analyze(self.conn, self.ref)  # the waves' plans depend on the cube's size
        self.scans += 1
        # the sensitive values a class may hold size the waves that carry them; on a small table (so a small cube,
        # whose waves are capped by MAX_WAVE first) counting them is a millisecond for nothing
        counted, known = [], 1
        if star.rows > SMALL_CUBE:
            counted = [s for col, s in star.sensitive_columns().items() if col not in star.domain_counts]
            known = math.prod(len(star.domain_counts[col]) for col in star.sensitive if col in star.domain_counts)
        values: list[int] = []
        if rows is None or counted:  # a statement only for what the cube's creation did not tell
            rows, *values = db.execute(self.conn, db.as_text(self.conn, self._sizes(counted))).one()
        self.sensitive_values = known * math.prod(max(int(v), 1) for v in values)
        self._register("packed_cube", self.name, rows)
        return int(rows)

    def _sizes(self, counted: list[str]) -> sa.Select[Any]:
        """The cube's rows, and the distinct values of each of its columns `counted` (each a grouping of its own:
        PostgreSQL sorts for a COUNT(DISTINCT), hospital 1M 0.23 s, and hashes a DISTINCT)."""
        cube = self.db.ref_table(self.ref, counted)
        distinct = [
            sa.select(sa.func.count())
            .select_from(sa.select(cube.c[s]).where(cube.c[s].is_not(None)).distinct().subquery())
            .scalar_subquery()
            for s in counted
        ]
        return sa.select(sa.select(sa.func.count()).select_from(cube).scalar_subquery(), *distinct)

    def carrying(self) -> StarSchema | None:
        """The star whose frequency sets this cube serves beside its own: its sensitive columns and those it
        carries (s0.. in that order), where it is a cube of the table's rows (None: a grouped cube, or none
        stored)."""
        if self.grouped or self.from_table:
            return None
        return dataclasses.replace(self.star, sensitive=list(dict.fromkeys(self.star.sensitive + self.carry)))

    def serve(self, star: StarSchema) -> None:
        """From now on, read as the cube of `star` (`carrying`'s): node sets carry every column it carries."""
        assert star == self.carrying(), "a cube serves the star it carries"
        self.star = star

    def cells_term(self) -> float:
        """The level-0 cells' sum of c ln c, which KL divergence needs, from the cube (grouped first where its rows
        are the table's); read when the run computes metrics, not by every search."""
        cells = self.ref
        if not self.grouped:
            group = ", ".join(self.key_names + list(self.star.sensitive_columns().values()))
            cells = f"(SELECT {count_sum('cnt')} AS cnt FROM {self.ref} c GROUP BY {group}) g"
        return float(self.db.execute(self.conn, f"SELECT {sum_c_ln_c('cnt')} FROM {cells}").scalar_one())

    def _keyed_rows(self, columns: list[str], source: str, params: dict[str, object]) -> tuple[bool, int | None]:
        """On a large table, where the database estimates distinct values cheaply: store the table's rows with their
        keys first, and keep them as the cube when most of them are distinct (grouping nearly unique rows costs
        as much as the joins and shrinks nothing: hospital 1M, 112 -> 56 ms); otherwise group them into the cube.
        Whether this stored the cube (False leaves it to the caller's one grouping of the table), and its rows
        where known."""
        star, db = self.star, self.db
        grouping = self.key_names + list(star.sensitive_columns().values())
        estimate = db.approximate_distinct(grouping)
        if estimate is None or star.rows <= SMALL_CUBE:
            return False, None
        name = rows_table(self.run_id, self.part)
        carried = dataclasses.replace(star, sensitive=star.sensitive + self.carry).sensitive_select("t")
        selected = ", ".join(columns + carried[len(star.sensitive) :])
        keyed, _ = self._store(name, f"SELECT {selected}, CAST(1 AS BIGINT) AS cnt FROM {source}", params)
        rows, distinct = db.execute(self.conn, f"SELECT COUNT(*), {estimate} FROM {keyed}").one()
        self.statements += 2
        if distinct > KEYED_ROWS * rows:
            self.name, self.ref, self.grouped = name, keyed, False
            return True, int(rows)
        self.ref, grouped_rows = self._store(
            self.name,
            f"SELECT {', '.join(grouping)}, {count_sum('cnt')} AS cnt FROM {keyed} GROUP BY {', '.join(grouping)}",
        )
        db.drop_table(self.conn, keyed)
        self.statements += 1
        return True, grouped_rows

    def _store(self, name: str, select: str, params: dict[str, object] | None = None) -> tuple[str, int | None]:
        """The run's scratch table `name` (the cube, the keyed rows) made from `select`: its reference, and its
        rows where the database reported them."""
        return self.db.create_run_scratch(self.conn, self.run.work_schema, name, select, params)

    def _register(self, label: str, name: str, rows: int) -> None:
        """A scratch table of the search, for the frequency-set registry. Written by `close`, once dropped: the
        registry records what the search computed; a killed run's scratch tables end with its session, or with the
        next cleanup where the database keeps them in the metadata schema (Database.create_run_scratch)."""
        self.registered.append((None, label, name, "base", None, rows, True))

    def violations(
        self, nodes: list[tuple[int, ...]], criteria: list[Criterion], sensitive: bool = True
    ) -> list[tuple[int, int]]:
        """(violating classes, tuples in them) of each node, in waves bounded by the rows they join. `sensitive`
        False: the frequency sets leave the sensitive columns out (criteria that read class sizes alone)."""
        # families (the attributes a node keeps) together, then by levels, the attributes with the most values
        # first: neighbours in this order share high levels where it matters, so a cluster's meet is small
        attrs = sorted(range(len(self.level_sizes)), key=lambda a: -self.level_sizes[a][0])
        order = sorted(
            range(len(nodes)),
            key=lambda j: (tuple(lv < 0 for lv in nodes[j]), tuple(nodes[j][a] for a in attrs)),
            reverse=True,
        )
        by_index: dict[int, tuple[int, int]] = {}
        for chunk, forest in self._statements(order, nodes, sensitive):
            found = self._wave([nodes[j] for j in chunk], forest, criteria, sensitive)
            by_index.update((chunk[j], found.get(j, (0, 0))) for j in nodes_of(forest))
        return [by_index[j] for j in range(len(nodes))]

    def _statements(
        self, order: list[int], nodes: list[tuple[int, ...]], sensitive: bool
    ) -> Iterator[tuple[list[int], list[RollUp]]]:
        """A statement each: a wave (indexes into `nodes`) and the roll-ups it reads, which name the wave's nodes
        by their index in it. On a large cube, waves of MAX_WAVE nodes whose planned roll-ups are cut into
        statements of at most ROWS_PER_STATEMENT rows joined; on a small one, `_waves`."""
        if not self.large:
            for wave in self._waves(order, nodes, sensitive):
                yield wave, self._clusters([nodes[j] for j in wave])
            return
        rows_at = partial(self._rows_at_many, sensitive=sensitive)
        for start in range(0, len(order), MAX_WAVE):
            wave = order[start : start + MAX_WAVE]
            forest = self._planned([nodes[j] for j in wave], sensitive)
            for trees in statements(forest, rows_at, ROWS_PER_STATEMENT):
                yield wave, trees

    def _planned(self, nodes: list[tuple[int, ...]], sensitive: bool) -> list[RollUp]:
        """The roll-ups planned for `nodes` on a large cube (rollups.plan), naming them by their index."""
        rows_at = partial(self._rows_at_many, sensitive=sensitive)
        return plan([tuple(self._meet([node])) for node in nodes], rows_at, self.rows, ROWS_PER_STATEMENT)

    def clusters(self, nodes: list[tuple[int, ...]]) -> list[tuple[list[int], list[int]]]:
        """`nodes` in clusters of CLUSTER neighbours: per cluster, the masks of its meet (every attribute at the
        lowest level of any of its nodes) and its nodes' indexes."""
        return [(self._meet_masks(r.meet), r.nodes) for r in self._clusters(nodes)]

    def node_sets(self, nodes: list[tuple[int, ...]]) -> str:
        """One SELECT of node (its index in `nodes`), key(s), the sensitive columns and cnt: every node's frequency
        set, read from the cube as a wave reads it (in clusters grouped to their meets, or through roll-ups
        planned for them), its roll-ups read by several as CTEs."""
        forest = self._planned(nodes, True) if self.large else self._clusters(nodes)
        ctes, definition = self._frequency_sets(nodes, forest, True)
        return f"WITH {_with_clause(ctes)}sets AS ({definition}) SELECT * FROM sets"

    def _waves(self, order: list[int], nodes: list[tuple[int, ...]], sensitive: bool) -> list[list[int]]:
        """`order` cut into waves: a node joins the current wave while the wave's base (the cube grouped to the
        meet, as estimated by `_rows_at`) times its nodes stays within ROWS_PER_STATEMENT."""
        waves: list[list[int]] = []
        meet: list[int] = []  # the current wave's
        for j in order:
            if waves and len(waves[-1]) < MAX_WAVE:
                joined = [min(m, level) for m, level in zip(meet, self._meet([nodes[j]]))]
                if self._rows_at(joined, sensitive) * (len(waves[-1]) + 1) <= ROWS_PER_STATEMENT:
                    waves[-1].append(j)
                    meet = joined
                    continue
            waves.append([j])
            meet = self._meet([nodes[j]])
        return waves

    def _meet(self, nodes: list[tuple[int, ...]]) -> list[int]:
        """Each attribute at the lowest level of any of `nodes` (height + 1 when every node leaves it out)."""
        return [
            min((node[attr] for node in nodes if node[attr] >= 0), default=top) for attr, top in enumerate(self.tops)
        ]

    @cached_property
    def log_level_sizes(self) -> list[np.ndarray]:
        """Per attribute, the log of each level's size, and 0 above the top (the attribute left out)."""
        return [np.log(np.array(sizes + [1], dtype=float)) for sizes in self.level_sizes]

    def _rows_at(self, meet: list[int] | tuple[int, ...], sensitive: bool) -> int:
        """At most how many rows the cube has once grouped to `meet`: the product of the levels' sizes (and of
        the sensitive columns' numbers of values, when the sets carry them), never more than the cube. (A small
        cube's waves ask it for every node they take: plain Python, 1 us a call against 25 us through numpy.)"""
        rows = self.sensitive_values if sensitive else 1
        for sizes, level, top in zip(self.level_sizes, meet, self.tops):
            rows *= sizes[level] if level < top else 1
            if rows >= self.rows:
                return self.rows
        return rows

    def _rows_at_many(self, meets: np.ndarray, sensitive: bool) -> np.ndarray:
        """`_rows_at` of each row of `meets` (levels; above the top: the attribute left out), as logs summed over
        arrays: what the roll-up planner asks for every pair of its roll-ups."""
        logs = np.full(len(meets), math.log(self.sensitive_values) if sensitive else 0.0)
        for d in self.star.dimensions:
            logs += self.log_level_sizes[d.attr][meets[:, d.attr]]
        return np.asarray(np.exp(np.minimum(logs, math.log(max(self.rows, 1)))))

    @property
    def large(self) -> bool:
        """Whether a wave's reads of the cube are planned (rollups.plan) rather than taken in clusters: every
        grouping of a large cube is a pass over many rows."""
        return self.rows > SMALL_CUBE

    @property
    def key_names(self) -> list[str]:
        return [f"key{key}" for key in range(self.layout.keys)]

    def _sensitive(self, sensitive: bool) -> dict[str, str]:
        return self.star.sensitive_columns() if sensitive else {}

    def _wave(
        self, nodes: list[tuple[int, ...]], forest: list[RollUp], criteria: list[Criterion], sensitive: bool
    ) -> dict[int, tuple[int, int]]:
        """(violating classes, tuples in them) of each node of `forest` with any (by its index in `nodes`)."""
        ctes, definition = self._frequency_sets(nodes, forest, sensitive)
        population = self.population_sets(nodes, criteria, nodes_of(forest))
        if population is not None:
            ctes += population
        wave = self.criteria_view("wave", definition, criteria, sensitive, "population" if population else None)
        view, holders = dataclasses.replace(wave, counts_only=True).with_stored_holders()
        params: dict[str, object] = {}
        stored = "".join(f", {name} {self.db.wave_cte} ({select})" for name, select in holders)
        decided = histograms.decided(criteria)
        if decided is not None:  # each node's class sizes, decided in Python
            select = histogram_statement(view, criteria, params)
        else:
            violators = violating_classes_sql(view, criteria, "w", params)
            select = "SELECT node, COUNT(*), SUM(n) FROM (" + violators + ") AS violators GROUP BY node"
        statement = f"WITH {_with_clause(ctes)}wave {self.db.wave_cte} ({definition}){stored} {select}"
        self.statements += 1
        if decided is not None:
            answers = histograms.violations(decided, histograms.read_histograms(self.conn, statement, params, True))
            return {int(node): answer for node, answer in answers.items() if answer[0]}
        rows = self.db.execute(self.conn, statement, params).all()
        return {int(node): (int(classes), int(tuples)) for node, classes, tuples in rows}

    def population_sets(
        self, nodes: list[tuple[int, ...]], criteria: list[Criterion], only: list[int] | None = None
    ) -> list[tuple[str, str]] | None:
        """Where `criteria` compare classes with the population of the star's research subset: (name, SELECT) of
        common table expressions, the last, `population`, of node (its index in `nodes`), key.. and cnt: the
        classes over the population of every node (or of those numbered `only`: a statement's part of a wave),
        from its own cube (made on first use), read as a wave reads the cube. None where no criterion reads the
        population."""
        if self.star.population is None or not any(c.reads_population for c in criteria):
            return None
        population = self.population_checker()
        numbers = sorted(only) if only is not None else list(range(len(nodes)))
        picked = [nodes[j] for j in numbers]
        forest = population._planned(picked, False) if population.large else population._clusters(picked)
        forest = _renumbered(forest, numbers)  # as `nodes` numbers them
        ctes, definition = population._frequency_sets(nodes, forest, False, prefix="population_rollup")
        return [*ctes, ("population", definition)]

    def population_checker(self) -> WaveChecker:
        """A checker of the population of the star's research subset, over its own cube (made on first use, with
        the same key layout), which this one closes."""
        assert self.star.population is not None, "a star with a research subset"
        if self._population is None:
            over = dataclasses.replace(
                self.star, source=self.star.population, rows=self.star.population_rows, sensitive=[], population=None
            )
            self._population = WaveChecker(
                db=self.db, conn=self.conn, star=over, run=self.run, part=self.part + POPULATION_PART
            )
        return self._population

    def criteria_view(
        self,
        table: str,
        definition: str,
        criteria: list[Criterion],
        sensitive: bool = True,
        population: str | None = None,
    ) -> FrequencySetView:
        """How `criteria` see `table`, the name of a CTE whose SELECT is `definition`: frequency sets of node, key
        columns (the classes), the cube's sensitive columns (`sensitive`) and cnt, one row per class and values;
        `population`, the name of a CTE of `population_sets`."""
        return FrequencySetView(
            population=population,
            table=table,
            class_columns=["node"] + self.key_names,
            node_columns=("node",),
            count_column="cnt",
            sensitive_columns=self._sensitive(sensitive),
            definition=definition,
            reference=self._reference(criteria),
            grouped=True,
            table_counts=self._table_counts(criteria) if sensitive else None,
            sizes_by_join=self.db.class_sizes_by_join,
            codes=self.codes if sensitive else None,
            held=self.star.held if sensitive else {},
        )

    def _reference(self, criteria: list[Criterion]) -> str:
        """What t-closeness compares a class with: the table's counts of each sensitive value, from the cube, or,
        on a large cube, stored once (each wave would scan the cube for them twice); needed only by the criteria
        that do not bind the table's counts (the ordered distance; a domain too large to have been read before the
        search; any, where the database binds no lists)."""
        bound = self._table_counts(criteria).keys()
        in_sql = any(
            c.reads_distribution and not (c.reads_table_counts and set(c.sensitive_attributes()) <= bound)
            for c in criteria
        )
        if not self.large or not in_sql:
            return self.ref
        if self.reference is None:
            columns, name = ", ".join(self.star.sensitive_columns().values()), f"reference_{self.run_id}"
            self.reference = self.db.create_scratch(
                self.conn, name, f"SELECT {columns}, {count_sum('cnt')} AS cnt FROM {self.ref} GROUP BY {columns}"
            )
            self.statements += 1
            self.scans += self.from_table
            rows = self.db.count_rows(self.conn, self.reference)
            self._register("reference", name, rows)
        return self.reference

    def _table_counts(self, criteria: list[Criterion]) -> dict[str, dict[str | None, int]]:
        """Per sensitive attribute whose table counts `criteria` bind as lists (t-closeness but for the ordered
        distance, where the database binds lists), the table's count of each value (as text), where they were
        read before the search (StarSchema.domain_counts)."""
        if not self.db.binds_lists:
            return {}
        wanted = {a for c in criteria if c.reads_table_counts for a in c.sensitive_attributes()}
        return {a: counts for a, counts in self.star.domain_counts.items() if a in wanted}

    def _clusters(self, nodes: list[tuple[int, ...]]) -> list[RollUp]:
        """A small cube's wave: its nodes in clusters of CLUSTER neighbours, each from the cube grouped to the
        cluster's meet."""
        clusters = [list(range(start, min(start + CLUSTER, len(nodes)))) for start in range(0, len(nodes), CLUSTER)]
        return [RollUp(tuple(self._meet([nodes[j] for j in cluster])), cluster) for cluster in clusters]

    def _frequency_sets(
        self, nodes: list[tuple[int, ...]], forest: list[RollUp], sensitive_too: bool, prefix: str = "rollup"
    ) -> tuple[list[tuple[str, str]], str]:
        """(name, SELECT) of the roll-ups that several others read (named `prefix` and a number), and the SELECT of
        node (its index in `nodes`), key(s), sensitive columns, cnt: the frequency sets of the nodes of `forest`,
        each from its roll-up."""
        names = ", ".join(["node"] + [f"m{key}" for key in range(self.layout.keys)])
        keys = [f"c.key{key} & CAST(w.m{key} AS BIGINT)" for key in range(self.layout.keys)]
        sensitive = [f"c.{s}" for s in self._sensitive(sensitive_too).values()]
        columns = [f"{k} AS key{j}" for j, k in enumerate(keys)] + sensitive
        select = f"SELECT w.node, {', '.join(columns)}, {count_sum('c.cnt')} AS cnt"
        group = f"GROUP BY {', '.join(['w.node'] + keys + sensitive)}"
        ctes: list[tuple[str, str]] = []
        parts: list[str] = []

        def read(roll_up: RollUp, parent: str, parent_rows: float) -> None:
            source, rows, grouped = parent, parent_rows, self._worth_grouping(roll_up, parent_rows, sensitive_too)
            if grouped:
                self.rollups += 1
                source, rows = (
                    self._grouped(parent, roll_up.meet, sensitive_too),
                    self._rows_at(roll_up.meet, sensitive_too),
                )
                if roll_up.below:  # read by several: computed once
                    ctes.append((f"{prefix}{len(ctes)}", source))
                    source = ctes[-1][0]
            if self.from_table and parent == self.ref and (grouped or roll_up.nodes):
                self.scans += 1  # without a cube, whatever reads the source is a scan of the table
            if len(roll_up.nodes) > 1 and self.db.grouping_sets:
                parts.append(
                    self._grouping_sets(
                        source,
                        [(j, self.masks(nodes[j])) for j in roll_up.nodes],
                        list(self._sensitive(sensitive_too).values()),
                    )
                )
            elif roll_up.nodes:
                values = ", ".join("(" + ", ".join(map(str, (j, *self.masks(nodes[j])))) + ")" for j in roll_up.nodes)
                parts.append(f"{select} FROM {source} c CROSS JOIN (VALUES {values}) AS w({names}) {group}")
            for under in roll_up.below:
                read(under, source, rows)

        for root in forest:
            read(root, self.ref, self.rows)
        return ctes, " UNION ALL ".join(parts)

    def _grouping_sets(self, source: str, masked: list[tuple[int, list[int]]], sensitive: list[str]) -> str:
        """Node, key(s), `sensitive` columns, cnt of each (node, masks) of `masked`, from one read of `source`: each
        node's keys are a grouping set of their own (a node's key columns are NULL in every other node's rows)."""
        keys = range(self.layout.keys)
        columns = [
            f"c.key{key} & CAST({mask} AS BIGINT) AS g{i}_{key}"
            for i, (_, masks) in enumerate(masked)
            for key, mask in zip(keys, masks)
        ]
        node = " ".join(f"WHEN g{i}_0 IS NOT NULL THEN {j}" for i, (j, _) in enumerate(masked))
        merged = [f"COALESCE({', '.join(f'g{i}_{key}' for i in range(len(masked)))}) AS key{key}" for key in keys]
        sets = ", ".join("(" + ", ".join([f"g{i}_{key}" for key in keys] + sensitive) + ")" for i in range(len(masked)))
        read = columns + [f"c.{s}" for s in sensitive]
        return (
            f"SELECT CASE {node} END AS node, {', '.join(merged + sensitive)}, {count_sum('cnt')} AS cnt FROM "
            f"(SELECT {', '.join(read)}, c.cnt FROM {source} c) g GROUP BY GROUPING SETS ({sets})"
        )

    def _worth_grouping(self, roll_up: RollUp, parent_rows: float, sensitive: bool) -> bool:
        """Whether a roll-up groups its parent to its meet: not a lone node with nothing under it (its own join
        groups as much), not at the bottom of the lattice, and, on a large cube, only when that is expected to
        halve the rows at least."""
        if not any(roll_up.meet) or (len(roll_up.nodes) == 1 and not roll_up.below and self.large):
            return False
        return not self.large or self._rows_at(list(roll_up.meet), sensitive) <= GROUP_FIRST * parent_rows

    def _meet_masks(self, meet: tuple[int, ...]) -> list[int]:
        """The masks of a meet (each attribute's level; above its top, an attribute no node keeps: no bits)."""
        return self.masks(tuple(-1 if level >= top else level for level, top in zip(meet, self.tops)))

    def _grouped(self, source: str, meet: tuple[int, ...], sensitive_too: bool) -> str:
        """`source` grouped up to `meet` (each attribute's level; above its top: left out)."""
        keys = [f"key{key} & CAST({mask} AS BIGINT)" for key, mask in enumerate(self._meet_masks(meet))]
        sensitive = list(self._sensitive(sensitive_too).values())
        return (
            f"(SELECT {', '.join([f'{k} AS key{j}' for j, k in enumerate(keys)] + sensitive)}, "
            f"{count_sum('cnt')} AS cnt FROM {source} b GROUP BY {', '.join(keys + sensitive)})"
        )

    def close(self) -> None:
        if self._population is not None:
            self._population.close()
        if self.reference:
            self.db.drop_table(self.conn, self.reference)
        if not self.from_table:
            self.db.drop_table(self.conn, self.ref)
        if self.registered:
            self.run.store.insert(
                self.db.metadata_connection(self.conn), runs.FREQUENCY_SETS, self.run_id, self.registered
            )


def _renumbered(forest: list[RollUp], numbers: list[int]) -> list[RollUp]:
    """`forest`, whose roll-ups name nodes by their index in a list, naming them by `numbers` of those indexes."""
    return [RollUp(r.meet, [numbers[j] for j in r.nodes], _renumbered(r.below, numbers)) for r in forest]


def _with_clause(ctes: list[tuple[str, str]]) -> str:
    """The (name, SELECT) roll-ups several parts of a statement read, as the start of its WITH clause."""
    return "".join(f"{name} AS MATERIALIZED ({select}), " for name, select in ctes)
