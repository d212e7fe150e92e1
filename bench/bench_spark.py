"""Spark (local mode) against DuckDB on the hospital table: startup, load, one GROUP BY of the QI columns,
search, write, and peak memory, each engine in a process of its own.

    python bench/bench_spark.py [--rows 1000000,5000000] [--cores 2] [--driver-memory 4g]

Per size and engine: the CSV is loaded into a table (Spark: Parquet in a warehouse under bench/out/),
one GROUP BY over zip, birth_date, sex, race, marital_status counts the classes (the scan a search
should cost, measured in the same process), then `anonymize` (k=5, default strategy) searches and
writes the audited output (Spark: a Parquet table); "checks+write" is everything of that command but the
search: the source's checks against the hierarchies, the publication and its audit. Peak memory is the
high-water RSS of the Python process plus, for Spark, its JVM. Data: ../shared/tools/gen_hospital.py,
generated once into bench/out/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from bench_hospital import QIS, dataset  # noqa: E402 (after the path set above)
from common import print_table  # noqa: E402


def peak_rss_mb(pid: int) -> float:
    """VmHWM of a process, in MB (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        path = task / "children"
        if path.exists():
            found += [int(p) for p in path.read_text().split()]
    return found + [grand for child in found for grand in children(child)]


def worker(engine: str, rows: int, out: Path, cores: int) -> dict:
    """One engine, one size, in this process: the figures as a dict."""
    import sqlalchemy as sa

    from sqlanon import anonymize
    from sqlanon.api import load_csv
    from sqlanon.config import job_from_dict

    folder = dataset(rows)
    if engine == "spark":
        from sqlanon.backends.spark_dbapi import session_for

        warehouse = out / f"warehouse_{rows}"
        shutil.rmtree(warehouse, ignore_errors=True)
        url = f"spark://local[{cores}]?warehouse={warehouse}"
        started = time.perf_counter()
        session_for(f"local[{cores}]", str(warehouse))
        startup = time.perf_counter() - started
        options = {"all_varchar": True}  # zip codes keep their leading zeros, dates stay as the hierarchy has them
    else:
        path = out / f"bench_spark_duck_{rows}.duckdb"
        path.unlink(missing_ok=True)
        url, startup = f"duckdb:///{path}", 0.0
        options = {"types": {"zip": "VARCHAR", "birth_date": "VARCHAR"}}
    started = time.perf_counter()
    load_csv(folder / "hospital.csv", "hospital", url, csv_options=options)
    load = time.perf_counter() - started

    engine_ = sa.create_engine(url)  # the same session (Spark's dialect is registered by sqlanon.backends.spark_dbapi)
    quoted = ", ".join(f'"{c}"' for c in QIS)
    with engine_.connect() as conn:
        started = time.perf_counter()
        classes = conn.exec_driver_sql(
            f"SELECT COUNT(*) FROM (SELECT {quoted}, COUNT(*) AS n FROM hospital GROUP BY {quoted}) g"
        ).scalar()
        group_by = time.perf_counter() - started
    engine_.dispose()

    job = job_from_dict(
        {
            "source": {"url": url, "table": "hospital"},
            "quasi_identifiers": {q: {"hierarchy": f"hierarchies/{q}.csv"} for q in QIS},
            "insensitive": ["diagnosis", "cost"],
            "criteria": {"k_anonymity": {"k": 5}},
            "output": {"table": "hospital_anon"},
        },
        folder,
    )
    started = time.perf_counter()
    report = anonymize(job, replace=True)
    total = time.perf_counter() - started
    stats = report.search.stats
    peak = peak_rss_mb(os.getpid()) + sum(peak_rss_mb(c) for c in children(os.getpid()))
    return {
        "engine": engine,
        "rows": rows,
        "startup": startup,
        "load": load,
        "group_by": group_by,
        "classes": classes,
        "search": stats.seconds,
        "checks": stats.nodes_checked,
        "statements": stats.statements,
        "write": total - stats.seconds,
        "node": list(report.node),
        "peak_mb": peak,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="1000000,5000000")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--worker", nargs=2, metavar=("ENGINE", "ROWS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    if args.worker:
        print(json.dumps(worker(args.worker[0], int(args.worker[1]), out, args.cores)))
        return
    env = {
        **os.environ,
        "SQLANON_SPARK_CONF": f"spark.sql.shuffle.partitions={args.cores * 2},spark.driver.memory={args.driver_memory}",
    }
    table = []
    for rows in map(int, args.rows.split(",")):
        dataset(rows)
        found = {}
        for engine in ("duckdb", "spark"):
            done = subprocess.run(
                [sys.executable, __file__, "--worker", engine, str(rows), "--cores", str(args.cores)],
                env=env,
                capture_output=True,
                text=True,
            )
            if done.returncode:
                raise SystemExit(f"{engine} at {rows} rows failed:\n{done.stderr[-3000:]}")
            found[engine] = json.loads(done.stdout.strip().splitlines()[-1])
            f = found[engine]
            table.append(
                [
                    f"{rows:,}",
                    engine,
                    f["startup"],
                    f["load"],
                    f["group_by"],
                    f["search"],
                    f["checks"],
                    f["statements"],
                    f["search"] / f["group_by"],
                    f["write"],
                    f"{f['peak_mb']:.0f}",
                ]
            )
            print(table[-1], flush=True)
        assert found["duckdb"]["node"] == found["spark"]["node"], "Spark and DuckDB chose different nodes"
        table.append(
            [
                f"{rows:,}",
                "spark/duckdb",
                found["spark"]["startup"],
                found["spark"]["load"] / found["duckdb"]["load"],
                found["spark"]["group_by"] / found["duckdb"]["group_by"],
                found["spark"]["search"] / found["duckdb"]["search"],
                "",
                "",
                "",
                found["spark"]["write"] / found["duckdb"]["write"],
                "",
            ]
        )
    print_table(
        f"Hospital, k=5, default strategy; Spark local[{args.cores}] against DuckDB (seconds; ratios on "
        "the spark/duckdb rows)",
        [
            "rows",
            "engine",
            "startup",
            "load",
            "group by",
            "search",
            "checks",
            "statements",
            "search/group by",
            "checks+write",
            "peak MB",
        ],
        table,
    )


if __name__ == "__main__":
    main()
