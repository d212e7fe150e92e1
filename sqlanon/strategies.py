"""Search strategies over the generalization lattice.

A strategy receives a SearchContext (database connection, star schema,
criteria, run) and returns every node over the full QI set that satisfies the
criteria. Incognito is the production strategy; Exhaustive evaluates every
node with its own direct GROUP BY and serves as the oracle in tests.
"""
from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable

from sqlalchemy.engine import Connection

from .backends import Database
from .criteria import Criterion, FrequencySetView
from .dimensions import StarSchema
from .frequency import FrequencySet, FrequencySets, count_violations_per_set
from .lattice import LatticeStore, Node, full_lattice
from .metadata import RunRecord

Progress = Callable[[str, int, int], None]  # (phase description, done, total)


@dataclass
class SearchStats:
    nodes_checked: int = 0
    rollups: int = 0
    base_scans: int = 0
    seconds: float = 0.0


@dataclass
class SearchContext:
    db: Database
    conn: Connection
    star: StarSchema
    criteria: list[Criterion]
    run: RunRecord
    schema: str
    keep: bool = False
    use_cube: bool = True
    progress: Progress = field(default=lambda phase, done, total: None)


class SearchStrategy(ABC):
    name: str = ""

    @abstractmethod
    def search(self, ctx: SearchContext, stats: SearchStats) -> list[tuple[int, ...]]:
        """All satisfying nodes over the full QI set, as level vectors in config order."""


class Incognito(SearchStrategy):
    """LeFevre et al.: QI subsets of growing size, each lattice searched breadth-first with marking."""

    name = "incognito"

    def search(self, ctx: SearchContext, stats: SearchStats) -> list[tuple[int, ...]]:
        heights = ctx.star.heights
        store = LatticeStore(ctx.db, ctx.schema, ctx.run.run_id)
        fsets = FrequencySets(ctx.db, ctx.conn, ctx.star, ctx.schema, ctx.run.run_id, ctx.keep, ctx.use_cube)
        try:
            store.create_first_iteration(ctx.conn, heights)
            for iteration in range(1, len(heights) + 1):
                if iteration > 1:
                    store.generate_next(ctx.conn, iteration - 1)
                nodes, edges = store.load_iteration(ctx.conn, iteration)
                statuses = self._search_iteration(ctx, fsets, nodes, edges, iteration, stats)
                store.save_statuses(ctx.conn, statuses)
                fsets.flush_registry()
                ctx.run.progress(ctx.conn, iteration, stats.nodes_checked)
                ctx.conn.commit()
            survivors = store.survivors(ctx.conn, len(heights))
            fsets.drop_all()
            fsets.flush_registry()
            ctx.conn.commit()
        finally:
            fsets.drop_all()
            stats.rollups, stats.base_scans = fsets.rollups, fsets.base_scans
        return sorted(tuple(level for _, level in pairs) for pairs in survivors)

    def _search_iteration(self, ctx: SearchContext, fsets: FrequencySets, nodes: list[Node],
                          edges: list[tuple[int, int]], iteration: int, stats: SearchStats) -> dict[int, str]:
        up, down = defaultdict(list), defaultdict(list)
        for a, b in edges:
            up[a].append(b)
            down[b].append(a)
        families: dict[tuple[int, ...], list[Node]] = defaultdict(list)
        for node in nodes:
            families[node.attrs].append(node)
        statuses: dict[int, str] = {}
        done = 0
        for attrs in sorted(families):
            family = families[attrs]
            self._search_family(ctx, fsets, family, up, down, statuses, stats)
            ctx.conn.commit()  # bounded transactions: scratch tables of a family are gone by now
            done += len(family)
            ctx.progress(f"iteration {iteration}/{len(ctx.star.dimensions)}", done, len(nodes))
        # nodes never reached lie above a marked node: they satisfy the criteria by monotonicity
        return {n.node_id: statuses.get(n.node_id, "implied") for n in nodes}

    def _search_family(self, ctx: SearchContext, fsets: FrequencySets, family: list[Node], up: dict, down: dict,
                       statuses: dict[int, str], stats: SearchStats) -> None:
        by_id = {n.node_id: n for n in family}
        roots = [n for n in family if not down[n.node_id]]
        super_root = self._super_root(fsets, roots)
        waiting = {n.node_id: len(up[n.node_id]) for n in family}  # generalizations not yet dequeued
        held: dict[int, FrequencySet] = {}  # frequency sets of failed nodes, kept for roll-ups
        marked: set[int] = set()
        queue = [(n.height, n.node_id) for n in roots]
        heapq.heapify(queue)
        while queue:
            _, node_id = heapq.heappop(queue)
            if node_id in statuses:
                continue
            node = by_id[node_id]
            if node_id in marked:
                statuses[node_id] = "marked"
            else:
                fs = self._frequency_set(fsets, node, super_root, [held[p] for p in down[node_id] if p in held])
                stats.nodes_checked += 1
                classes, _ = fsets.violations(fs, ctx.criteria)
                if classes == 0:
                    statuses[node_id] = "pass"
                    marked.update(up[node_id])
                    fsets.drop(fs)
                else:
                    statuses[node_id] = "fail"
                    held[node_id] = fs
                    for succ in up[node_id]:
                        heapq.heappush(queue, (by_id[succ].height, succ))
                    if not up[node_id]:
                        fsets.drop(held.pop(node_id))
            for parent in down[node_id]:
                waiting[parent] -= 1
                if waiting[parent] == 0 and parent in held:
                    fsets.drop(held.pop(parent))
        for fs in held.values():
            fsets.drop(fs)
        if super_root is not None:
            fsets.drop(super_root)

    @staticmethod
    def _super_root(fsets: FrequencySets, roots: list[Node]) -> FrequencySet | None:
        """One base scan for all roots of a family: the most specific node below every root."""
        if len(roots) < 2:
            return None
        levels = {a: min(r.levels[a] for r in roots) for a in roots[0].attrs}
        return fsets.measured(fsets.base(levels, f"sr_{'_'.join(map(str, sorted(levels)))}"))

    @staticmethod
    def _frequency_set(fsets: FrequencySets, node: Node, super_root: FrequencySet | None,
                       children: list[FrequencySet]) -> FrequencySet:
        label = f"n{node.node_id}"
        if children:  # roll up from the smallest computed specialization
            return fsets.rollup(min(children, key=lambda f: f.rows), node.levels, label, node.node_id)
        if super_root is not None:
            return fsets.rollup(super_root, node.levels, label, node.node_id)
        return fsets.base(node.levels, label, node.node_id)


class Exhaustive(SearchStrategy):
    """Every node of the full lattice, each by its own GROUP BY over labels; no pruning, no roll-up.

    Deliberately independent of lattice tables and frequency-set roll-ups, so it
    can check Incognito in tests.
    """

    name = "exhaustive"

    def search(self, ctx: SearchContext, stats: SearchStats) -> list[tuple[int, ...]]:
        return self.evaluate(ctx, [ctx.criteria], stats)[0]

    def evaluate(self, ctx: SearchContext, criteria_sets: list[list[Criterion]],
                 stats: SearchStats | None = None) -> list[list[tuple[int, ...]]]:
        """Satisfying nodes for several criteria sets, one GROUP BY per node for all of them."""
        stats = stats or SearchStats()
        nodes = full_lattice(ctx.star.heights)
        satisfying: list[list[tuple[int, ...]]] = [[] for _ in criteria_sets]
        for done, node in enumerate(nodes, 1):
            labels = [f"d{d.attr}.l{level}" for d, level in zip(ctx.star.dimensions, node)]
            select = ", ".join(f"{label} AS g{i}" for i, label in enumerate(labels))
            definition = f"SELECT {select}, COUNT(*) AS cnt FROM {ctx.star.joins()} GROUP BY {', '.join(labels)}"
            view = FrequencySetView("node_classes", [f"g{i}" for i in range(len(node))], "cnt", [], definition)
            _, per_set = count_violations_per_set(ctx.conn, view, criteria_sets)
            for found, (classes, _) in zip(satisfying, per_set):
                if classes == 0:
                    found.append(node)
            stats.nodes_checked += 1
            stats.base_scans += 1
            ctx.progress("every node", done, len(nodes))
        return satisfying


STRATEGIES: dict[str, type[SearchStrategy]] = {s.name: s for s in (Incognito, Exhaustive)}
