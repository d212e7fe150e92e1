"""Adult, 8 QIs (all but occupation), sensitive occupation: Incognito with k=5 alone and with
each privacy criterion, on DuckDB (and PostgreSQL with --postgres), in the same run.

    python bench/bench_criteria.py [--postgres]

Prints search seconds and nodes checked per criterion and the ratio to the k-only search.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from importlib import resources
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import databases, print_table, timed

from sqlanon import RunOptions, load_job, search
from sqlanon.criteria import criteria_from_config
from sqlanon.model.job import Job

HERE = Path(__file__).parent
ADULT = Path(str(resources.files("sqlanon.data").joinpath("adult")))
K = {"k_anonymity": {"k": 5}}
OCC = "occupation"
OCCUPATIONS = [
    line.split(";")[0] for line in (ADULT / "hierarchies" / "occupation.csv").read_text(encoding="utf-8").splitlines()
]
CASES = {
    "k=5 only": {},
    "distinct l=3": {"distinct_l_diversity": {"attribute": OCC, "l": 3}},
    "entropy l=3": {"entropy_l_diversity": {"attribute": OCC, "l": 3}},
    "entropy l=3 grassberger": {"entropy_l_diversity": {"attribute": OCC, "l": 3, "estimator": "grassberger"}},
    "entropy l=3, don't-care": {"entropy_l_diversity": {"attribute": OCC, "l": 3, "dont_care": ["Prof-specialty"]}},
    "recursive c=4 l=3": {"recursive_l_diversity": {"attribute": OCC, "c": 4, "l": 3}},
    "pd-recursive c=4 l=3": {
        "recursive_l_diversity": {"attribute": OCC, "c": 4, "l": 3, "dont_care": ["Prof-specialty"]}
    },
    "npd-recursive": {"npd_recursive_l_diversity": {"attribute": OCC, "c1": 4, "c2": 1, "l": 3, "w": ["Sales"]}},
    "multi-attribute distinct l=2 (7 QIs)": {
        "multi_attribute_l_diversity": {"attributes": [OCC, "salary-class"], "l": 2}
    },
    "t equal 0.2": {"t_closeness": {"attribute": OCC, "t": 0.2, "distance": "equal"}},
    "t hierarchical 0.2": {
        "t_closeness": {
            "attribute": OCC,
            "t": 0.2,
            "distance": "hierarchical",
            "hierarchy": str(ADULT / "hierarchies" / "occupation.csv"),
        }
    },
    "t kl 0.3": {"t_closeness": {"attribute": OCC, "t": 0.3, "distance": "kl"}},
    "beta basic 1.0": {"beta_likeness": {"attribute": OCC, "beta": 1.0, "variant": "basic"}},
    "beta enhanced 3.0": {"beta_likeness": {"attribute": OCC, "beta": 3.0, "variant": "enhanced"}},
    "delta disclosure 3.0": {"delta_disclosure": {"attribute": OCC, "delta": 3.0}},
    # ordered as ARX orders strings
    "t ordered 0.2": {"t_closeness": {"attribute": OCC, "t": 0.2, "distance": "ordered", "order": sorted(OCCUPATIONS)}},
}


def criteria_job(job: Job, case: str) -> Job:
    """`job` (the bundled Adult job, source already loaded) with occupation sensitive and `case`'s criteria."""
    criteria = criteria_from_config({**K, **CASES[case]})
    sensitive = sorted({a for c in criteria for a in c.sensitive_attributes()})
    # a sensitive attribute cannot also be a QI (the multi-attribute case reads salary-class)
    return dataclasses.replace(
        job,
        criteria=criteria,
        sensitive=sensitive,
        quasi_identifiers=[qi for qi in job.quasi_identifiers if qi.column != OCC and qi.column not in sensitive],
        insensitive=[] if OCC in sensitive else [OCC],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--postgres", action="store_true")
    args = parser.parse_args()
    targets = databases("adult.duckdb", args.postgres)
    job = load_job(ADULT / "adult.yaml")
    rows = []
    for name, url in targets:
        search(job, RunOptions(db_url=url))  # loads the bundled CSV (not timed)
        base = dataclasses.replace(job, source=dataclasses.replace(job.source, csv=None))
        k_only = None
        for case in CASES:
            run = criteria_job(base, case)
            seconds, result = timed(lambda: search(run, RunOptions(db_url=url)))
            k_only = k_only or seconds
            rows.append([name, case, seconds, result.stats.nodes_checked, len(result.minimal), seconds / k_only])
            print(rows[-1], flush=True)
    print_table(
        "Adult (30,162 rows), 8 QIs, sensitive occupation, k=5 plus each criterion",
        ["database", "criteria", "search s", "checked", "minimal", "ratio to k only"],
        rows,
    )


if __name__ == "__main__":
    main()
