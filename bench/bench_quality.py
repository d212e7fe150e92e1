"""Publishing by ARX's quality models (sqlanon.model.quality) beside publishing by the default policy on the same
job, in the same run, on DuckDB (and PostgreSQL with --postgres).

    python bench/bench_quality.py [--postgres] [--no-hospital] [--hospital-rows 1000000] [--selections a,b]

Adult: all nine QIs with k=5 (ARX's TestAnonymizationKAnonymity job) at 0%, 4% and 100% suppression (all rows but
one: ARX's heuristic tests' limit). Hospital (../shared/tools/gen_hospital.py): its five QIs, k=5, 0% and 2%.
Per selection: `anonymize`'s seconds (search, selection, write and audit; median of REPEAT), the nodes whose
metrics the selection read, the ratio to the default policy's `anonymize` on the same job and limit, and the
ratio to one GROUP BY of the table's QIs; and the search and selection alone (what ARX's anonymize() does) beside
ARX's warm median on this machine (`bench/arx/run.sh`: its "adult quality" jobs, Flash, 100% for "all but 1").
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_hospital import QIS as HOSPITAL_QIS
from bench_hospital import dataset, load_hospital
from bench_hospital import job as hospital_job
from bench_search import ADULT, ADULT_QIS
from common import adult_and_hospital_parser, arx_here, databases, group_by_seconds, print_table, timed

from sqlanon import RunOptions, anonymize, load_job, search
from sqlanon.model.job import Output, Selection, Suppression

REPEAT = 3
SELECTIONS = {
    "policy (default)": Selection(),
    "non_uniform_entropy": Selection(None, "non_uniform_entropy"),
    "non_uniform_entropy_nm": Selection(None, "non_uniform_entropy_nm"),
    "loss (geometric)": Selection(None, "loss", aggregate="geometric_mean"),
    "aecs": Selection(None, "aecs"),
    "dm_star": Selection(None, "dm_star"),
    "normalized_entropy": Selection(None, "normalized_entropy"),
    "precision_loss_nm": Selection(None, "precision_loss_nm"),
    "entropy_loss": Selection(None, "entropy_loss"),
    "publisher_payout": Selection(None, "publisher_payout"),
}


def measure(
    rows: list, label: str, database: str, job, url: str, limits: list, table: str, qis: list, arx: dict, only: list
) -> None:
    scan = group_by_seconds(url, table, qis)
    for limit in limits:
        baseline = None
        for name, select in SELECTIONS.items():
            if only and name not in only and select.policy is None:  # the default policy is every run's baseline
                continue
            published = dataclasses.replace(
                job, suppression=Suppression(limit), select=select, output=Output(table="bench_quality_out")
            )
            seconds, result = timed(lambda j=published: anonymize(j, RunOptions(db_url=url), replace=True), REPEAT)
            baseline = baseline or seconds
            shown = f"{limit:.0%}" if isinstance(limit, float) else "all but 1"
            chosen = result.search.stats.seconds + result.selection_seconds  # the last run's
            arx_limit = limit if isinstance(limit, float) else 1.0
            rows.append(
                [label, database, shown, name, len(result.search.metrics), len(result.search.satisfying), seconds]
                + [seconds / baseline, seconds / scan, chosen, arx.get(("adult quality", name, arx_limit), "-")]
            )
            print(f"{label} {database} {shown} {name}: {seconds:.3f} s", file=sys.stderr, flush=True)


def main() -> None:
    parser = adult_and_hospital_parser(__doc__)
    parser.add_argument("--selections", default="", help="comma-separated selections to time (default: all)")
    args = parser.parse_args()
    only = [name for name in args.selections.split(",") if name]
    rows: list = []
    arx = arx_here()
    for database, url in databases("quality.duckdb", args.postgres):
        adult = load_job(ADULT)
        search(adult, RunOptions(db_url=url))  # loads the bundled CSV once (not timed)
        adult = dataclasses.replace(adult, source=dataclasses.replace(adult.source, csv=None))
        limits = [0.0, 0.04, 30161]
        measure(rows, "adult 9 QIs k=5", database, adult, url, limits, "adult", ADULT_QIS, arx, only)
        if not args.no_hospital:
            folder = dataset(args.hospital_rows)
            if database == "duckdb":
                url = f"duckdb:///{Path(__file__).parent / 'out' / f'search_hospital_{args.hospital_rows}.duckdb'}"
            load_hospital(folder, url)
            hospital = hospital_job(folder, url, 5, load=False)
            label = f"hospital {args.hospital_rows:,} k=5"
            measure(rows, label, database, hospital, url, [0.0, 0.02], "hospital", HOSPITAL_QIS, {}, only)
    print_table(
        f"Publishing by ARX's quality models (anonymize s: median of {REPEAT}; same job, same limit)",
        ["dataset", "database", "suppression", "selection", "read", "passing", "anonymize s", "ratio", "/ GROUP BY"]
        + ["search+select s", "ARX here s"],
        rows,
    )


if __name__ == "__main__":
    main()
