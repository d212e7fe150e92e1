"""How a wave reads a large cube: a forest of roll-ups, each its parent grouped to the meet of the nodes under it.

On a large cube a node's check is a pass over the cube (hospital 1M: a million rows read for each node, a few
thousand classes out), but nodes that keep the same high levels share most of that work: the cube grouped once to
their meet (each attribute at the lowest level of any of them) is far smaller, and each of them groups that
instead. A roll-up is grouped from its parent (the cube, for a root); its own nodes are joined with it (one hash
aggregation for all of them); the roll-ups under it read it in turn.

The forest is built bottom up, greedily, on estimated rows read: every node starts as a roll-up of its own, and
the pair of roll-ups whose merge saves the most is merged, until no merge saves anything. A merge either
flattens the pair (one roll-up at their meet, holding both one's nodes and the roll-ups under them), nests them
(a new roll-up at their meet, over both), or puts one under the other (when one's meet lies below the other's).
A roll-up costs the rows it reads plus GROUP_ROWS for each row it groups into (a hash table that large, and its
rows stored: grouping the hospital 1M cube into 150k classes takes 4x the time of grouping it into a thousand)
plus ROLLUP_ROWS, an operator's own cost.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

ROLLUP_ROWS = 40_000  # a roll-up's own cost, in rows read (an operator)
GROUP_ROWS = 15  # what each row a roll-up groups into costs, in rows read


@dataclass
class RollUp:
    """The cube grouped to `meet` (each attribute's level), read by `nodes` (indexes) and by the roll-ups `below`."""

    meet: tuple[int, ...]
    nodes: list[int]
    below: list[RollUp] = field(default_factory=list)


def plan(
    levels: list[tuple[int, ...]], rows_at: Callable[[np.ndarray], np.ndarray], cube_rows: float, max_join: float
) -> list[RollUp]:
    """The roll-ups reading the cube (`cube_rows` rows) for nodes at `levels` (an attribute left out: a level above
    its top). `rows_at` estimates the rows of the cube grouped to each row of an array of levels. No roll-up joins
    more than `max_join` rows with its nodes (its rows times its nodes) unless it has one node: two roll-ups are
    flattened into one only when its rows times all that reads it stay within the bound. Nesting and putting under
    are not bounded: a roll-up under another reads it by grouping it, not by a join."""
    return _Merging(levels=levels, rows_at=rows_at, cube_rows=cube_rows, max_join=max_join).run()


def statements(
    forest: list[RollUp], rows_at: Callable[[np.ndarray], np.ndarray], max_join: float
) -> list[list[RollUp]]:
    """The forest's trees in groups, a statement each, of at most `max_join` rows read (each roll-up's rows times
    the nodes and roll-ups that read it; a tree that reads more is a statement of its own)."""
    groups: list[list[RollUp]] = []
    joined = 0.0
    for tree in forest:
        rows = sum(float(rows_at(np.array([r.meet]))[0]) * (len(r.nodes) + len(r.below)) for r in _walk(tree))
        if not groups or joined + rows > max_join:
            groups.append([])
            joined = 0.0
        groups[-1].append(tree)
        joined += rows
    return groups


def nodes_of(forest: list[RollUp]) -> list[int]:
    return [j for tree in forest for r in _walk(tree) for j in r.nodes]


def _walk(tree: RollUp) -> Iterator[RollUp]:
    yield tree
    for under in tree.below:
        yield from _walk(under)


class _Merging:
    """The greedy merge: per roll-up, its meet, estimated rows, nodes, roll-ups under it and their cost; per pair
    (i, j), what flattening, nesting and putting j under i would save (updated for the merged roll-up only)."""

    def __init__(
        self,
        *,
        levels: list[tuple[int, ...]],
        rows_at: Callable[[np.ndarray], np.ndarray],
        cube_rows: float,
        max_join: float,
    ):
        self.rows_at, self.cube_rows, self.max_join = rows_at, cube_rows, max_join
        self.meets = np.array(levels, dtype=np.int64)
        count = len(levels)
        self.forest = [RollUp(tuple(int(x) for x in m), [j]) for j, m in enumerate(self.meets)]
        self.rows = rows_at(self.meets)
        self.nodes = np.ones(count)  # nodes joined with each roll-up
        self.below = np.zeros(count)  # roll-ups under it
        self.below_cost = np.zeros(count)  # what the roll-ups under it cost, each with its own grouping
        self.alive = np.ones(count, dtype=bool)
        everyone = np.arange(count)
        self.options = self._options(np.repeat(everyone, count), np.tile(everyone, count)).reshape(3, count, count)
        self.best = self.options.min(axis=0)

    def own(self, i: np.ndarray | int) -> np.ndarray:
        """A roll-up's cost, but for reading its parent."""
        return np.asarray(_grouping(self.rows[i]) + self.rows[i] * (self.nodes[i] + self.below[i]) + self.below_cost[i])

    def _options(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """For pairs (i[n], j[n]): what flattening, nesting and putting j under i save (3 rows; inf: not allowed)."""
        meets = np.minimum(self.meets[i], self.meets[j])
        rows = self.rows_at(meets)
        grouping, reads = _grouping(rows), self.nodes + self.below
        flat = (
            grouping
            + rows * (reads[i] + reads[j])
            + self.below_cost[i]
            + self.below_cost[j]
            - self.own(i)
            - self.own(j)
            - self.cube_rows
        )
        flat[rows * (reads[i] + reads[j]) > self.max_join] = np.inf
        nest = grouping + 2 * rows - self.cube_rows
        put_under = np.where((self.meets[i] <= self.meets[j]).all(axis=1), self.rows[i] - self.cube_rows, np.inf)
        options = np.stack([flat, nest, put_under])
        options[:, (i == j) | ~self.alive[i] | ~self.alive[j]] = np.inf
        return options

    def run(self) -> list[RollUp]:
        while True:
            i, j = (int(x) for x in np.unravel_index(int(np.argmin(self.best)), self.best.shape))
            if not self.best[i, j] < -1:  # saves at least a row (the estimates are floats)
                break
            self._merge(i, j, int(np.argmin(self.options[:, i, j])))
        return [self.forest[i] for i in range(len(self.forest)) if self.alive[i]]

    def _merge(self, i: int, j: int, option: int) -> None:
        """Merge roll-up j into i: 0 flattened, 1 nested under a new roll-up, 2 put under i."""
        a, b = self.forest[i], self.forest[j]
        if option == 2:
            a.below.append(b)
            self.below[i] += 1
            self.below_cost[i] += self.own(j)
        else:
            meet = np.minimum(self.meets[i], self.meets[j])
            if option == 0:
                self.forest[i] = RollUp(tuple(int(x) for x in meet), a.nodes + b.nodes, a.below + b.below)
                self.nodes[i] += self.nodes[j]
                self.below[i] += self.below[j]
                self.below_cost[i] += self.below_cost[j]
            else:
                self.forest[i] = RollUp(tuple(int(x) for x in meet), [], [a, b])
                self.below_cost[i] = self.own(i) + self.own(j)
                self.nodes[i], self.below[i] = 0, 2
            self.meets[i], self.rows[i] = meet, self.rows_at(meet[None, :])[0]
        self.alive[j] = False
        self.options[:, j, :] = self.options[:, :, j] = self.best[j, :] = self.best[:, j] = np.inf
        count = len(self.forest)
        everyone, merged = np.arange(count), np.full(count, i)
        updated = self._options(np.concatenate([merged, everyone]), np.concatenate([everyone, merged]))
        self.options[:, i, :], self.options[:, :, i] = updated[:, :count], updated[:, count:]
        self.best[i, :], self.best[:, i] = self.options[:, i, :].min(axis=0), self.options[:, :, i].min(axis=0)


def _grouping(rows: np.ndarray) -> np.ndarray:
    """What grouping into `rows` rows costs beyond reading the input, in rows read."""
    return GROUP_ROWS * rows + ROLLUP_ROWS
