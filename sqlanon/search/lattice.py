"""One run's lattice tables: Incognito's nodes, their levels and edges, per iteration.

A node of iteration i is a set of i (attribute, level) pairs, attributes being
QI positions in config order. Its key `attr:level,...` (attributes ascending)
identifies it; Incognito's self-join, subset pruning and edge generation are
the SQL templates under sql/, run by the store (sqlanon.store.lattice). Python
only reads back one iteration's nodes and edges to drive the breadth-first
search.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.engine import Connection

from ..backends import Database
from ..model.lattice import Pairs, direct_specializations, full_lattice, node_key, parse_key
from ..store import Store, lattice


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
            nodes.append(
                (
                    node_id,
                    iteration,
                    node_key(pairs),
                    node_key(pairs[:-1]),
                    len(node) - 1,
                    node[-1],
                    sum(node),
                    "candidate",
                )
            )
            levels += [(node_id, attr, level) for attr, level in pairs]
            edges += [(iteration, ids[below], node_id) for below in direct_specializations(node)]
        self.store.insert(conn, lattice.NODES, self.run_id, nodes)
        self.store.insert(conn, lattice.LEVELS, self.run_id, levels)
        self.store.insert(conn, lattice.EDGES, self.run_id, edges)
        self.store.run(conn, lattice.ANALYZE_TABLES, run=self.run_id)

    def record_full_lattice(
        self, conn: Connection, attributes: int, statuses: dict[tuple[int, ...], str], resumed: bool
    ) -> None:
        """The settled nodes of a search over the full lattice, as its one iteration (in bulk); a resumed run's
        earlier rows replaced."""
        rows = [
            (
                node_id,
                attributes,
                node_key(list(enumerate(node))),
                node_key(list(enumerate(node))[:-1]),
                attributes - 1,
                node[-1],
                sum(node),
                status,
            )
            for node_id, (node, status) in enumerate(sorted(statuses.items()), start=1)
        ]
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
