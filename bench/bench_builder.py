"""What building the search's SQL with sqlglot or SQLAlchemy Core would cost, beside the time the database takes
to run the same statements, on the searches of bench_search.py that run the most statements.

    pip install sqlglot && python bench/bench_builder.py [--no-postgres]

Every statement a search sends (its waves, the cube, the checks) is recorded with the seconds it took to
run; each is then parsed by sqlglot (`parse_one`) and generated back (`.sql`) in the database's dialect.
Generating from a tree is what a builder on sqlglot would pay on every statement (a statement built with
its expression API is a tree to begin with); parsing is what a transpiler over our strings would pay on top.
The ratios say whether that cost matters beside running the statements; the search's figures themselves
stay those of bench_search.py. SQLAlchemy Core cannot read our strings, so a wave-shaped statement (clusters of 8
nodes, each a VALUES list of masks joined with the cube grouped to its meet) is built both ways at 8, 64 and 256
nodes: Core's build and compile time against assembling the same text.
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
from common import databases, print_table

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


def core_wave(nodes: int, dialect: Any) -> tuple[float, float, int]:
    """A wave of `nodes` nodes shaped as the checker's (clusters of 8, each the cube grouped to its meet, joined with
    a VALUES list of its nodes' masks and grouped by node and key, then the classes under k), built once with
    SQLAlchemy Core and once as text: seconds to build and compile it with Core, seconds to assemble the text,
    and the text's length."""
    started = time.perf_counter()
    cube = sa.table("cube", sa.column("key0", sa.BigInteger), sa.column("s0"), sa.column("cnt", sa.BigInteger))
    parts = []
    for first in range(0, nodes, 8):
        meet = sa.select(
            (cube.c.key0.op("&")(sa.cast(sa.literal(1023 - first), sa.BigInteger))).label("key0"),
            cube.c.s0,
            sa.cast(sa.func.sum(cube.c.cnt), sa.BigInteger).label("cnt"),
        ).group_by(sa.text("1"), cube.c.s0)
        grouped = meet.subquery("c")
        masks = sa.values(sa.column("node", sa.Integer), sa.column("m0", sa.BigInteger), name="w").data(
            [(j, 4095 - j) for j in range(first, min(first + 8, nodes))]
        )
        key = grouped.c.key0.op("&")(sa.cast(masks.c.m0, sa.BigInteger))
        parts.append(
            sa.select(masks.c.node, key.label("key0"), grouped.c.s0, sa.func.sum(grouped.c.cnt).label("cnt"))
            .select_from(grouped.join(masks, sa.true()))
            .group_by(masks.c.node, key, grouped.c.s0)
        )
    wave = sa.union_all(*parts).subquery("fs")
    violators = sa.select(wave.c.node, sa.func.count()).group_by(wave.c.node).having(sa.func.sum(wave.c.cnt) < 5)
    str(violators.compile(dialect=dialect, compile_kwargs={"literal_binds": True}))
    core = time.perf_counter() - started
    started = time.perf_counter()
    text_parts = []
    for first in range(0, nodes, 8):
        values = ", ".join(f"({j}, {4095 - j})" for j in range(first, min(first + 8, nodes)))
        grouped = (
            f"(SELECT key0 & CAST({1023 - first} AS BIGINT) AS key0, s0, CAST(SUM(cnt) AS BIGINT) AS cnt "
            "FROM cube GROUP BY 1, s0) c"
        )
        text_parts.append(
            f"SELECT w.node, c.key0 & CAST(w.m0 AS BIGINT) AS key0, c.s0, SUM(c.cnt) AS cnt FROM {grouped} "
            f"CROSS JOIN (VALUES {values}) AS w(node, m0) GROUP BY w.node, c.key0 & CAST(w.m0 AS BIGINT), c.s0"
        )
    statement = f"SELECT node, COUNT(*) FROM ({' UNION ALL '.join(text_parts)}) fs GROUP BY node HAVING SUM(cnt) < 5"
    return core, time.perf_counter() - started, len(statement)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    targets = databases("builder.duckdb", not args.no_postgres)
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
    from sqlalchemy.dialects import postgresql

    core_rows = []
    for nodes in (8, 64, 256):
        built = [core_wave(nodes, postgresql.dialect()) for _ in range(5)]
        core, text, length = (sorted(b[i] for b in built)[2] for i in range(3))
        core_rows.append([nodes, length, core * 1000, text * 1000, core / text])
    print_table(
        f"SQLAlchemy {sa.__version__} Core against text for a wave-shaped statement (median of 5, ms)",
        ["nodes", "chars", "Core build + compile ms", "text ms", "ratio"],
        core_rows,
    )
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
