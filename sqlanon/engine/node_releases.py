"""Many lattice nodes' releases at once, over a packed cube (engine.checker), for the analyses of
sqlanon.analysis: a batch of nodes costs a few statements, whatever its size, where a node alone cost several
scans of the table joined with its dimensions.

A batch is a VALUES list of its nodes: each node's number, its class masks (a node's class key is the cube's
level-0 key ANDed with them), and per attribute its level and the mask of that attribute's bits there. From
the cube, one statement stores the batch's frequency sets: per node, class key (key0..) and value of the
analyzed attribute, the tuples; with suppression, one more the classes the criteria suppress. Everything else
reads them: the attacks of engine.attacks (whose `by` is the node column), ARX's utility sums and the
Bayes-optimal audit below. Classes are integer keys joined by equality, so every join hashes.

Class keys name a class by the path codes of its values; ARX's loss needs each class's area per attribute (the
hierarchy leaves under its value), which a small lookup table gives per (attribute, level, masked key bits),
computed from the hierarchies in Python. The audit's figures are a person's whatever the node (see
`person_figures`): stored once per level-0 cell, summed per node over the cells it releases.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..criteria import Criterion
from ..criteria.view import count_sum, share
from .attacks import Release
from .checker import ROWS_PER_STATEMENT, WaveChecker
from .frequency import violating_classes_sql

NODE = "node"


@dataclass(frozen=True)
class NodeBatch:
    """A batch's stored tables: `frequency_sets` (node, key.., the attribute's column, cnt) and `suppressed`
    (node, key.. of the classes left out; None: none)."""

    nodes: list[tuple[int, ...]]
    frequency_sets: str
    suppressed: str | None
    keys: list[str]
    value: str  # the analyzed attribute's column

    def release(self) -> Release:
        """The batch's releases, by node, as engine.attacks reads them."""
        return Release(
            definition=f"SELECT * FROM {self.frequency_sets}",
            classes=[NODE, *self.keys],
            suppressed=f"SELECT * FROM {self.suppressed}" if self.suppressed else None,
            by=(NODE,),
        )


class NodeReleases:
    """Batches of nodes over `checker`'s cube, the attribute `attribute` analyzed (the cube must carry it as
    values); with `criteria` and `suppress`, the classes that violate them are left out of each release."""

    def __init__(self, checker: WaveChecker, attribute: str, criteria: list[Criterion], suppress: bool):
        self.checker, self.attribute, self.criteria, self.suppress = checker, attribute, criteria, suppress
        self.db, self.conn = checker.db, checker.conn
        self.keys = checker.key_names
        self.value = checker.star.sensitive_columns()[attribute]
        self.statements = 0
        self._areas: str | None = None
        self._persons: str | None = None

    def batches(self, nodes: list[tuple[int, ...]]) -> list[list[tuple[int, ...]]]:
        """`nodes` cut into batches whose cells (cube rows x nodes) stay within ROWS_PER_STATEMENT."""
        size = max(1, ROWS_PER_STATEMENT // max(self.checker.rows, 1))
        return [nodes[start : start + size] for start in range(0, len(nodes), size)]

    def values(self, nodes: list[tuple[int, ...]], columns: bool = False) -> str:
        """The batch's VALUES list: node number, class masks m.., and with `columns` per attribute its level l..
        and its bits' masks a<attr>_<key>, with its alias."""
        checker = self.checker
        keys = range(checker.layout.keys)
        names = [NODE] + [f"m{key}" for key in keys]
        if columns:
            names += [f"l{d.attr}" for d in checker.star.dimensions]
            names += [f"a{d.attr}_{key}" for d in checker.star.dimensions for key in keys]
        rows = []
        for j, node in enumerate(nodes):
            row = [j, *checker.masks(node)]
            if columns:
                row += list(node)
                row += [mask for d in checker.star.dimensions for mask in checker.attribute_masks(d.attr, node[d.attr])]
            rows.append("(" + ", ".join(map(str, row)) + ")")
        return f"(VALUES {', '.join(rows)}) AS w({', '.join(names)})"

    @contextmanager
    def batch(self, nodes: list[tuple[int, ...]], tag: str) -> Iterator[NodeBatch]:
        """The batch's tables, stored for the statements that read them, dropped at the end (after an error, with
        the caller's transaction)."""
        db, conn, keys, value = self.db, self.conn, self.keys, self.value
        classes = [f"c.{key} & CAST(w.m{j} AS BIGINT)" for j, key in enumerate(keys)]
        columns = ", ".join(f"{c} AS {k}" for c, k in zip(classes, keys))
        sets = db.create_scratch(
            conn,
            f"sets_{tag}",
            f"SELECT w.{NODE}, {columns}, c.{value}, {count_sum('c.cnt')} AS cnt FROM {self.checker.ref} c "
            f"CROSS JOIN {self.values(nodes)} GROUP BY {', '.join([f'w.{NODE}', *classes, f'c.{value}'])}",
        )
        db.analyze(conn, sets)
        self.statements += 1
        suppressed = self._suppressed(nodes, sets, tag) if self.suppress else None
        yield NodeBatch(nodes, sets, suppressed, keys, value)
        for ref in (suppressed, sets):
            if ref:
                db.drop_table(conn, ref)

    def _suppressed(self, nodes: list[tuple[int, ...]], sets: str, tag: str) -> str:
        """The batch's classes that violate the criteria (node, key..), stored."""
        checker, keys = self.checker, self.keys
        sensitive = list(checker.star.sensitive_columns().values())
        if sensitive == [self.value]:  # the batch's frequency sets are the criteria's
            definition = f"SELECT * FROM {sets}"
        else:
            masked = [f"c.{key} & CAST(w.m{j} AS BIGINT)" for j, key in enumerate(keys)]
            read = [f"c.{s}" for s in sensitive]
            columns = [f"{m} AS {k}" for m, k in zip(masked, keys)] + read
            definition = (
                f"SELECT w.{NODE}, {', '.join(columns)}, {count_sum('c.cnt')} AS cnt FROM {checker.ref} c "
                f"CROSS JOIN {self.values(nodes)} GROUP BY {', '.join([f'w.{NODE}', *masked, *read])}"
            )
        view = checker.criteria_view("criteria_fs", definition, self.criteria)
        params: dict[str, object] = {}
        violators = violating_classes_sql(view, self.criteria, "a", params)
        ref = self.db.create_scratch(
            self.conn,
            f"suppressed_{tag}",
            f"WITH criteria_fs AS ({definition}) SELECT DISTINCT {', '.join([NODE, *keys])} FROM ({violators}) v",
            params,
        )
        self.db.analyze(self.conn, ref)
        self.statements += 1
        return ref

    def areas(self) -> str:
        """The lookup of ARX's certainty penalty, stored once: per attribute, level and masked key bits (m..) of a
        value at that level, (leaves under it - 1) / (leaves of the hierarchy - 1)."""
        if self._areas is None:
            checker = self.checker
            keys = range(checker.layout.keys)
            rows: list[tuple[Any, ...]] = []
            for d in checker.star.dimensions:
                codes = d.hierarchy.path_codes
                fields = [
                    (f.piece, key, offset)
                    for f, key, offset in zip(checker.fields, checker.layout.key_of, checker.layout.offset)
                    if f.attr == d.attr
                ]
                placed = []  # per leaf: its code's pieces in place in the key columns
                for leaf in codes.code:
                    key_bits = [0] * len(keys)
                    pieces = codes.piece_codes(leaf)
                    for piece, key, offset in fields:
                        key_bits[key] |= pieces[piece] << offset
                    placed.append(key_bits)
                leaves = max(len(d.hierarchy.paths) - 1, 1)
                for level in range(d.height + 1):
                    masks = checker.attribute_masks(d.attr, level)
                    areas = Counter(tuple(bits[k] & masks[k] for k in keys) for bits in placed)
                    rows += [(d.attr, level, *bits, (area - 1) / leaves) for bits, area in areas.items()]
            columns = [("attr", "INTEGER"), ("level", "INTEGER")] + [(f"m{k}", "BIGINT") for k in keys]
            ref = self.db.create_scratch_from_rows(
                self.conn, f"areas_{checker.run_id}", [*columns, ("weight", "DOUBLE PRECISION")], rows
            )
            self.db.analyze(self.conn, ref)
            self._areas = ref
        return self._areas

    def utility_sums(self, batch: NodeBatch) -> dict[int, tuple[float, float]]:
        """Per node of the batch: the sums of ARX's utility, n^2 over its classes (DM*, suppressed classes too),
        and the certainty penalty over its tuples and QIs (a suppressed tuple: 1 per QI)."""
        checker, keys, dims = self.checker, self.keys, self.checker.star.dimensions
        areas = self.areas()
        kept, joined = self._kept(batch)
        lookups = []
        for d in dims:
            touched = sorted({key for f, key in zip(checker.fields, checker.layout.key_of) if f.attr == d.attr})
            bits = " AND ".join(f"a{d.attr}.m{k} = (c.key{k} & CAST(w.a{d.attr}_{k} AS BIGINT))" for k in touched)
            lookups.append(
                f"JOIN {areas} a{d.attr} ON a{d.attr}.attr = {d.attr} AND a{d.attr}.level = w.l{d.attr} AND {bits}"
            )
        penalty = " + ".join(f"a{d.attr}.weight" for d in dims)
        group = ", ".join([NODE, *keys])
        rows = self.db.execute(
            self.conn,
            f"WITH classes AS (SELECT {group}, SUM(cnt) AS n FROM {batch.frequency_sets} GROUP BY {group}) "
            f"SELECT c.{NODE}, SUM(CAST(c.n AS DOUBLE PRECISION) * c.n), SUM(CASE WHEN {kept} = 0 "
            f"THEN c.n * {len(dims)}.0 ELSE c.n * ({penalty}) END) FROM classes c "
            f"JOIN {self.values(batch.nodes, columns=True)} ON w.{NODE} = c.{NODE} {joined}{' '.join(lookups)} "
            f"GROUP BY c.{NODE}",
        ).all()
        self.statements += 1
        return {int(node): (float(dm or 0), float(loss or 0)) for node, dm, loss in rows}

    def person_figures(self, thresholds: dict[str, float]) -> str:
        """The Bayes-optimal audit's figures of each original cell q (a level-0 key), stored once: its tuples n,
        its distinct values, the tuples of its values whose posterior is above 1 - delta (positive), and
        whether some posterior of its values is below epsilon (negative) or breaches (rho1, rho2).

        The audit's adversary knows the table: the posterior of value s for a person with QI values q released in
        class q* is n(q*, s) f(s|q) / f(s|q*), normalized over the values of q* (the l-diversity paper's Theorem
        3.1). A class is released whole or suppressed whole, so n(q*, s) / f(s|q*) is q*'s size, the same for
        every s, and the posterior is f(s|q) at every node: what a node changes is only who is released, and
        which values their class shows (a value the class shows that q lacks has posterior 0, a negative
        disclosure). So the figures are a person's, computed once, and a node sums them over its released cells."""
        if self._persons is None:
            keys = ", ".join(self.keys)
            alpha = share("c.cnt", "q.n")
            select = (
                f"WITH cells AS (SELECT {keys}, {self.value} AS s, {count_sum('cnt')} AS cnt FROM {self.checker.ref} "
                f"GROUP BY {keys}, {self.value}), q AS (SELECT {keys}, {count_sum('cnt')} AS n, COUNT(*) AS "
                f"distinct_values FROM cells GROUP BY {keys}) "
                f"SELECT {', '.join(f'q.{k}' for k in self.keys)}, q.n, q.distinct_values, "
                f"SUM(CASE WHEN {alpha} > 1 - :delta THEN c.cnt ELSE 0 END) AS positive, "
                f"MAX(CASE WHEN {alpha} < :epsilon AND c.cnt < q.n THEN 1 ELSE 0 END) AS negative, "
                f"MAX(CASE WHEN ({alpha} < :rho1 AND {alpha} > :rho2) OR ({alpha} > 1 - :rho1 AND {alpha} < "
                f"1 - :rho2) THEN 1 ELSE 0 END) AS breach FROM cells c JOIN q ON "
                f"{' AND '.join(f'c.{k} = q.{k}' for k in self.keys)} "
                f"GROUP BY {', '.join(f'q.{k}' for k in self.keys)}, q.n, q.distinct_values"
            )
            self._persons = self.db.create_scratch(self.conn, f"persons_{self.checker.run_id}", select, thresholds)
            self.db.analyze(self.conn, self._persons)
            self.statements += 1
        return self._persons

    def bayes_sums(self, batch: NodeBatch, thresholds: dict[str, float]) -> dict[int, tuple[int, int, int]]:
        """Per node of the batch: tuples with positive disclosure, with negative disclosure and with a (rho1, rho2)
        breach, over its released persons (see `person_figures`)."""
        persons = self.person_figures(thresholds)
        group = ", ".join([NODE, *self.keys])
        kept, joined = self._kept(batch)
        masked = ", ".join(f"q.{k} & CAST(w.m{j} AS BIGINT) AS {k}" for j, k in enumerate(self.keys))
        on = " AND ".join(f"c.{column} = q.{column}" for column in [NODE, *self.keys])
        rows = self.db.execute(
            self.conn,
            f"WITH classes AS (SELECT {group}, COUNT(*) AS distinct_values FROM {batch.frequency_sets} "
            f"GROUP BY {group}), flagged AS (SELECT c.*, {kept} AS kept FROM classes c {joined}), "
            f"released AS (SELECT w.{NODE}, {masked}, q.n, q.distinct_values, q.positive, q.negative, q.breach "
            f"FROM {persons} q CROSS JOIN {self.values(batch.nodes)}) "
            f"SELECT c.{NODE}, COALESCE(SUM(q.positive * c.kept), 0), COALESCE(SUM(CASE WHEN c.kept = 1 AND "
            "(q.negative = 1 OR c.distinct_values > q.distinct_values) THEN q.n ELSE 0 END), 0), "
            f"COALESCE(SUM(q.breach * q.n * c.kept), 0) FROM released q JOIN flagged c ON {on} GROUP BY c.{NODE}",
        ).all()
        self.statements += 1
        return {int(node): (int(p), int(n), int(b)) for node, p, n, b in rows}

    def _kept(self, batch: NodeBatch) -> tuple[str, str]:
        """SQL for a class's `kept` flag (1: released, 0: suppressed), and the join it reads (alias c: the class)."""
        if not batch.suppressed:
            return "1", ""
        on = " AND ".join(f"x.{column} = c.{column}" for column in [NODE, *self.keys])
        return "1 - COALESCE(x.out, 0)", (
            f"LEFT JOIN (SELECT {NODE}, {', '.join(self.keys)}, 1 AS out FROM {batch.suppressed}) x ON {on} "
        )

    def close(self) -> None:
        for ref in (self._areas, self._persons):
            if ref is not None:
                self.db.drop_table(self.conn, ref)
        self._areas = self._persons = None


def population_sets(checker: WaveChecker, releases: NodeReleases, nodes: list[tuple[int, ...]]) -> str:
    """The batch's nodes over the population (`checker`'s cube, the same key layout): node, key.., cnt."""
    keys = checker.key_names
    masked = [f"c.{key} & CAST(w.m{j} AS BIGINT)" for j, key in enumerate(keys)]
    columns = ", ".join(f"{m} AS {k}" for m, k in zip(masked, keys))
    return (
        f"SELECT w.{NODE}, {columns}, {count_sum('c.cnt')} AS cnt FROM {checker.ref} c CROSS JOIN "
        f"{releases.values(nodes)} GROUP BY w.{NODE}, {', '.join(masked)}"
    )
