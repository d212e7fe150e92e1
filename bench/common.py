"""Helpers shared by the benchmarks: timing, PostgreSQL reachability, table printing, ARX's figures."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa

from sqlanon.backends import unreachable_reason

PG_URL = os.environ.get("SQLANON_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


ARX_FIGURES = Path(__file__).parent / "out" / "arx" / "figures.tsv"


def arx_here() -> dict[tuple[str, str, float], float]:
    """ARX's warm seconds per (dataset, criteria, suppression), as `bench/arx/run.sh` measured them on this
    machine; empty until it has run."""
    if not ARX_FIGURES.exists():
        return {}
    lines = ARX_FIGURES.read_text().splitlines()[1:]
    return {
        (dataset, criteria, float(limit)): float(warm) / 1000
        for dataset, criteria, limit, _cold, warm, *_ in (line.split("\t") for line in lines)
    }


def adult_and_hospital_parser(doc: str | None) -> argparse.ArgumentParser:
    """The command line of a benchmark over Adult and the hospital table: --postgres, --no-hospital and
    --hospital-rows (1M by default); a benchmark may add its own."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument("--no-hospital", action="store_true")
    parser.add_argument("--hospital-rows", type=int, default=1_000_000)
    return parser


def adult_and_hospital_arguments(doc: str | None) -> argparse.Namespace:
    """The parsed command line of `adult_and_hospital_parser`."""
    return adult_and_hospital_parser(doc).parse_args()


def pg_reachable(url: str = PG_URL) -> bool:
    return unreachable_reason(url) is None


def databases(duckdb_file: str, postgres: bool = True) -> list[tuple[str, str]]:
    """(name, URL) of the databases a benchmark runs on: a DuckDB file under bench/out/, then PostgreSQL when
    `postgres` is asked and the server is reachable."""
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    found = [("duckdb", f"duckdb:///{out / duckdb_file}")]
    if postgres and pg_reachable():
        found.append(("postgresql", PG_URL))
    return found


def timed(action: Callable[[], object], repeat: int = 1) -> tuple[float, object]:
    """Median wall seconds over `repeat` runs, and the last result."""
    seconds, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = action()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), result


def group_by_seconds(url: str, table: str, columns: list[str]) -> float:
    """One GROUP BY of the table over the QIs, counting the classes (the scan a search should cost)."""
    engine = sa.create_engine(url)
    quoted = ", ".join(f'"{c}"' for c in columns)
    with engine.connect() as conn:
        seconds, _ = timed(
            lambda: conn.exec_driver_sql(
                f"SELECT COUNT(*) FROM (SELECT {quoted}, COUNT(*) FROM {table} GROUP BY {quoted}) g"
            ).scalar(),
            3,
        )
    engine.dispose()
    return seconds


# runs a command in a process forked from this small one and writes its wall seconds and peak RSS (KiB) to the file
# argv[1]: a child forked from the benchmark itself would report the benchmark's own resident memory at the fork as
# its peak (Linux keeps the high-water mark across exec)
_PEAK_SHIM = """import os, sys, time
started = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as figures:
    figures.write(f"{time.perf_counter() - started} {usage.ru_maxrss}")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_process(command: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak resident memory in MB (DuckDB's memory as well as Python's) and standard output of one
    process; exits with its standard error if it fails."""
    with tempfile.TemporaryDirectory() as folder:
        figures = Path(folder) / "figures"
        done = subprocess.run(
            [sys.executable, "-c", _PEAK_SHIM, str(figures), *command], capture_output=True, text=True
        )
        if done.returncode:
            raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr}")
        seconds, peak = figures.read_text().split()
        return float(seconds), int(peak) / 1024, done.stdout


def print_table(title: str, header: list[str], rows: list[list[object]]) -> None:
    # floats under 1 with three decimals: a small search's milliseconds are what is compared
    cells = [header] + [
        [(f"{c:.3f}" if abs(c) < 1 else f"{c:.2f}") if isinstance(c, float) else str(c) for c in row] for row in rows
    ]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    print(f"\n{title}")
    for n, row in enumerate(cells):
        print("  ".join(c.rjust(w) for c, w in zip(row, widths)))
        if n == 0:
            print("  ".join("-" * w for w in widths))
