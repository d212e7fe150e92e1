"""The risk models (average re-identification risk, sample uniqueness, k-map estimated from the sample) beside
k-anonymity alone on the same job, and beside ARX, in the same run, on DuckDB (and PostgreSQL with --postgres).

    python bench/bench_risk.py [--postgres] [--hospital-rows 1000000] [--no-hospital]

Adult: all nine QIs, each model alone (as ARX's tests run them: bench/arx/ArxBench.java's jobs of the same
names), without suppression and with 4% (ARX's tests' limit); the search `anonymize` runs too (the default
policy: minimal nodes alone). Hospital (../shared/tools/gen_hospital.py): its five QIs, each model beside k=5,
without suppression. "ratio to k" divides by k-anonymity alone on the same rows and limit (k=5 on Adult; on the
hospital, the job without the model). "ARX here" is ARX's warm median on this machine (bench/arx/run.sh).
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_hospital import dataset, load_hospital
from bench_hospital import job as hospital_job
from bench_search import ADULT
from common import adult_and_hospital_arguments, arx_here, databases, print_table

from sqlanon import RunOptions, anonymize, load_job, search
from sqlanon.criteria import criteria_from_config
from sqlanon.model.job import Output, Suppression
from sqlanon.testing import ARX_RISK_CASES

HERE = Path(__file__).parent
CASES = {"k=5": {"k_anonymity": {"k": 5}}, **ARX_RISK_CASES}
#: beside k=5 on the hospital (k-map's estimate is k-anonymity: nothing to add there)
HOSPITAL_CASES = {name: spec for name, spec in CASES.items() if name.startswith(("k=5", "average", "sample"))}
REPEAT = 3


def median_search(job, url: str) -> tuple[float, object]:
    """The median search seconds of REPEAT runs, and the last result."""
    results = [search(job, RunOptions(db_url=url)) for _ in range(REPEAT)]
    return statistics.median(r.stats.seconds for r in results), results[-1]


def median_anonymize(job, url: str) -> tuple[float, object]:
    """The search `anonymize` runs (median of REPEAT), and the last result."""
    published = dataclasses.replace(job, output=Output(table="bench_risk_published"))
    results = [anonymize(published, RunOptions(db_url=url), replace=True).search for _ in range(REPEAT)]
    return statistics.median(r.stats.seconds for r in results), results[-1]


def adult_rows(rows: list, database: str, url: str, arx: dict) -> None:
    adult = load_job(ADULT)
    search(adult, RunOptions(db_url=url))  # loads the bundled CSV once (not timed)
    loaded = dataclasses.replace(adult, source=dataclasses.replace(adult.source, csv=None))
    for limit in (0.0, 0.04):
        k_alone = None
        for name, spec in CASES.items():
            job = dataclasses.replace(loaded, criteria=criteria_from_config(spec), suppression=Suppression(limit))
            for how, measure in (("search", median_search), ("anonymize's", median_anonymize)):
                seconds, result = measure(job, url)
                if name == "k=5" and how == "search":
                    k_alone = seconds
                rows.append(
                    ["adult", database, name, how, f"{limit:.0%}", result.stats.nodes_checked, seconds]
                    + [seconds / k_alone if k_alone else "-", arx.get(("adult", name, limit), "-")]
                )
                print(f"adult {database} {name} {how} {limit:.0%}: {seconds:.3f} s", file=sys.stderr, flush=True)


def hospital_rows(rows: list, database: str, url: str, size: int) -> None:
    folder = dataset(size)
    if database == "duckdb":
        url = f"duckdb:///{HERE / 'out' / f'search_hospital_{size}.duckdb'}"
    load_hospital(folder, url)
    hospital = hospital_job(folder, url, 5, load=False)
    k_alone = None
    for name, spec in HOSPITAL_CASES.items():
        job = dataclasses.replace(hospital, criteria=criteria_from_config({"k_anonymity": {"k": 5}, **spec}))
        seconds, result = median_search(job, url)
        k_alone = k_alone or seconds
        label = name if name == "k=5" else f"k=5 and {name}"
        rows.append(
            [f"hospital {size:,}", database, label, "search", "0%", result.stats.nodes_checked, seconds]
            + [seconds / k_alone, "-"]
        )
        print(f"hospital {database} {label}: {seconds:.3f} s", file=sys.stderr, flush=True)


def main() -> None:
    args = adult_and_hospital_arguments(__doc__)
    rows: list = []
    arx = arx_here()
    for database, url in databases("risk.duckdb", args.postgres):
        adult_rows(rows, database, url, arx)
        if not args.no_hospital:
            hospital_rows(rows, database, url, args.hospital_rows)
    print_table(
        f"Risk models beside k-anonymity alone (search s: median of {REPEAT}; ratio to k: same rows, same limit)",
        ["dataset", "database", "criteria", "search", "suppression", "checks", "search s", "ratio to k", "ARX here s"],
        rows,
    )


if __name__ == "__main__":
    main()
