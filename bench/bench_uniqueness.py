"""Population uniqueness (ARX's PopulationUniqueness: Pitman, Zayatz, SNB, Dankar's rule) on Adult's nine QIs with
4% suppression, as ARX's TestAnonymizationRiskBased runs it (threshold 0.0001, the USA's population, 15 Newton
steps a try), beside k-anonymity (k=5) on the same job and the same run, on DuckDB.

    python bench/bench_uniqueness.py

Every node is checked (the models are monotone neither under generalization nor under suppression): per model,
the search's seconds, the share of them spent solving the models (numpy, in Python), the Newton-Raphson systems
solved and the nodes checked. One run each: a search takes tens of seconds.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_search import ADULT
from common import print_table

from sqlanon import RunOptions, load_job, search
from sqlanon.criteria import criteria_from_config
from sqlanon.model import uniqueness
from sqlanon.model.job import Suppression
from sqlanon.testing import USA

HERE = Path(__file__).parent
MODELS = ("zayatz", "snb", "pitman", "dankar")


class Timed:
    """Counts the systems Newton-Raphson solves and the seconds the models take (wrapping uniqueness.unique_shares)."""

    def __init__(self) -> None:
        self.seconds, self.systems = 0.0, 0
        self.shares, self.newton = uniqueness.unique_shares, uniqueness.newton

    def __enter__(self) -> Timed:
        def shares(*args, **kwargs):
            start = time.perf_counter()
            try:
                return self.shares(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        def newton(evaluate, starts, *args, **kwargs):
            self.systems += len(starts)
            return self.newton(evaluate, starts, *args, **kwargs)

        uniqueness.unique_shares, uniqueness.newton = shares, newton
        return self

    def __exit__(self, *_: object) -> None:
        uniqueness.unique_shares, uniqueness.newton = self.shares, self.newton


def main() -> None:
    url = f"duckdb:///{HERE / 'out' / 'uniqueness_adult.duckdb'}"
    options = RunOptions(db_url=url)
    adult = load_job(ADULT)
    search(adult, options)  # loads the bundled CSV once (not timed)
    loaded = dataclasses.replace(
        adult, suppression=Suppression(0.04), source=dataclasses.replace(adult.source, csv=None)
    )
    k_alone = search(dataclasses.replace(loaded, criteria=criteria_from_config({"k_anonymity": {"k": 5}})), options)
    rows: list[list[object]] = [["k=5", k_alone.stats.seconds, 1.0, "-", "-", k_alone.stats.nodes_checked, "-"]]
    for model in MODELS:
        spec = {"threshold": 0.0001, "model": model, "population_size": USA, "iterations_per_try": 15}
        job = dataclasses.replace(loaded, criteria=criteria_from_config({"population_uniqueness": spec}))
        with Timed() as timed:
            result = search(job, options)
        seconds = result.stats.seconds
        rows.append(
            [model, seconds, seconds / k_alone.stats.seconds, timed.seconds / seconds, timed.systems]
            + [result.stats.nodes_checked, len(result.satisfying)]
        )
        print(f"{model}: {seconds:.1f} s", file=sys.stderr, flush=True)
    header = ["model", "search s", "ratio to k=5", "models' share", "Newton systems", "nodes", "passing"]
    print_table("population uniqueness, Adult 9 QIs, 4% suppression, DuckDB", header, rows)


if __name__ == "__main__":
    main()
