"""(epsilon, delta)-differential privacy by sampling and generalization (output.method differential_privacy).

1. Utility against ARX (Adult, all nine QIs, DuckDB): ARX's 23 TestAnonymizationDifferentialPrivacy cases on
   Adult, each RUNS times with a different key: for a fixed generalization (ARX's degree) the loss of the release
   (ARX's loss model and its default aggregate, the geometric mean), for a search the published node's score
   (loss, precision, entropy, AECS, discernibility, or classification of QI targets; epsilon 2 of which 1 for
   the search, delta 1e-5, 1, 10 or 100 steps). Beside each, the same figure of ARX's own runs (random sampling
   and mechanism, not its fixed seed) from bench/out/arx/dp.tsv, which `bash bench/arx/run.sh ARX_SOURCE RUNS dp`
   writes (bench/arx/ArxDp.java). sqlanon's mean should lie within ARX's spread.
2. Cost at scale (hospital, 1M rows by default; DuckDB, and PostgreSQL with --postgres): a fixed generalization
   (medium) and a search of 20 steps, each beside one GROUP BY of the table's five QIs in the same run.

    python bench/bench_dp.py [--postgres] [--runs N] [--hospital-rows N] [--no-hospital] [--no-adult]
"""

from __future__ import annotations

import math
import os
import statistics
from importlib import resources
from pathlib import Path
from typing import Any

from bench_hospital import QIS, dataset, load_hospital
from common import adult_and_hospital_parser, databases, group_by_seconds, print_table, timed

from sqlanon import SqlanonError, anonymize, job_from_dict, load_csv

ADULT = Path(str(resources.files("sqlanon.data").joinpath("adult")))
ADULT_QIS = ["sex", "age", "race", "marital-status", "education", "native-country", "workclass", "occupation"]
ADULT_QIS += ["salary-class"]
ARX_RUNS = Path(__file__).parent / "out" / "arx" / "dp.tsv"
KEY_VARIABLE = "SQLANON_BENCH_DP_KEY"

# ARX's cases, in ArxDp.java's order: (fixed generalization: epsilon, delta, degree) or (search: score, steps)
FIXED = [(2.0, 1e-5, "low_medium"), (1.5, 1e-6, "high"), (math.log(2), 1e-7, "low_medium")]
FIXED += [(math.log(3), 1e-8, "medium"), (2.0, 1e-5, "medium_high"), (1.5, 1e-6, "low_medium")]
FIXED += [(0.01, 1e-9, "low_medium")]
SCORED = ("loss", "precision", "entropy", "aecs", "discernibility")
SEARCHES: list[tuple[str, int, list[str]]] = [(score, steps, []) for score in SCORED for steps in (10, 100)]
SEARCHES += [
    ("classification", steps, targets)
    for targets in (["salary-class"], ["occupation", "salary-class"])
    for steps in (1, 10, 100)
]


def cases() -> list[tuple[str, dict[str, Any]]]:
    """Each case's name and its output settings."""
    found = [
        (
            f"fixed {degree}, eps {epsilon:.3g}, delta {delta:g}",
            {"epsilon": epsilon, "delta": delta, "generalization": degree},
        )
        for epsilon, delta, degree in FIXED
    ]
    for score, steps, targets in SEARCHES:
        search = {"budget": 1.0, "steps": steps, "score": score, **({"targets": targets} if targets else {})}
        what = f"{score} of {' and '.join(targets)}" if targets else score
        found.append((f"search {what}, {steps} steps", {"epsilon": 2.0, "delta": 1e-5, "search": search}))
    return found


def arx_figures() -> dict[int, list[float]]:
    """ARX's figure of each run, by case number (empty until ArxDp has run)."""
    found: dict[int, list[float]] = {}
    if ARX_RUNS.exists():
        for line in ARX_RUNS.read_text().splitlines():
            parts = line.split("\t")
            if parts[0] == "case" and parts[4] != "-":
                found.setdefault(int(parts[1]), []).append(float(parts[4]))
    return found


def adult_job(url: str, output: dict[str, Any]):
    return job_from_dict(
        {
            "source": {"url": url, "table": "adult"},
            "quasi_identifiers": {q: {"hierarchy": f"hierarchies/{q}.csv"} for q in ADULT_QIS},
            "select": {"metric": "loss", "aggregate": "geometric_mean"},  # ARX's loss model's own aggregate
            "output": {
                "table": "adult_dp",
                "method": "differential_privacy",
                "noise_key": {"key_env": KEY_VARIABLE},
                **output,
            },
        },
        ADULT,
    )


def spread(values: list[float]) -> str:
    return f"{statistics.fmean(values):.4g} [{min(values):.4g}, {max(values):.4g}]" if values else "-"


def utility_rows(url: str, runs: int) -> list[list[object]]:
    load_csv(ADULT / "adult.csv.gz", "adult", url, csv_options={"delimiter": ";"}, replace=True)
    arx = arx_figures()
    rows = []
    for number, (name, output) in enumerate(cases()):
        figures, seconds = [], []
        for run in range(runs):
            os.environ[KEY_VARIABLE] = f"the benchmark's key number {run:04d}, 32 bytes"
            try:
                took, report = timed(lambda: anonymize(adult_job(url, output), replace=True))
            except SqlanonError as error:  # an empty release is refused: ARX publishes it, every row suppressed
                if "every row would be suppressed" not in str(error) and "suppresses every one" not in str(error):
                    raise
                figures.append(1.0)
                seconds.append(0.0)
                continue
            figures.append(report.score if "search" in output else report.loss)
            seconds.append(took)
        theirs = arx.get(number, [])
        mean, slack = statistics.fmean(figures), 1e-9  # ARX's all-suppressed loss is 1 less rounding
        inside = "yes" if theirs and min(theirs) - slack <= mean <= max(theirs) + slack else "no" if theirs else "-"
        rows.append([name, spread(theirs), spread(figures), inside, f"{statistics.median(seconds):.2f}"])
    return rows


def hospital_job(folder: Path, url: str, output: dict[str, Any]):
    return job_from_dict(
        {
            "source": {"url": url, "table": "hospital"},
            "quasi_identifiers": {q: {"hierarchy": f"hierarchies/{q}.csv"} for q in QIS},
            "others": "drop",  # published as they are, they would void the guarantee
            "output": {
                "table": "hospital_dp",
                "method": "differential_privacy",
                "noise_key": {"key_env": KEY_VARIABLE},
                **output,
            },
        },
        folder,
    )


def scale_rows(name: str, url: str, size: int) -> list[list[object]]:
    folder = dataset(size)
    load_hospital(folder, url)
    group_by = group_by_seconds(url, "hospital", QIS)
    rows = []
    for what, output in (
        ("fixed generalization (medium)", {"generalization": "medium"}),
        ("search, loss, 20 steps", {"search": {"budget": 1.0, "steps": 20, "score": "loss"}}),
    ):
        job = hospital_job(folder, url, {"epsilon": 2.0, "delta": 1e-6, **output})
        seconds, report = timed(lambda: anonymize(job, replace=True), 3)
        rows.append([name, what, report.published, seconds, group_by, f"{seconds / group_by:.1f}x"])
    return rows


def main() -> None:
    parser = adult_and_hospital_parser(__doc__)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--no-adult", action="store_true")
    args = parser.parse_args()
    found = databases("dp.duckdb", args.postgres)
    if not args.no_adult:
        print_table(
            f"Utility against ARX on Adult: mean [min, max] over {args.runs} keys (ARX: over its runs in dp.tsv)",
            ["case", "ARX", "sqlanon", "mean within ARX's spread", "seconds (median)"],
            utility_rows(found[0][1], args.runs),
        )
    if args.no_hospital:
        return
    os.environ[KEY_VARIABLE] = "the benchmark's key for the hospital, 32 bytes"
    rows = [row for name, url in found for row in scale_rows(name, url, args.hospital_rows)]
    print_table(
        f"Cost at {args.hospital_rows:,} hospital rows, beside one GROUP BY of the five QIs",
        ["database", "publication", "rows published", "seconds", "GROUP BY", "ratio"],
        rows,
    )


if __name__ == "__main__":
    main()
