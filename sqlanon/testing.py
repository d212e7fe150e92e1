"""The exhaustive oracle the searches are tested against: every node of the lattice evaluated, by a code path
that shares nothing with the strategies' pruning (one GROUP BY per node, every criteria set at once); and the jobs
of ARX's own test cases that tests and benchmarks run beside ARX.

For tests and benchmarks; not part of the API a data owner uses.
"""

from __future__ import annotations

from typing import Any

from .criteria import Criterion
from .model.job import Job
from .search.strategies import Exhaustive
from .session import RunOptions, lattice_run

#: the population ARX's tests sample Adult from (ARXPopulationModel.Region.USA)
USA = 317238626
#: ARX's test cases for its risk models (TestAnonymizationRiskBased, TestAnonymizationKMap), each model alone on
#: Adult's nine QIs: bench/arx/ArxBench.java runs ARX's by the same names
ARX_RISK_CASES: dict[str, dict[str, Any]] = {
    "average risk 0.01": {"average_risk": {"threshold": 0.01}},
    "average risk 0.05, highest 0.1, at risk 0.05": {
        "average_risk": {"threshold": 0.05, "highest_risk": 0.1, "records_at_risk": 0.05}
    },
    "sample uniqueness 0.01": {"sample_uniqueness": {"threshold": 0.01}},
    "k-map 3 zero-truncated": {"k_map": {"k": 3, "population_size": USA, "estimator": "zero_truncated_poisson"}},
    "k-map 1000 zero-truncated": {"k_map": {"k": 1000, "population_size": USA, "estimator": "zero_truncated_poisson"}},
    "k-map 1000 poisson": {"k_map": {"k": 1000, "population_size": USA, "estimator": "poisson"}},
}


def evaluate_every_node(
    job: Job, criteria_sets: list[list[Criterion]], options: RunOptions | None = None
) -> list[list[tuple[int, ...]]]:
    """Brute force: the passing nodes of the full lattice for each criteria set (the job's suppression
    limit applies). The oracle the searches are tested against."""
    violations, max_suppressed = every_node_violations(job, criteria_sets, options)
    return [sorted(n for n, tuples in found.items() if tuples <= max_suppressed) for found in violations]


def every_node_violations(
    job: Job, criteria_sets: list[list[Criterion]], options: RunOptions | None = None
) -> tuple[list[dict[tuple[int, ...], int]], int]:
    """Brute force: every node's violating tuples per criteria set, and the job's MaxSup.

    Every node is one GROUP BY over the table, evaluated against all sets at
    once, so one pass answers several k and any suppression limit.
    """
    options = options or RunOptions()
    extra = [c for criteria in criteria_sets for c in criteria]
    with lattice_run(job, options, "evaluate-every-node", extra_criteria=extra) as run:
        found = Exhaustive().evaluate(run.ctx, criteria_sets)
        run.finish({"nodes": len(found[0]) if found else 0})
    return found, run.ctx.max_suppressed
