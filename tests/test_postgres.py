"""What only PostgreSQL has: searches checked against the exhaustive oracle on the server itself, the stored audit
function, loading into a schema by a hostile name, the session settings sqlanon changes (parallel plans, hash
joins, work_mem, JIT) and the plans of every verb (no nested loop over large inputs). The verbs every backend
supports are in test_backends_shared."""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from sqlanon import RunOptions, analyze, analyze_table, anonymize, apply, audit, inference, job_from_dict, search
from sqlanon.cli import main
from sqlanon.criteria import criteria_from_config
from sqlanon.model.job import Suppression

from .conftest import (
    ADULT_DIR,
    ADULT_QIS,
    CASES,
    QIS,
    adult_config,
    adult_job,
    passing,
    reclassified,
    user_tables,
    with_rest_insensitive,
)

pytestmark = pytest.mark.postgres
SUBSET = ["age", "education", "marital-status", "workclass"]


def _options(schema: str) -> RunOptions:
    return RunOptions(metadata_schema=f"{schema}_meta")


@pytest.fixture
def pg_adult(pg_server: str, pg_schema: str):
    """Adult loaded from the bundled CSV into the test's schema."""
    search(adult_job(pg_server, ["sex"], k=1, schema=pg_schema), _options(pg_schema))
    return pg_server, pg_schema


def test_all_nine_qis_equal_the_oracle(pg_adult, all_qi_oracle):
    url, schema = pg_adult
    result = search(adult_job(url, ADULT_QIS, k=5, load_csv=False, schema=schema), _options(schema))
    assert set(result.satisfying) == all_qi_oracle[5]


def test_border_search_with_suppression_equals_the_oracle(pg_adult, all_qi_violations):
    """The default search with suppression (binary search on chains) over all nine QIs, on PostgreSQL."""
    url, schema = pg_adult
    job = dataclasses.replace(
        adult_job(url, ADULT_QIS, k=5, load_csv=False, schema=schema), suppression=Suppression(0.02)
    )
    result = search(job, _options(schema))
    assert set(result.satisfying) == passing(all_qi_violations[5], Suppression(0.02).max_suppressed(30162))


@pytest.mark.parametrize("case", ["t hierarchical 0.15", "beta basic 1.0"])
@pytest.mark.parametrize("limit", [0, 0.02])
def test_criteria_reading_the_tables_shares_equal_the_oracle(pg_adult, adult_violations, limit: float, case: str):
    """The search binds the table's shares (of the hierarchy's nodes, of the values with their likeness bounds) as
    arrays on PostgreSQL: the oracle's answer (computed on DuckDB from the table's distribution in SQL), with and
    without suppression."""
    url, schema = pg_adult
    job = reclassified(
        adult_job(url, QIS, load_csv=False, schema=schema),
        criteria=criteria_from_config(CASES[case]),
        sensitive=["occupation"],
        suppression=Suppression(limit),
    )
    result = search(job, _options(schema))
    assert set(result.satisfying) == passing(adult_violations[case], Suppression(limit).max_suppressed(30162))


def test_exhaustive_strategy_runs_on_postgres(pg_adult):
    url, schema = pg_adult
    job = adult_job(url, ["sex", "race", "salary-class"], k=10, load_csv=False, schema=schema)
    incognito = search(job, _options(schema))
    exhaustive = search(dataclasses.replace(job, strategy="exhaustive"), _options(schema))
    assert incognito.satisfying == exhaustive.satisfying


def test_stored_audit_function_equals_the_cli_audit(pg_adult):
    """sqlanon.audit() from SQL gives the figures `sqlanon audit` reports, on the source and on an output."""
    url, schema = pg_adult
    meta = f"{schema}_meta"
    criteria = {
        "k_anonymity": {"k": 5},
        "distinct_l_diversity": {"attribute": "occupation", "l": 2},
        "entropy_l_diversity": {"attribute": "occupation", "l": 2},
        "t_closeness": {"attribute": "occupation", "t": 0.5},
    }
    job = reclassified(
        adult_job(url, SUBSET, load_csv=False, schema=schema, output={"table": "adult_k"}),
        criteria=criteria_from_config(criteria),
        sensitive=["occupation"],
    )
    anonymize(job, _options(schema))
    engine = sa.create_engine(url)
    for table in ("adult", "adult_k"):
        report = audit(job, table, schema)
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(f'SELECT * FROM "{meta}".audit(CAST(:t AS regclass), :q, :s)'),
                {"t": f'"{schema}"."{table}"', "q": SUBSET, "s": ["occupation"]},
            ).all()
        whole, occupation = rows
        assert (whole.row_count, whole.classes, whole.min_class_size) == (
            report.rows,
            report.classes,
            report.min_class_size,
        )
        assert occupation.distinct_l == report.criteria["distinct_l_diversity"].figure
        assert occupation.entropy_l == pytest.approx(report.criteria["entropy_l_diversity"].figure)
        assert occupation.max_t == pytest.approx(report.criteria["t_closeness"].figure)
    with engine.connect() as conn:  # hostile names are identifiers, not SQL
        with pytest.raises(sa.exc.DBAPIError, match="does not exist"):
            conn.execute(
                sa.text(f'SELECT * FROM "{meta}".audit(CAST(:t AS regclass), :q)'),
                {"t": f'"{schema}"."adult"', "q": ['sex"; DROP TABLE adult; --']},
            )
    engine.dispose()


def test_a_never_analyzed_source_is_planned_without_nested_loops(pg_adult):
    """A table sqlanon loads gets planner statistics; a large user table without them (100k rows or more) gets a
    warning naming the fix, hash-joined plans, and the same answer as with statistics."""
    url, schema = pg_adult
    engine = sa.create_engine(url)
    four_times = " UNION ALL ".join([f'SELECT * FROM "{schema}".adult'] * 4)  # 120,648 rows
    with engine.begin() as conn:
        loaded = conn.execute(
            sa.text("SELECT COUNT(*) FROM pg_stats WHERE schemaname = :s AND tablename = 'adult'"), {"s": schema}
        ).scalar_one()
        for table in ("analyzed", "fresh"):  # autovacuum must not analyze the copy before the search looks
            conn.exec_driver_sql(f'CREATE TABLE "{schema}".{table} WITH (autovacuum_enabled = false) AS {four_times}')
        conn.exec_driver_sql(f'ANALYZE "{schema}".analyzed')
    engine.dispose()
    assert loaded > 0
    job = adult_job(url, SUBSET, k=5, load_csv=False, schema=schema)
    on = {
        table: dataclasses.replace(job, source=dataclasses.replace(job.source, table=table))
        for table in ("analyzed", "fresh")
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        expected = search(on["analyzed"], _options(schema))
    assert not [w for w in caught if "planner statistics" in str(w.message)]
    with pytest.warns(UserWarning, match=r'"fresh" has no planner statistics.*ANALYZE'):
        result = search(on["fresh"], _options(schema))
    assert result.satisfying == expected.satisfying and result.minimal == expected.minimal


def test_load_into_a_schema_with_a_hostile_table_name(pg_server, pg_schema):
    hostile = 'ad"; DROP TABLE x; --'
    result = CliRunner().invoke(
        main,
        [
            "load",
            str(ADULT_DIR / "adult.csv.gz"),
            "--table",
            hostile,
            "--schema",
            pg_schema,
            "--delimiter",
            ";",
            "--db",
            pg_server,
        ],
    )
    assert result.exit_code == 0, result.output
    refused = CliRunner().invoke(
        main, ["load", str(ADULT_DIR / "adult.csv.gz"), "--table", hostile, "--schema", pg_schema, "--db", pg_server]
    )
    assert refused.exit_code == 2 and "already exists" in refused.stderr
    engine = sa.create_engine(pg_server)
    with engine.connect() as conn:
        rows = conn.execute(sa.text(f'SELECT COUNT(*) FROM "{pg_schema}"."{hostile.replace(chr(34), 2 * chr(34))}"'))
        assert rows.scalar_one() == 30162
    engine.dispose()
    assert {t for s, t in user_tables(pg_server) if s == pg_schema} == {hostile}


def test_parallel_plans_come_back_to_the_session_s_own_costs(pg_server: str):
    """The cube is planned with cheaper parallel costs; the caller's session settings (a job run inside the
    server runs in its caller's session) are the same afterwards, and a failed statement leaves them too."""
    from sqlanon.backends import open_database

    db = open_database(pg_server)
    costs = "SELECT current_setting('parallel_setup_cost'), current_setting('parallel_tuple_cost')"
    try:
        with db.connect() as conn:
            conn.exec_driver_sql("SET parallel_tuple_cost = 0.5")
            conn.commit()
            with db.parallel_plans(conn):
                assert conn.exec_driver_sql(costs).one() == ("10", "0.001")
            assert conn.exec_driver_sql(costs).one() == ("1000", "0.5")
            conn.commit()
            with pytest.raises(sa.exc.DBAPIError), db.parallel_plans(conn):
                conn.exec_driver_sql("SELECT 1 / 0")
            conn.rollback()
            assert conn.exec_driver_sql(costs).one() == ("1000", "0.5")
    finally:
        db.dispose()


def test_hash_joins_last_for_their_statements(pg_server: str):
    """Within hash_joins nested loops are off, and they come back after."""
    from sqlanon.backends import open_database

    db = open_database(pg_server)
    nestloop = "SELECT current_setting('enable_nestloop')"
    try:
        with db.connect() as conn:
            with db.hash_joins(conn):
                assert conn.exec_driver_sql(nestloop).scalar_one() == "off"
            assert conn.exec_driver_sql(nestloop).scalar_one() == "on"
    finally:
        db.dispose()


def test_large_sorts_raise_work_mem_and_never_lower_it(pg_server: str):
    """Mondrian's rounds get 64MB to sort in, for their transaction; a session that has more keeps its own, and
    the session's setting is back afterwards."""
    from sqlanon.backends import open_database

    db = open_database(pg_server)
    memory = "SELECT current_setting('work_mem')"
    try:
        with db.connect() as conn:
            for own, within in (("1MB", "64MB"), ("256MB", "256MB")):
                conn.exec_driver_sql(f"SET work_mem = '{own}'")
                conn.commit()
                with db.large_sorts(conn):
                    assert conn.exec_driver_sql(memory).scalar_one() == within
                assert conn.exec_driver_sql(memory).scalar_one() == own
                conn.commit()
    finally:
        db.dispose()


def test_sqlanon_sessions_run_without_jit(pg_server: str):
    """JIT compilation cost more than it saved on sqlanon's statements: its own sessions turn it off (for good,
    not for one transaction), and no other session is touched."""
    from sqlanon.backends import open_database

    db = open_database(pg_server)
    other = sa.create_engine(pg_server)
    try:
        with db.connect() as conn:
            conn.rollback()
            assert conn.exec_driver_sql("SHOW jit").scalar_one() == "off"
        with other.connect() as conn:
            assert (
                conn.exec_driver_sql("SHOW jit").scalar_one()
                == conn.exec_driver_sql("SELECT reset_val FROM pg_settings WHERE name = 'jit'").scalar_one()
            )
    finally:
        db.dispose()
        other.dispose()


@pytest.mark.parametrize("backend", ["duckdb", pytest.param("postgresql", marks=pytest.mark.postgres)])
@pytest.mark.parametrize("rows", [3, 500])  # below and above the size where DuckDB's inserts change method
def test_bulk_inserts_store_the_values_they_are_given(request, backend: str, rows: int):
    """Metadata rows come back as written, on each database and whichever way its insert goes: NULLs, NaN (stored
    as NULL on DuckDB, as it always was), large integers, text with quotes, booleans."""
    from sqlanon.backends import open_database

    if backend == "duckdb":
        db, schema = open_database(request.getfixturevalue("duck_url")), None
    else:
        db, schema = open_database(request.getfixturevalue("pg_server")), request.getfixturevalue("pg_schema")
    values = [
        (i, None if i % 3 == 0 else f"it's {i}", float("nan") if i == 1 else i / 2, 2**62 + i, i % 2 == 0)
        for i in range(rows)
    ]
    ref = db.q(schema, "bulk_insert_check")
    try:
        with db.begin() as conn:
            db.create_table_from_rows(
                conn,
                ref,
                [("i", "INTEGER"), ("t", "VARCHAR(20)"), ("f", "DOUBLE PRECISION"), ("b", "BIGINT"), ("ok", "BOOLEAN")],
                values,
            )
            stored = [tuple(r) for r in db.execute(conn, f"SELECT * FROM {ref} ORDER BY i")]
            db.drop_table(conn, ref)
    finally:
        db.dispose()
    assert stored[1][2] is None if backend == "duckdb" else math.isnan(stored[1][2])
    assert [r[:2] + r[3:] for r in stored] == [v[:2] + v[3:] for v in values]
    assert [r[2] for r in stored if r[0] != 1] == [v[2] for v in values if v[0] != 1]


BIG_INPUT = 2_000  # rows on each side of a nested loop that makes it quadratic
# a join on part of a key (the pairs of 17,000 persons with 9,000 of their groups' values, on the value alone:
# 8.9 million rows) makes many times its inputs' rows, however it is planned
BLOW_UP, BLOWN_UP_ROWS = 50, 1_000_000


def _nested_loops(plan: dict, actual: bool) -> list[str]:
    """The nested loops of `plan` (EXPLAIN's JSON) that run an inner side of BIG_INPUT rows or more once per row of
    an outer side as large (actual rows per loop with ANALYZE, else the planner's estimates), outside index
    lookups: two large inputs paired, or a large input read again for every row of another (an anti-join whose
    inner aggregate is recomputed per row took 198 s on 20k rows); with ANALYZE, also the hash and merge joins
    that make BLOW_UP times the rows of their larger input."""
    found = []
    children = plan.get("Plans", [])
    if plan["Node Type"] == "Nested Loop" and len(children) == 2:
        outer, inner = children
        rows = "Actual Rows" if actual else "Plan Rows"
        lookup = inner["Node Type"] in ("Index Scan", "Index Only Scan", "Bitmap Heap Scan", "Memoize")
        per_loop = _rows_per_run(inner, rows)
        if not lookup and min(outer[rows], per_loop) >= BIG_INPUT:
            found.append(f"{outer['Node Type']} ({outer[rows]} rows) x {inner['Node Type']} ({per_loop} rows a loop)")
    if plan["Node Type"] in ("Hash Join", "Merge Join") and actual and len(children) == 2:
        larger = max(_input_rows(child) for child in children)
        if plan["Actual Rows"] >= BLOWN_UP_ROWS and plan["Actual Rows"] > BLOW_UP * larger:
            found.append(f"{plan['Node Type']} of {larger:.0f} rows at most made {plan['Actual Rows']} rows")
    for child in children:
        found += _nested_loops(child, actual)
    return found


def _input_rows(plan: dict) -> float:
    """The rows a join's input holds: below a Sort, Hash or Materialize, which a merge join re-reads (its inner
    Sort counts every row read again), the rows of what they hold."""
    if plan["Node Type"] in ("Sort", "Hash", "Materialize"):
        return _input_rows(plan["Plans"][0])
    return float(plan["Actual Rows"])


def _rows_per_run(plan: dict, rows: str) -> float:
    """The most rows a node of `plan` produces each time the plan runs (below a Materialize or a Hash, nodes run
    once, whatever the loops)."""
    most = plan[rows]
    if plan["Node Type"] in ("Materialize", "Hash"):
        return float(most)
    return float(max([most] + [_rows_per_run(child, rows) for child in plan.get("Plans", [])]))


@dataclasses.dataclass
class Plans:
    """What `explained` saw: how many statements it EXPLAINed, and the quadratic ones (statement, loops)."""

    explained: int = 0
    quadratic: list[tuple[str, list[str]]] = dataclasses.field(default_factory=list)


@contextmanager
def explained() -> Iterator[Plans]:
    """EXPLAIN every SELECT, CREATE TABLE AS and INSERT ... SELECT that runs on PostgreSQL meanwhile, with ANALYZE
    (their real rows; writes undone) where the connection is in a transaction."""
    plans = Plans()

    def explain(conn, cursor, statement, parameters, context, executemany) -> None:
        words = statement.lstrip().split(None, 4)
        select = words[0].upper() in ("SELECT", "WITH")
        created = words[0].upper() == "CREATE" and " AS " in statement.upper() and "TABLE" in statement.upper()[:40]
        created = created or (words[0].upper() == "INSERT" and "SELECT" in statement.upper())
        if executemany or not (select or created) or conn.dialect.name != "postgresql":
            return
        # a write is run and undone (a savepoint) for its real rows: a plan's guesses on a table never analyzed
        # are a row or two, which hides the very nested loop they cause
        undone = created and not cursor.connection.autocommit
        if undone:
            cursor.execute("SAVEPOINT explained")
        options = "ANALYZE, FORMAT JSON" if select or undone else "FORMAT JSON"
        cursor.execute(f"EXPLAIN ({options}) {statement}", parameters)
        [plan] = cursor.fetchone()[0]
        if undone:
            cursor.execute("ROLLBACK TO SAVEPOINT explained")
        plans.explained += 1
        found = _nested_loops(plan["Plan"], select or undone)
        if "NOT IN (SELECT" in " ".join(statement.upper().split()):
            # hashed only while the subquery's rows fit in work_mem: beyond, a loop over them per row (two
            # releases of 100,000 persons: over 20 minutes)
            found.append("NOT IN over a subquery")
        if found:
            plans.quadratic.append((statement[:200], found))

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", explain)
    try:
        yield plans
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", explain)


def test_the_plan_harness_sees_joins_that_blow_up_and_not_in(pg_server: str, pg_schema: str):
    """`explained` flags a join of two 3,000-row tables on a column of three values (3 million rows: the shape
    of the inference's join of its pairs with decided values on the value alone) and a NOT IN over a subquery,
    and passes their hashable forms."""
    engine = sa.create_engine(pg_server)
    with engine.begin() as conn:
        for table in ("a", "b"):
            conn.exec_driver_sql(
                f'CREATE TABLE "{pg_schema}".{table} AS SELECT i AS id, MOD(i, 3) AS v FROM generate_series(1, 3000) i'
            )
    blown = f'SELECT COUNT(*) FROM "{pg_schema}".a JOIN "{pg_schema}".b ON a.v = b.v'
    keyed = f'SELECT COUNT(*) FROM "{pg_schema}".a JOIN "{pg_schema}".b ON a.id = b.id AND a.v = b.v'
    not_in = f'SELECT COUNT(*) FROM "{pg_schema}".a WHERE id NOT IN (SELECT id FROM "{pg_schema}".b WHERE v = 0)'
    anti = f'SELECT COUNT(*) FROM "{pg_schema}".a WHERE NOT EXISTS (SELECT 1 FROM "{pg_schema}".b WHERE b.id = a.id)'
    try:
        flagged = []
        for statement in (blown, keyed, not_in, anti):
            with explained() as plans, engine.connect() as conn:
                conn.exec_driver_sql(statement).scalar_one()
            flagged.append([found for _, loops in plans.quadratic for found in loops])
    finally:
        engine.dispose()
    assert "made 3000000 rows" in flagged[0][0] and flagged[1] == [] and flagged[3] == []
    assert flagged[2] == ["NOT IN over a subquery"]


def _holes(url: str, schema: str, table: str = "holes", where: str = "TRUE", analyzed: bool = True) -> None:
    """Adult's rows (those `where` keeps) with NULL ages for one race and a person key `pid`;
    analyzed, or never (as a table a user just made, before autovacuum looked)."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f'CREATE TABLE "{schema}".{table} WITH (autovacuum_enabled = {str(analyzed).lower()}) AS '
            f'SELECT ROW_NUMBER() OVER () AS pid, * FROM "{schema}".adult; '
            f"""UPDATE "{schema}".{table} SET age = NULL WHERE race = 'Other'; """
            f'DELETE FROM "{schema}".{table} WHERE NOT ({where})'
            + (f'; ANALYZE "{schema}".{table}' if analyzed else "")
        )
    engine.dispose()


def _holes_config(url: str, schema: str, table: str = "holes", **extra: Any) -> dict[str, Any]:
    """A hard shape: a QI with NULLs mapped by its hierarchy, many classes, suppression, an entropy criterion."""
    qis = ["age", "education", "marital-status", "native-country", "workclass"]
    config = adult_config(
        url,
        qis,
        load_csv=False,
        schema=schema,
        table=table,
        sensitive=["occupation"],
        criteria={"k_anonymity": {"k": 5}, "entropy_l_diversity": {"attribute": "occupation", "l": 2}},
        suppression={"limit": 0.02},
        output={"table": f"{table}_anon"},
        identifying=["pid"],
        **extra,
    )
    config["quasi_identifiers"]["age"] = {"generate": "intervals", "widths": [5, 10, 20], "null": "unknown"}
    return with_rest_insensitive(config)


def test_no_verb_plans_a_nested_loop_over_large_inputs(pg_adult):
    """Every statement a search, the metrics of every minimal node, their analysis and a publication run on a hard
    shape (`_holes_config`) is EXPLAINed as it runs, SELECTs with ANALYZE (their real rows): none pairs two inputs
    of thousands of rows in a nested loop, the plan PostgreSQL falls back to on IS NOT DISTINCT FROM or on guessed
    sizes."""
    url, schema = pg_adult
    _holes(url, schema)
    job = job_from_dict(_holes_config(url, schema), ADULT_DIR)
    with explained() as plans:
        report = analyze(job, _options(schema))
        anonymize(job, _options(schema))
    assert len(report.tables) > 1 and plans.explained > 20
    assert not plans.quadratic, plans.quadratic


def test_no_publication_or_analysis_of_a_table_plans_a_nested_loop(pg_adult, tmp_path: Path):
    """The verbs around the search on the same hard shape, EXPLAINed alike: a publication of 20k of its rows never
    analyzed, `apply` of a node to a batch, `audit` and `analyze --table` of the published table, Mondrian (of
    Adult, and of 20k rows never analyzed), anatomy of two overlapping versions of the table (pseudonymized
    persons; and of 20k rows never analyzed), the inference across those two releases, and a research subset's
    publication under delta-presence with its audit, which reads the population."""
    url, schema = pg_adult
    _holes(url, schema)
    _holes(url, schema, "holes_v2", "MOD(pid, 3) <> 0")
    _holes(url, schema, "fresh", "pid <= 20190", analyzed=False)  # 20k rows: no warning, no session-wide setting
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE TABLE "{schema}".study AS SELECT pid FROM "{schema}".holes WHERE MOD(pid, 4) = 0')
    engine.dispose()
    config = _holes_config(url, schema)
    job = job_from_dict(config, ADULT_DIR)
    fresh = job_from_dict(_holes_config(url, schema, "fresh"), ADULT_DIR)
    key = tmp_path / "key"
    key.write_text("0123456789abcdef0123456789abcdef")
    anatomy = {**config, "identifying": {"pid": {"pseudonym": {"key_file": str(key)}}}}
    del anatomy["criteria"], anatomy["suppression"]
    anatomy["quasi_identifiers"] = list(config["quasi_identifiers"])  # published exact
    with explained() as plans:
        published = anonymize(job, _options(schema))
        apply(job, "holes", node=published.node, output="holes_applied", options=_options(schema))
        anonymize(fresh, _options(schema))
        assert audit(job, "holes_anon", schema, _options(schema)).ok
        analyze_table(job, "holes_anon", schema, _options(schema))
        # a research subset under delta-presence, whose audit reads the population at the node the table shows
        presence = {"k_anonymity": {"k": 5}, "delta_presence": {"d_min": 0.0, "d_max": 0.9}}
        study = {"table": "study", "key": "pid", "schema": schema}
        subset = job_from_dict({**config, "criteria": presence, "subset": study, "output": {"table": "study_anon"}})
        assert audit(subset, "study_anon", schema, _options(schema), node=anonymize(subset, _options(schema)).node).ok
        for table in ("holes", "fresh"):  # Mondrian, its NULL ages cut as numbers (below every number)
            mondrian = {**_holes_config(url, schema, table), "suppression": {"limit": 0}}
            mondrian["quasi_identifiers"]["age"] = None
            mondrian["output"] = {"table": f"{table}_mondrian", "method": "mondrian"}
            anonymize(job_from_dict(mondrian, ADULT_DIR), _options(schema))
        for table in ("holes", "holes_v2", "fresh"):
            output = {"table": f"{table}_qi", "method": "anatomy", "l": 2}
            anonymize(
                job_from_dict({**anatomy, "source": {**config["source"], "table": table}, "output": output}, ADULT_DIR),
                _options(schema),
            )
        series = [
            {"name": name, "table": f"{name}_qi", "sensitive_table": f"{name}_qi_sensitive", "schema": schema}
            for name in ("holes", "holes_v2")
        ]
        releases = {**anatomy, "releases": {"pseudonym": "pid", "series": series}, "inference": {"table": "inferred"}}
        inference(job_from_dict(releases, ADULT_DIR), _options(schema))
    assert plans.explained > 20
    assert not plans.quadratic, plans.quadratic


def test_a_boolean_sensitive_attribute_is_analyzed(pg_server: str, pg_schema: str, tmp_path: Path):
    """PostgreSQL has no MIN or MAX of a boolean: the Bayes audit's cells are told apart without them."""
    engine = sa.create_engine(pg_server)
    with engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE TABLE "{pg_schema}".t (zip VARCHAR, age VARCHAR, smoker BOOLEAN)')
        conn.exec_driver_sql(
            f"INSERT INTO \"{pg_schema}\".t SELECT lpad(mod(i, 40)::text, 3, '0'), mod(i, 7)::text, mod(i, 3) = 0 "
            "FROM generate_series(1, 300) i"
        )
    engine.dispose()
    job = job_from_dict(
        {
            "source": {"url": pg_server, "table": "t", "schema": pg_schema},
            "quasi_identifiers": {"zip": {"generate": "mask"}, "age": {"generate": "suppress"}},
            "sensitive": ["smoker"],
            "criteria": {"k_anonymity": {"k": 2}},
        },
        tmp_path,
    )
    [t] = analyze(job, _options(pg_schema), node=(0, 0)).tables
    # the figure the audit gave before it read cells by MIN and MAX (bfd1c99), which then failed here
    assert t.bayes["positive_disclosure_tuples"] == 274
