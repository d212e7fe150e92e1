"""Several rows per person (`unit: {column: pid}`): what counting persons costs.

The hospital table (../shared/tools/gen_hospital.py, one row per patient) becomes `visits`: each patient gets
1-4 visits (2.5 on average), the QIs and the diagnosis the patient's, a per-visit cost. On each engine, in the
same run, medians of --repeat:

- one GROUP BY of the QIs over `visits` (the unit of the ratios),
- the search with the unit (k=5; k=5 and entropy l=2 on the diagnosis) over `visits`,
- the same search over `patients` (one row per patient, no unit), which must find the same nodes,
- anonymize with the unit: the ~2.5 rows per patient written, pseudonymized, and audited by persons,
- the search and anonymize over `moves`: `visits` where one patient in ten has their second visit at the zip code of
  the patient before them (their rows disagree on zip: each such patient is counted and published at the lowest
  common ancestor of their zip codes),
- the search and anonymize over `diagnoses`: `visits` where a third of the patients with several visits get, at
  each visit after the first, the diagnosis of another patient (they hold several values of the sensitive
  attribute: each class's count of a diagnosis is then its patients who hold it), by generalization and by
  Mondrian (whose parts count holders so too).

    python bench/bench_persons.py [--rows 1000000] [--repeat 3] [--no-postgres]
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).parent))
from bench_hospital import QIS, dataset, load_hospital, plain_group_by
from common import databases, print_table, timed

from sqlanon import RunOptions, anonymize, search
from sqlanon.config import job_from_dict

KEY_ENV = "SQLANON_BENCH_KEY"
CRITERIA = {
    "k=5": {"k_anonymity": {"k": 5}},
    "k=5, entropy l=2": {"k_anonymity": {"k": 5}, "entropy_l_diversity": {"attribute": "diagnosis", "l": 2}},
}


def make_tables(url: str) -> tuple[int, int]:
    """`patients` (the hospital table with a pid) and `visits` (1 + pid mod 4 rows each); their row counts."""
    order = ", ".join(QIS + ["diagnosis", "cost"])
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        for table in ("visits", "patients"):
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
        conn.exec_driver_sql(
            f"CREATE TABLE patients AS SELECT ROW_NUMBER() OVER (ORDER BY {order}) AS pid, * FROM hospital"
        )
        conn.exec_driver_sql(
            f"CREATE TABLE visits AS SELECT p.pid, {', '.join(f'p.{q}' for q in QIS)}, v.visit, p.diagnosis, "
            "p.cost * v.visit AS cost FROM patients p JOIN generate_series(1, 4) AS v(visit) "
            "ON v.visit <= 1 + MOD(p.pid, 4)"
        )
        conn.exec_driver_sql("DROP TABLE IF EXISTS moves")
        others = ", ".join(f"v.{c}" for c in ["pid", *QIS[1:], "visit", "diagnosis", "cost"])
        conn.exec_driver_sql(
            f"CREATE TABLE moves AS SELECT {others}, CASE WHEN MOD(v.pid, 10) = 0 AND v.visit = 2 THEN b.zip "
            "ELSE v.zip END AS zip FROM visits v "
            "JOIN patients b ON b.pid = CASE WHEN v.pid > 1 THEN v.pid - 1 ELSE 1 END"
        )
        conn.exec_driver_sql("DROP TABLE IF EXISTS diagnoses")
        kept = ", ".join(f"v.{c}" for c in ["pid", *QIS, "visit"])
        conn.exec_driver_sql(
            f"CREATE TABLE diagnoses AS SELECT {kept}, CASE WHEN MOD(v.pid, 3) = 0 AND v.visit > 1 THEN b.diagnosis "
            "ELSE v.diagnosis END AS diagnosis, v.cost FROM visits v "
            "JOIN patients b ON b.pid = CASE WHEN v.pid > v.visit THEN v.pid - v.visit ELSE 1 END"
        )
        counts = tuple(conn.exec_driver_sql(f"SELECT COUNT(*) FROM {t}").scalar_one() for t in ("patients", "visits"))
        if url.startswith("postgresql"):
            for table in ("patients", "visits", "moves", "diagnoses"):
                conn.exec_driver_sql(f"ANALYZE {table}")
    engine.dispose()
    return counts[0], counts[1]


def job(folder: Path, url: str, table: str, criteria: dict, unit: bool, method: str = "generalize"):
    per_person = {"unit": {"column": "pid"}, "insensitive": ["visit", "cost"]} if unit else {"insensitive": ["cost"]}
    return job_from_dict(
        {
            "source": {"url": url, "table": table},
            "identifying": {"pid": {"pseudonym": {"key_env": KEY_ENV}}},
            "quasi_identifiers": {q: {"hierarchy": f"hierarchies/{q}.csv"} for q in QIS},
            "sensitive": ["diagnosis"],
            "criteria": criteria,
            "output": {"table": f"{table}_anon", "method": method},
            **per_person,
        },
        folder,
    )


def _anonymized(
    folder: Path,
    url: str,
    table: str,
    options: RunOptions,
    repeat: int,
    base: float,
    name: str = "k=5",
    method: str = "generalize",
) -> list[str]:
    """The row of anonymize by persons over `table` (the criteria `name`, the publication `method`): what,
    seconds, ratio to `base`."""
    written, published = timed(
        lambda: anonymize(job(folder, url, table, CRITERIA[name], True, method), options, replace=True), repeat
    )
    how = f"node {published.node}" if method == "generalize" else f"{published.result.partitions:,} partitions"
    what = f"anonymize {name} by {method}, unit pid over {table} ({published.audit.rows:,} persons written, {how})"
    return [what, f"{written:.3f}", f"{written / base:.1f}x"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="patients")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault(KEY_ENV, "0123456789abcdef0123456789abcdef")
    folder = dataset(args.rows)
    rows = []
    for engine, url in databases(f"persons_{args.rows}.duckdb", not args.no_postgres):
        load_hospital(folder, url)
        patients, visits = make_tables(url)
        options = RunOptions()
        base, _ = timed(lambda: plain_group_by(url, "visits"), args.repeat)
        rows.append([engine, f"one GROUP BY of {visits:,} visits ({patients:,} patients)", f"{base:.3f}", "1.0x"])
        for name, criteria in CRITERIA.items():
            by_person, found = timed(lambda: search(job(folder, url, "visits", criteria, True), options), args.repeat)
            by_row, plain = timed(lambda: search(job(folder, url, "patients", criteria, False), options), args.repeat)
            same = "same nodes" if sorted(found.satisfying) == sorted(plain.satisfying) else "DIFFERENT NODES"
            rows.append(
                [engine, f"search {name}, unit pid over visits", f"{by_person:.3f}", f"{by_person / base:.1f}x"]
            )
            rows.append([engine, f"search {name} over patients ({same})", f"{by_row:.3f}", f"{by_row / base:.1f}x"])
        with warnings.catch_warnings():  # a tenth of the patients disagree on zip in moves: said once per run
            warnings.simplefilter("ignore")
            for table in ("visits", "moves"):
                rows.append([engine, *_anonymized(folder, url, table, options, args.repeat, base)])
            for name, criteria in CRITERIA.items():
                moved, found = timed(lambda: search(job(folder, url, "moves", criteria, True), options), args.repeat)
                what = f"search {name}, unit pid over moves (minimal {sorted(found.minimal)})"
                rows.append([engine, what, f"{moved:.3f}", f"{moved / base:.1f}x"])
            held = "k=5, entropy l=2"  # patients who hold several diagnoses (said once per run)
            seconds, found = timed(
                lambda: search(job(folder, url, "diagnoses", CRITERIA[held], True), options), args.repeat
            )
            what = f"search {held}, unit pid over diagnoses (minimal {sorted(found.minimal)})"
            rows.append([engine, what, f"{seconds:.3f}", f"{seconds / base:.1f}x"])
            for table in ("visits", "diagnoses"):
                for method in ("generalize", "mondrian"):
                    rows.append([engine, *_anonymized(folder, url, table, options, args.repeat, base, held, method)])
    print_table(
        f"hospital, {args.rows:,} patients, 1-4 visits each: counting persons",
        ["engine", "what", "seconds", "ratio"],
        rows,
    )


if __name__ == "__main__":
    main()
