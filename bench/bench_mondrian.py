"""Mondrian against full-domain generalization on the same job, and Mondrian's time on large tables.

    python bench/bench_mondrian.py [--skip utility,scale] [--rows 1000000,5000000]

1. Utility (Adult, the 9 QIs, k = 2, 5, 10, 50, DuckDB): the default full-domain search and
   publication (`sqlanon anonymize`) against strict Mondrian (`output.method: mondrian`, age cut as a
   number, the 8 other QIs down their hierarchies), each on its published table: discernibility
   (sum of class sizes squared), average class size, KL divergence (the table's distribution of QI
   tuples against each class spread evenly over the tuples its generalized values cover) and the
   normalized certainty penalty (per tuple and QI: a numeric QI's published range over the table's
   range, a categorical QI's (leaves under its value - 1) / (leaves - 1); averaged), plus the time.
2. Scale (the hospital generator, zip and birth_date as numbers, sex, race and marital_status down
   their hierarchies, k = 5): Mondrian's time against one GROUP BY of the five QI columns in the same
   run, whole and split into partitioning (the work table and the rounds) and publishing (writing the
   published table, its audit, the commit), and the peak memory of the process (DuckDB limited to 1 GB).
"""

from __future__ import annotations

import argparse
import math
import re
import resource
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).parent))
from common import print_table

from sqlanon import RunOptions, anonymize, job_from_dict, load_csv, partition
from sqlanon.model.hierarchies import read_hierarchy_file

HERE = Path(__file__).parent
OUT = HERE / "out" / "mondrian"
ADULT = Path(str(resources.files("sqlanon.data").joinpath("adult")))
QIS = ["sex", "age", "race", "marital-status", "education", "native-country", "workclass", "occupation", "salary-class"]
GENERATOR = HERE.parent.parent / "shared" / "tools" / "gen_hospital.py"
RANGE = re.compile(r"^\[(-?[\d.]+)-(-?[\d.]+)\]$")


def adult_job(url: str, k: int, mondrian: bool) -> dict:
    qis = {q: {"hierarchy": str(ADULT / "hierarchies" / f"{q}.csv")} for q in QIS}
    if mondrian:
        qis["age"] = None
    table = f"{'mondrian' if mondrian else 'fulldomain'}_{k}"
    output = {"table": table, **({"method": "mondrian"} if mondrian else {})}
    return {
        "source": {"url": url, "table": "adult"},
        "quasi_identifiers": qis,
        "insensitive": ["rid"],
        "criteria": {"k_anonymity": {"k": k}},
        "output": output,
    }


class Metrics:
    """The utility of a published table with a `rid` column, against the source `adult` (same rids)."""

    def __init__(self, engine: sa.Engine):
        self.engine = engine
        self.hierarchies = {q: read_hierarchy_file(q, ADULT / "hierarchies" / f"{q}.csv") for q in QIS}
        with engine.connect() as conn:
            self.ages = sorted(int(a) for (a,) in conn.exec_driver_sql("SELECT DISTINCT age FROM adult").all())

    def covered(self, qi: str, label: str) -> tuple[int, float]:
        """(distinct table values the published value covers, its NCP)."""
        if qi == "age":
            found = RANGE.match(label)
            if found:
                low, high = float(found.group(1)), float(found.group(2))
            else:
                leaves = [int(p[0]) for p in self.hierarchies["age"].paths if label in p]
                low, high = (min(leaves), max(leaves)) if leaves else (float(label), float(label))
            values = [a for a in self.ages if low <= a <= high]
            return len(values), (min(high, self.ages[-1]) - max(low, self.ages[0])) / (self.ages[-1] - self.ages[0])
        paths = self.hierarchies[qi].paths
        leaves = {p[0] for p in paths if label in p}
        return len(leaves), (len(leaves) - 1) / (len({p[0] for p in paths}) - 1)

    def of(self, table: str) -> tuple[int, float, float, float]:
        quoted = ", ".join(f'"{q}"' for q in QIS)
        published = ", ".join(f'p."{q}"' for q in QIS)
        original = ", ".join(f'a."{q}"' for q in QIS)
        with self.engine.connect() as conn:
            classes = conn.exec_driver_sql(f"SELECT {quoted}, COUNT(*) FROM {table} GROUP BY {quoted}").all()
            rows = sum(c[-1] for c in classes)
            # p(x) and the class of each original QI tuple x (one class per tuple: strict partitions, full-domain)
            cells = conn.exec_driver_sql(
                f"SELECT {published}, COUNT(*) FROM adult a JOIN {table} p ON p.rid = a.rid "
                f"GROUP BY {original}, {published}"
            ).all()
        cover = {}
        for row in classes:
            box, penalty = 1, 0.0
            for qi, label in zip(QIS, row[:-1]):
                size, ncp = self.covered(qi, str(label))
                box, penalty = box * size, penalty + ncp
            cover[tuple(row[:-1])] = (row[-1], box, penalty / len(QIS))
        discernibility = sum(n * n for n, _, _ in cover.values())
        ncp = sum(n * pen for n, _, pen in cover.values()) / rows
        kl = sum(
            c / rows * math.log((c / rows) / (cover[tuple(x[:-1])][0] / rows / cover[tuple(x[:-1])][1]))
            for x in cells
            for c in [x[-1]]
        )
        return discernibility, rows / len(classes), kl, ncp


def utility_rows(url: str) -> list[list[object]]:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE IF EXISTS adult")
        conn.exec_driver_sql(
            "CREATE TABLE adult AS SELECT CAST(ROW_NUMBER() OVER () AS INTEGER) AS rid, * FROM adult_raw"
        )
    metrics = Metrics(engine)
    rows = []
    for k in (2, 5, 10, 50):
        for mondrian in (False, True):
            job = job_from_dict(adult_job(url, k, mondrian))
            started = time.perf_counter()
            if mondrian:
                published = partition(job, replace=True)
                table = published.output
            else:
                table = anonymize(job, replace=True).output
            seconds = time.perf_counter() - started
            disc, average, kl, ncp = metrics.of(table)
            rows.append(
                [
                    k,
                    "mondrian" if mondrian else "full-domain",
                    f"{disc:.3g}",
                    round(average, 1),
                    round(kl, 3),
                    round(ncp, 3),
                    seconds,
                ]
            )
    engine.dispose()
    return rows


def scale_rows(sizes: list[int]) -> list[list[object]]:
    rows = []
    for size in sizes:
        folder = OUT / f"hospital_{size}"
        if not (folder / "hospital.csv").exists():
            subprocess.run([sys.executable, str(GENERATOR), "--rows", str(size), "--out", str(folder)], check=True)
        url = f"duckdb:///{folder / 'mondrian.duckdb'}"
        load_csv(folder / "hospital.csv", "hospital_raw", url, replace=True)
        engine = sa.create_engine(url)
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE IF EXISTS hospital")
            conn.exec_driver_sql(
                "CREATE TABLE hospital AS SELECT CAST(zip AS INTEGER) AS zip, "
                "CAST(strftime(CAST(birth_date AS DATE), '%Y%m%d') AS INTEGER) AS birth_date, "
                "sex, race, marital_status, diagnosis, cost FROM hospital_raw"
            )
        started = time.perf_counter()
        with engine.connect() as conn:
            conn.exec_driver_sql(
                "SELECT COUNT(*) FROM (SELECT zip, birth_date, sex, race, marital_status, COUNT(*) "
                "FROM hospital GROUP BY ALL) g"
            ).all()
        group_by = time.perf_counter() - started
        engine.dispose()
        hierarchies = folder / "hierarchies"
        job = {
            "source": {"url": url, "table": "hospital", "memory_limit": "1GB"},
            "quasi_identifiers": {
                "zip": None,
                "birth_date": None,
                **{q: {"hierarchy": str(hierarchies / f"{q}.csv")} for q in ("sex", "race", "marital_status")},
            },
            "insensitive": ["diagnosis", "cost"],
            "criteria": {"k_anonymity": {"k": 5}},
            "output": {"table": "hospital_mondrian", "method": "mondrian"},
        }
        started = time.perf_counter()
        published = partition(job_from_dict(job), RunOptions(), replace=True)
        seconds = time.perf_counter() - started
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        rows.append(
            [
                size,
                published.result.partitions,
                published.result.rounds,
                published.result.statements,
                seconds,
                group_by,
                f"{seconds / group_by:.0f}x",
                published.partitioning_seconds,
                f"{published.partitioning_seconds / group_by:.0f}x",
                published.publishing_seconds,
                f"{published.publishing_seconds / group_by:.0f}x",
                round(peak),
            ]
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: utility,scale")
    parser.add_argument("--rows", default="1000000,5000000", help="hospital sizes for part 2")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    OUT.mkdir(parents=True, exist_ok=True)
    if "utility" not in skip:
        url = f"duckdb:///{OUT / 'adult.duckdb'}"
        load_csv(ADULT / "adult.csv.gz", "adult_raw", url, csv_options={"delimiter": ";"}, replace=True)
        print_table(
            "1. Adult, 9 QIs: full-domain generalization against Mondrian (lower is better)",
            ["k", "method", "discernibility", "avg class", "KL divergence", "NCP", "seconds"],
            utility_rows(url),
        )
    if "scale" not in skip:
        print_table(
            "2. Hospital, k = 5: Mondrian against one GROUP BY of the QIs (same run), DuckDB (1 GB limit)",
            [
                "rows",
                "partitions",
                "rounds",
                "statements",
                "seconds",
                "GROUP BY s",
                "ratio",
                "partitioning s",
                "ratio",
                "publishing s",
                "ratio",
                "peak RSS MB (process so far)",
            ],
            scale_rows([int(n) for n in args.rows.split(",")]),
        )


if __name__ == "__main__":
    main()
