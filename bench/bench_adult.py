"""Adult, all 9 QIs: Incognito against the exhaustive strategy (every node, one GROUP BY
each), for k in {2, 5, 10}, on DuckDB and PostgreSQL (if reachable), in the same run.

    python bench/bench_adult.py [--ks 2,5,10] [--no-postgres] [--exhaustive-ks 5]

The exhaustive strategy takes minutes per k (12,960 nodes); --exhaustive-ks limits
the k it is run for (default: all of --ks on DuckDB, k=5 on PostgreSQL).
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
from sqlanon.criteria import KAnonymity

HERE = Path(__file__).parent
CONFIG = Path(str(resources.files("sqlanon.data").joinpath("adult", "adult.yaml")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ks", default="2,5,10")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--exhaustive-ks", default=None, help="k values to run the exhaustive strategy for")
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    targets = databases("adult.duckdb", not args.no_postgres)
    base_job = load_job(CONFIG)
    rows = []
    for name, url in targets:
        search(base_job, RunOptions(db_url=url))  # load the bundled CSV (not timed)
        loaded = dataclasses.replace(base_job, source=dataclasses.replace(base_job.source, csv=None))
        default_exhaustive = ks if name == "duckdb" else [5]
        exhaustive_ks = [int(k) for k in args.exhaustive_ks.split(",")] if args.exhaustive_ks else default_exhaustive
        for k in ks:
            job = dataclasses.replace(loaded, criteria=[KAnonymity(k)])
            seconds, result = timed(lambda: search(job, RunOptions(db_url=url)))
            s = result.stats
            row = [name, k, seconds, s.nodes_checked, s.rollups, s.base_scans, len(result.minimal)]
            if k in exhaustive_ks:
                ex_seconds, ex = timed(
                    lambda: search(dataclasses.replace(job, strategy="exhaustive"), RunOptions(db_url=url))
                )
                assert ex.satisfying == result.satisfying, "exhaustive and Incognito disagree"
                row += [ex_seconds, ex.stats.nodes_checked, ex_seconds / seconds]
            else:
                row += ["-", "-", "-"]
            rows.append(row)
            print(row, flush=True)
    print_table(
        "Adult (30,162 rows), 9 QIs: Incognito vs exhaustive (wall seconds of the whole search call)",
        [
            "database",
            "k",
            "incognito s",
            "checked",
            "roll-ups",
            "scans",
            "minimal",
            "exhaustive s",
            "checked",
            "exhaustive/incognito",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
