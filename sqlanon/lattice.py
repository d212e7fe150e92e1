"""The generalization lattice as tables: nodes, their levels, and edges, per iteration.

A node of iteration i is a set of i (attribute, level) pairs, attributes being
QI positions in config order. Its key `attr:level,...` (attributes ascending)
identifies it; Incognito's self-join, subset pruning and edge generation are
the SQL templates under sql/, run by the store (sqlanon.store.lattice). Python
only reads back one iteration's nodes and edges to drive the breadth-first
search.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from typing import Iterable

from sqlalchemy.engine import Connection

from .backends import Database
from .store import Store, lattice

Pairs = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Node:
    node_id: int
    pairs: Pairs  # ((attr, level), ...) by attribute

    @property
    def height(self) -> int:
        return sum(level for _, level in self.pairs)

    @property
    def attrs(self) -> tuple[int, ...]:
        return tuple(attr for attr, _ in self.pairs)

    @property
    def levels(self) -> dict[int, int]:
        return dict(self.pairs)

    def vector(self, width: int) -> tuple[int, ...]:
        """The levels of all `width` attributes, -1 for those the node leaves out."""
        levels = self.levels
        return tuple(levels.get(attr, -1) for attr in range(width))


def node_key(pairs: Iterable[tuple[int, int]]) -> str:
    return ",".join(f"{attr}:{level}" for attr, level in sorted(pairs))


def parse_key(key: str) -> Pairs:
    return tuple((int(a), int(lv)) for a, lv in (pair.split(":") for pair in key.split(",")))


def full_lattice(heights: list[int]) -> list[tuple[int, ...]]:
    """Every node over all attributes, as level vectors (for the exhaustive strategy)."""
    return list(product(*(range(h + 1) for h in heights)))


def direct_specializations(node: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The nodes one attribute one level lower."""
    return [node[:j] + (node[j] - 1,) + node[j + 1:] for j in range(len(node)) if node[j] > 0]


def direct_generalizations(node: tuple[int, ...], heights: list[int]) -> list[tuple[int, ...]]:
    """The nodes one attribute one level higher."""
    return [node[:j] + (node[j] + 1,) + node[j + 1:] for j in range(len(node)) if node[j] < heights[j]]


def nodes_by_height(heights: list[int]) -> dict[int, list[tuple[int, ...]]]:
    """The full lattice grouped by height (sum of levels), every height present."""
    found: dict[int, list[tuple[int, ...]]] = {h: [] for h in range(sum(heights) + 1)}
    for node in full_lattice(heights):
        found[sum(node)].append(node)
    return found


def minimal_nodes(passing: Iterable[tuple[int, ...]], heights: list[int] | None = None) -> list[tuple[int, ...]]:
    """Passing nodes with no passing node strictly below them.

    Passing sets need not be closed under generalization (criteria that are
    not monotone under suppression), so "below" means anywhere below, not just
    one step: a node is covered when a direct specialization passes or is
    itself covered, worked out from the lowest heights up. When the set is
    closed (checked against the lattice's `heights`), a passing node below
    another means one a step below it, and the direct specializations tell.
    """
    found = set(passing)
    if heights is not None and all(g in found for n in found for g in direct_generalizations(n, heights)):
        minimal = [n for n in found if not any(b in found for b in direct_specializations(n))]
        return sorted(minimal, key=lambda n: (sum(n), n))
    covered: dict[tuple[int, ...], bool] = {}  # node -> some passing node lies strictly below it

    def is_covered(node: tuple[int, ...]) -> bool:
        stack = [node]
        while stack:  # iterative depth-first evaluation (lattices can be deep)
            top = stack[-1]
            below = [b for b in direct_specializations(top) if b not in found and b not in covered]
            if below:
                stack.extend(below)
                continue
            stack.pop()
            covered[top] = any(b in found or covered[b] for b in direct_specializations(top))
        return covered[node]

    minimal = [node for node in found if not is_covered(node)]
    return sorted(minimal, key=lambda n: (sum(n), n))


class LatticeStore:
    """Reads and writes one run's lattice tables (through the store's operations, sqlanon.store.lattice)."""

    def __init__(self, db: Database, schema: str, run_id: int):
        self.store, self.run_id = Store(db, schema), run_id

    def create_first_iteration(self, conn: Connection, heights: list[int]) -> None:
        """C_1: every level of every attribute, chained by edges level -> level + 1."""
        nodes, levels, edges, next_id = [], [], [], 1
        for attr, height in enumerate(heights):
            for level in range(height + 1):
                nodes.append((next_id, 1, node_key([(attr, level)]), "", attr, level, level, "candidate"))
                levels.append((next_id, attr, level))
                if level < height:
                    edges.append((1, next_id, next_id + 1))
                next_id += 1
        self.store.insert(conn, lattice.NODES, self.run_id, nodes)
        self.store.insert(conn, lattice.LEVELS, self.run_id, levels)
        self.store.insert(conn, lattice.EDGES, self.run_id, edges)

    def create_full_iteration(self, conn: Connection, heights: list[int]) -> None:
        """The whole lattice over all attributes as one iteration (for searches that cannot prune by subsets)."""
        iteration = len(heights)
        ids = {node: i for i, node in enumerate(full_lattice(heights), start=1)}
        nodes, levels, edges = [], [], []
        for node, node_id in ids.items():
            pairs = list(enumerate(node))
            nodes.append((node_id, iteration, node_key(pairs), node_key(pairs[:-1]), len(node) - 1, node[-1],
                          sum(node), "candidate"))
            levels += [(node_id, attr, level) for attr, level in pairs]
            edges += [(iteration, ids[below], node_id) for below in direct_specializations(node)]
        self.store.insert(conn, lattice.NODES, self.run_id, nodes)
        self.store.insert(conn, lattice.LEVELS, self.run_id, levels)
        self.store.insert(conn, lattice.EDGES, self.run_id, edges)
        self.store.call(conn, lattice.ANALYZE_TABLES, run=self.run_id)

    def record_full_lattice(self, conn: Connection, attributes: int, statuses: dict[tuple[int, ...], str],
                            resumed: bool) -> None:
        """The settled nodes of a search over the full lattice, as its one iteration (in bulk); a resumed run's
        earlier rows replaced."""
        rows = [(node_id, attributes, node_key(list(enumerate(node))), node_key(list(enumerate(node))[:-1]),
                 attributes - 1, node[-1], sum(node), status)
                for node_id, (node, status) in enumerate(sorted(statuses.items()), start=1)]
        if resumed:  # a new run has no rows yet (the statement was a millisecond of a 0.04 s search)
            self.store.call(conn, lattice.CLEAR, run=self.run_id)
        self.store.insert(conn, lattice.NODES, self.run_id, rows)

    def prepare_resume(self, conn: Connection) -> int:
        """The last iteration an interrupted run completed (0 if none); the partial one's rows are deleted."""
        return int(self.store.call(conn, lattice.RESUME, run=self.run_id).scalar_one())

    def generate_next(self, conn: Connection, iteration: int) -> None:
        """C_{i+1}, pruned, with its edges, from the survivors of iteration i (all in SQL)."""
        self.store.call(conn, lattice.NEXT, run=self.run_id, iteration=iteration)

    def load_iteration(self, conn: Connection, iteration: int) -> tuple[list[Node], list[tuple[int, int]]]:
        rows = self.store.call(conn, lattice.ITERATION_NODES, run=self.run_id, iteration=iteration).all()
        edges = self.store.call(conn, lattice.ITERATION_EDGES, run=self.run_id, iteration=iteration).all()
        return [Node(int(i), parse_key(k)) for i, k in rows], [(int(a), int(b)) for a, b in edges]

    def save_statuses(self, conn: Connection, statuses: dict[int, str]) -> None:
        by_status: dict[str, list[int]] = {}
        for node_id, status in statuses.items():
            by_status.setdefault(status, []).append(node_id)
        for status, ids in by_status.items():
            self.store.call(conn, lattice.STATUS, run=self.run_id, ids=ids, status=status)

    def survivors(self, conn: Connection, iteration: int) -> list[Pairs]:
        rows = self.store.call(conn, lattice.SURVIVORS, run=self.run_id, iteration=iteration).scalars().all()
        return [parse_key(k) for k in rows]
