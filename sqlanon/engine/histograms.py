"""Criteria decided over each release's class-size histogram (Criterion.decided_by_histogram, e.g.
criteria.risk.PopulationUniqueness, whose models are a numeric solve): the histogram of every node's classes, with
those the other criteria take flagged, from one statement (a few hundred rows a node: one per class size); in
Python, how many of its smallest classes each node suppresses; then those classes taken in SQL by their rank (the
criterion `with_cuts`), wherever the engine selects violating classes.

Contract: reads frequency sets through FrequencySetView; writes nothing. `violations` answers a search's wave from
the histograms alone; `cuts` gives the criterion each node's classes to take (frequency.resolve_histograms runs
the statement over a view its caller defines and binds them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from sqlalchemy import text
from sqlalchemy.engine import Connection

from ..criteria import Criterion
from ..model.uniqueness import Histogram

EVERY_CLASS = 2**62  # a cut that takes every class: the criterion holds over no part of the release


class HistogramCriterion(Protocol):
    """What the engine asks of a criterion decided by histogram (risk.PopulationUniqueness), of many releases at
    once."""

    name: str
    suppression_limit: int | None

    def classes_to_suppress(self, histograms: list[Histogram], budgets: list[int | None]) -> list[int | None]: ...

    def holds_at(self, histogram: Histogram, share: float | None) -> bool: ...

    def unique_shares(self, histograms: list[Histogram]) -> list[float | None]: ...

    def with_cuts(self, cuts: dict[Any, int]) -> Criterion: ...


@dataclass
class NodeClasses:
    """One node's classes: those the other criteria take (count and tuples), and the histogram of the others."""

    taken_classes: int = 0
    taken_tuples: int = 0
    kept: Histogram = field(default_factory=lambda: Histogram.of({}))


def decided(criteria: Sequence[Criterion]) -> Criterion | None:
    """The criterion decided by histogram among `criteria` (at most one: criteria_from_config checks)."""
    return next((c for c in criteria if c.decided_by_histogram), None)


def read_histograms(
    conn: Connection, statement: str, params: dict[str, object], by_node: bool
) -> dict[Any, NodeClasses]:
    """Per node (its node column's value, or None for a view of one node), its classes from `statement` (a
    `frequency.histogram_statement`): a few hundred rows a node, sorted apart in numpy."""
    rows = conn.execute(text(statement), params).all()
    table = np.array([[row[0] if by_node else 0, *row[-3:]] for row in rows], dtype=np.int64).reshape(-1, 4)
    table = table[np.lexsort((table[:, 1], table[:, 0]))]  # by node, then size
    nodes: dict[Any, NodeClasses] = {}
    keys, starts = np.unique(table[:, 0], return_index=True)
    for key, part in zip(keys, np.split(table, starts[1:])):
        taken, kept = part[part[:, 2] == 1], part[part[:, 2] == 0]
        nodes[int(key) if by_node else None] = NodeClasses(
            taken_classes=int(taken[:, 3].sum()),
            taken_tuples=int((taken[:, 1] * taken[:, 3]).sum()),
            kept=Histogram(kept[:, 1], kept[:, 3]),
        )
    return nodes


def cuts(criterion: Criterion, nodes: dict[Any, NodeClasses]) -> dict[Any, int]:
    """Per node, how many of its smallest classes (of those the others leave) the criterion takes: EVERY_CLASS
    where it cannot hold over any part within the suppression limit. Every node's decided together."""
    decider: HistogramCriterion = criterion  # type: ignore[assignment]
    limit = decider.suppression_limit
    budgets = [None if limit is None else limit - node.taken_tuples for node in nodes.values()]
    found = decider.classes_to_suppress([node.kept for node in nodes.values()], budgets)
    return {key: EVERY_CLASS if taken is None else taken for key, taken in zip(nodes, found)}


def violations(criterion: Criterion, nodes: dict[Any, NodeClasses]) -> dict[Any, tuple[int, int]]:
    """Per node, (violating classes, their tuples): the others' and those the criterion takes."""
    found = {}
    for key, taken in cuts(criterion, nodes).items():
        node = nodes[key]
        histogram = node.kept
        taken = min(taken, histogram.classes)
        found[key] = (node.taken_classes + taken, node.taken_tuples + histogram.smallest_records(taken))
    return found


def bind(criterion: Criterion, taken: dict[Any, int]) -> Criterion:
    """The criterion taking, per node, its `taken` smallest classes."""
    decider: HistogramCriterion = criterion  # type: ignore[assignment]
    return decider.with_cuts(taken)
