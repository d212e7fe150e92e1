"""The generalization lattice as level vectors: a node is a tuple of levels, one per QI in config order (as
the exhaustive search and the selection see it), or a set of (attribute, level) pairs with a text key (as
Incognito's iterations over subsets of the QIs see it). Pure functions, no connection.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import product

#: a node as one level per QI, in the job's QI order
Levels = tuple[int, ...]
#: a node as (attribute, level) pairs over a subset of the QIs
Pairs = tuple[tuple[int, int], ...]


def node_key(pairs: Iterable[tuple[int, int]]) -> str:
    return ",".join(f"{attr}:{level}" for attr, level in sorted(pairs))


def parse_key(key: str) -> Pairs:
    return tuple((int(a), int(lv)) for a, lv in (pair.split(":") for pair in key.split(",")))


def full_lattice(heights: list[int]) -> list[Levels]:
    """Every node over all attributes, as level vectors (for the exhaustive strategy)."""
    return list(product(*(range(h + 1) for h in heights)))


def direct_specializations(node: Levels) -> list[Levels]:
    """The nodes one attribute one level lower."""
    return [node[:j] + (node[j] - 1,) + node[j + 1 :] for j in range(len(node)) if node[j] > 0]


def direct_generalizations(node: Levels, heights: list[int]) -> list[Levels]:
    """The nodes one attribute one level higher."""
    return [node[:j] + (node[j] + 1,) + node[j + 1 :] for j in range(len(node)) if node[j] < heights[j]]


def nodes_by_height(heights: list[int]) -> dict[int, list[Levels]]:
    """The full lattice grouped by height (sum of levels), every height present."""
    found: dict[int, list[Levels]] = {h: [] for h in range(sum(heights) + 1)}
    for node in full_lattice(heights):
        found[sum(node)].append(node)
    return found


def minimal_nodes(passing: Iterable[Levels], heights: list[int] | None = None) -> list[Levels]:
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
    covered: dict[Levels, bool] = {}  # node -> some passing node lies strictly below it

    def is_covered(node: Levels) -> bool:
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
