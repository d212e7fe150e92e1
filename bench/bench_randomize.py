"""Randomization (output.method randomize) and the reconstruction of a randomized column's distribution.

1. Accuracy as noise grows (Adult's age, 30,162 rows, DuckDB): for uniform noise of growing width and gaussian
   noise of growing deviation, the L1 distance (0 to 2) to the true distribution of age, on the reconstruction's
   grid of 40 intervals, of the published values and of the reconstruction, and the iterations it took.
2. Cost at scale (hospital, 1M rows by default; DuckDB, and PostgreSQL with --postgres): the publication (noise on
   cost, write, independent audit, noise table) and the reconstruction, each beside one GROUP BY of the table's
   five QIs on the same database in the same run.

    python bench/bench_randomize.py [--postgres] [--hospital-rows N] [--no-hospital]
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from bench_hospital import QIS, dataset, load_hospital
from common import adult_and_hospital_arguments, databases, group_by_seconds, print_table, timed

from sqlanon import anonymize, job_from_dict, load_csv, reconstruct

ADULT_CSV = Path(str(resources.files("sqlanon.data").joinpath("adult", "adult.csv.gz")))
KEY_VARIABLE = "SQLANON_BENCH_NOISE_KEY"
NOISES = [("uniform", "width", w) for w in (5, 10, 20, 40, 80)] + [("gaussian", "sd", s) for s in (2.5, 5, 10, 20)]


def randomize_job(url: str, table: str, column: str, others: list[str], noise: dict[str, object]):
    return job_from_dict(
        {
            "source": {"url": url, "table": table},
            "quasi_identifiers": [column],
            "insensitive": others,
            "output": {
                "table": f"{table}_randomized",
                "method": "randomize",
                "noise": {column: noise},
                "noise_key": {"key_env": KEY_VARIABLE},
            },
        }
    )


def accuracy_rows(url: str) -> list[list[object]]:
    load_csv(ADULT_CSV, "adult", url, csv_options={"delimiter": ";"}, replace=True)
    others = ["sex", "race", "marital-status", "education", "native-country", "workclass", "occupation"]
    rows = []
    for distribution, parameter, scale in NOISES:
        job = randomize_job(
            url, "adult", "age", others + ["salary-class"], {"distribution": distribution, parameter: scale}
        )
        anonymize(job, replace=True)
        seconds, found = timed(lambda: reconstruct(url, "adult_randomized", "age", original="adult"))
        rows.append(
            [
                distribution,
                f"{parameter} {scale:g}",
                round(found.l1_perturbed, 3),
                round(found.l1_reconstructed, 3),
                f"{found.l1_reconstructed / found.l1_perturbed:.2f}",
                found.iterations,
                seconds,
            ]
        )
    return rows


def scale_rows(name: str, url: str, size: int) -> list[list[object]]:
    load_hospital(dataset(size), url)
    group_by = group_by_seconds(url, "hospital", QIS)
    others = QIS + ["diagnosis"]
    job = randomize_job(url, "hospital", "cost", others, {"distribution": "gaussian", "sd": 5000})
    published_seconds, _ = timed(lambda: anonymize(job, replace=True), 3)
    seconds, found = timed(lambda: reconstruct(url, "hospital_randomized", "cost", original="hospital"), 3)
    return [
        [
            name,
            "publication (write, audit, noise table)",
            "",
            published_seconds,
            group_by,
            f"{published_seconds / group_by:.1f}x",
        ],
        [
            name,
            f"reconstruction ({found.iterations} iterations)",
            found.statements,
            seconds,
            group_by,
            f"{seconds / group_by:.1f}x",
        ],
    ]


def main() -> None:
    args = adult_and_hospital_arguments(__doc__)
    os.environ.setdefault(KEY_VARIABLE, "the benchmark's noise key, 32 bytes")  # the same noise in every run
    found = databases("randomize.duckdb", args.postgres)
    print_table(
        "Accuracy as noise grows: Adult's age, L1 distance to the true distribution (DuckDB)",
        ["noise", "spread", "published", "reconstructed", "ratio", "iterations", "seconds"],
        accuracy_rows(found[0][1]),
    )
    if args.no_hospital:
        return
    rows = [row for name, url in found for row in scale_rows(name, url, args.hospital_rows)]
    print_table(
        f"Cost at {args.hospital_rows:,} hospital rows, beside one GROUP BY of the five QIs",
        ["database", "verb", "statements", "seconds", "GROUP BY", "ratio"],
        rows,
    )


if __name__ == "__main__":
    main()
