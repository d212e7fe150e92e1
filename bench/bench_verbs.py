"""The verbs around the search, each beside one GROUP BY of the table's QIs measured in the same run: seconds and
their ratio to that GROUP BY, on DuckDB, PostgreSQL (if reachable) and, with --spark, Spark local.

    python bench/bench_verbs.py [--hospital-rows 200000] [--no-postgres] [--repeat 3] [--metrics-nodes 64]
                                [--verbs search,metrics,...] [--postgres-verbs ...] [--spark [--spark-verbs ...]]
                                [--cases survey,adult,hospital]

An empty list of verbs leaves that engine out (--verbs '' measures PostgreSQL alone).

Cases: a survey-shaped table (the first 20,190 of Adult's rows by every column, 7 QIs, age in generated intervals
with NULLs mapped, occupation sensitive, k=5 and entropy l=2, 2% suppression); Adult with the 8 QIs other than
occupation, the same criteria; hospital (../shared/tools/gen_hospital.py, QIs zip, birth_date, sex, race,
marital_status; diagnosis sensitive), k=5, 2% suppression. Verbs, each a whole API call (its run record, star schema
and cleanup included): the search; the metrics of --metrics-nodes passing nodes (one run for all of them: the table
grouped once into a packed cube, the nodes in batches from it; a selection by a metric reads every passing node);
`analyze` of the first minimal node, and of every minimal node (one run, the same cube and batches; two more rows
split it into its search and its analysis); `report` (search, metrics, analysis, the HTML page); `apply` of the
first minimal node to the source table as a batch (metrics, the refusal check, publication and its audit);
`anonymize` (search, selection, publication, audit; two more rows split what follows its search into the publication
and the run's setup); `audit` and `analyze --table` of that output; Mondrian (no suppression; a method an engine
lacks says so in the table); anatomy (the QIs exact, l=2). The inference across releases is benchmarked at scale by
bench_releases.py. Each figure is the median of --repeat calls (and a figure's parts, that call's).

A second table checks that the engines agree on the same job: the minimal releases, every figure of the
analysis of each (attacks, risk, metrics, the Bayes-optimal audit; floats to 9 digits), and the rows `anonymize`
and `apply` published (QIs and the first sensitive attribute, grouped in the database and compared as
multisets of texts).
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).parent))
from bench_criteria import criteria_job
from bench_hospital import QIS as HOSPITAL_QIS
from bench_hospital import dataset, load_hospital
from bench_hospital import job as hospital_job
from common import databases, group_by_seconds, print_table

from sqlanon import (
    RunOptions,
    analyze,
    analyze_table,
    anonymize,
    apply,
    audit,
    job_from_dict,
    load_job,
    node_metrics,
    report,
    search,
)
from sqlanon.analysis.attacks import AnalysisReport
from sqlanon.criteria import criteria_from_config
from sqlanon.errors import SqlanonError
from sqlanon.model.job import Job, Output, QuasiIdentifier, Suppression
from sqlanon.publish.anatomy import Anatomy
from sqlanon.publish.mondrian import MondrianMethod
from sqlanon.steps import AnonymizeResult

HERE = Path(__file__).parent
ADULT = Path(str(resources.files("sqlanon.data").joinpath("adult", "adult.yaml")))
LIMIT = 0.02
Figures = dict[str, object]  # what every engine must agree on, by name


def adult_job(url: str) -> tuple[Job, list[str]]:
    criteria = {"k_anonymity": {"k": 5}, "entropy_l_diversity": {"attribute": "occupation", "l": 2}}
    job = dataclasses.replace(criteria_job(load_job(ADULT), "entropy l=3"), criteria=criteria_from_config(criteria))
    return on(job, url, "adult"), [qi.column for qi in job.quasi_identifiers]


def hospital(url: str, rows: int) -> tuple[Job, list[str]]:
    job = hospital_job(dataset(rows), url, 5, load=False)
    return on(dataclasses.replace(job, sensitive=["diagnosis"], insensitive=["cost"]), url, "hospital"), HOSPITAL_QIS


SURVEY_ROWS = 20_190


def survey(url: str) -> tuple[Job, list[str]]:
    """A survey-shaped table: 20,190 of Adult's rows, 7 QIs, age in generated intervals with NULLs (one race's
    ages removed) mapped by its hierarchy, occupation sensitive, k=5 and entropy l=2, 2% suppression."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # no UPDATE: Spark's tables have none
        columns = list(conn.exec_driver_sql("SELECT * FROM adult LIMIT 0").keys())
        quoted = [f'"{c}"' for c in columns]
        ages = [
            "CASE WHEN race = 'Other' THEN NULL ELSE age END AS age" if c == "age" else q
            for c, q in zip(columns, quoted)
        ]
        # the same rows on every engine: the first ones in the order of every column
        first = f"SELECT * FROM adult ORDER BY {', '.join(quoted)} LIMIT {SURVEY_ROWS}"
        conn.exec_driver_sql("DROP TABLE IF EXISTS survey")
        conn.exec_driver_sql(f"CREATE TABLE survey AS SELECT {', '.join(ages)} FROM ({first}) a")
    engine.dispose()
    qis = ["age", "education", "marital-status", "native-country", "workclass", "sex", "race"]
    hierarchies = {q: {"hierarchy": f"hierarchies/{q}.csv"} for q in qis}
    hierarchies["age"] = {"generate": "intervals", "widths": [5, 10, 20], "null": "unknown"}
    config = {
        "source": {"url": url, "table": "survey"},
        "quasi_identifiers": hierarchies,
        "sensitive": ["occupation"],
        "insensitive": ["salary-class"],
        "criteria": {"k_anonymity": {"k": 5}, "entropy_l_diversity": {"attribute": "occupation", "l": 2}},
    }
    return on(job_from_dict(config, ADULT.parent), url, "survey"), qis


def on(job: Job, url: str, table: str) -> Job:
    return dataclasses.replace(
        job,
        source=dataclasses.replace(job.source, url=url, csv=None),
        suppression=Suppression(LIMIT),
        output=Output(table=f"{table}_bench_anon"),
    )


def median_seconds(action: Callable[[], object], repeat: int) -> tuple[float, object]:
    """The median seconds of `repeat` calls, and the result of the call that took them (the lower middle one of
    an even number): its own parts (a search's seconds, a publication's) then add up to the figure."""
    calls = []
    for _ in range(repeat):
        started = time.perf_counter()
        result = action()
        calls.append((time.perf_counter() - started, result))
    calls.sort(key=lambda call: call[0])
    return calls[(len(calls) - 1) // 2]


def rounded(value: object) -> object:
    """A figure as engines agree on it: floats to 9 significant digits (sums of logs differ in the last bits)."""
    if isinstance(value, float):
        return float(f"{value:.9g}")
    if isinstance(value, dict):
        return {key: rounded(v) for key, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [rounded(v) for v in value]
    return value


def published_rows(url: str, table: str, columns: list[str]) -> Counter[tuple[str, ...]]:
    """The table's rows over `columns` as a multiset of texts: grouped in the database (a row per distinct
    row), the groups fetched to compare engines."""
    engine = sa.create_engine(url)
    quoted = ", ".join(f'"{c}"' for c in columns)
    with engine.connect() as conn:
        groups = conn.exec_driver_sql(f"SELECT {quoted}, COUNT(*) FROM {table} GROUP BY {quoted}").all()
    engine.dispose()
    return Counter({tuple("" if v is None else str(v) for v in row[:-1]): int(row[-1]) for row in groups})


def fingerprints(job: Job, qis: list[str], minimal: list[tuple[int, ...]], results: dict[str, object]) -> Figures:
    """What every engine must agree on for the same job: the minimal releases, the analysis' figures and
    metrics of each, and the rows `anonymize` and `apply` published (QIs and sensitive values)."""
    found: Figures = {"minimal releases": sorted(minimal)}
    analysis = results.get("analyze-all")
    if isinstance(analysis, AnalysisReport):
        found["analysis of every minimal release"] = [rounded(t.to_dict()) for t in analysis.tables]
    columns = qis + job.sensitive[:1]
    for verb, table in (
        ("anonymize", job.output.table if job.output else ""),
        ("apply", f"{job.source.table}_bench_applied"),
    ):
        if verb in results:
            found[f"rows {verb} published"] = published_rows(job.source.url, table, columns)
    return found


def measure(
    rows: list[list[object]],
    case: str,
    database: str,
    job: Job,
    qis: list[str],
    verbs: list[str],
    args: argparse.Namespace,
) -> Figures:
    """The verbs' rows of the table, and what the engines must agree on (`fingerprints`)."""
    options = RunOptions(db_url=job.source.url)
    table = job.source.table
    out = Path(tempfile.gettempdir()) / f"bench_verbs_{case.split()[0]}_{database}.html"
    group_by = group_by_seconds(job.source.url, table, qis)
    result = search(job, options)
    node = result.minimal[0]
    passing = result.satisfying[: args.metrics_nodes]
    actions: dict[str, tuple[str, Callable[[], object]]] = {
        "search": ("search", lambda: search(job, options)),
        "metrics": (
            f"metrics of {len(passing)} nodes",
            lambda: node_metrics(job, passing, options),
        ),
        "analyze": ("analyze 1 node", lambda: analyze(job, options, node=node)),
        "analyze-all": (
            f"analyze {len(result.minimal)} minimal releases",
            lambda: analyze(job, options),
        ),
        "report": (f"report ({len(result.minimal)} releases)", lambda: report(job, out, options, replace=True)),
        "apply": (
            "apply",
            lambda: apply(job, table, node=node, output=f"{table}_bench_applied", options=options, replace=True),
        ),
        "anonymize": ("anonymize", lambda: anonymize(job, options, replace=True)),
        "audit": ("audit of the output", lambda: audit(job, output, options=options)),
        "analyze-table": ("analyze --table of the output", lambda: analyze_table(job, output, options=options)),
        "mondrian": ("Mondrian", lambda: anonymize(mondrian(job), options, replace=True)),
        "anatomy": ("anatomy, l=2", lambda: anonymize(anatomy(job), options, replace=True)),
    }
    output = job.output.table if job.output else ""
    if {"audit", "analyze-table"} & set(verbs):
        anonymize(job, options, replace=True)  # the table they read
    results: dict[str, object] = {}
    for verb in verbs:
        label, action = actions[verb]
        try:
            seconds, results[verb] = median_seconds(action, args.repeat)
        except SqlanonError as refused:  # a method that cannot publish this shape says why, in one line
            rows.append([case, database, label, f"refused: {str(refused)[:60]}...", "-"])
            continue
        rows.append([case, database, label, seconds, seconds / group_by])
        if verb == "anonymize":  # its publication (the selection, the write, the audit) and the run's setup
            done: AnonymizeResult = results[verb]  # type: ignore[assignment]
            published = done.publishing_seconds
            setup = seconds - done.search.stats.seconds - published
            label = "  its publication (selection, write, audit)"
            rows.append([case, database, label, published, published / group_by])
            label = "  its setup (checks, hierarchies, star schema)"
            rows.append([case, database, label, setup, setup / group_by])
        if verb == "analyze-all":  # its search, and the analysis of the releases it found
            analysis: AnalysisReport = results[verb]  # type: ignore[assignment]
            for label, part in (
                ("  its search", analysis.search_seconds),
                (f"  its analysis of {len(analysis.tables)} releases", analysis.analysis_seconds),
            ):
                rows.append([case, database, label, part, part / group_by])
    rows.append([case, database, "one GROUP BY", group_by, 1.0])
    return fingerprints(job, qis, result.minimal, results)


def agreement(found: dict[str, dict[str, Figures]]) -> list[list[object]]:
    """Per case and figure: the engines that agree with the first one, and those that differ."""
    rows: list[list[object]] = []
    for case, by_engine in found.items():
        (first, reference), *others = by_engine.items()
        for name, value in reference.items():
            compared = [engine for engine, figures in others if name in figures]
            differ = [engine for engine in compared if by_engine[engine][name] != value]
            same = [engine for engine in compared if engine not in differ]
            verdict = "DIFFERS on " + ", ".join(differ) if differ else ("same" if same else "one engine")
            rows.append([case, name, ", ".join([first, *same]), verdict])
    return rows


def mondrian(job: Job) -> Job:
    """The job published by Mondrian (which suppresses nothing)."""
    assert job.output is not None
    settings = MondrianMethod.parse({}, Path("."))
    method = Output(table=f"{job.output.table}_mondrian", method="mondrian", settings=settings)
    return dataclasses.replace(job, output=method, suppression=Suppression(0))


def anatomy(job: Job) -> Job:
    """The job published by anatomy: the QIs exact, the first sensitive attribute bucketized, l = 2."""
    assert job.output is not None
    first, *others = job.sensitive
    return dataclasses.replace(
        job,
        quasi_identifiers=[QuasiIdentifier(column=qi.column) for qi in job.quasi_identifiers],
        criteria=[],
        sensitive=[first],
        insensitive=job.insensitive + others,
        suppression=Suppression(0),
        output=Output(
            table=f"{job.output.table}_anatomy", method="anatomy", settings=Anatomy.parse({"l": 2}, Path("."))
        ),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hospital-rows", type=int, default=200_000)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--metrics-nodes", type=int, default=64)
    verbs = "search,metrics,analyze,analyze-all,report,apply,anonymize,audit,analyze-table,mondrian,anatomy"
    parser.add_argument("--verbs", default=verbs)
    parser.add_argument("--postgres-verbs", default=verbs)
    parser.add_argument("--spark", action="store_true", help="Spark local too (needs pyspark and a Java runtime)")
    parser.add_argument("--spark-verbs", default=verbs)
    parser.add_argument("--spark-cores", type=int, default=2)
    parser.add_argument("--cases", default="survey,adult,hospital")
    args = parser.parse_args()
    targets = databases("verbs.duckdb", not args.no_postgres)
    if args.spark:
        warehouse = HERE / "out" / "warehouse_verbs"
        shutil.rmtree(warehouse, ignore_errors=True)
        targets.append(("spark", f"spark://local[{args.spark_cores}]?warehouse={warehouse}"))
    rows: list[list[object]] = []
    found: dict[str, dict[str, Figures]] = {}
    for database, url in targets:
        verbs = {"postgresql": args.postgres_verbs, "spark": args.spark_verbs}.get(database, args.verbs)
        if not verbs:  # --verbs '': this engine left out
            continue
        search(dataclasses.replace(load_job(ADULT), source=dataclasses.replace(load_job(ADULT).source, url=url)))
        load_hospital(dataset(args.hospital_rows), url)
        cases = {
            "survey": (f"survey {SURVEY_ROWS:,}, NULLs", lambda: survey(url)),
            "adult": ("adult 8 QIs", lambda: adult_job(url)),
            "hospital": (f"hospital {args.hospital_rows:,}", lambda: hospital(url, args.hospital_rows)),
        }
        for name in args.cases.split(","):
            case, make = cases[name]
            job, qis = make()
            found.setdefault(case, {})[database] = measure(rows, case, database, job, qis, verbs.split(","), args)
    print_table(
        f"Verbs, median of {args.repeat} (seconds, and ratio to one GROUP BY of the QIs)",
        ["case", "database", "verb", "seconds", "x GROUP BY"],
        rows,
    )
    print_table("The same job on every engine", ["case", "figures", "engines", "verdict"], agreement(found))


if __name__ == "__main__":
    main()
