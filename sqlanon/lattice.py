"""The generalization lattice as tables: nodes, their levels, and edges, per iteration.

A node of iteration i is a set of i (attribute, level) pairs, attributes being
QI positions in config order. Its key `attr:level,...` (attributes ascending)
identifies it; Incognito's self-join, subset pruning and edge generation are
the SQL templates under sql/, run here. Python only reads back one iteration's
nodes and edges to drive the breadth-first search.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from itertools import product
from typing import Iterable

from sqlalchemy import bindparam, text
from sqlalchemy.engine import Connection

from .backends import Database

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


@lru_cache(maxsize=None)
def sql_template(name: str) -> list[str]:
    """The statements of sql/<name>.sql."""
    body = resources.files("sqlanon.sql").joinpath(f"{name}.sql").read_text()
    return [stmt for stmt in body.split(";\n") if stmt.strip() and not _only_comments(stmt)]


def _only_comments(stmt: str) -> bool:
    return all(not line.strip() or line.strip().startswith("--") for line in stmt.splitlines())


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
    """Reads and writes one run's lattice tables."""

    def __init__(self, db: Database, schema: str, run_id: int):
        self.db, self.run_id = db, run_id
        self.s = db.q(schema)

    def _run(self, conn: Connection, template: str, **params: int) -> None:
        for stmt in sql_template(template):
            conn.execute(text(stmt.replace("{s}", self.s)), {"run_id": self.run_id, **params})

    def create_first_iteration(self, conn: Connection, heights: list[int]) -> None:
        """C_1: every level of every attribute, chained by edges level -> level + 1."""
        nodes, edges, next_id = [], [], 1
        for attr, height in enumerate(heights):
            for level in range(height + 1):
                nodes.append({"r": self.run_id, "id": next_id, "key": node_key([(attr, level)]), "a": attr,
                              "l": level})
                if level < height:
                    edges.append({"r": self.run_id, "a": next_id, "b": next_id + 1})
                next_id += 1
        conn.execute(text(f"INSERT INTO {self.s}.lattice_nodes (run_id, node_id, iteration, node_key, prefix_key, "
                          "last_attr, last_level, height, status) "
                          "VALUES (:r, :id, 1, :key, '', :a, :l, :l, 'candidate')"), nodes)
        conn.execute(text(f"INSERT INTO {self.s}.lattice_node_levels (run_id, node_id, attr, level) "
                          "VALUES (:r, :id, :a, :l)"), nodes)
        if edges:
            conn.execute(text(f"INSERT INTO {self.s}.lattice_edges (run_id, iteration, start_id, end_id) "
                              "VALUES (:r, 1, :a, :b)"), edges)

    def create_full_iteration(self, conn: Connection, heights: list[int]) -> None:
        """The whole lattice over all attributes as one iteration (for searches that cannot prune by subsets)."""
        iteration = len(heights)
        ids = {node: i for i, node in enumerate(full_lattice(heights), start=1)}
        nodes, levels, edges = [], [], []
        for node, node_id in ids.items():
            pairs = list(enumerate(node))
            nodes.append((self.run_id, node_id, iteration, node_key(pairs), node_key(pairs[:-1]), len(node) - 1,
                          node[-1], sum(node), "candidate"))
            levels += [(self.run_id, node_id, attr, level) for attr, level in pairs]
            edges += [(self.run_id, iteration, ids[below], node_id) for below in direct_specializations(node)]
        self.db.insert_rows(conn, f"{self.s}.lattice_nodes", ["run_id", "node_id", "iteration", "node_key",
                            "prefix_key", "last_attr", "last_level", "height", "status"], nodes)
        self.db.insert_rows(conn, f"{self.s}.lattice_node_levels", ["run_id", "node_id", "attr", "level"], levels)
        self.db.insert_rows(conn, f"{self.s}.lattice_edges", ["run_id", "iteration", "start_id", "end_id"], edges)
        self._analyze(conn)

    def record_full_lattice(self, conn: Connection, attributes: int, statuses: dict[tuple[int, ...], str],
                            resumed: bool) -> None:
        """The settled nodes of a search over the full lattice, as its one iteration (in bulk); a resumed run's
        earlier rows replaced."""
        rows = [(self.run_id, node_id, attributes, node_key(list(enumerate(node))),
                 node_key(list(enumerate(node))[:-1]), attributes - 1, node[-1], sum(node), status)
                for node_id, (node, status) in enumerate(sorted(statuses.items()), start=1)]
        if resumed:  # a new run has no rows yet (the statement was a millisecond of a 0.04 s search)
            conn.execute(text(f"DELETE FROM {self.s}.lattice_nodes WHERE run_id = :r"), {"r": self.run_id})
        self.db.insert_rows(conn, f"{self.s}.lattice_nodes", ["run_id", "node_id", "iteration", "node_key",
                            "prefix_key", "last_attr", "last_level", "height", "status"], rows)

    def prepare_resume(self, conn: Connection) -> int:
        """The last iteration an interrupted run completed (0 if none); the partial one's rows are deleted.

        An iteration is complete once every node has a status: statuses are saved
        and committed at the end of each iteration, never in between.
        """
        completed = conn.execute(text(
            f"SELECT COALESCE(MAX(iteration), 0) FROM {self.s}.lattice_nodes WHERE run_id = :r AND iteration NOT IN "
            f"(SELECT iteration FROM {self.s}.lattice_nodes WHERE run_id = :r AND status = 'candidate')"),
            {"r": self.run_id}).scalar_one()
        params = {"r": self.run_id, "i": int(completed)}
        conn.execute(text(f"DELETE FROM {self.s}.lattice_node_levels WHERE run_id = :r AND node_id IN "
                          f"(SELECT node_id FROM {self.s}.lattice_nodes WHERE run_id = :r AND iteration > :i)"), params)
        conn.execute(text(f"DELETE FROM {self.s}.lattice_nodes WHERE run_id = :r AND iteration > :i"), params)
        conn.execute(text(f"DELETE FROM {self.s}.lattice_edges WHERE run_id = :r AND iteration > :i"), params)
        return int(completed)

    def generate_next(self, conn: Connection, iteration: int) -> None:
        """C_{i+1}, pruned, with its edges, from the survivors of iteration i (all in SQL)."""
        first_id = conn.execute(text(f"SELECT COALESCE(MAX(node_id), 0) + 1 FROM {self.s}.lattice_nodes "
                                     "WHERE run_id = :r"), {"r": self.run_id}).scalar_one()
        self._run(conn, "candidates", iteration=iteration, first_id=first_id)
        self._analyze(conn)
        self._run(conn, "prune", iteration=iteration)
        self._run(conn, "edges", iteration=iteration + 1)
        self._analyze(conn)

    def _analyze(self, conn: Connection) -> None:
        """Fresh statistics for PostgreSQL's planner after bulk writes (DuckDB keeps its own)."""
        for table in ("lattice_nodes", "lattice_node_levels", "lattice_edges"):
            self.db.analyze(conn, f"{self.s}.{table}")

    def load_iteration(self, conn: Connection, iteration: int) -> tuple[list[Node], list[tuple[int, int]]]:
        rows = conn.execute(text(f"SELECT node_id, node_key FROM {self.s}.lattice_nodes "
                                 "WHERE run_id = :r AND iteration = :i ORDER BY node_id"),
                            {"r": self.run_id, "i": iteration}).all()
        edges = conn.execute(text(f"SELECT start_id, end_id FROM {self.s}.lattice_edges "
                                  "WHERE run_id = :r AND iteration = :i"),
                             {"r": self.run_id, "i": iteration}).all()
        return [Node(int(i), parse_key(k)) for i, k in rows], [(int(a), int(b)) for a, b in edges]

    def save_statuses(self, conn: Connection, statuses: dict[int, str]) -> None:
        by_status: dict[str, list[int]] = {}
        for node_id, status in statuses.items():
            by_status.setdefault(status, []).append(node_id)
        update = text(f"UPDATE {self.s}.lattice_nodes SET status = :st WHERE run_id = :r AND node_id IN :ids")
        update = update.bindparams(bindparam("ids", expanding=True))
        for status, ids in by_status.items():
            conn.execute(update, {"st": status, "r": self.run_id, "ids": ids})

    def survivors(self, conn: Connection, iteration: int) -> list[Pairs]:
        rows = conn.execute(text(f"SELECT node_key FROM {self.s}.lattice_nodes "
                                 "WHERE run_id = :r AND iteration = :i AND status <> 'fail'"),
                            {"r": self.run_id, "i": iteration}).scalars().all()
        return [parse_key(k) for k in rows]
