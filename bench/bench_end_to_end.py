"""From CSV to an audited anonymized table, as a user runs it: one `sqlanon anonymize` process per
size, its wall seconds and peak resident memory, on DuckDB.

    python bench/bench_end_to_end.py [--rows 1000000,5000000] [--k 5]

The hospital data (../shared/tools/gen_hospital.py, QIs zip, birth_date, sex, race,
marital_status) is generated once into bench/out/. Each run starts from an empty database
file, so the time covers loading the CSV, building the dimension tables, the search, the
publication and its audit. Peak RSS is the child process's (wait4), so it covers DuckDB's
memory as well as Python's; each size runs with sqlanon's default memory limit (half the
machine's memory) and with a fixed one, to show that peak memory then stays flat in the rows.
The one GROUP BY column is measured on the loaded table afterwards, in the same run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).parent))
from bench_hospital import QIS, dataset
from common import group_by_seconds, print_table, run_process

HERE = Path(__file__).parent
ARX = {5_000_000: "load 8 s + anonymize 25 s, 1.8 GB"}


def write_job(folder: Path, database: Path, k: int) -> Path:
    config = {
        "name": "hospital",
        "source": {
            "url": f"duckdb:///{database}",
            "table": "hospital",
            "csv": "hospital.csv",
            "csv_options": {"types": {"zip": "VARCHAR", "birth_date": "VARCHAR"}},
        },
        "quasi_identifiers": {q: {"hierarchy": f"hierarchies/{q}.csv"} for q in QIS},
        "insensitive": ["diagnosis", "cost"],
        "criteria": {"k_anonymity": {"k": k}},
        "output": {"table": "hospital_anon"},
    }
    path = folder / "end_to_end.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def run_once(rows: int, k: int, memory_limit: str | None) -> list[object]:
    folder = dataset(rows)
    database = HERE / "out" / f"end_to_end_{rows}.duckdb"
    for stale in (database, database.with_suffix(".duckdb.wal")):
        stale.unlink(missing_ok=True)
    job = write_job(folder, database, k)
    command = [sys.executable, "-m", "sqlanon", "anonymize", str(job), "--json"]
    if memory_limit:
        command += ["--memory-limit", memory_limit]
    seconds, peak, out = run_process(command)
    result = json.loads(out)
    baseline = group_by_seconds(f"duckdb:///{database}", "hospital", QIS)
    return [
        f"{rows:,}",
        memory_limit or "default",
        seconds,
        peak,
        result.get("node"),
        baseline,
        seconds / baseline,
        ARX.get(rows, "-"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="1000000,5000000")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument(
        "--memory-limits",
        default=",512MB",
        help="DuckDB memory limits to compare, comma-separated ('' = sqlanon's default)",
    )
    args = parser.parse_args()
    (HERE / "out").mkdir(exist_ok=True)
    table = []
    for memory_limit in args.memory_limits.split(","):
        for rows in sorted(int(r) for r in args.rows.split(",")):
            table.append(run_once(rows, args.k, memory_limit or None))
            print(table[-1], flush=True)
    print_table(
        f"CSV to audited anonymized table, hospital, k={args.k}, DuckDB, one `sqlanon anonymize` process",
        ["rows", "memory limit", "total s", "peak RSS MB", "node", "one GROUP BY s", "ratio", "ARX"],
        table,
    )


if __name__ == "__main__":
    main()
