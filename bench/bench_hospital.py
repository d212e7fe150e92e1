"""Hospital microdata (default 1M rows): Incognito k=5 over zip, birth_date, sex, race,
marital_status, against one plain GROUP BY over the same five columns, measured in the
same run on DuckDB (and PostgreSQL if reachable).

    python bench/bench_hospital.py [--rows 1000000] [--k 5] [--no-postgres]

The data comes from ../shared/tools/gen_hospital.py (deterministic); it is
generated once into bench/out/ and reused.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).parent))
from common import databases, print_table, timed

from sqlanon import load_csv, search
from sqlanon.config import job_from_dict

HERE = Path(__file__).parent
GENERATOR = HERE.parent.parent / "shared" / "tools" / "gen_hospital.py"
QIS = ["zip", "birth_date", "sex", "race", "marital_status"]


def dataset(rows: int) -> Path:
    out = HERE / "out" / f"hospital_{rows}"
    if not (out / "hospital.csv").exists():
        subprocess.run([sys.executable, str(GENERATOR), "--rows", str(rows), "--out", str(out)], check=True)
    return out


CSV_OPTIONS = {"types": {"zip": "VARCHAR", "birth_date": "VARCHAR"}}


def load_hospital(folder: Path, url: str) -> None:
    """(Re)load the table `hospital` from the folder's CSV (not timed): the benchmarks share PostgreSQL's
    database, where another size's rows may be there from an earlier benchmark."""
    # Spark reads no column types: every column as text keeps zip codes' leading zeros, and dates as written
    options = {"all_varchar": True} if url.startswith("spark") else CSV_OPTIONS
    load_csv(folder / "hospital.csv", "hospital", url, csv_options=options, replace=True)


def job(folder: Path, url: str, k: int, load: bool, base: str = "cube"):
    source = {"url": url, "table": "hospital"}
    if load:
        source.update(csv="hospital.csv", csv_options=CSV_OPTIONS)
    return job_from_dict(
        {
            "source": source,
            "quasi_identifiers": {q: {"hierarchy": f"hierarchies/{q}.csv"} for q in QIS},
            "sensitive": ["diagnosis", "cost"],
            "criteria": {"k_anonymity": {"k": k}},
            "search": {"base": base},
        },
        folder,
    )


def plain_group_by(url: str, table: str = "hospital") -> None:
    """One GROUP BY of `table` on the hospital's QIs: what the benchmarks' ratios divide by."""
    engine = sa.create_engine(url)
    cols = ", ".join(QIS)
    with engine.connect() as conn:
        conn.exec_driver_sql(f"SELECT COUNT(*) FROM (SELECT {cols}, COUNT(*) FROM {table} GROUP BY {cols}) g").all()
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--bases", default="cube,table", help="frequency-set bases to compare")
    args = parser.parse_args()
    folder = dataset(args.rows)
    targets = databases(f"hospital_{args.rows}.duckdb", not args.no_postgres)
    rows = []
    for name, url in targets:
        load_hospital(folder, url)
        group_by, _ = timed(lambda: plain_group_by(url), repeat=3)
        for base in args.bases.split(","):
            seconds, result = timed(lambda: search(job(folder, url, args.k, load=False, base=base)))
            s = result.stats
            rows.append(
                [
                    name,
                    base,
                    args.rows,
                    args.k,
                    seconds,
                    s.nodes_checked,
                    s.rollups,
                    s.base_scans,
                    len(result.minimal),
                    group_by,
                    seconds / group_by,
                ]
            )
    print_table(
        f"Hospital, {args.rows} rows, QIs {', '.join(QIS)}, k={args.k}",
        ["database", "base", "rows", "k", "search s", "checked", "roll-ups", "scans", "minimal", "GROUP BY s", "ratio"],
        rows,
    )


if __name__ == "__main__":
    main()
