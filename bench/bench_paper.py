"""The l-diversity paper's experiments (Machanavajjhala et al., section 7) on the Adult data sqlanon ships.

    python bench/bench_paper.py [--no-postgres] [--skip homogeneity,timing,utility] [--plots DIR]

1. Homogeneity: QIs age, sex, race, marital-status, education; sensitive occupation, then
   salary-class; every minimal k-anonymous table for k = 2..8: how many tables, how many are
   affected (a homogeneous class), the average affected classes and tuples per table; then the
   same for nearly homogeneous classes (most frequent value >= 95% of the class).
2. Running time of k-anonymity against entropy l-diversity (k = l = 6, sensitive occupation) as
   the QI set grows from 3 to 8 attributes (Incognito, as in the paper, and the default strategy).
3. Utility of the best k-anonymous, entropy l-diverse and recursive (3, l)-diverse tables for
   k = l = 2, 4, 6, 8 (QIs of 1., sensitive occupation): minimum height, minimum average class
   size, minimum discernibility and minimum KL divergence over the minimal nodes, with the KL of the
   all-suppressed table as baseline; on the full table and on a seeded 5% Bernoulli sample.

The paper used 45,222 rows of Adult; sqlanon ships the 30,162-row version without missing
values, so compare the shape of the results, not the digits. With matplotlib installed, the
figures are written as PNG files into --plots (default docs/figures, shown in the docs).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from importlib import resources
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).parent))
from common import print_table, timed

from sqlanon import RunOptions, analyze, load_job, node_metrics, search
from sqlanon.analysis.attacks import AnalysisSettings
from sqlanon.criteria import criteria_from_config

HERE = Path(__file__).parent
ADULT = Path(str(resources.files("sqlanon.data").joinpath("adult", "adult.yaml")))
QIS = ["age", "sex", "race", "marital-status", "education"]
GROWING = QIS + ["native-country", "workclass", "salary-class"]  # 3..8 QIs, occupation stays sensitive
COLUMNS = [
    "sex",
    "age",
    "race",
    "marital-status",
    "education",
    "native-country",
    "workclass",
    "occupation",
    "salary-class",
]


def job_for(base, qis: list[str], sensitive: str, criteria: dict, table: str = "adult"):
    """The bundled Adult job over `qis`, `sensitive` protected by `criteria`, every other column insensitive."""
    by_name = {q.column: q for q in base.quasi_identifiers}
    return dataclasses.replace(
        base,
        source=dataclasses.replace(base.source, csv=None, table=table),
        quasi_identifiers=[by_name[q] for q in qis],
        criteria=criteria_from_config(criteria),
        sensitive=[sensitive],
        insensitive=[c for c in COLUMNS if c not in qis and c != sensitive],
        output=None,
    )


def homogeneity(base, url: str) -> list[list]:
    rows = []
    for sensitive in ("occupation", "salary-class"):
        for k in range(2, 9):
            job = job_for(base, QIS, sensitive, {"k_anonymity": {"k": k}})
            report = analyze(job, RunOptions(db_url=url), settings=AnalysisSettings(near=0.95))
            tables = report.tables
            near = [t for t in tables if t.nearly_homogeneous_classes]
            count = len(tables) or 1
            rows.append(
                [
                    sensitive,
                    k,
                    len(tables),
                    report.affected_tables,
                    sum(t.homogeneous_classes for t in tables) / count,
                    sum(t.homogeneous_tuples for t in tables) / count,
                    len(near),
                    sum(t.nearly_homogeneous_classes for t in tables) / count,
                    sum(t.nearly_homogeneous_tuples for t in tables) / count,
                ]
            )
            print(rows[-1], flush=True)
    print_table(
        "Homogeneity attack on every minimal k-anonymous table (QIs age, sex, race, marital-status, education)",
        [
            "sensitive",
            "k",
            "tables",
            "affected",
            "avg classes",
            "avg tuples",
            "near affected",
            "avg near classes",
            "avg near tuples",
        ],
        rows,
    )
    return rows


def timing(base, url: str) -> list[list]:
    rows = []
    for size in range(3, len(GROWING) + 1):
        qis = GROWING[:size]
        row: list = [size]
        for criteria in ({"k_anonymity": {"k": 6}}, {"entropy_l_diversity": {"attribute": "occupation", "l": 6}}):
            for strategy in ("incognito", "auto"):
                job = dataclasses.replace(job_for(base, qis, "occupation", criteria), strategy=strategy)
                _seconds, result = timed(lambda: search(job, RunOptions(db_url=url)))
                row += [result.stats.seconds]
        rows.append(row)
        print(rows[-1], flush=True)
    print_table(
        "Search seconds as the QI set grows (k = 6 against entropy l = 6 on occupation)",
        ["QIs", "k=6 incognito", "k=6 auto", "entropy l=6 incognito", "entropy l=6 auto"],
        rows,
    )
    return rows


UTILITY_CRITERIA = {
    "k-anonymity": lambda p: {"k_anonymity": {"k": p}},
    "entropy l-diversity": lambda p: {"entropy_l_diversity": {"attribute": "occupation", "l": p}},
    "recursive (3,l)-diversity": lambda p: {"recursive_l_diversity": {"attribute": "occupation", "c": 3, "l": p}},
}


def utility(base, url: str, table: str) -> list[list]:
    rows = []
    top = tuple(
        h
        for h in search(
            job_for(base, QIS, "occupation", {"k_anonymity": {"k": 1}}, table), RunOptions(db_url=url)
        ).heights
    )
    for name, spec in UTILITY_CRITERIA.items():
        for p in (2, 4, 6, 8):
            job = job_for(base, QIS, "occupation", spec(p), table)
            found = search(job, RunOptions(db_url=url, metrics=True))
            metrics = list(found.metrics.values())
            baseline = node_metrics(job, [top], RunOptions(db_url=url))[top]["kl_divergence"]
            if not metrics:
                rows.append([table, name, p, 0, "-", "-", "-", "-", baseline])
                continue
            rows.append(
                [
                    table,
                    name,
                    p,
                    len(found.minimal),
                    min(m["height"] for m in metrics),
                    min(m["avg_class_size"] for m in metrics),
                    min(m["discernibility"] for m in metrics),
                    min(m["kl_divergence"] for m in metrics),
                    baseline,
                ]
            )
            print(rows[-1], flush=True)
    print_table(
        f"Utility of the best table ({table}; QIs age, sex, race, marital-status, education; sensitive occupation)",
        [
            "table",
            "criterion",
            "k or l",
            "minimal",
            "min height",
            "min avg class size",
            "min discernibility",
            "min KL",
            "KL all suppressed",
        ],
        rows,
    )
    return rows


def sample_table(url: str) -> str:
    """A seeded 5% Bernoulli sample of Adult (the paper's way around the age skew), created once."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE OR REPLACE TABLE adult_sample5 AS SELECT * FROM adult USING SAMPLE 5 PERCENT (bernoulli, 42)"
        )
    engine.dispose()
    return "adult_sample5"


def plots(folder: Path, homogeneity_rows: list, timing_rows: list, utility_rows: list) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no figures written (pip install matplotlib)")
        return
    folder.mkdir(parents=True, exist_ok=True)
    if homogeneity_rows:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for sensitive in ("occupation", "salary-class"):
            mine = [r for r in homogeneity_rows if r[0] == sensitive]
            ax.plot([r[1] for r in mine], [r[3] / max(r[2], 1) for r in mine], marker="o", label=sensitive)
        ax.set(xlabel="k", ylabel="share of minimal tables affected", title="Homogeneity attack")
        ax.legend()
        fig.savefig(folder / "homogeneity.png", dpi=120, bbox_inches="tight")
    if timing_rows:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for column, label in (
            (1, "k=6 (Incognito)"),
            (3, "entropy l=6 (Incognito)"),
            (2, "k=6 (auto)"),
            (4, "entropy l=6 (auto)"),
        ):
            ax.plot([r[0] for r in timing_rows], [r[column] for r in timing_rows], marker="o", label=label)
        ax.set(xlabel="QI attributes", ylabel="search seconds", title="Running time")
        ax.legend()
        fig.savefig(folder / "timing.png", dpi=120, bbox_inches="tight")
    for table in sorted({r[0] for r in utility_rows}):
        fig, axes = plt.subplots(1, 4, figsize=(14, 3.2))
        for index, (axis, title) in enumerate(
            zip(axes, ("min height", "min avg class size", "min discernibility", "min KL"))
        ):
            for name in UTILITY_CRITERIA:
                mine = [r for r in utility_rows if r[0] == table and r[1] == name and r[4] != "-"]
                axis.plot([r[2] for r in mine], [r[4 + index] for r in mine], marker="o", label=name)
            axis.set(xlabel="k = l", title=title)
        axes[0].legend(fontsize=7)
        fig.savefig(folder / f"utility_{table}.png", dpi=120, bbox_inches="tight")
    print(f"figures written to {folder}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip", default="", help="comma-separated: homogeneity, timing, utility")
    parser.add_argument("--plots", type=Path, default=HERE.parent / "docs" / "figures")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    (HERE / "out").mkdir(exist_ok=True)
    url = f"duckdb:///{HERE / 'out' / 'paper.duckdb'}"
    base = load_job(ADULT)
    search(base, RunOptions(db_url=url))  # loads the bundled CSV once
    homogeneity_rows = [] if "homogeneity" in skip else homogeneity(base, url)
    timing_rows = [] if "timing" in skip else timing(base, url)
    utility_rows = [] if "utility" in skip else utility(base, url, "adult") + utility(base, url, sample_table(url))
    plots(args.plots, homogeneity_rows, timing_rows, utility_rows)


if __name__ == "__main__":
    main()
