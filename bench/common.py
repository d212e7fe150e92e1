"""Helpers shared by the benchmarks: timing, PostgreSQL reachability, table printing, ARX's figures."""
from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Callable

from sqlanon.backends import unreachable_reason

PG_URL = os.environ.get("SQLANON_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


ARX_FIGURES = Path(__file__).parent / "out" / "arx" / "figures.tsv"


def arx_here() -> dict[tuple[str, str, float], float]:
    """ARX's warm seconds per (dataset, criteria, suppression), as `bench/arx/run.sh` measured them on this
    machine; empty until it has run."""
    if not ARX_FIGURES.exists():
        return {}
    lines = ARX_FIGURES.read_text().splitlines()[1:]
    return {(dataset, criteria, float(limit)): float(warm) / 1000
            for dataset, criteria, limit, _cold, warm, *_ in (line.split("\t") for line in lines)}


def pg_reachable(url: str = PG_URL) -> bool:
    return unreachable_reason(url) is None


def timed(action: Callable[[], object], repeat: int = 1) -> tuple[float, object]:
    """Median wall seconds over `repeat` runs, and the last result."""
    seconds, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = action()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), result


def print_table(title: str, header: list[str], rows: list[list[object]]) -> None:
    # floats under 1 with three decimals: a small search's milliseconds are what is compared
    cells = [header] + [[(f"{c:.3f}" if abs(c) < 1 else f"{c:.2f}") if isinstance(c, float) else str(c) for c in row]
                        for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    print(f"\n{title}")
    for n, row in enumerate(cells):
        print("  ".join(c.rjust(w) for c, w in zip(row, widths)))
        if n == 0:
            print("  ".join("-" * w for w in widths))
