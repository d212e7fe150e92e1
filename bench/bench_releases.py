"""The re-publication paper's experiments (Wang, Zhu, Du, Teng, section 4) with sqlanon's anatomy and inference.

    python bench/bench_releases.py [--skip entropy,overlap,timing,scale] [--scale-rows 10000,100000,1000000]
                                   [--scale-engines duckdb,postgresql]

1. Entropy, independent against history-guided re-bucketization: two releases D1', D2' of 7,200
   Adult records sharing 6,000; D2 bucketized by sqlanon independently of D1' (with another
   output.seed, as the paper's independent re-bucketization, or with the same one), or guided by
   D1' (the paper's rule: D1's buckets kept, a deleted record's slot filled by a new record with the
   same sensitive value when one is left, the other new records bucketized on their own); for
   l = 2, 3, 5: the maximum entropy H(S | I) of D2's persons from D2' alone and from both.
2. Overlap: D2 fixed, D1 sharing 6,000, 4,800, 3,600, 2,400, 1,200 and 0 of its records with it
   (independent with new seeds, l = 3): H(S | I) of D2's persons from both releases.
3. Time against the size (the paper's Figure 5): 1,200 to 7,200 records, independent, l = 3.
4. Scale: the synthetic hospital table (../shared/tools/gen_hospital.py), two releases of N records
   sharing 5/6 of them, l = 3, sensitive diagnosis; on DuckDB, and with --scale-engines on PostgreSQL too (in
   its schema bench_releases); each inference beside one GROUP BY of the QIs and the sensitive attribute of
   the whole table (both releases' records) on the same database.

Adult's sensitive attribute is occupation (14 values, none above a seventh of the records, so
l = 5 is possible); the other categorical columns are the QIs, published exact. Entropies are in
nats (natural logarithm), as the paper's figures are (7,200 x ln 5 = 11,588 for l = 5).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib import resources
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).parent))
from common import PG_URL, group_by_seconds, pg_reachable, print_table, timed

from sqlanon import bucketize, inference, job_from_dict, load_csv

HERE = Path(__file__).parent
OUT = HERE / "out" / "releases"
ADULT_CSV = Path(str(resources.files("sqlanon.data").joinpath("adult", "adult.csv.gz")))
GENERATOR = HERE.parent.parent / "shared" / "tools" / "gen_hospital.py"
ADULT_QIS = ["sex", "race", "marital-status", "education", "native-country", "workclass", "salary-class"]
RECORDS, SHARED = 7200, 6000
PG_SCHEMA = "bench_releases"


class Releases:
    """A database (a DuckDB file, or a PostgreSQL schema) with a table of records (pid, QIs, sensitive) and the
    releases made from it."""

    def __init__(self, url: str, source: str, qis: list[str], sensitive: str):
        self.url, self.source, self.qis, self.sensitive = url, source, qis, sensitive
        self.engine = sa.create_engine(url)

    def sql(self, statement: str) -> None:
        with self.engine.begin() as conn:
            conn.exec_driver_sql(statement)

    def version(self, name: str, first: int, count: int, extra_from: int = 0, extra: int = 0) -> None:
        """Table `name`: records [first, first + count) and [extra_from, extra_from + extra) of the source."""
        self.sql(f'DROP TABLE IF EXISTS "{name}"')
        self.sql(
            f'CREATE TABLE "{name}" AS SELECT * FROM "{self.source}" WHERE pid >= {first} AND pid < '
            f"{first + count} OR pid >= {extra_from} AND pid < {extra_from + extra}"
        )

    def job(self, table: str, **extra) -> dict:
        return {
            "source": {"url": self.url, "table": table},
            "quasi_identifiers": self.qis,
            "sensitive": [self.sensitive],
            "identifying": ["pid"],
            **extra,
        }

    def anatomy(self, table: str, l: int, seed: int = 0) -> None:
        """`<table>_qi` and `<table>_qi_sensitive`, with the plain pid kept as the pseudonym (a bench shortcut:
        a real release would use identifying: {pid: {pseudonym: ...}})."""
        config = self.job(table, output={"table": f"{table}_qi", "method": "anatomy", "l": l, "seed": seed})
        config["identifying"] = []
        config["insensitive"] = ["pid"]
        # the history-guided pair of an earlier round is the bench's own table, not sqlanon's: drop it first
        self.sql(f'DROP TABLE IF EXISTS "{table}_qi"; DROP TABLE IF EXISTS "{table}_qi_sensitive"')
        bucketize(job_from_dict(config), replace=True)

    def history_guided(self, old: str, new: str, l: int) -> None:
        """`<new>_qi` and its sensitive table from `<old>_qi`'s buckets by the paper's rule (see the module)."""
        s = f'"{self.sensitive}"'
        self.sql(f'DROP TABLE IF EXISTS "{new}_qi"; DROP TABLE IF EXISTS "{new}_qi_sensitive"')
        self.sql(f"""CREATE TEMP TABLE slots AS
            SELECT o.bucket, src.{s} AS value, ROW_NUMBER() OVER (PARTITION BY src.{s} ORDER BY o.pid) AS n
            FROM "{old}_qi" o JOIN "{self.source}" src ON src.pid = o.pid WHERE o.pid NOT IN (SELECT pid FROM "{new}");
            CREATE TEMP TABLE added AS SELECT pid, {s} AS value,
                ROW_NUMBER() OVER (PARTITION BY {s} ORDER BY pid) AS n
            FROM "{new}" WHERE pid NOT IN (SELECT pid FROM "{old}_qi");
            CREATE TEMP TABLE placed AS
                SELECT pid, bucket FROM "{old}_qi" WHERE pid IN (SELECT pid FROM "{new}")
                UNION ALL SELECT a.pid, sl.bucket FROM added a JOIN slots sl ON sl.value = a.value AND sl.n = a.n;
            CREATE TEMP TABLE rest AS
                SELECT a.pid, a.value FROM added a WHERE a.pid NOT IN (SELECT pid FROM placed);""")
        with self.engine.begin() as conn:
            left = conn.exec_driver_sql("SELECT COUNT(*) FROM rest").scalar_one()
            offset = conn.exec_driver_sql(f'SELECT MAX(bucket) FROM "{old}_qi"').scalar_one()
        groups = max(1, left // l)
        self.sql(f"""INSERT INTO placed SELECT pid, {offset} + MOD(ROW_NUMBER() OVER (ORDER BY value, pid) - 1,
                        {groups}) + 1 FROM rest;
            CREATE TABLE "{new}_qi" AS SELECT n.pid, {", ".join(f'n."{c}"' for c in self.qis)}, p.bucket
                FROM "{new}" n JOIN placed p ON p.pid = n.pid;
            CREATE TABLE "{new}_qi_sensitive" AS SELECT p.bucket, n.{s}, COUNT(*) AS "count"
                FROM "{new}" n JOIN placed p ON p.pid = n.pid GROUP BY p.bucket, n.{s};
            DROP TABLE slots; DROP TABLE added; DROP TABLE placed; DROP TABLE rest;""")

    def infer(self, releases: list[str], current: str):
        series = [{"name": r, "table": f"{r}_qi", "sensitive_table": f"{r}_qi_sensitive"} for r in releases]
        config = self.job(current, releases={"pseudonym": "pid", "series": series}, inference={"max_iterations": 1024})
        return timed(lambda: inference(job_from_dict(config)))


def adult(url: str) -> Releases:
    """Adult with a record number `pid` in a seeded random order (so any range is a random sample)."""
    load_csv(ADULT_CSV, "adult_raw", url, csv_options={"delimiter": ";"}, replace=True)
    data = Releases(url, "adult", ADULT_QIS, "occupation")
    data.sql("DROP TABLE IF EXISTS adult")
    columns = ", ".join(f'"{c}"' for c in ADULT_QIS + ["occupation"])
    data.sql(
        f"CREATE TABLE adult AS SELECT CAST(ROW_NUMBER() OVER (ORDER BY hash(line)) - 1 AS INTEGER) AS pid, "
        f"{columns} FROM (SELECT *, ROW_NUMBER() OVER () AS line FROM adult_raw) AS numbered"
    )
    return data


METHODS = {
    "independent (new seed)": "D2 bucketized by sqlanon with another output.seed than D1",
    "independent (same seed)": "D2 bucketized by sqlanon with D1's output.seed",
    "history-guided": "D1's buckets kept, the paper's rule",
}


def entropy_rows(data: Releases) -> list[list[object]]:
    rows = []
    for l in (2, 3, 5):
        data.version("d1", 0, RECORDS)
        data.version("d2", RECORDS - SHARED, RECORDS)
        data.anatomy("d1", l, seed=1)
        for method in METHODS:
            if method == "history-guided":
                data.history_guided("d1", "d2", l)
            else:
                data.anatomy("d2", l, seed=2 if "new" in method else 1)
            _, alone = data.infer(["d2"], "d2")
            seconds, both = data.infer(["d1", "d2"], "d2")
            single, together = alone.entropy[0].alone, both.entropy[1].together
            rows.append(
                [
                    l,
                    method,
                    round(single),
                    round(together),
                    f"{1 - together / single:.1%}",
                    both.positive_count,
                    both.iterations,
                    both.variables,
                    seconds,
                ]
            )
    return rows


def overlap_rows(data: Releases, l: int = 3) -> list[list[object]]:
    rows = []
    data.version("d2", 0, RECORDS)
    data.anatomy("d2", l, seed=2)
    for shared in (6000, 4800, 3600, 2400, 1200, 0):
        data.version("d1", RECORDS - shared, shared, extra_from=RECORDS, extra=RECORDS - shared)
        data.anatomy("d1", l, seed=1)
        seconds, both = data.infer(["d1", "d2"], "d2")
        rows.append(
            [
                shared,
                round(both.entropy[1].alone),
                round(both.entropy[1].together),
                f"{both.entropy[1].drop:.1%}",
                seconds,
            ]
        )
    return rows


PAPER_FIGURE_5 = {
    1200: (11237, 2921, 4),
    2400: (30437, 5841, 43),
    3600: (49637, 9036, 49),
    4800: (23617, 12101, 57),
    6000: (29575, 15601, 233),
    7200: (34852, 19121, 221),
}  # variables, constraints, minutes


def timing_rows(data: Releases, l: int = 3) -> list[list[object]]:
    rows = []
    for records in sorted(PAPER_FIGURE_5):
        shared = records * SHARED // RECORDS
        data.version("d1", 0, records)
        data.version("d2", records - shared, records)
        data.anatomy("d1", l, seed=1)
        data.anatomy("d2", l, seed=2)
        seconds, both = data.infer(["d1", "d2"], "d2")
        constraints = both.one_constraints + both.relation_constraints
        paper = PAPER_FIGURE_5[records]
        rows.append(
            [records, both.variables, constraints, both.iterations, seconds, paper[0], paper[1], f"{paper[2]} min"]
        )
    return rows


def scale_url(engine: str, folder: Path) -> str:
    """Where part 4 runs: a DuckDB file beside the generated CSV, or PostgreSQL's schema `bench_releases` (made
    here; its unqualified tables are the bench's own)."""
    if engine == "duckdb":
        return f"duckdb:///{folder / 'releases.duckdb'}"
    server = sa.create_engine(PG_URL)
    with server.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {PG_SCHEMA}")
    server.dispose()
    return f"{PG_URL}?options=-csearch_path%3D{PG_SCHEMA}"


def scale_rows(sizes: list[int], engines: list[str], l: int = 3) -> list[list[object]]:
    rows = []
    for size in sizes:
        total = size + size // 6  # two versions of `size` records sharing 5/6
        folder = OUT / f"hospital_{total}"
        if not (folder / "hospital.csv").exists():
            subprocess.run([sys.executable, str(GENERATOR), "--rows", str(total), "--out", str(folder)], check=True)
        rows += [scale_row(size, total, scale_url(engine, folder), folder, engine, l) for engine in engines]
    return rows


def scale_row(size: int, total: int, url: str, folder: Path, engine: str, l: int) -> list[object]:
    """Part 4's row for one size on one database: the two releases' anatomy, then the inference across them."""
    load_csv(folder / "hospital.csv", "hospital_raw", url, replace=True)
    data = Releases(url, "hospital", ["zip", "birth_date", "sex", "race", "marital_status"], "diagnosis")
    # records numbered in file order by one thread: over a parallel scan, ROW_NUMBER() OVER () numbers a million
    # rows differently from run to run, and so did the releases (528 and 720 IPF passes)
    numbered = (
        "DROP TABLE IF EXISTS hospital; CREATE TABLE hospital AS SELECT CAST(ROW_NUMBER() OVER () - 1 AS INTEGER) "
        "AS pid, zip, birth_date, sex, race, marital_status, diagnosis FROM hospital_raw"
    )
    data.sql(f"SET threads = 1; {numbered}; RESET threads" if engine == "duckdb" else f"{numbered}; ANALYZE hospital")
    data.version("d1", 0, size)
    data.version("d2", total - size, size)
    publish, _ = timed(lambda: (data.anatomy("d1", l, seed=1), data.anatomy("d2", l, seed=2)))
    seconds, both = data.infer(["d1", "d2"], "d2")
    group_by = group_by_seconds(url, "hospital", data.qis + [data.sensitive])
    data.engine.dispose()
    return [
        size,
        engine,
        both.variables,
        both.one_constraints + both.relation_constraints,
        both.iterations,
        f"{both.max_violation:.1e}",
        publish,
        seconds,
        group_by,
        seconds / group_by,
        f"{both.entropy[1].drop:.1%}",
    ]


def scale_engines(names: str) -> list[str]:
    engines = [name for name in names.split(",") if name]
    if "postgresql" in engines and not pg_reachable():
        print("PostgreSQL is not reachable: part 4 runs on DuckDB alone", file=sys.stderr)
        engines.remove("postgresql")
    return engines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: entropy,overlap,timing,scale")
    parser.add_argument("--scale-rows", default="10000,100000,1000000", help="records per release, part 4")
    parser.add_argument(
        "--scale-engines", default="duckdb", help="part 4's databases: duckdb,postgresql (PostgreSQL if reachable)"
    )
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    OUT.mkdir(parents=True, exist_ok=True)
    data = adult(f"duckdb:///{OUT / 'adult_releases.duckdb'}")
    if "entropy" not in skip:
        print_table(
            "1. H(S | I) of D2's 7,200 persons (nats), D2' alone and with D1' (6,000 shared), DuckDB",
            [
                "l",
                "D2 bucketized",
                "alone",
                "both",
                "lower by",
                "positive disclosures",
                "passes",
                "variables",
                "seconds",
            ],
            entropy_rows(data),
        )
    if "overlap" not in skip:
        print_table(
            "2. Shared records (independent, l = 3): H(S | I) of D2's persons",
            ["shared", "D2' alone", "both", "lower by", "seconds"],
            overlap_rows(data),
        )
    if "timing" not in skip:
        print_table(
            "3. Time against size (independent, l = 3, 5/6 shared), with the paper's Figure 5 (Knitro)",
            [
                "records",
                "variables",
                "constraints",
                "passes",
                "seconds",
                "paper variables",
                "paper constraints",
                "paper time",
            ],
            timing_rows(data),
        )
    data.engine.dispose()
    if "scale" not in skip:
        print_table(
            "4. Hospital, two releases sharing 5/6 (l = 3, sensitive diagnosis)",
            [
                "records",
                "database",
                "variables",
                "constraints",
                "passes",
                "violation",
                "anatomy s (both)",
                "inference s",
                "one GROUP BY s",
                "x GROUP BY",
                "lower by",
            ],
            scale_rows([int(n) for n in args.scale_rows.split(",")], scale_engines(args.scale_engines)),
        )


if __name__ == "__main__":
    main()
