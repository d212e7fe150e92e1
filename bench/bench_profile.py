"""`sqlanon profile` on a wide table: 200 columns of 2 to 1M distinct values (an id, codes, some measures),
1M rows by default, DuckDB (PostgreSQL with --postgres: 200 columns of a row store are 200 scans there). Prints
the seconds of the profile (every column alone, then every combination of up to 3 of the 12 candidates: 298
groupings, then up to --greedy columns added one at a time, each step a grouping per column) beside one GROUP BY
of three of the columns, same run.

    python bench/bench_profile.py [--rows 1000000] [--columns 200] [--greedy 3] [--postgres]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).parent))
from common import databases, print_table, timed

from sqlanon import profile

CARDINALITIES = [2, 3, 5, 7, 12, 20, 50, 100, 365, 1000, 5000, 30000]


def make_table(url: str, rows: int, columns: int) -> None:
    """`wide`: column 0 an id, then codes of CARDINALITIES cycled (every 25th a measure: a double)."""
    parts = ["i AS c0"]
    for k in range(1, columns):
        if k % 25 == 0:
            parts.append(f"CAST(MOD(i * {7919 + k}, 1000003) AS DOUBLE PRECISION) / 7 AS c{k}")
        else:  # pseudo-random codes: combinations of many values single rows out, as real columns do
            card = CARDINALITIES[k % len(CARDINALITIES)]
            value = f"hash(i, {k})" if url.startswith("duckdb") else f"ABS(hashtextextended(i::text || '-{k}', 0))"
            parts.append(f"MOD({value}, {card}) AS c{k}")
    series = "range(0, {n}) AS t(i)" if url.startswith("duckdb") else "generate_series(0, {n} - 1) AS t(i)"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE IF EXISTS wide")
        conn.exec_driver_sql(f"CREATE TABLE wide AS SELECT {', '.join(parts)} FROM {series.format(n=rows)}")
        if url.startswith("postgresql"):
            conn.exec_driver_sql("ANALYZE wide")
    engine.dispose()


def group_by(url: str) -> None:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        conn.exec_driver_sql(
            "SELECT COUNT(*) FROM (SELECT c11, c23, c35, COUNT(*) FROM wide GROUP BY c11, c23, c35) g"
        ).all()
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--columns", type=int, default=200)
    parser.add_argument("--greedy", type=int, default=3)
    parser.add_argument("--postgres", action="store_true")
    args = parser.parse_args()
    rows = []
    for engine, url in databases("profile.duckdb", args.postgres):
        make_table(url, args.rows, args.columns)
        base, _ = timed(lambda: group_by(url), 3)
        started = time.perf_counter()
        found = profile(url, "wide", greedy=args.greedy)
        seconds = time.perf_counter() - started
        greedy = [c for c in found.combinations if c.greedy]
        groupings = len(found.columns) + len(found.combinations) + len(greedy) * (args.columns - 3)
        rows.append([engine, f"one GROUP BY of 3 columns of 30,000 values, {args.rows:,} rows", f"{base:.3f}", "1x"])
        rows.append(
            [
                engine,
                f"profile, {args.columns} columns ({groupings} groupings)",
                f"{seconds:.2f}",
                f"{seconds / base:.0f}x",
            ]
        )
        for step in greedy:
            what = f"greedy: {', '.join(step.columns)} ({step.singled_out:.1%} alone)"
            rows.append([engine, what, "", ""])
        chosen = found.suggested
        if chosen is not None:
            what = f"suggested quasi-identifiers: {', '.join(chosen.columns)} ({chosen.singled_out:.1%} alone)"
            rows.append([engine, what, "", ""])
    print_table(
        f"profile of a wide table ({args.columns} columns, {args.rows:,} rows)",
        ["engine", "what", "seconds", "ratio"],
        rows,
    )


if __name__ == "__main__":
    main()
