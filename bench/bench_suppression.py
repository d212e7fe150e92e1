"""Adult, all 9 QIs, k=5 with tuple suppression at 0, 2% and 10% of the table (DuckDB):
search seconds and nodes checked (the job's own strategy, top-down and Samarati, same run), then the node each
selection rule picks and its metrics.

    python bench/bench_suppression.py [--limits 0,0.02,0.1] [--k 5]

Selection works as in `anonymize`: policies (and metrics when nothing is suppressed)
choose among the minimal nodes; data metrics with suppression among every passing
node, whose metrics are computed here in batched SQL (timed separately).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from importlib import resources
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import print_table, timed

from sqlanon import RunOptions, Suppression, load_job, node_metrics, search
from sqlanon.criteria import KAnonymity
from sqlanon.model.selection import POLICIES, best_node, needs_every_passing_node, node_label, selection_metric

HERE = Path(__file__).parent
CONFIG = Path(str(resources.files("sqlanon.data").joinpath("adult", "adult.yaml")))
METRIC_RULES = ["precision", "discernibility", "kl_divergence", "c_avg"]
SHOWN = ["height", "precision", "suppressed", "classes", "avg_class_size", "discernibility", "kl_divergence"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limits", default="0,0.02,0.1")
    parser.add_argument("--k", type=int, default=5)
    args = parser.parse_args()
    (HERE / "out").mkdir(exist_ok=True)
    url = f"duckdb:///{HERE / 'out' / 'adult.duckdb'}"
    base = load_job(CONFIG)
    search(dataclasses.replace(base, criteria=[KAnonymity(1)]), RunOptions(db_url=url))  # load the CSV, untimed
    loaded = dataclasses.replace(base, source=dataclasses.replace(base.source, csv=None), criteria=[KAnonymity(args.k)])
    searches, choices = [], []
    for raw in args.limits.split(","):
        limit = float(raw) if "." in raw else int(raw)
        job = dataclasses.replace(loaded, suppression=Suppression(limit))
        seconds, result = timed(lambda: search(job, RunOptions(db_url=url)))
        sam_seconds, samarati = timed(
            lambda: search(dataclasses.replace(job, strategy="samarati"), RunOptions(db_url=url))
        )
        top_seconds, topdown = timed(
            lambda: search(dataclasses.replace(job, strategy="topdown"), RunOptions(db_url=url))
        )
        assert topdown.satisfying == result.satisfying, "top-down and the job's strategy disagree"
        lowest = min(map(sum, result.satisfying))
        assert samarati.satisfying == [n for n in result.satisfying if sum(n) == lowest], "Samarati disagrees"
        rules = [(p, None) for p in POLICIES] + [(None, m) for m in METRIC_RULES]
        wide = any(
            needs_every_passing_node(selection_metric(p, m), p is not None, result.max_suppressed) for p, m in rules
        )
        pool = result.satisfying if wide else result.minimal
        metric_seconds, metrics = timed(lambda: node_metrics(job, pool, RunOptions(db_url=url)))
        searches.append(
            [
                limit,
                result.max_suppressed,
                seconds,
                result.stats.nodes_checked,
                len(result.satisfying),
                len(result.minimal),
                top_seconds,
                topdown.stats.nodes_checked,
                sam_seconds,
                samarati.stats.nodes_checked,
                len(pool),
                metric_seconds,
            ]
        )
        print(searches[-1], flush=True)
        for policy, metric in rules:
            rule = selection_metric(policy, metric)
            wide = needs_every_passing_node(rule, policy is not None, result.max_suppressed)
            candidates = result.satisfying if wide else result.minimal
            node = best_node(rule, {n: metrics[n] for n in candidates})
            choices.append(
                [limit, policy or f"metric {metric}", node_label(node)]
                + [_short(metrics[node][name]) for name in SHOWN]
            )
    print_table(
        f"Adult (30,162 rows), 9 QIs, k={args.k}: search with suppression (wall seconds, DuckDB)",
        [
            "limit",
            "MaxSup",
            "search s",
            "checked",
            "passing",
            "minimal",
            "topdown s",
            "checked",
            "samarati s",
            "checked",
            "metric nodes",
            "metrics s",
        ],
        searches,
    )
    print_table("the node each selection rule picks, and its metrics", ["limit", "rule", "node"] + SHOWN, choices)


def _short(value: object) -> str:
    if value is None:
        return "-"
    return str(value) if isinstance(value, int) else f"{value:.4g}"


if __name__ == "__main__":
    main()
