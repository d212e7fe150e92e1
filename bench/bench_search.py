"""The search strategies side by side: checks, statements and seconds, against one GROUP BY of the
same table measured in the same run, on DuckDB (and PostgreSQL if reachable).

    python bench/bench_search.py [--no-postgres] [--hospital-rows 1000000,5000000] [--no-hospital]
                                 [--no-processes] [--strategies incognito,topdown,border,auto]

Adult: the bundled data, all 9 QIs, k=5, without suppression and with 2% and 10%.
Criteria: Adult with the 8 QIs other than occupation, occupation sensitive, k=5 plus each
criterion of bench_criteria.py (default strategy), without suppression and with 2%; with 2%, also the search
`anonymize` runs for the same job ("auto, anonymize's": it reads the minimal nodes alone, so where passing is
not closed under generalization it leaves the nodes above a passing one unchecked), as ARX looks for one node.
Hospital: ../shared/tools/gen_hospital.py data (QIs zip, birth_date, sex, race,
marital_status), k=5; the first size with every strategy, alone and (unless --no-criteria) with
entropy l-diversity or t-closeness on diagnosis, on each database; the larger sizes with the default
strategy, on DuckDB.
Processes (unless --no-processes): `sqlanon search` on the bundled Adult job as a whole process (median
of 3), and `sqlanon anonymize` from the largest hospital size's CSV to an audited table in a new
DuckDB file (bench_end_to_end.py), with their peak resident memory.
The ARX column is the figure the targets were set against (ARX on another machine of this kind);
"ARX here" is ARX measured on this machine by bench/arx/run.sh, once it has run.
A search under QUICK_SECONDS is timed REPEAT times and its row shows the medians.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from importlib import resources
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from bench_criteria import CASES as CRITERIA_CASES
from bench_criteria import OCC, criteria_job
from bench_end_to_end import run_once as end_to_end
from bench_hospital import QIS as HOSPITAL_QIS
from bench_hospital import dataset, load_hospital
from bench_hospital import job as hospital_job
from common import arx_here, databases, group_by_seconds, print_table, run_process, timed

from sqlanon import RunOptions, anonymize, load_job, search
from sqlanon.criteria import KAnonymity, criteria_from_config
from sqlanon.model.job import Output, Suppression

HERE = Path(__file__).parent
ADULT = Path(str(resources.files("sqlanon.data").joinpath("adult", "adult.yaml")))
ADULT_QIS = [
    "age",
    "education",
    "marital-status",
    "native-country",
    "race",
    "salary-class",
    "sex",
    "workclass",
    "occupation",
]
ARX_SECONDS = {
    ("adult", "k=5", 0.0): 0.088,
    ("adult", "k=5", 0.02): 0.81,
    ("adult", "k=5", 0.1): 3.4,
    ("adult 8 QIs", "distinct l=3", 0.0): 0.115,
    ("adult 8 QIs", "entropy l=3", 0.0): 0.091,
    ("adult 8 QIs", "recursive c=4 l=3", 0.0): 0.090,
    ("adult 8 QIs", "t equal 0.2", 0.0): 0.062,
    ("adult 8 QIs", "t hierarchical 0.2", 0.0): 0.039,
}
ARX_HERE = arx_here()


# k=5 plus a criterion over the hospital's diagnosis: frequency sets with the sensitive values are far larger
HOSPITAL_CRITERIA = {
    "k=5, entropy l=2": {"entropy_l_diversity": {"attribute": "diagnosis", "l": 2}},
    "k=5, t equal 0.3": {"t_closeness": {"attribute": "diagnosis", "t": 0.3}},
}


# a search faster than this is timed REPEAT times (medians): single runs of Adult's 8-QI searches varied by 20-30 ms
QUICK_SECONDS, REPEAT = 0.25, 9


def measure(
    rows: list,
    dataset_name: str,
    database: str,
    url: str,
    job,
    strategies: list[str],
    limits: list[float],
    baseline: float,
    criteria: str = "k=5",
) -> Any:
    """Times each strategy at each limit (a row each); returns the last search's result."""
    result = None
    for limit in limits:
        answers = set()
        for strategy in strategies:
            run = dataclasses.replace(job, strategy=strategy, suppression=Suppression(limit))
            calls = [timed(lambda: search(run, RunOptions(db_url=url)))]
            if calls[0][1].stats.seconds < QUICK_SECONDS:
                calls += [timed(lambda: search(run, RunOptions(db_url=url))) for _ in range(REPEAT - 1)]
            result = calls[-1][1]
            answers.add(tuple(result.satisfying))
            s = result.stats
            seconds = statistics.median(call for call, _ in calls)
            searched = statistics.median(r.stats.seconds for _, r in calls)
            rows.append(
                [
                    dataset_name,
                    database,
                    criteria,
                    strategy,
                    f"{limit:.0%}",
                    s.nodes_checked,
                    s.statements or "-",
                    searched,
                    seconds,
                    baseline,
                    searched / baseline,
                    "-",
                    ARX_SECONDS.get((dataset_name, criteria, limit), "-"),
                    ARX_HERE.get((dataset_name, criteria, limit), "-"),
                ]
            )
            # a line per search as it ends (the whole run takes minutes; the table comes at the end)
            print(
                f"{dataset_name}, {database}, {criteria}, {strategy}, {limit:.0%}: {s.nodes_checked} checks, "
                f"search {searched:.3f} s, call {seconds:.3f} s",
                file=sys.stderr,
                flush=True,
            )
        assert len(answers) == 1, "the strategies disagree"
    return result


def measure_publishing(
    rows: list, database: str, url: str, job, limit: float, baseline: float, criteria: str, minimal: list
) -> None:
    """The search `anonymize` runs for the same job (its selection the default policy, the lowest height: where
    passing is not closed under generalization, the nodes above a passing one and those higher than a passing one
    go unchecked), median of 3."""
    run = dataclasses.replace(
        job, strategy="auto", suppression=Suppression(limit), output=Output(table="adult_bench_published")
    )
    published = [anonymize(run, RunOptions(db_url=url), replace=True) for _ in range(3)]
    best = min(minimal, key=lambda node: (sum(node), node))  # the default policy's choice
    assert all(p.node == best for p in published), "anonymize published another node than the search's best"
    results = [p.search for p in published]
    s, searched = results[-1].stats, statistics.median(r.stats.seconds for r in results)
    rows.append(
        ["adult 8 QIs", database, criteria, "auto, anonymize's", f"{limit:.0%}", s.nodes_checked, s.statements or "-"]
        + [searched, "-", baseline, searched / baseline, "-", "-", ARX_HERE.get(("adult 8 QIs", criteria, limit), "-")]
    )


def measure_hospital(rows: list, database: str, url: str, size: int, strategies: list[str], criteria: bool) -> None:
    folder = dataset(size)
    if database == "duckdb":  # a file per size: a table loaded from another size's CSV is refused
        url = f"duckdb:///{HERE / 'out' / f'search_hospital_{size}.duckdb'}"
    load_hospital(folder, url)
    baseline = group_by_seconds(url, "hospital", HOSPITAL_QIS)
    hospital = hospital_job(folder, url, 5, load=False)
    measure(rows, f"hospital {size:,}", database, url, hospital, strategies, [0.0], baseline)
    if criteria:
        for case, spec in HOSPITAL_CRITERIA.items():
            run = dataclasses.replace(hospital, criteria=criteria_from_config({"k_anonymity": {"k": 5}, **spec}))
            measure(rows, f"hospital {size:,}", database, url, run, ["auto"], [0.0], baseline, case)


def measure_processes(rows: list, url: str, hospital_rows: int | None) -> None:
    """`sqlanon search` on the bundled job, and (given a size) `sqlanon anonymize` from CSV, as whole processes."""
    command = [sys.executable, "-m", "sqlanon", "search", str(ADULT), "--db", url]
    runs = [run_process(command) for _ in range(3)]
    seconds, peak = statistics.median(r[0] for r in runs), max(r[1] for r in runs)
    baseline = group_by_seconds(url, "adult", ADULT_QIS)
    rows.append(
        [
            "adult",
            "duckdb",
            "k=5",
            "`sqlanon search` process",
            "0%",
            "-",
            "-",
            "-",
            seconds,
            baseline,
            seconds / baseline,
            peak,
            "-",
            "-",
        ]
    )
    if hospital_rows:
        size, _, seconds, peak, _, baseline, ratio, arx = end_to_end(hospital_rows, 5, None)
        rows.append(
            [
                f"hospital {size}",
                "duckdb",
                "k=5",
                "CSV to audited table, process",
                "0%",
                "-",
                "-",
                "-",
                seconds,
                baseline,
                ratio,
                peak,
                arx,
                "-",
            ]
        )
    print(f"processes: {rows[-1]}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--no-hospital", action="store_true")
    parser.add_argument("--no-criteria", action="store_true")
    parser.add_argument("--no-processes", action="store_true")
    parser.add_argument("--hospital-rows", default="1000000,5000000", help="sizes, comma-separated")
    parser.add_argument("--strategies", default="incognito,topdown,border,auto")
    args = parser.parse_args()
    strategies = args.strategies.split(",")
    sizes = [] if args.no_hospital else [int(size) for size in args.hospital_rows.split(",")]
    targets = databases("search.duckdb", not args.no_postgres)
    rows: list = []
    adult = load_job(ADULT)
    for database, url in targets:
        search(adult, RunOptions(db_url=url))  # loads the bundled CSV once (not timed)
        loaded = dataclasses.replace(
            adult, source=dataclasses.replace(adult.source, csv=None), criteria=[KAnonymity(5)]
        )
        baseline = group_by_seconds(url, "adult", ADULT_QIS)
        measure(rows, "adult", database, url, loaded, strategies, [0.0], baseline)
        measure(
            rows, "adult", database, url, loaded, [s for s in strategies if s != "incognito"], [0.02, 0.1], baseline
        )
        if not args.no_criteria:
            baseline = group_by_seconds(url, "adult", [q for q in ADULT_QIS if q != OCC])
            for limit in (0.0, 0.02):  # with suppression most criteria are not monotone: the filtered search
                for case in CRITERIA_CASES:
                    job = criteria_job(loaded, case)
                    searched = measure(rows, "adult 8 QIs", database, url, job, ["auto"], [limit], baseline, case)
                    if limit:
                        measure_publishing(rows, database, url, job, limit, baseline, case, searched.minimal)
        for n, size in enumerate(sizes if database == "duckdb" else sizes[:1]):
            measure_hospital(
                rows, database, url, size, strategies if n == 0 else ["auto"], n == 0 and not args.no_criteria
            )
        if database == "duckdb" and not args.no_processes:
            measure_processes(rows, url, max(sizes, default=None))
    print_table(
        "Search strategies, k=5 (search s: the search itself; call s: the whole search() call, or the whole "
        "process; ratio: search s, or a process's s, / one GROUP BY s, same run)",
        [
            "dataset",
            "database",
            "criteria",
            "strategy",
            "suppression",
            "checks",
            "statements",
            "search s",
            "call s",
            "GROUP BY s",
            "ratio",
            "peak RSS MB",
            "ARX s",
            "ARX here s",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
