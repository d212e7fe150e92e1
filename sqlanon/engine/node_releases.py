"""Many lattice nodes' releases at once, over a packed cube (engine.checker), for the analyses of
sqlanon.analysis: a batch of nodes costs a few statements, whatever its size, where a node alone cost several
scans of the table joined with its dimensions.

A batch is a list of nodes, numbered in it. From the cube, one statement stores the batch's frequency sets as a
wave of the search reads them (WaveChecker.node_sets: per node, class key key0.., the cube's sensitive values,
the tuples); with suppression, one more the classes the criteria suppress (the criteria's SQL over the same
view as the waves'). Everything else reads them: the metrics' and ARX's sums per node, the attacks of
engine.attacks (whose `by` is the node column), the Bayes-optimal audit, and what a report shows of the
chosen node (its class sizes, least diverse classes and distributions, the classes' labels read from a lookup
of the dimension tables by masked key bits). Where a statement needs a node's masks (its class key is the
cube's level-0 key ANDed with them) or its levels, it joins a VALUES list of the batch's nodes. Classes are
integer keys joined by equality, so every join hashes.

Class keys name a class by the path codes of its values; ARX's loss needs each class's area per attribute (the
hierarchy leaves under its value), which a small lookup table gives per (attribute, level, masked key bits),
computed from the dimension tables once. The audit's figures are a person's whatever the node (see
`person_figures`): stored once per level-0 cell, summed per node over the cells it releases.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql.selectable import SelectBase

from ..criteria import Criterion
from ..criteria.view import count_sum, share, sum_c_ln_c
from ..model.quality import QualitySettings
from .attacks import Release, flagged_classes, most_frequent
from .checker import ROWS_PER_STATEMENT, WaveChecker
from .frequency import resolve_histograms, violating_classes_sql
from .scratch import MATERIALIZED

NODE = "node"
NO_VALUE = "no_value"  # the constant value column of a release analyzed without a sensitive attribute


@dataclass(frozen=True)
class NodeBatch:
    """A batch's tables, each a FROM item (a stored table, or for a caller reading it once a subquery; see
    NodeReleases.batch): `frequency_sets` (node, key.., the cube's sensitive columns `sensitive`, cnt),
    `suppressed` (node, key.. of the classes left out; None: none) and `classes`; `value`, the analyzed attribute's
    column."""

    nodes: list[tuple[int, ...]]
    frequency_sets: str
    suppressed: str | None
    keys: list[str]
    sensitive: list[str]
    value: str | None
    classes: str  # per class (node, key..): n, distinct_values, top, c_ln_c, kept (see NodeReleases.batch)
    decoded: tuple[str, dict[str, Any]] | None = None  # where `value` holds codes: SQL of fs's value as text
    #: where persons may hold several values of the analyzed attribute: the FROM item of its sets' members with
    #: each set's first (NodeReleases.members), whose sets the `value` column holds
    members: str | None = None

    def release(self) -> Release:
        """The batch's releases over the analyzed attribute, by node, as engine.attacks reads them (without one, a
        constant value: every class one cell, which the risk figures read; where persons hold several values, a
        row per class and value of its holders, and `persons` summing to its persons)."""
        selected, grouping = "*", ""
        if self.members is not None:
            assert self.value is not None, "sets of values are the analyzed attribute's"
            return Release(
                definition=holders_per_value(self.frequency_sets, [NODE, *self.keys], self.value, self.members),
                classes=[NODE, *self.keys],
                suppressed=every_row(self.suppressed) if self.suppressed else None,
                by=(NODE,),
                value=self.value,
                flagged=self.classes,
                persons="persons",
            )
        if self.value is None:
            assert not self.sensitive, "without an analyzed attribute the cube carries no sensitive column"
            selected = ", ".join([NODE, *self.keys, f"0 AS {NO_VALUE}", "cnt"])
        elif self.sensitive != [self.value]:  # one row per class and value of the attribute
            group = ", ".join([NODE, *self.keys, str(self.value)])
            selected, grouping = f"{group}, {count_sum('cnt')} AS cnt", f" GROUP BY {group}"
        definition = f"SELECT {selected} FROM {self.frequency_sets}{grouping}"
        return Release(
            definition=definition,
            classes=[NODE, *self.keys],
            suppressed=every_row(self.suppressed) if self.suppressed else None,
            by=(NODE,),
            value=self.value or NO_VALUE,
            flagged=self.classes,
            decoded=self.decoded,
        )


@dataclass(frozen=True)
class ClassSums:
    """A node's sums over its classes: released classes, suppressed tuples, n^2 over the released classes and
    over all (DM*), ARX's certainty penalty (suppressed tuples: 1 per QI), and for KL divergence the sum over the
    released (class, values) cells of c ln c - c ln(area of the class), and over the suppressed tuples grouped
    by their values, c ln c. Per QI, for ARX's quality models (model.quality): the certainty penalty of the
    released and of the suppressed tuples, and over the suppressed tuples grouped by the QI's value, c ln c."""

    classes: int = 0
    suppressed: int = 0
    squares: float = 0.0
    all_squares: float = 0.0
    kl_released: float = 0.0
    kl_suppressed: float = 0.0
    released_penalties: tuple[float, ...] = ()
    suppressed_penalties: tuple[float, ...] = ()
    suppressed_c_ln_c: tuple[float, ...] = ()
    released_ln_area: tuple[float, ...] = ()
    attacked: float = 0.0  # see model.quality.QualitySums
    mispredicted: int = 0  # over the classification's targets (NodeReleases.prediction_sums)
    undecided: int = 0
    #: per QI, over the released tuples grouped by its value, the sum of the groups' sizes squared, where asked
    #: (NodeReleases.value_squares)
    value_squares: tuple[float, ...] = ()
    #: per QI target, over the released classes grouped by the other QIs, the most frequent value's count, summed,
    #: where asked (NodeReleases.target_tops)
    target_tops: tuple[float, ...] = ()
    #: per QI target of the classification metric (`qi_target_positions`), its tuples mispredicted and undecided
    #: (NodeReleases.target_predictions)
    target_predictions: tuple[tuple[int, int], ...] = ()

    @property
    def penalty(self) -> float:
        """ARX's certainty penalty over every QI: the released tuples' per QI, and 1 per QI for a suppressed one."""
        return sum(self.released_penalties) + len(self.released_penalties) * self.suppressed


def qi_target_positions(dimensions: Sequence[Any], targets: Sequence[str]) -> list[int]:
    """The positions among the QIs (`dimensions`) of the classification's `targets` that are QIs (the others are
    sensitive attributes)."""
    wanted = {t.lower() for t in targets}
    return [i for i, d in enumerate(dimensions) if d.column.lower() in wanted]


@dataclass
class MarginalTerms:
    """Per (QI, level): over the table's values at that level, the sum of c ln c, and of c times each value's
    certainty penalty, and how many values there are (see NodeReleases.marginal_terms)."""

    c_ln_c: dict[tuple[int, int], float] = field(default_factory=dict)
    penalty: dict[tuple[int, int], float] = field(default_factory=dict)
    ln_area: dict[tuple[int, int], float] = field(default_factory=dict)  # sum of c ln(leaves under the value)
    values: dict[tuple[int, int], int] = field(default_factory=dict)  # the distinct values the table holds there


class NodeReleases:
    """Batches of nodes over `checker`'s cube; with `suppress`, the classes that violate `criteria` are left out
    of each release. `attribute`: the attribute the attacks analyze (the cube carries it as values, or as codes that
    its releases read back as texts)."""

    def __init__(
        self, checker: WaveChecker, criteria: list[Criterion], *, suppress: bool, attribute: str | None = None
    ):
        self.checker, self.attribute, self.criteria, self.suppress = checker, attribute, criteria, suppress
        self.db, self.conn = checker.db, checker.conn
        self.keys = checker.key_names
        self.sensitive = list(checker.star.sensitive_columns().values())
        self.value = checker.star.sensitive_columns()[attribute] if attribute else None
        self.decoded = None  # the attribute's codes read back as texts, where the cube carries codes
        if attribute in checker.codes:
            texts = list(checker.codes[attribute])  # by code: 1, 2, ...
            self.decoded = (self.db.text_at(f"fs.{self.value}", "value_texts"), {"value_texts": texts})
        # where persons may hold several values of the analyzed attribute (1:M), the FROM item of its sets' members
        self.held_members = checker.star.held.get(attribute) if attribute else None
        self.statements = 0
        self._areas: str | None = None
        self._persons: str | None = None
        self._members: str | None = None
        self._levels: set[tuple[int, int]] = set()  # (attribute, level) above 0 of the nodes to look areas up for

    def batches(self, nodes: list[tuple[int, ...]]) -> list[list[tuple[int, ...]]]:
        """`nodes` cut into batches whose cells (cube rows x nodes) stay within ROWS_PER_STATEMENT. (The areas'
        lookup, made at its first use, covers the levels of the nodes given here; one made before for other
        levels is made again.)"""
        levels = {(attr, level) for node in nodes for attr, level in enumerate(node) if level > 0}
        if self._areas is not None and not levels <= self._levels:
            self.db.drop_table(self.conn, self._areas)
            self._areas = None
        self._levels |= levels
        size = self.batch_size()
        return [nodes[start : start + size] for start in range(0, len(nodes), size)]

    def batch_size(self) -> int:
        """The nodes a batch holds: its cells (cube rows x nodes) within ROWS_PER_STATEMENT."""
        return max(1, ROWS_PER_STATEMENT // max(self.checker.rows, 1))

    def values(self, nodes: list[tuple[int, ...]], columns: bool = False, only: list[int] | None = None) -> str:
        """The batch's VALUES list (of its nodes numbered `only`, or all): node number, class masks m.., and with
        `columns` per attribute its level l.. and its bits' masks a<attr>_<key>, with its alias."""
        checker = self.checker
        keys = range(checker.layout.keys)
        names = [NODE] + [f"m{key}" for key in keys]
        if columns:
            names += [f"l{d.attr}" for d in checker.star.dimensions]
            names += [f"a{d.attr}_{key}" for d in checker.star.dimensions for key in keys]
        rows = []
        for j in range(len(nodes)) if only is None else only:
            node = nodes[j]
            row = [j, *checker.masks(node)]
            if columns:
                row += list(node)
                row += [mask for d in checker.star.dimensions for mask in checker.attribute_masks(d.attr, node[d.attr])]
            rows.append("(" + ", ".join(map(str, row)) + ")")
        return f"(VALUES {', '.join(rows)}) AS w({', '.join(names)})"

    @contextmanager
    def batch(self, nodes: list[tuple[int, ...]], tag: str, *, read_once: bool = False) -> Iterator[NodeBatch]:
        """The batch's tables, stored for the statements that read them, dropped at the end (after an error, with
        the caller's transaction). With `read_once` (a caller reading the classes in one statement: the metrics),
        what only that statement reads is a subquery of it instead of a stored table: the classes, and without
        suppression the frequency sets too, so that a batch costs one statement (on Spark, one job)."""
        node_sets, stored = self.checker.node_sets(nodes), []
        if read_once and not self.suppress and self.held_members is None:
            sets = f"({node_sets}) fs_{tag}"
        else:
            sets = self._store(f"sets_{tag}", node_sets)
            stored.append(sets)
        suppressed = self._suppressed(sets, tag, nodes) if self.suppress else None
        stored += [suppressed] if suppressed else []
        classes = self._classes(sets, suppressed)
        if read_once:
            classes = f"({classes})"
        else:
            classes = self._store(f"classes_{tag}", classes)
            stored.append(classes)
        members = self.members()
        yield NodeBatch(nodes, sets, suppressed, self.keys, self.sensitive, self.value, classes, self.decoded, members)
        for ref in reversed(stored):
            self.db.drop_table(self.conn, ref)

    def _store(self, name: str, select: str, params: dict[str, Any] | None = None) -> str:
        """A scratch table made from `select`, analyzed (its joins are planned on its real size)."""
        ref = self.db.create_scratch(self.conn, name, select, params)
        self.db.analyze(self.conn, ref)
        self.statements += 1
        return ref

    def _classes(self, sets: str, suppressed: str | None) -> str:
        """SELECT the batch's classes (stored once where several statements read them: the attacks, the sums, the
        audit, which each grouped the frequency sets anew before): per class (node, key..), its tuples n, the
        analyzed attribute's distinct values and the count of its most frequent one (top), the sum of c ln c over
        its cells of every sensitive column (KL divergence), and `kept` (0: suppressed)."""
        group, size = ", ".join([NODE, *self.keys]), "cnt"
        members = self.members()
        if members is not None:  # a row per class and value, its holders; each cell's c ln c on its set's first
            assert self.value is not None, "sets of values are the analyzed attribute's"
            c_ln_c = "SUM(m.first_member * f.cnt * LN(CAST(f.cnt AS DOUBLE PRECISION))) AS c_ln_c"
            cells, size = holders_per_value(sets, [NODE, *self.keys], self.value, members, ", " + c_ln_c), "persons"
        elif self.value is None or self.sensitive == [self.value]:  # a row per cell already
            cells = f"SELECT {group}, cnt, cnt * LN(CAST(cnt AS DOUBLE PRECISION)) AS c_ln_c FROM {sets}"
        else:  # the analyzed attribute's values, each with its cells' c ln c
            cells = (
                f"SELECT {group}, {count_sum('cnt')} AS cnt, {sum_c_ln_c('cnt')} AS c_ln_c FROM {sets} "
                f"GROUP BY {group}, {self.value}"
            )
        suppressed_classes = every_row(suppressed) if suppressed else None
        return flagged_classes(
            f"({cells}) v", [NODE, *self.keys], suppressed_classes, ", SUM(c_ln_c) AS c_ln_c", size=size
        )

    def members(self) -> str | None:
        """Where persons may hold several values of the analyzed attribute: its sets' members (held, value) and
        first_member (1 on each set's first, which counts the set's persons once: `holders_per_value`), stored at
        the first use; None otherwise."""
        if self.held_members is not None and self._members is None:
            m = self.db.ref_table(self.held_members, ["held", "value"])
            rank = sa.func.row_number().over(partition_by=m.c.held, order_by=m.c.value)
            first = sa.case((rank == 1, 1), else_=0).label("first_member")
            select = self.db.as_text(self.conn, sa.select(m.c.held, m.c.value, first))
            # not members_<run>_<i>: that is a held column's own table of its sets' members (engine.persons)
            self._members = self._store(self._name("first_members"), select)
        return self._members

    def _suppressed(self, sets: str, tag: str, nodes: list[tuple[int, ...]]) -> str:
        """The batch's classes that violate the criteria (node, key..), stored."""
        definition = every_row(sets)
        population = self.checker.population_sets(nodes, self.criteria) or []
        view = self.checker.criteria_view(
            "criteria_fs", definition, self.criteria, population=population[-1][0] if population else None
        )
        params: dict[str, Any] = {}
        with_clause = "WITH " + "".join(f"{name} AS ({select}), " for name, select in population)
        with_clause += "criteria_fs AS (" + definition + ") "
        criteria = resolve_histograms(self.conn, view, self.criteria, with_clause, params)
        violators = violating_classes_sql(view, criteria, "a", params)
        return self._store(
            f"suppressed_{tag}",
            f"{with_clause}SELECT DISTINCT {', '.join([NODE, *self.keys])} FROM ({violators}) v",
            params,
        )

    def areas(self) -> str:
        """The lookup of the areas of values, stored once: per attribute, level and masked key bits (m..) of a
        value at that level, ARX's certainty penalty (leaves under it - 1) / (leaves of the hierarchy - 1) as
        `weight`, and the log of the leaves under it as `ln_area` (KL divergence). Only the levels of the nodes
        batched, above 0 (a value at level 0 is one leaf: weight 0, ln_area 0, what a missing row reads as).
        One statement over the dimension tables (a row per leaf): each leaf's path code placed in the key
        columns as the cube places it, masked at each level; the leaves sharing masked bits are the area of the
        value they name."""
        if self._areas is None:
            parts = [self._area_select(attr, level) for attr, level in sorted(self._levels)]
            if not parts:  # every node at level 0: an empty lookup of the same columns
                parts = [self._area_select(0, 0) + " LIMIT 0"]
            self._areas = self._store(self._name("areas"), " UNION ALL ".join(parts))
        return self._areas

    def _area_select(self, attr: int, level: int) -> str:
        """The lookup's rows of one attribute at one level, from its dimension table."""
        dimension, masks = self.checker.star.dimensions[attr], self.checker.attribute_masks(attr, level)
        masked = [
            f"CAST(({key}) & CAST({mask} AS BIGINT) AS BIGINT)"
            for key, mask in zip(self.checker.attribute_keys(attr), masks)
        ]
        leaves = max(dimension.leaves - 1, 1)
        # a node of persons' common ancestors only stands for its ancestor's area (engine.persons.ancestor_areas)
        area = (
            "CAST(CASE WHEN SUM(w) > 0 THEN SUM(w) ELSE MAX(a) END AS DOUBLE PRECISION)"
            if dimension.ancestors
            else "CAST(COUNT(*) AS DOUBLE PRECISION)"
        )
        columns = ", ".join(f"{m} AS m{k}" for k, m in enumerate(masked))
        return (
            f"SELECT * FROM (SELECT {attr} AS attr, {level} AS level, {columns}, ({area} - 1) / {leaves} AS weight, "
            f"LN({area}) AS ln_area FROM {dimension.table} d{attr} GROUP BY {', '.join(masked)}) a{attr}_{level}"
        )

    def _keys_of(self, attr: int) -> list[int]:
        """The key columns that hold bits of attribute `attr`."""
        checker = self.checker
        return sorted({key for f, key in zip(checker.fields, checker.layout.key_of) if f.attr == attr})

    # --- one node's release as a report shows it (analysis.releases.NodeAnalysis.chosen) -----------------
    def labels(self, node: tuple[int, ...]) -> str:
        """The lookup of the labels of `node`'s classes, stored (the caller drops it): per attribute, the masked
        key bits (m..) of each value at the node's level and its label. One statement over the dimension tables,
        grouped as `areas` groups them."""
        parts = []
        for d in self.checker.star.dimensions:
            level = node[d.attr]
            dimension = self.db.ref_table(d.table, [f"l{level}"]).alias(f"d{d.attr}")
            masked = [
                _and(sa.literal_column(f"({key})"), mask)
                for key, mask in zip(self.checker.attribute_keys(d.attr), self.checker.attribute_masks(d.attr, level))
            ]
            label = sa.func.min(dimension.c[f"l{level}"]).label("label")
            bits = [m.label(f"m{k}") for k, m in enumerate(masked)]
            parts.append(sa.select(sa.literal(d.attr).label("attr"), *bits, label).group_by(*masked))
        return self._store(self._name("labels"), self.db.as_text(self.conn, sa.union_all(*parts)))

    def class_size_counts(self, batch: NodeBatch) -> list[tuple[int, int]]:
        """(size, classes of that size) of the batch's published classes, by size."""
        c = self._classes_table(batch)
        query = sa.select(c.c.n, sa.func.count()).where(c.c.kept == 1).group_by(c.c.n).order_by(c.c.n)
        return [(int(n), int(count)) for n, count in self._rows(query)]

    def distributions(
        self, batch: NodeBatch, node: tuple[int, ...], labels: str, shown: list[str], top: int
    ) -> dict[str, list[tuple[str, int]]]:
        """Per QI (its labels at `node`'s level, from the `labels` lookup) and per sensitive attribute of `shown`,
        the `top` most frequent labels or values among the batch's published records, most frequent first (ties
        by text): one statement. (Coded values come back as codes, all of them: their domain is small, and they
        are read back as texts and ranked here.)"""
        c, fs = self._classes_table(batch), self._sets_table(batch)
        dims = self.checker.star.dimensions
        branches = []
        for d in dims:
            b, on = self._label(node, d.attr, c, labels)
            counted = sa.select(sa.literal(d.attr).label("a"), sa.cast(b.c.label, sa.String).label("v"), _n(c.c.n))
            branches.append(counted.select_from(c.join(b, on)).where(c.c.kept == 1).group_by(b.c.label))
        coded = [len(dims) + j for j, attribute in enumerate(shown) if attribute in self.checker.codes]
        for j, attribute in enumerate(shown):
            joined, value = self._values(fs.join(c, self._same_class(fs, c)), fs, attribute)
            counted = sa.select(sa.literal(len(dims) + j).label("a"), sa.cast(value, sa.String).label("v"))
            branches.append(counted.add_columns(_n(fs.c.cnt)).select_from(joined).where(c.c.kept == 1).group_by(value))
        query = most_frequent(sa.union_all(*branches).subquery("b"), top, coded)
        names = [d.column for d in dims] + shown
        found: dict[str, list[tuple[str, int]]] = {name: [] for name in names}
        for attr, value, count in self._rows(query):
            found[names[attr]].append((self._text(names[attr], value), int(count)))
        return {name: sorted(counts_of, key=_most_first)[:top] for name, counts_of in found.items()}

    def least_diverse(
        self, batch: NodeBatch, node: tuple[int, ...], labels: str, shown: int
    ) -> list[tuple[str, list[tuple[str, int]]]]:
        """The `shown` published classes of the batch's node of fewest distinct values of the analyzed attribute
        (then fewest tuples): each class's labels (from the `labels` lookup), with its values as text and their
        counts, most frequent first (ties by text)."""
        assert self.value is not None and self.attribute is not None, "the classes' values are the analyzed ones"
        c, fs = self._classes_table(batch), self._sets_table(batch)
        keys = [NODE, *self.keys]
        w = (
            sa.select(*(c.c[k] for k in keys), c.c.distinct_values.label("d"), c.c.n)
            .where(c.c.kept == 1)
            .order_by(c.c.distinct_values, c.c.n, *(c.c[k] for k in keys))
            .limit(shown)
            .cte("w")
        )
        joined_sets, value = self._values(fs.join(w, self._same_class(fs, w)), fs, self.attribute)
        by_value = [*(fs.c[k] for k in keys), value]
        v = (
            sa.select(*by_value[:-1], value.label("s"), _n(fs.c.cnt))
            .select_from(joined_sets)
            .group_by(*by_value)
            .cte("v")
        )
        joined: sa.FromClause = w
        names: list[sa.ColumnElement[Any]] = []
        for d in self.checker.star.dimensions:
            b, on = self._label(node, d.attr, w, labels)
            joined = joined.join(b, on)
            names.append(b.c.label)
        joined = joined.join(v, self._same_class(v, w))
        shown_value = v.c.s if self.attribute in self.checker.codes else sa.cast(v.c.s, sa.String)
        query = sa.select(*names, shown_value, v.c.n).select_from(joined).order_by(w.c.d, w.c.n, *names)
        worst: dict[str, list[tuple[str, int]]] = {}
        for row in self._rows(query):
            label = "(" + ", ".join(map(str, row[: len(names)])) + ")"
            found, count = row[len(names)], row[len(names) + 1]
            worst.setdefault(label, []).append((self._text(self.attribute, found), int(count)))
        return [(label, sorted(counts, key=_most_first)) for label, counts in worst.items()]

    def _values(
        self, joined: sa.FromClause, fs: sa.TableClause, attribute: str
    ) -> tuple[sa.FromClause, sa.ColumnElement[Any]]:
        """`joined` (which reads the frequency sets `fs`) and `attribute`'s value in it: its column of `fs`, or
        where persons may hold several of its values, each member of the person's set (joined with the sets'
        members: a value's count is then its holders)."""
        column = fs.c[self.checker.star.sensitive_columns()[attribute]]
        members = self.checker.star.held.get(attribute)
        if members is None:
            return joined, column
        m = self.db.ref_table(members, ["held", "value"]).alias("members")
        return joined.join(m, m.c.held == column), m.c.value

    def _classes_table(self, batch: NodeBatch) -> sa.TableClause:
        return self.db.ref_table(batch.classes, [NODE, *self.keys, "n", "distinct_values", "kept"])

    def _sets_table(self, batch: NodeBatch) -> sa.TableClause:
        return self.db.ref_table(batch.frequency_sets, [NODE, *self.keys, *self.sensitive, "cnt"])

    def _same_class(self, left: sa.FromClause, right: sa.FromClause) -> sa.ColumnElement[bool]:
        return sa.and_(*(left.c[k] == right.c[k] for k in [NODE, *self.keys]))

    def _label(
        self, node: tuple[int, ...], attr: int, classes: sa.FromClause, labels: str
    ) -> tuple[sa.FromClause, sa.ColumnElement[bool]]:
        """The `labels` lookup as b<attr>, and the condition that joins it to the classes of `node` (keys in
        `classes`): its `label` is attribute `attr`'s label of the class."""
        lookup = self.db.ref_table(labels, ["attr", *(f"m{k}" for k in range(len(self.keys))), "label"])
        b = lookup.alias(f"b{attr}")
        masks = self.checker.attribute_masks(attr, node[attr])
        bits = [b.c[f"m{k}"] == _and(classes.c[f"key{k}"], masks[k]) for k in self._keys_of(attr)]
        return b, sa.and_(b.c.attr == attr, *bits)

    def _text(self, attribute: str, value: Any) -> str:
        """A value the cube carries (a code, where it carries codes) as the report shows it."""
        if value is not None and attribute in self.checker.codes:
            value = list(self.checker.codes[attribute])[int(value) - 1]
        return "NULL" if value is None else str(value)

    def _rows(self, query: SelectBase) -> list[Any]:
        self.statements += 1
        return list(self.db.execute(self.conn, self.db.as_text(self.conn, query)).all())

    def class_sums(self, batch: NodeBatch, quality: QualitySettings | None = None) -> dict[int, ClassSums]:
        """Per node of the batch, its ClassSums (with the `quality` models' settings: the classes an attack pays on,
        counted in the population for the journalist, and the classification's targets): one statement, one more
        for the suppressed tuples, and one for the targets."""
        quality = quality or QualitySettings()
        attacked_size = quality.cost_benefit.largest_attacked_size
        dims = self.checker.star.dimensions
        areas = self.areas()
        lookups = []
        for d in dims:
            bits = " AND ".join(
                f"a{d.attr}.m{k} = (c.key{k} & CAST(w.a{d.attr}_{k} AS BIGINT))" for k in self._keys_of(d.attr)
            )
            lookups.append(
                f"LEFT JOIN {areas} a{d.attr} ON a{d.attr}.attr = {d.attr} AND a{d.attr}.level = w.l{d.attr} AND {bits}"
            )
        if quality.attacker == "journalist":  # the classes' rows in the population, from its own cube
            population = population_sets(self.checker.population_checker(), self, batch.nodes)
            on = " AND ".join(f"p.{k} = c.{k}" for k in [NODE, *self.keys])
            lookups.append(f"JOIN ({population}) p ON {on}")
            size, success = "p.cnt", share("c.n", "p.cnt")
        else:
            size, success = "c.n", "1"
        ln_area = " + ".join(f"COALESCE(a{d.attr}.ln_area, 0)" for d in dims)
        per_qi = "".join(
            f", SUM(c.n * {kept} * COALESCE(a{d.attr}.{column}, 0))"
            for d in dims
            for kept, column in (("c.kept", "weight"), ("(1 - c.kept)", "weight"), ("c.kept", "ln_area"))
        )
        square = "CAST(c.n AS DOUBLE PRECISION) * c.n"
        rows = self.db.execute(
            self.conn,
            f"SELECT c.{NODE}, SUM(c.kept), SUM(c.n * (1 - c.kept)), SUM({square} * c.kept), "
            f"SUM({square}), SUM(CASE WHEN c.kept = 1 AND {size} <= :attacked_size THEN {success} ELSE 0 END), "
            f"SUM(CASE WHEN c.kept = 1 THEN c.c_ln_c - c.n * ({ln_area}) ELSE 0 END){per_qi} FROM {batch.classes} c "
            f"JOIN {self.values(batch.nodes, columns=True)} ON w.{NODE} = c.{NODE} {' '.join(lookups)} "
            f"GROUP BY c.{NODE}",
            {"attacked_size": attacked_size},
        ).all()
        self.statements += 1
        suppressed = self._suppressed_sums(batch)
        sensitive = tuple(t for t in quality.targets if t in self.checker.star.sensitive_columns())
        positions = qi_target_positions(dims, quality.targets)
        predicted = self.prediction_sums(batch, sensitive) if sensitive else {}
        by_qi = self.target_predictions(batch, positions) if positions else {}
        sums = {}
        for node, classes, out, squares, every, attacked, kl, *per_qi_sums in rows:
            by_part = suppressed.get(int(node), {})
            sums[int(node)] = ClassSums(
                int(classes or 0),
                int(out or 0),
                float(squares or 0),
                float(every or 0),
                float(kl or 0),
                by_part.get(-1, 0.0),
                tuple(float(p or 0) for p in per_qi_sums[0::3]),
                tuple(float(p or 0) for p in per_qi_sums[1::3]),
                tuple(by_part.get(d.attr, 0.0) for d in dims),
                tuple(float(p or 0) for p in per_qi_sums[2::3]),
                float(attacked or 0),
                *predicted.get(int(node), (0, 0)),
                target_predictions=by_qi.get(int(node), ()),
            )
        return sums

    def value_squares(self, batch: NodeBatch) -> dict[int, tuple[float, ...]]:
        """Per node of the batch and per QI, over its released tuples grouped by the QI's value at the node's
        level, the sum of the groups' sizes squared (ARX's entropy score): one statement, a grouping per QI of
        the released classes, whose keys hold each QI's value at the node's level already."""
        c = self._classes_table(batch)

        def squares(attr: int) -> tuple[sa.Subquery, list[sa.ColumnElement[Any]]]:
            field = self.checker.attribute_masks(attr, 0)  # every bit of the QI's value
            value = [_and(c.c[f"key{k}"], field[k]).label(f"v{k}") for k in self._keys_of(attr)]
            grouped = (
                sa.select(c.c[NODE], *value, _n(c.c.n))
                .where(c.c.kept == 1)
                .group_by(c.c[NODE], *value)
                .subquery(f"g{attr}")
            )
            return grouped, [sa.cast(grouped.c.n, sa.Double) * grouped.c.n]

        found = self._summed_per_part(batch, [d.attr for d in self.checker.star.dimensions], squares)
        return {j: tuple(total for (total,) in parts) for j, parts in found.items()}

    def target_tops(self, batch: NodeBatch, targets: Sequence[int]) -> dict[int, tuple[float, ...]]:
        """Per node of the batch and per QI of `targets` (attribute numbers): its released classes grouped by every
        other QI's value (ARX's MetaHashGroupify), and over those groups the count of the target's most frequent
        value, summed (ARX's classification score with QI targets): one statement."""

        def tops(target: int) -> tuple[sa.Subquery, list[sa.ColumnElement[Any]]]:
            cells, others = self._target_cells(batch, target)
            groups = (
                sa.select(cells.c[NODE], sa.func.max(cells.c.n).label("top"))
                .group_by(cells.c[NODE], *others(cells))
                .subquery(f"g{target}")
            )
            return groups, [groups.c.top]

        found = self._summed_per_part(batch, list(targets), tops)
        return {j: tuple(total for (total,) in parts) for j, parts in found.items()}

    def target_predictions(self, batch: NodeBatch, positions: Sequence[int]) -> dict[int, tuple[tuple[int, int], ...]]:
        """Per node of the batch and per QI target (`positions` among the QIs): its released classes grouped by every
        other QI's value (ARX's MetaHashGroupify), and over those groups, of the target's values at the node's
        level, the tuples outside the most frequent value where one value is the most frequent, and the tuples of
        the groups where several tie (ARX's classification metric with QI targets). One statement."""
        dims = self.checker.star.dimensions

        def predictions(position: int) -> tuple[sa.Subquery, list[sa.ColumnElement[Any]]]:
            cells, others = self._target_cells(batch, dims[position].attr)
            top = sa.func.max(cells.c.n).over(partition_by=[cells.c[NODE], *others(cells)])
            ranked = sa.select(cells, top.label("top")).subquery(f"r{position}")
            tied = sa.func.sum(sa.case((ranked.c.n == ranked.c.top, 1), else_=0))
            groups = (
                sa.select(
                    ranked.c[NODE],
                    sa.func.sum(ranked.c.n).label("n"),
                    sa.func.max(ranked.c.top).label("top"),
                    tied.label("tied"),
                )
                .group_by(ranked.c[NODE], *others(ranked))
                .subquery(f"g{position}")
            )
            unique = groups.c.tied == 1
            return groups, [
                sa.case((unique, groups.c.n - groups.c.top), else_=0),
                sa.case((unique, 0), else_=groups.c.n),
            ]

        found = self._summed_per_part(batch, list(positions), predictions)
        return {j: tuple((int(wrong), int(tied)) for wrong, tied in parts) for j, parts in found.items()}

    def _target_cells(
        self, batch: NodeBatch, target: int
    ) -> tuple[sa.Subquery, Callable[[sa.FromClause], list[sa.ColumnElement[Any]]]]:
        """The batch's released classes counted per node, every other QI's value (o0 ..) and the `target` QI's
        value (t..) at the node's level; and the other QIs' columns of a query over it."""
        c, width = self._classes_table(batch), self.checker.layout.keys
        everything = (1 << 63) - 1  # the keys are BIGINT, their sign bit unused
        field = self.checker.attribute_masks(target, 0)  # every bit of the target's value
        others = [_and(c.c[f"key{k}"], everything & ~field[k]).label(f"o{k}") for k in range(width)]
        value = [_and(c.c[f"key{k}"], field[k]).label(f"t{k}") for k in self._keys_of(target)]
        cells = (
            sa.select(c.c[NODE], *others, *value, _n(c.c.n))
            .where(c.c.kept == 1)
            .group_by(c.c[NODE], *others, *value)
            .subquery(f"v{target}")
        )
        return cells, lambda query: [query.c[f"o{k}"] for k in range(width)]

    def _summed_per_part(
        self,
        batch: NodeBatch,
        parts: list[int],
        grouping: Callable[[int], tuple[sa.Subquery, list[sa.ColumnElement[Any]]]],
    ) -> dict[int, tuple[tuple[float, ...], ...]]:
        """Per node of the batch and per part (an attribute number or position), the sums over the part's grouping
        (a subquery with the node's column, and the values summed, from `grouping(part)`); 0 where a node has no
        row. One statement: the union of the parts' sums."""
        branches, width = [], 0
        for part in parts:
            grouped, values = grouping(part)
            width = len(values)
            summed = sa.select(grouped.c[NODE], sa.literal(part).label("part"), *(sa.func.sum(v) for v in values))
            branches.append(summed.group_by(grouped.c[NODE]))
        found: dict[int, list[tuple[float, ...]]] = {j: [(0.0,) * width] * len(parts) for j in range(len(batch.nodes))}
        for node, part, *totals in self._rows(sa.union_all(*branches)):
            found[int(node)][parts.index(int(part))] = tuple(float(t or 0) for t in totals)
        return {j: tuple(values) for j, values in found.items()}

    def prediction_sums(self, batch: NodeBatch, targets: tuple[str, ...]) -> dict[int, tuple[int, int]]:
        """Per node, over the `targets` (sensitive attributes the cube carries) and the released classes: the
        tuples outside the class's most frequent value where one value is the most frequent, and the tuples of the
        classes where several tie (ARX's classification metric). One statement; the batch's sets are stored."""
        keys, columns = [NODE, *self.keys], self.checker.star.sensitive_columns()
        sets = self.db.ref_table(batch.frequency_sets, [*keys, *self.sensitive, "cnt"])
        parts = []
        for target in targets:
            value = sets.c[columns[target]]
            cells = (
                sa.select(*(sets.c[k] for k in keys), sa.func.sum(sets.c.cnt).label("c"))
                .group_by(*(sets.c[k] for k in keys), value)
                .subquery("cells")
            )
            top = sa.func.max(cells.c.c).over(partition_by=[cells.c[k] for k in keys])
            ranked = sa.select(*(cells.c[k] for k in keys), cells.c.c, top.label("top")).subquery("ranked")
            tied = sa.func.sum(sa.case((ranked.c.c == ranked.c.top, 1), else_=0))
            parts.append(
                sa.select(
                    *(ranked.c[k] for k in keys),
                    sa.func.sum(ranked.c.c).label("n"),
                    sa.func.max(ranked.c.top).label("top"),
                    tied.label("tied"),
                ).group_by(*(ranked.c[k] for k in keys))
            )
        classes = sa.union_all(*parts).subquery("classes")
        released: sa.ColumnElement[bool] = sa.true()
        if batch.suppressed:
            out = self.db.ref_table(batch.suppressed, keys).alias("x")
            released = ~sa.exists().where(*(out.c[k] == classes.c[k] for k in keys))
        unique = classes.c.tied == 1
        query = (
            sa.select(
                classes.c[NODE],
                sa.func.sum(sa.case((unique, classes.c.n - classes.c.top), else_=0)),
                sa.func.sum(sa.case((unique, 0), else_=classes.c.n)),
            )
            .where(released)
            .group_by(classes.c[NODE])
        )
        return {int(node): (int(wrong or 0), int(tied or 0)) for node, wrong, tied in self._rows(query)}

    def _suppressed_sums(self, batch: NodeBatch) -> dict[int, dict[int, float]]:
        """Per node: over its suppressed tuples grouped by their sensitive values, the sum of c ln c (part -1, KL
        divergence), and per QI (its number) grouped by its value at the node's level (ARX's non-uniform entropy):
        one statement."""
        if not batch.suppressed:
            return {}
        dims, on = self.checker.star.dimensions, " AND ".join(f"s.{c} = x.{c}" for c in [NODE, *self.keys])
        masks = [f"w.a{d.attr}_{k}" for d in dims for k in self._keys_of(d.attr)]
        cells = ", ".join([f"s.{c}" for c in [NODE, *self.keys, *self.sensitive, "cnt"]] + masks)
        parts = [(-1, list(self.sensitive))] + [
            (d.attr, [f"key{k} & CAST(a{d.attr}_{k} AS BIGINT)" for k in self._keys_of(d.attr)]) for d in dims
        ]
        # the suppressed cells joined once, each part a grouping of them (each part joining them again took 14.6 s
        # of 26 s on Adult's nine QIs with every tuple allowed to go, selecting by ARX's entropy-based loss)
        rows = self.db.execute(
            self.conn,
            f"WITH out_cells AS {MATERIALIZED} (SELECT {cells} FROM {batch.frequency_sets} s JOIN {batch.suppressed} "
            f"x ON {on} JOIN {self.values(batch.nodes, columns=True)} ON w.{NODE} = s.{NODE}) "
            + " UNION ALL ".join(
                f"SELECT {NODE}, {part} AS part, {sum_c_ln_c('c')} AS total FROM (SELECT {', '.join([NODE, *group])}, "
                f"SUM(cnt) AS c FROM out_cells GROUP BY {', '.join([NODE, *group])}) g GROUP BY {NODE}"
                for part, group in parts
            ),
        ).all()
        self.statements += 1
        found: dict[int, dict[int, float]] = {}
        for node, part, total in rows:
            found.setdefault(int(node), {})[int(part)] = float(total)
        return found

    def marginal_terms(self) -> MarginalTerms:
        """Per QI and level, over the table's values at that level: the sum of c ln c (c: the rows holding the
        value), how many values there are, and the sums of c times the value's certainty penalty and of c times
        ln(leaves under it), which ARX's quality models read (model.quality). One statement: the cube grouped by
        each QI's level-0 bits (a grouping per QI, as many rows as the QIs have values), stored, then each QI's
        rows grouped by the bits of each level and joined with that level's areas (`_area_select`); a row per QI
        and level returns. Grouping the values to each level in Python took 0.35 s of hospital 1M's zips and
        36,000 birth dates on every run, 6x one GROUP BY of the table on DuckDB; this statement 0.04 s. The
        groupings are a UNION ALL, not GROUPING SETS: PostgreSQL took each set for as many groups as the cube has
        rows and sorted for it, on disk (hospital 1M: 1.08 s against 0.60 s; DuckDB the same either way). The
        level-0 cells' c ln c as one more grouping here took PostgreSQL's statement from 1.4 s to 3.2 s, 0.8 s more
        than its own statement (`WaveChecker.cells_term`)."""
        dims = self.checker.star.dimensions
        cube = self.db.ref_table(self.checker.ref, [*self.keys, "cnt"]).alias("c")
        keyed = {
            d.attr: [
                _and(cube.c[f"key{k}"], self.checker.attribute_masks(d.attr, 0)[k]).label(f"q{d.attr}_{k}")
                for k in self._keys_of(d.attr)
            ]
            for d in dims
        }

        def values_of(attr: int) -> sa.Select[Any]:
            """The QI's level-0 values and their rows; the other QIs' columns NULL."""
            columns = [
                column if other == attr else sa.cast(sa.null(), sa.BigInteger).label(column.name)
                for other, other_columns in keyed.items()
                for column in other_columns
            ]
            return sa.select(*columns, _n(cube.c.cnt)).group_by(*(column.element for column in keyed[attr]))

        marginals = sa.union_all(*map(values_of, keyed)).cte("marginals").prefix_with(MATERIALIZED)
        parts = [self._level_terms(marginals, d.attr, level) for d in dims for level in range(d.height + 1)]
        terms = MarginalTerms()
        for attr, level, c_ln_c, values, penalty, ln_area in self._rows(sa.union_all(*parts)):
            at = (int(attr), int(level))
            terms.c_ln_c[at], terms.values[at] = float(c_ln_c), int(values)
            terms.penalty[at], terms.ln_area[at] = float(penalty), float(ln_area)
        return terms

    def _level_terms(self, marginals: sa.CTE, attr: int, level: int) -> SelectBase:
        """`marginal_terms`' row of one QI at one level: the QI's values (its rows of `marginals`)
        grouped by their bits at `level`, each joined with its area (a value at level 0 is one leaf: penalty 0,
        ln 1 = 0)."""
        keys = self._keys_of(attr)
        own = [marginals.c[f"q{attr}_{k}"] for k in keys]
        masks = self.checker.attribute_masks(attr, level)
        bits = [_and(column, masks[k]) for column, k in zip(own, keys)]
        grouped = (
            sa.select(*(b.label(f"b{k}") for b, k in zip(bits, keys)), sa.func.sum(marginals.c.n).label("c"))
            .where(own[0].is_not(None))
            .group_by(*bits)
            .subquery(f"g{attr}_{level}")
        )
        c = grouped.c.c
        # the subquery's own names (g<attr>_<level>.c): sqlanon's, never a user's
        figures: list[sa.ColumnElement[Any]] = [sa.literal_column(sum_c_ln_c(f"{grouped.name}.c")), sa.func.count()]
        joined: sa.FromClause = grouped
        if level == 0:
            figures += [_ZERO] * 2
        else:
            names = [f"m{k}" for k in range(self.checker.layout.keys)] + ["weight", "ln_area"]
            columns: list[sa.ColumnClause[Any]] = [sa.column(name) for name in names]
            area = sa.text(self._area_select(attr, level)).columns(*columns).subquery(f"a{attr}_{level}")
            joined = grouped.outerjoin(area, sa.and_(*(area.c[f"m{k}"] == grouped.c[f"b{k}"] for k in keys)))
            figures += [sa.func.coalesce(sa.func.sum(c * area.c[name]), 0) for name in ("weight", "ln_area")]
        labelled = [sa.literal(attr).label("attr"), sa.literal(level).label("level")]
        figure_names = ("c_ln_c", "vals", "penalty", "ln_area_sum")
        return sa.select(*labelled, *(f.label(n) for f, n in zip(figures, figure_names))).select_from(joined)

    def person_figures(self, thresholds: dict[str, float]) -> str:
        """The Bayes-optimal audit's figures of each original cell q (a level-0 key) holding several values,
        stored once: its tuples n, its distinct values, the tuples of its values whose posterior is above
        1 - delta (positive), and whether some posterior of its values is below epsilon (negative) or breaches
        (rho1, rho2). A cell of one value is not stored: its figures follow from its size (see `bayes_sums`).

        The audit's adversary knows the table: the posterior of value s for a person with QI values q released in
        class q* is n(q*, s) f(s|q) / f(s|q*), normalized over the values of q* (the l-diversity paper's Theorem
        3.1). A class is released whole or suppressed whole, so n(q*, s) / f(s|q*) is q*'s size, the same for
        every s, and the posterior is f(s|q) at every node: what a node changes is only who is released, and
        which values their class shows (a value the class shows that q lacks has posterior 0, a negative
        disclosure). So the figures are a person's, computed once, and a node sums them over its released cells."""
        if self._persons is None:
            assert self.value is not None, "the Bayes audit reads the analyzed attribute's values"
            # most original cells of a large table hold one person, so one value: only the cells holding several
            # values are grouped by value (hospital 1M: a few thousand of a million)
            keys, s, cube = self.keys, self.value, self.checker.ref
            # codes compared as they are, values as text: PostgreSQL has no MIN or MAX of a boolean (equal texts
            # are equal values; equal values of unequal texts, as -0.0 and 0.0, only take the longer way)
            text = s if self.decoded else f"CAST({s} AS VARCHAR)"
            mixed = f"MIN({text}) < MAX({text}) OR (COUNT({s}) < COUNT(*) AND COUNT({s}) > 0)"
            sizes = self._store(
                self._name("cell_sizes"),
                f"SELECT {', '.join(keys)}, {count_sum('cnt')} AS n FROM {cube} GROUP BY {', '.join(keys)} "
                f"HAVING {mixed}",
            )
            on = " AND ".join(f"z.{k} = v.{k}" for k in keys)
            cells = ", ".join(f"v.{k}" for k in keys)
            counts = (
                f"SELECT {cells}, v.{s} AS s, {count_sum('v.cnt')} AS c, z.n FROM {cube} v JOIN {sizes} z ON {on} "
                f"GROUP BY {cells}, v.{s}, z.n"
            )
            positive, negative, breach = _disclosures(share("c", "n"), "c", "n")
            select = (
                f"SELECT {', '.join(keys)}, n, COUNT(*) AS distinct_values, SUM({positive}) AS positive, "
                f"MAX({negative}) AS negative, MAX({breach}) AS breach FROM ({counts}) w GROUP BY {', '.join(keys)}, n"
            )
            self._persons = self._store(self._name("persons"), select, thresholds)
            self.db.drop_table(self.conn, sizes)
        return self._persons

    def bayes_sums(self, batch: NodeBatch, thresholds: dict[str, float]) -> dict[int, tuple[int, int, int]]:
        """Per node of the batch: tuples with positive disclosure, with negative disclosure and with a (rho1, rho2)
        breach, over its released persons (see `person_figures`).

        Every released tuple is first counted as if its cell held one value: posterior 1, so positive (delta > 0),
        negative only where its class shows other values, never a breach (rho2 < 1); each class's tuples are
        read from the batch's classes. The cells holding several values then add the difference between their
        figures and that, grouped to the nodes' classes: a few thousand cells, where every cell grouped to every
        node cost more than the frequency sets."""
        persons = self.person_figures(thresholds)
        on = " AND ".join(f"c.{column} = q.{column}" for column in [NODE, *self.keys])
        rows = self.db.execute(
            self.conn,
            f"WITH released AS ({self._persons_by_class(persons, batch.nodes)}) "
            f"SELECT {NODE}, COALESCE(SUM(positive), 0), COALESCE(SUM(negative), 0), COALESCE(SUM(breached), 0) "
            f"FROM (SELECT c.{NODE}, c.n * c.kept AS positive, "
            "CASE WHEN c.kept = 1 AND c.distinct_values > 1 THEN c.n ELSE 0 END AS negative, 0 AS breached "
            f"FROM {batch.classes} c UNION ALL "
            f"SELECT c.{NODE}, (q.positive - q.n) * c.kept, CASE WHEN c.kept = 1 AND q.negative = 0 "
            "AND c.distinct_values <= q.distinct_values THEN -q.n ELSE 0 END, q.breached * c.kept "
            f"FROM released q JOIN {batch.classes} c ON {on}) t GROUP BY {NODE}",
        ).all()
        self.statements += 1
        return {int(node): (int(p), int(n), int(b)) for node, p, n, b in rows}

    def _persons_by_class(self, persons: str, nodes: list[tuple[int, ...]]) -> str:
        """A SELECT of node, class key.., and per kind of person (their distinct values, whether negative) their
        tuples n, positive tuples and breached tuples: the persons grouped to each cluster's meet of neighbouring
        nodes first (WaveChecker.clusters), then joined with the cluster's masks, instead of every person joined
        with every node."""
        keys, parts = self.keys, []
        for meet, numbers in self.checker.clusters(nodes):
            grouped = [f"{k} & CAST({mask} AS BIGINT)" for k, mask in zip(keys, meet)]
            kinds = "distinct_values, negative"
            meet_set = (
                f"SELECT {', '.join(f'{g} AS {k}' for g, k in zip(grouped, keys))}, {kinds}, SUM(n) AS n, "
                f"SUM(positive) AS positive, SUM(breach * n) AS breached FROM {persons} GROUP BY "
                f"{', '.join(grouped)}, {kinds}"
            )
            masked = ", ".join(f"g.{k} & CAST(w.m{j} AS BIGINT) AS {k}" for j, k in enumerate(keys))
            parts.append(
                f"SELECT w.{NODE}, {masked}, g.distinct_values, g.negative, g.n, g.positive, g.breached "
                f"FROM ({meet_set}) g CROSS JOIN {self.values(nodes, only=numbers)}"
            )
        return " UNION ALL ".join(parts)

    def _name(self, table: str) -> str:
        """A lookup's scratch table name, unique among the run's cubes."""
        return f"{table}_{self.checker.run_id}_{self.checker.part}"

    def close(self) -> None:
        for ref in (self._areas, self._persons, self._members):
            if ref is not None:
                self.db.drop_table(self.conn, ref)
        self._areas = self._persons = self._members = None


def population_sets(checker: WaveChecker, releases: NodeReleases, nodes: list[tuple[int, ...]]) -> str:
    """The batch's nodes over the population (`checker`'s cube, the same key layout): node, key.., cnt."""
    keys = checker.key_names
    masked = [f"c.{key} & CAST(w.m{j} AS BIGINT)" for j, key in enumerate(keys)]
    columns = ", ".join(f"{m} AS {k}" for m, k in zip(masked, keys))
    return (
        f"SELECT w.{NODE}, {columns}, {count_sum('c.cnt')} AS cnt FROM {checker.ref} c CROSS JOIN "
        f"{releases.values(nodes)} GROUP BY w.{NODE}, {', '.join(masked)}"
    )


def _disclosures(alpha: str, c: str, n: str) -> tuple[str, str, str]:
    """SQL: for a value held c times in an original cell of n tuples (its posterior `alpha`), the tuples
    disclosed positively (above 1 - delta), whether it is a negative disclosure (below epsilon, and not all of
    them), and whether it breaches (rho1, rho2)."""
    return (
        f"CASE WHEN {alpha} > 1 - :delta THEN {c} ELSE 0 END",
        f"CASE WHEN {alpha} < :epsilon AND {c} < {n} THEN 1 ELSE 0 END",
        f"CASE WHEN ({alpha} < :rho1 AND {alpha} > :rho2) OR ({alpha} > 1 - :rho1 AND {alpha} < 1 - :rho2) "
        "THEN 1 ELSE 0 END",
    )


def holders_per_value(sets: str, classes: list[str], value: str, members: str, extra: str = "") -> str:
    """SELECT per class (`classes`) and value of the frequency set `sets`, whose `value` column holds each person's
    set of values: `value` (a member), cnt (its holders: each set's persons add to each of its members), persons
    (each set's persons counted on its first member only: their sum over a class is its persons), and `extra`
    aggregates over the sets' rows joined with their members (f, m)."""
    group = ", ".join(f"f.{c}" for c in classes)
    return (
        f"SELECT {group}, m.value AS {value}, {count_sum('f.cnt')} AS cnt, "
        f"{count_sum('f.cnt * m.first_member')} AS persons{extra} FROM {sets} f "
        f"JOIN {members} m ON f.{value} = m.held GROUP BY {group}, m.value"
    )


def every_row(ref: str) -> str:
    """SELECT every row of a stored table (or a FROM item)."""
    return f"SELECT * FROM {ref}"


def _and(value: Any, mask: int) -> sa.ColumnElement[Any]:
    """`value` (a BIGINT key) AND `mask`, as a BIGINT."""
    return sa.cast(value.op("&")(sa.cast(sa.literal(mask), sa.BigInteger)), sa.BigInteger)


_ZERO = sa.cast(sa.literal(0), sa.Double)


def _n(count: sa.ColumnElement[Any]) -> sa.Label[Any]:
    return sa.func.sum(count).label("n")


def _most_first(counted: tuple[str, int]) -> tuple[int, str]:
    return -counted[1], counted[0]
