"""sqlanon's answers against ARX's, on the Adult jobs of bench/arx/ArxBench.java (DuckDB).

    bash bench/arx/run.sh ARX_SOURCE      # writes bench/out/arx/lattices.tsv
    python bench/compare_arx.py

ARX tags the transformations it looked at (checked or settled by predictive tagging) anonymous or not. For
each job this prints how many of each tag sqlanon's search agrees with (a transformation ARX calls anonymous
must be among sqlanon's satisfying nodes, one it calls not anonymous must not be), and whether ARX's optimum
(by its loss metric) satisfies the job in sqlanon and is one of its minimal nodes.
"""

from __future__ import annotations

import csv
import dataclasses
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_criteria import criteria_job
from bench_search import ADULT
from common import print_table

from sqlanon import RunOptions, load_job, search
from sqlanon.criteria import KAnonymity, criteria_from_config
from sqlanon.model.job import Suppression

HERE = Path(__file__).parent
LATTICES = HERE / "out" / "arx" / "lattices.tsv"


def arx_lattices() -> dict[tuple[str, str, float], list[tuple[dict[str, int], str, bool]]]:
    """Per job: (levels by attribute, ARX's tag, whether it is ARX's optimum) of each transformation ARX kept."""
    jobs = defaultdict(list)
    with LATTICES.open() as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            levels = {a: int(lv) for a, lv in (pair.split("=") for pair in row["node"].split(","))}
            jobs[(row["dataset"], row["criteria"], float(row["suppression"]))].append(
                (levels, row["anonymity"], row["optimum"] == "true")
            )
    return jobs


AGE_CASES = {"t ordered 0.2": {"t_closeness": {"attribute": "age", "t": 0.2, "distance": "ordered"}}}


def sqlanon_job(base, dataset: str, criteria: str, limit: float):
    if dataset == "adult":
        job = dataclasses.replace(base, criteria=[KAnonymity(5)])
    elif dataset.endswith("age sensitive"):  # the eight other QIs
        job = dataclasses.replace(
            base,
            criteria=criteria_from_config({"k_anonymity": {"k": 5}, **AGE_CASES[criteria]}),
            quasi_identifiers=[q for q in base.quasi_identifiers if q.column != "age"],
            sensitive=["age"],
        )
    else:
        job = criteria_job(base, criteria)
    return dataclasses.replace(job, suppression=Suppression(limit))


def main() -> None:
    if not LATTICES.exists():
        sys.exit(f"{LATTICES} is missing: run bench/arx/run.sh ARX_SOURCE first")
    url = f"duckdb:///{HERE / 'out' / 'search.duckdb'}"
    adult = load_job(ADULT)
    search(adult, RunOptions(db_url=url))  # loads the bundled CSV once
    base = dataclasses.replace(adult, source=dataclasses.replace(adult.source, csv=None))
    rows = []
    for (dataset, criteria, limit), nodes in arx_lattices().items():
        result = search(sqlanon_job(base, dataset, criteria, limit), RunOptions(db_url=url))
        satisfying, minimal = set(result.satisfying), set(result.minimal)

        def ours(levels: dict[str, int]) -> tuple[int, ...]:
            return tuple(levels[qi] for qi in result.qi)

        tags = defaultdict(lambda: [0, 0])  # tag -> [ARX's count, sqlanon agreeing]
        for levels, tag, _ in nodes:
            tags[tag][0] += 1
            tags[tag][1] += (ours(levels) in satisfying) == (tag == "ANONYMOUS")
        optimum = [ours(levels) for levels, _, is_optimum in nodes if is_optimum]
        rows.append(
            [
                dataset,
                criteria,
                f"{limit:.0%}",
                len(satisfying),
                len(minimal),
                "{}/{}".format(*reversed(tags["ANONYMOUS"])),
                "{}/{}".format(*reversed(tags["NOT_ANONYMOUS"])),
                sum(n for tag, (n, _) in tags.items() if tag not in ("ANONYMOUS", "NOT_ANONYMOUS")),
                "-" if not optimum else "yes" if optimum[0] in satisfying else "NO",
                "-" if not optimum else "yes" if optimum[0] in minimal else "no",
            ]
        )
        print(rows[-1], flush=True)
    print_table(
        "sqlanon against ARX (agreeing / tagged by ARX)",
        [
            "dataset",
            "criteria",
            "suppression",
            "sqlanon satisfying",
            "sqlanon minimal",
            "ARX anonymous",
            "ARX not anonymous",
            "ARX other tags",
            "ARX optimum satisfies",
            "ARX optimum minimal",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
