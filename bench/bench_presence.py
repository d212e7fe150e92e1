"""delta-presence and k-map counted in the population, over ARX's research subset of Adult (3,016 of its 30,162
rows, tests/data/arx_adult_subset_rows.txt), eight QIs (occupation left out, as ARX's TestAnonymizationDPresence
runs them), beside k-anonymity (k=5) over the same subset in the same run and one GROUP BY of the whole table, on
DuckDB.

    python bench/bench_presence.py

Per job: the search's seconds (it reads a second packed cube, of the whole table, for the population), the nodes it
checked and how many pass, and `anonymize` (search, publication and its audit, which reads the population through
the published labels). Three alternated runs; the best of each.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).parent))
from bench_search import ADULT
from common import group_by_seconds, print_table

from sqlanon import RunOptions, anonymize, load_job, search
from sqlanon.criteria import criteria_from_config
from sqlanon.model.job import Output, Subset, Suppression

HERE = Path(__file__).parent
SUBSET_ROWS = HERE.parent / "tests" / "data" / "arx_adult_subset_rows.txt"
JOBS = {
    "k=5 (subset)": ({"k_anonymity": {"k": 5}}, 0.0),
    "presence 0.05-0.15": ({"delta_presence": {"d_min": 0.05, "d_max": 0.15}}, 0.0),
    "presence 0.05-0.15, 5%": ({"delta_presence": {"d_min": 0.05, "d_max": 0.15}}, 0.05),
    "presence 0-0.2 + k=5": ({"delta_presence": {"d_min": 0.0, "d_max": 0.2}, "k_anonymity": {"k": 5}}, 0.0),
    "k-map 5 (population)": ({"k_map": {"k": 5}}, 0.0),
    "k-map 20 (population), 5%": ({"k_map": {"k": 20}}, 0.05),
}
RUNS = 3


def main() -> None:
    path = HERE / "out" / "presence_adult.duckdb"
    path.parent.mkdir(exist_ok=True)
    url = f"duckdb:///{path}"
    options = RunOptions(db_url=url)
    adult = load_job(ADULT)
    search(adult, options)  # loads the bundled CSV once (not timed)
    with duckdb.connect(str(path)) as con:
        frame = con.execute("SELECT * FROM adult").df()
        frame["in_subset"] = frame.index.isin([int(r) for r in SUBSET_ROWS.read_text().split()])
        con.execute("CREATE OR REPLACE TABLE adult_study AS SELECT * FROM frame")
    qis = [qi for qi in adult.quasi_identifiers if qi.column != "occupation"]
    base = dataclasses.replace(
        adult,
        quasi_identifiers=qis,
        insensitive=["occupation"],
        source=dataclasses.replace(adult.source, csv=None, table="adult_study"),
        subset=Subset(column="in_subset"),
        output=Output(table="adult_presence_anon"),
    )
    best: dict[str, list[float]] = {}
    found: dict[str, tuple[int, int]] = {}
    group_by = min(group_by_seconds(url, "adult", [qi.column for qi in qis]) for _ in range(RUNS))
    for _ in range(RUNS):
        for name, (spec, limit) in JOBS.items():
            job = dataclasses.replace(base, criteria=criteria_from_config(spec), suppression=Suppression(limit))
            result = search(job, options)
            published = anonymize(job, options, replace=True)
            assert published.audit.ok
            seconds = [result.stats.seconds, published.search.stats.seconds + published.publishing_seconds]
            best[name] = [min(a, b) for a, b in zip(best.get(name, seconds), seconds)]
            found[name] = (result.stats.nodes_checked, len(result.satisfying))
            print(f"{name}: {seconds[0]:.2f} s", file=sys.stderr, flush=True)
    rows = [[name, best[name][0], best[name][0] / group_by, *found[name], best[name][1]] for name in JOBS]
    header = ["job", "search s", "x GROUP BY", "nodes checked", "passing", "anonymize s"]
    print_table(
        f"research subset of Adult (3,016 rows), 8 QIs, DuckDB; one GROUP BY of the 30,162 rows: {group_by:.3f} s",
        header,
        rows,
    )


if __name__ == "__main__":
    main()
