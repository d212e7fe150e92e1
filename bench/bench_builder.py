"""What building the search's SQL with sqlglot would cost: its parse and generate time beside the time the
database takes to run the same statements, on the searches of bench_search.py that run the most statements.

    pip install sqlglot && python bench/bench_builder.py [--no-postgres]

Every statement a search sends (its waves, the cube, the checks) is recorded with the seconds it took to
run; each is then parsed by sqlglot (`parse_one`) and generated back (`.sql`) in the database's dialect.
Generating from a tree is what a builder on sqlglot would pay on every statement (a statement built with
its expression API is a tree to begin with); parsing is what a transpiler over our strings would pay on top.
The ratios say whether that cost matters beside running the statements; the search's figures themselves
stay those of bench_search.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import sqlalchemy as sa
import sqlglot
from bench_criteria import criteria_job
from common import PG_URL, pg_reachable, print_table

from sqlanon import RunOptions, load_job, search
from sqlanon.criteria import KAnonymity
from sqlanon.model.job import Suppression

HERE = Path(__file__).parent
ADULT = Path(str(resources.files("sqlanon.data").joinpath("adult", "adult.yaml")))


@contextmanager
def recorded() -> Iterator[list[tuple[str, float]]]:
    """Every statement sent to a database within (as the driver gets it), with its seconds to run."""
    statements: list[tuple[str, float]] = []
    started: list[float] = []

    def before(*_: Any) -> None:
        started.append(time.perf_counter())

    def after(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        statements.append((sql, time.perf_counter() - started.pop()))

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", before)
    sa.event.listen(sa.engine.Engine, "after_cursor_execute", after)
    try:
        yield statements
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", before)
        sa.event.remove(sa.engine.Engine, "after_cursor_execute", after)


def sqlglot_seconds(statements: list[tuple[str, float]], dialect: str) -> tuple[float, float, int]:
    """Seconds to parse every statement, seconds to generate it back, and statements sqlglot could not parse."""
    parse = generate = 0.0
    failed = 0
    for sql, _ in statements:
        started = time.perf_counter()
        try:
            tree = sqlglot.parse_one(sql, read=dialect)
        except sqlglot.errors.ParseError:
            failed += 1
            continue
        parsed = time.perf_counter()
        tree.sql(dialect=dialect)
        parse += parsed - started
        generate += time.perf_counter() - parsed
    return parse, generate, failed


def measure(rows: list, database: str, url: str, name: str, job: Any) -> None:
    with recorded() as statements:
        result = search(job, RunOptions(db_url=url))
    dialect = "duckdb" if database == "duckdb" else "postgres"
    running = sum(seconds for _, seconds in statements)
    parse, generate, failed = sqlglot_seconds(statements, dialect)
    longest = max(len(sql) for sql, _ in statements)
    rows.append(
        [
            name,
            database,
            len(statements),
            longest,
            result.stats.seconds,
            running,
            generate,
            parse,
            generate / running,
            (parse + generate) / running,
            failed,
        ]
    )
    print(f"{name}, {database}: {len(statements)} statements", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    (HERE / "out").mkdir(exist_ok=True)
    targets = [("duckdb", f"duckdb:///{HERE / 'out' / 'builder.duckdb'}")]
    if not args.no_postgres and pg_reachable():
        targets.append(("postgresql", PG_URL))
    adult = load_job(ADULT)
    rows: list = []
    for database, url in targets:
        search(adult, RunOptions(db_url=url))  # loads the bundled CSV once (not measured)
        loaded = dataclasses.replace(adult, source=dataclasses.replace(adult.source, csv=None))
        k5 = dataclasses.replace(loaded, criteria=[KAnonymity(5)])
        for limit in (0.0, 0.02, 0.1):
            measure(
                rows, database, url, f"adult k=5, {limit:.0%}", dataclasses.replace(k5, suppression=Suppression(limit))
            )
        for case in ("entropy l=3", "t hierarchical 0.2"):
            job = dataclasses.replace(criteria_job(k5, case), suppression=Suppression(0.02))
            measure(rows, database, url, f"adult 8 QIs {case}, 2%", job)
    print_table(
        f"sqlglot {sqlglot.__version__} on the search's statements (run s: the database running them; "
        "generate s: sqlglot writing them from trees; parse s: reading them from our strings)",
        [
            "search",
            "database",
            "statements",
            "longest chars",
            "search s",
            "run s",
            "generate s",
            "parse s",
            "generate / run",
            "parse+generate / run",
            "not parsed",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
