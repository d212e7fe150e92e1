"""Condensation (output.method condense): the covariance structure its synthetic records keep, what k costs, and
its cost at scale.

1. Structure (a generated table of 100,000 records: age, weight, height and blood pressure, a mixture of three
   correlated clusters; DuckDB): for each k, the groups' sizes, the error of the synthetic table's correlation
   matrix against the records' (largest absolute difference), Aggarwal and Yu's covariance compatibility (the
   correlation between the entries of the two covariance matrices, 1 at best), the same group by group (each
   group's synthetic draws against its records' covariance: mean largest difference of correlations, over the
   groups), and the seconds.
   The last row condenses within each cluster (`output.label: cluster`, the class a model would learn): its
   correlation error is the largest over the clusters, each cluster's synthetic records against its records.
2. Scale (the same table at 1M records, k = 10; DuckDB, and PostgreSQL with --postgres): the publication (grouping,
   statistics, eigen-decompositions, synthetic records, both audits), the same within each cluster, and the
   addition of 10,000 new records, each beside one GROUP BY of the table's four attributes on the same database in
   the same run.

    python bench/bench_condense.py [--postgres] [--rows N]
"""

from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path

import numpy as np
import sqlalchemy as sa
from common import databases, group_by_seconds, print_table, timed

from sqlanon import condense, condense_add, job_from_dict, load_csv
from sqlanon.backends import open_database
from sqlanon.engine.condensation import synthetic_select
from sqlanon.engine.randomization import noise_key_table

OUT = Path(__file__).parent / "out"
COLUMNS = ["age", "weight", "height", "pressure"]
KEY_VARIABLE = "SQLANON_BENCH_NOISE_KEY"


def vitals(rows: int, seed: int = 11) -> np.ndarray:
    """Three clusters of correlated vitals (rounded as they would be recorded), each record's cluster (1-3) last."""
    rng = np.random.default_rng(seed)
    centres = [[35, 70, 172, 120], [60, 85, 168, 140], [20, 60, 165, 110]]
    scales = np.array([[8, 10, 7, 10], [9, 12, 8, 14], [3, 8, 9, 8]])
    mixing = np.array([[1, 0.5, 0.2, 0.6], [0, 1, 0.7, 0.4], [0, 0, 1, 0.1], [0, 0, 0, 1]])
    which = rng.choice(3, size=rows, p=[0.5, 0.3, 0.2])
    normal = rng.normal(size=(rows, 4)) @ mixing
    return np.column_stack([np.round(np.array(centres)[which] + normal * scales[which], 1), which + 1])


def load(url: str, rows: int, table: str, offset_seed: int = 11) -> np.ndarray:
    """The generated vitals as `table` (with their cluster); the attributes returned."""
    data = vitals(rows, offset_seed)
    path = OUT / f"{table}_{rows}_clustered.csv"
    if not path.exists():
        formats = ["%.1f"] * len(COLUMNS) + ["%d"]
        np.savetxt(path, data, delimiter=",", header=",".join([*COLUMNS, "cluster"]), comments="", fmt=formats)
    load_csv(path, table, url, replace=True)
    return data


def job(url: str, k: int, label: str | None = None):
    """The condensation of the vitals; with `label`, within each value of it."""
    output = {"table": "vitals_synthetic", "method": "condense", "k": k, "noise_key": {"key_env": KEY_VARIABLE}}
    within = {"insensitive": [label], "output": {**output, "label": label}} if label else {"output": output}
    return job_from_dict(
        {"source": {"url": url, "table": "vitals"}, "quasi_identifiers": COLUMNS, "others": "drop", **within}
    )


def compatibility(a: np.ndarray, b: np.ndarray) -> float:
    """Aggarwal and Yu's covariance compatibility: the correlation between the two covariance matrices' entries."""
    upper = np.triu_indices(a.shape[1])
    return float(np.corrcoef(np.cov(a.T)[upper], np.cov(b.T)[upper])[0, 1])


def per_group_error(url: str) -> float:
    """Mean over groups of the largest difference between the correlations of its synthetic draws and its
    records' (from its condensed statistics)."""
    db = open_database(url)
    d = len(COLUMNS)
    with db.connect() as conn:
        groups = {row.grp: row._mapping for row in conn.execute(sa.text("SELECT * FROM vitals_synthetic_groups"))}
        conn.exec_driver_sql("CREATE TEMP TABLE numbers AS SELECT range + 1 AS i FROM range(200)")
        with noise_key_table(db, conn, os.environ[KEY_VARIABLE].encode()) as keys:
            select = synthetic_select(
                db, conn, groups="vitals_synthetic_groups", numbers="numbers", keys=keys, names=COLUMNS, with_group=True
            )
            drawn = np.array(conn.execute(sa.text(select)).all())
    db.dispose()
    errors = []
    for grp, values in groups.items():
        n = values["n"]
        sums = np.array([values[f"sum_{j}"] for j in range(1, d + 1)])
        products = np.array(
            [[values[f"sum_{min(i, j)}_{max(i, j)}"] for j in range(1, d + 1)] for i in range(1, d + 1)]
        )
        covariance = products / n - np.outer(sums, sums) / n**2
        spread = np.sqrt(np.clip(np.diag(covariance), 1e-12, None))
        records = covariance / np.outer(spread, spread)
        mine = drawn[drawn[:, d] == grp][:, :d]
        errors.append(np.abs(np.corrcoef(mine.T) - records).max())
    return float(np.nanmean(errors))


def structure_rows(url: str) -> list[list[object]]:
    data = load(url, 100_000, "vitals")
    original, clusters = data[:, : len(COLUMNS)], data[:, -1]
    rows = []
    for k, label in ((5, None), (10, None), (20, None), (50, None), (100, None), (10, "cluster")):
        seconds, report = timed(lambda k=k, label=label: condense(job(url, k, label), replace=True))
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            columns = ", ".join([*COLUMNS, "cluster" if label else "0"])
            synthetic = np.array(conn.exec_driver_sql(f"SELECT {columns} FROM vitals_synthetic").all(), dtype=float)
        engine.dispose()
        drawn = synthetic[:, : len(COLUMNS)]
        if label:  # each cluster's synthetic records against its own records
            error = max(_corr_error(original[clusters == c], drawn[synthetic[:, -1] == c]) for c in (1, 2, 3))
        else:
            error = _corr_error(original, drawn)
        rows.append(
            [
                f"{k} within {label}" if label else k,
                report.groups,
                f"{report.smallest}-{report.largest}",
                round(error, 4),
                f"{compatibility(original, drawn):.6f}",
                round(per_group_error(url), 3),
                seconds,
            ]
        )
    return rows


def _corr_error(records: np.ndarray, synthetic: np.ndarray) -> float:
    """The largest absolute difference between the two tables' correlation matrices."""
    return float(np.abs(np.corrcoef(synthetic.T) - np.corrcoef(records.T)).max())


def scale_rows(name: str, url: str, rows: int) -> list[list[object]]:
    load(url, rows, "vitals")
    load(url, 10_000, "batch", offset_seed=12)
    group_by = group_by_seconds(url, "vitals", COLUMNS)
    within, labelled = timed(lambda: condense(job(url, 10, "cluster"), replace=True))
    published, report = timed(lambda: condense(job(url, 10), replace=True))
    added, addition = timed(lambda: condense_add(job(url, 10), "batch"))
    return [
        [
            name,
            f"condense k=10 within cluster ({labelled.rounds} rounds)",
            labelled.statements,
            within,
            group_by,
            f"{within / group_by:.1f}x",
        ],
        [
            name,
            f"condense k=10 ({report.rounds} rounds)",
            report.statements,
            published,
            group_by,
            f"{published / group_by:.1f}x",
        ],
        [
            name,
            f"condense-add 10,000 ({addition.splits} splits)",
            addition.statements,
            added,
            group_by,
            f"{added / group_by:.1f}x",
        ],
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    os.environ.setdefault(KEY_VARIABLE, "the benchmark's noise key, 32 bytes")
    warnings.filterwarnings("ignore", message="others: drop leaves")  # the cluster, when it is not the label
    OUT.mkdir(exist_ok=True)
    found = databases("condense.duckdb", args.postgres)
    print_table(
        "Structure kept, 100,000 generated vitals (DuckDB)",
        ["k", "groups", "sizes", "corr error", "compatibility", "per-group corr error", "seconds"],
        structure_rows(found[0][1]),
    )
    print_table(
        f"Cost at {args.rows:,} records, beside one GROUP BY of the four attributes",
        ["database", "verb", "statements", "seconds", "GROUP BY", "ratio"],
        [row for name, url in found for row in scale_rows(name, url, args.rows)],
    )


if __name__ == "__main__":
    main()
