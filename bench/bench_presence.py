"""delta-presence and k-map counted in the population, over ARX's research subset of Adult (3,016 of its 30,162
rows, tests/data/arx_adult_subset_rows.txt), eight QIs (occupation left out, as ARX's TestAnonymizationDPresence
runs them), beside k-anonymity (k=5) over the same subset in the same run and one GROUP BY of the whole table, on
DuckDB.

    python bench/bench_presence.py [--audit-rows 1000000]

Per job: the search's seconds (it reads a second packed cube, of the whole table, for the population), the nodes it
checked and how many pass, and `anonymize` (search, publication and its audit, which reads the population through
the published labels). Three alternated runs; the best of each.

With --audit-rows: `sqlanon audit` of a published research subset of that many hospital rows (every tenth row in the
study; k=5 and delta-presence 0-0.5, published by anonymize, not timed), which finds the table's node from its values
and reads the population at it, beside the audit of the same table by k=5 alone and one GROUP BY of the whole table's
QIs, on DuckDB and (where reachable) PostgreSQL; the median of three.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import duckdb
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).parent))
from bench_hospital import QIS as HOSPITAL_QIS
from bench_hospital import dataset, load_hospital
from bench_hospital import job as hospital_job
from bench_search import ADULT
from common import databases, group_by_seconds, print_table, timed

from sqlanon import RunOptions, anonymize, audit, load_job, search
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


def audit_of_a_subset(rows: int) -> None:
    """The audit of a published research subset of the hospital table (see the module's docstring)."""
    table = []
    for database, url in databases("presence_audit.duckdb"):
        load_hospital(dataset(rows), url)
        engine = sa.create_engine(url)
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE IF EXISTS hospital_study")
            conn.exec_driver_sql(
                "CREATE TABLE hospital_study AS SELECT *, MOD(ROW_NUMBER() OVER (), 10) = 0 AS in_study FROM hospital"
            )
        engine.dispose()
        job = hospital_job(dataset(rows), url, 5, load=False)
        job = dataclasses.replace(
            job,
            source=dataclasses.replace(job.source, table="hospital_study"),
            sensitive=["diagnosis"],
            insensitive=["cost"],
            subset=Subset(column="in_study"),
            criteria=criteria_from_config({"k_anonymity": {"k": 5}, "delta_presence": {"d_min": 0.0, "d_max": 0.5}}),
            output=Output(table="hospital_study_anon"),
        )
        published = anonymize(job, RunOptions(db_url=url), replace=True)
        k_alone = dataclasses.replace(job, criteria=criteria_from_config({"k_anonymity": {"k": 5}}))
        group_by = group_by_seconds(url, "hospital_study", HOSPITAL_QIS)
        for label, audited in (("audit, population read at the node found", job), ("audit, k=5 alone", k_alone)):
            seconds, report = timed(lambda j=audited: audit(j, "hospital_study_anon"), RUNS)
            assert report.ok and report.population_node in (None, published.node)
            table.append([database, label, seconds, seconds / group_by])
        table.append([database, "one GROUP BY of the QIs", group_by, 1.0])
    print_table(
        f"audit of a published research subset of {rows:,} hospital rows", ["database", "verb", "s", "x"], table
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--audit-rows", type=int, default=0, help="measure the audit of a subset of this many rows")
    args = parser.parse_args()
    if args.audit_rows:
        audit_of_a_subset(args.audit_rows)
    else:
        main()
