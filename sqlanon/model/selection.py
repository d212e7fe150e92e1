"""Choosing the node to publish: the utility metrics a job may name, Samarati and Sweeney's preference
policies, and the tie-breaking rule (no connection: the data-dependent figures come from engine.metrics)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .lattice import Levels


@dataclass(kw_only=True, frozen=True)
class Metric:
    name: str
    better: str  # "min" or "max"
    levels_only: bool  # depends on the levels alone: its best passing node is minimal even with suppression
    description: str
    #: gets no better under generalization and ignores what is suppressed, so its best passing node is minimal
    #: even with suppression (as levels_only), though it reads the data
    minimal_optimum: bool = False
    #: one of ARX's quality models (see quality.py): takes ARX's generalization/suppression factor, and where
    #: it has one figure per QI, the aggregate function that combines them (this one by default)
    arx: bool = False
    aggregate: str | None = None


def _arx(name: str, description: str, aggregate: str | None = None, minimal_optimum: bool = False) -> Metric:
    """One of ARX's quality models (model.quality): lower is better, read from the data."""
    return Metric(
        name=name,
        better="min",
        levels_only=False,
        description=description,
        minimal_optimum=minimal_optimum,
        arx=True,
        aggregate=aggregate,
    )


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric(name="height", better="min", levels_only=True, description="sum of the levels"),
        Metric(
            name="relative_distance",
            better="min",
            levels_only=True,
            description="sum over QIs of level / hierarchy height",
        ),
        Metric(
            name="precision",
            better="max",
            levels_only=True,
            description="Sweeney's Prec: 1 - relative distance / number of QIs",
        ),
        Metric(
            name="suppressed", better="min", levels_only=False, description="tuples in classes violating the criteria"
        ),
        Metric(name="completeness", better="max", levels_only=False, description="1 - suppressed / rows"),
        Metric(
            name="classes",
            better="max",
            levels_only=False,
            description="equivalence classes released (distinct generalized tuples)",
        ),
        Metric(name="avg_class_size", better="min", levels_only=False, description="released tuples / classes"),
        Metric(name="c_avg", better="min", levels_only=False, description="average class size / k"),
        Metric(
            name="discernibility",
            better="min",
            levels_only=False,
            description="sum of squared class sizes, plus rows for each suppressed tuple",
        ),
        Metric(
            name="kl_divergence",
            better="min",
            levels_only=False,
            description="KL divergence of the (QI, sensitive) distribution, uniformity assumed",
        ),
        _arx(
            "loss",
            "ARX's loss: per QI, the share of the domain each tuple's value covers, normalized",
            # the mean certainty penalty, which `analyze` reports as loss; ARX's own default is the geometric mean
            aggregate="arithmetic_mean",
        ),
        _arx("aecs", "ARX's average equivalence class size: rows / classes, the suppressed tuples one class"),
        Metric(
            name="dm_star",
            better="min",
            levels_only=False,
            description="ARX's monotonic discernibility: sum of squared class sizes, suppressed classes included",
            minimal_optimum=True,
        ),
        _arx(
            "non_uniform_entropy",
            "ARX's non-uniform entropy: per QI, the bits the generalization takes from each tuple",
            aggregate="sum",
            minimal_optimum=True,
        ),
        _arx(
            "non_uniform_entropy_nm",
            "ARX's non-monotonic non-uniform entropy: the suppressed tuples' lost bits added",
            aggregate="sum",
        ),
        _arx(
            "normalized_entropy",
            "ARX's normalized non-uniform entropy: the non-monotonic entropy over its most, per QI",
            aggregate="sum",
        ),
        _arx(
            "precision_loss",
            "ARX's precision: per QI, the level over the hierarchy's height",
            aggregate="arithmetic_mean",
            minimal_optimum=True,
        ),
        _arx(
            "precision_loss_nm",
            "ARX's non-monotonic precision: suppressed tuples count as generalized to the top",
            aggregate="arithmetic_mean",
        ),
        _arx(
            "classification",
            "ARX's classification metric: the targets' tuples a class's most frequent value mispredicts",
        ),
        _arx(
            "entropy_loss",
            "ARX's entropy-based information loss: per tuple, the log of its class's share of the domain",
        ),
        _arx(
            "publisher_payout",
            "ARX's publisher payout: the benefit the release forgoes by its loss and its attacked classes",
        ),
    )
}

#: ARX's multi-QI quality models, each with its own default aggregate function
ARX_AGGREGATES: dict[str, str] = {m.name: m.aggregate for m in METRICS.values() if m.aggregate}

#: Samarati & Sweeney's preference policies, each the best minimal node by one metric
POLICIES: dict[str, str] = {
    "min_absolute_distance": "height",
    "min_relative_distance": "relative_distance",
    "max_distribution": "classes",
    "min_suppression": "suppressed",
}


def selection_metric(policy: str | None, metric: str | None) -> Metric:
    if policy:
        return METRICS[POLICIES[policy]]
    assert metric is not None, "a selection names a policy or a metric"
    return METRICS[metric]


def needs_every_passing_node(metric: Metric, by_policy: bool, max_suppressed: int) -> bool:
    """Whether the best node may lie above the minimal ones.

    Policies choose among minimal nodes by definition. Every metric here gets
    no better under generalization without suppression (KL: coarser blocks
    only add divergence), so its optimum is minimal; with suppression the
    data-dependent ones can improve higher up (fewer suppressed tuples), except
    those that ignore what is suppressed (`minimal_optimum`).
    """
    return not by_policy and not (metric.levels_only or metric.minimal_optimum) and max_suppressed > 0


def level_metrics(node: Levels, heights: list[int]) -> dict[str, Any]:
    """The metrics that depend on the levels alone (no data): height, relative distance, precision."""
    relative = sum(level / h for level, h in zip(node, heights) if h > 0)
    return {"height": sum(node), "relative_distance": relative, "precision": 1 - relative / len(node)}


def best_node(metric: Metric, metrics: dict[Levels, dict[str, Any]]) -> Levels:
    """The best node by `metric`; ties go to the lowest height, then the smallest level vector
    (in QI config order, so the QIs listed first stay the most precise)."""
    return min(metrics, key=lambda node: rank(metric, metrics[node][metric.name], node))


Rank = tuple[tuple[float, ...], int, Levels]


def rank(metric: Metric, value: Any, node: Levels) -> Rank:
    """`node`'s place in `metric`'s order, the smaller the better (see best_node). A list (ARX's rank aggregate:
    per-QI figures, largest first) compares element by element."""
    sign = 1 if metric.better == "min" else -1
    if isinstance(value, list | tuple):
        return (tuple(sign * round(float(v), 9) for v in value), sum(node), node)
    return ((float("inf") if value is None else sign * round(float(value), 9),), sum(node), node)


def levels_rank(metric: Metric, heights: list[int]) -> Callable[[Levels], Rank] | None:
    """Each node's rank by `metric` where it depends on the levels alone, else None. Such a metric gets no
    better under generalization (height and relative distance grow, precision falls) and a generalization is
    higher: a node ranks after every node it generalizes."""
    if not metric.levels_only:
        return None
    return lambda node: rank(metric, level_metrics(node, heights)[metric.name], node)


def node_label(node: Levels) -> str:
    """A node as the JSON key and display form: levels joined by commas."""
    return ",".join(map(str, node))
