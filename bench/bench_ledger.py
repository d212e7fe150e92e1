"""What the release ledger costs a publication: two monthly releases of the hospital table, the second checked
against the first before it commits.

    python bench/bench_ledger.py [--rows 100000,1000000] [--method anatomy|invariant|generalize] [--postgres]

Each size: the synthetic hospital table (../shared/tools/gen_hospital.py) numbered by patient, two versions of
N records sharing 5/6 of them (as bench_releases.py's scale part), each published by a job that keeps a ledger
(persons by a keyed pseudonym of the patient number). The first release is recorded only; the second is
written, audited, then solved together with the first by the maximum-entropy inference, and committed or
refused. With `--method invariant` the releases are m-invariant bucketizations (anatomy's output.invariant,
l = m = 3) checked by m-invariance instead. Printed: the second release published without a ledger (another
job name, plain anatomy or generalization) and with it (admitted or refused: a refused check costs as much as
an admitted one), the difference (the check over both releases, the checks of the earlier release, the record,
and for `invariant` the bucketization after the previous release), and one GROUP BY of the QIs of the second
version, all in the same run on DuckDB (or PostgreSQL).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_releases import GENERATOR, OUT, Releases
from common import PG_URL, group_by_seconds, print_table, timed

from sqlanon import RunOptions, anonymize, job_from_dict, load_csv
from sqlanon.errors import DataError

QIS = ["zip", "birth_date", "sex", "race", "marital_status"]
KEY_ENV = "SQLANON_BENCH_LEDGER_KEY"


STORE = "bench_ledger"  # the benchmark's own metadata schema, dropped at each start


def hospital(size: int, postgres: bool) -> Releases:
    """Versions d1 and d2 of `size` records each, sharing 5/6 of them (patients numbered in file order on DuckDB,
    in the order of their columns on PostgreSQL), on DuckDB or PostgreSQL."""
    import subprocess

    total = size + size // 6
    folder = OUT / f"hospital_{total}"
    if not (folder / "hospital.csv").exists():
        subprocess.run([sys.executable, str(GENERATOR), "--rows", str(total), "--out", str(folder)], check=True)
    url = PG_URL if postgres else f"duckdb:///{folder / 'ledger.duckdb'}"
    load_csv(folder / "hospital.csv", "hospital_raw", url, replace=True)
    data = Releases(url, "hospital", QIS, "diagnosis")
    columns = "zip, birth_date, sex, race, marital_status, diagnosis"
    data.sql(f"DROP SCHEMA IF EXISTS {STORE} CASCADE")
    for table in ("hospital", "d1", "d2", "d1_kept", "d2_kept", "d2_plain"):  # an earlier run's
        for suffix in ("", "_sensitive", "_counterfeits"):
            data.sql(f"DROP TABLE IF EXISTS {table}{suffix}")
    order = columns if postgres else ""
    data.sql(
        f"CREATE TABLE hospital AS SELECT CAST(ROW_NUMBER() OVER ({'ORDER BY ' + order if order else ''}) - 1 AS "
        f"INTEGER) AS pid, {columns} FROM hospital_raw"
    )
    data.version("d1", 0, size)
    data.version("d2", total - size, size)
    if postgres:
        data.sql("ANALYZE d1; ANALYZE d2")
    return data


def job(data: Releases, table: str, name: str, method: str, ledger: bool) -> object:
    output: dict[str, object] = {"table": f"{table}_{name}", "method": method}
    config: dict[str, object] = {
        "name": name,
        "source": {"url": data.url, "table": table},
        "identifying": {"pid": {"pseudonym": {"key_env": KEY_ENV}}},
        "sensitive": ["diagnosis"],
        "output": output,
    }
    if method in ("anatomy", "invariant"):
        output |= {"method": "anatomy", "l": 3, "seed": 1, "invariant": method == "invariant" and ledger}
        config["quasi_identifiers"] = QIS
    else:  # the zip code and birth date generalized by their generators, a k-anonymous and 3-diverse node
        config["quasi_identifiers"] = {
            "zip": {"generate": "mask"},
            "birth_date": {"generate": "date", "bands": [5, 10]},
            "sex": {"generate": "suppress"},
            "race": {"generate": "suppress"},
            "marital_status": {"generate": "suppress"},
        }
        config["criteria"] = {"k_anonymity": {"k": 5}, "distinct_l_diversity": {"attribute": "diagnosis", "l": 3}}
        config["suppression"] = {"limit": 0.02}
    if ledger:
        config["ledger"] = {"person": "pid"} | ({"check": "m-invariance", "m": 3} if method == "invariant" else {})
    return job_from_dict(config)


def measure(size: int, method: str, postgres: bool) -> list[object]:
    data = hospital(size, postgres)
    options = RunOptions(metadata_schema=STORE)
    plain_seconds, _ = timed(lambda: anonymize(job(data, "d2", "plain", method, False), options, replace=True))
    anonymize(job(data, "d1", "kept", method, True), options)  # the first release: recorded, nothing to check
    ledger_seconds, outcome = timed(lambda: _published_or_refused(job(data, "d2", "kept", method, True), options))
    group_by = group_by_seconds(data.url, "d2", QIS)
    data.engine.dispose()
    checked = ledger_seconds - plain_seconds
    engine = "postgresql" if postgres else "duckdb"
    return [
        size,
        engine,
        method,
        group_by,
        plain_seconds,
        ledger_seconds,
        checked,
        f"{checked / group_by:.0f}x",
        outcome,
    ]


def _published_or_refused(second: object, options: RunOptions) -> str:
    """What became of the second release: admitted, or refused and for how many values."""
    try:
        check = anonymize(second, options).ledger
    except DataError as refused:
        return "refused: " + str(refused).split(" together disclose ")[1].split(" of their")[0]
    assert check is not None and check.checked == ["diagnosis"], check
    return "admitted"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="100000,1000000", help="records per release")
    parser.add_argument("--method", default="anatomy", choices=["anatomy", "invariant", "generalize"])
    parser.add_argument("--postgres", action="store_true", help="on PostgreSQL (the test database) instead of DuckDB")
    args = parser.parse_args()
    os.environ.setdefault(KEY_ENV, "bench-ledger-key-0123456789abcdef")
    rows = [measure(int(n), args.method, args.postgres) for n in args.rows.split(",")]
    print_table(
        "The release ledger: the second of two releases sharing 5/6 of their persons",
        [
            "persons",
            "engine",
            "method",
            "GROUP BY s",
            "publish s (no ledger)",
            "publish s (ledger)",
            "ledger s",
            "ledger / GROUP BY",
            "second release",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
