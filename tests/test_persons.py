"""A person with several rows (`unit: {column: ...}`): the criteria count persons, on DuckDB, PostgreSQL and Spark.

The search is checked against a brute force over every node that counts each class's distinct persons in Python
(small generated tables, a different code path); publications are re-counted from the written table.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import itertools
import warnings
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqlanon import RunOptions, analyze, anonymize, audit, inference, load_csv, search
from sqlanon.config import job_from_dict
from sqlanon.errors import ConfigError, DataError, HierarchyError

KEY = "0123456789abcdef0123456789abcdef"
KEY_ENV = "SQLANON_TEST_PERSON_KEY"


@pytest.fixture(autouse=True)
def pseudonym_key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)


@st.composite
def person_tables(draw):
    """Persons with 1-4 rows each (a visit and a diagnosis that differ from row to row), 2 QIs with random
    hierarchies that every row of a person shares, a k and a suppression limit."""
    hierarchies, columns = [], []
    for _ in range(2):
        height = draw(st.integers(1, 3))
        values = [f"v{i}" for i in range(draw(st.integers(2, 6)))]
        # level L groups the values by their index shifted right L times: each label has one parent
        hierarchies.append(
            [
                [value] + [f"L{level}_{i >> level}" for level in range(1, height)] + ["*"]
                for i, value in enumerate(values)
            ]
        )
        columns.append(values)
    persons = draw(
        st.lists(st.tuples(*(st.sampled_from(c) for c in columns), st.integers(1, 4)), min_size=2, max_size=30)
    )
    rows = [
        (f"p{p}", *qis, f"visit{v}", f"d{(p + v) % 3}")
        for p, (*qis, visits) in enumerate(persons)
        for v in range(visits)
    ]
    k = draw(st.integers(1, 5))
    limit = draw(st.sampled_from([0, 0.1, 0.3]))
    return hierarchies, rows, min(k, len(persons)), limit


def _pseudonym(pid: str) -> str:
    """A person's pseudonym, computed in Python (HMAC-SHA256 of the identifier with the tests' key)."""
    return hmac.new(KEY.encode(), pid.encode(), hashlib.sha256).hexdigest()


def _job(folder: Path, url: str, hierarchies, k: int, limit: float, schema: str | None = None, **extra: Any):
    for i, paths in enumerate(hierarchies):
        (folder / f"q{i}.csv").write_text("\n".join(";".join(p) for p in paths) + "\n")
    return job_from_dict(
        {
            "source": {"url": url, "table": "visits", **({"schema": schema} if schema else {})},
            "identifying": {"pid": {"pseudonym": {"key_env": KEY_ENV}}},
            "unit": {"column": "pid"},
            "insensitive": ["visit", "diagnosis"],
            "quasi_identifiers": {f"q{i}": {"hierarchy": f"q{i}.csv"} for i in range(len(hierarchies))},
            "criteria": {"k_anonymity": {"k": k}},
            "suppression": {"limit": limit},
            **extra,
        },
        folder,
    )


def _load(url: str, rows: list[tuple], schema: str | None = None) -> None:
    engine = sa.create_engine(url)
    table = f'"{schema}".visits' if schema else "visits"
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
        conn.exec_driver_sql(
            f"CREATE TABLE {table} (pid VARCHAR, q0 VARCHAR, q1 VARCHAR, visit VARCHAR, diagnosis VARCHAR)"
        )
        conn.execute(
            sa.text(f"INSERT INTO {table} VALUES (:p, :a, :b, :v, :d)"),
            [dict(zip("pabvd", row)) for row in rows],
        )
    engine.dispose()


def brute_force(hierarchies, rows, k: int, max_suppressed: int) -> list[tuple[int, ...]]:
    """Every node whose classes of fewer than k distinct persons hold at most `max_suppressed` persons."""
    labels = [{path[0]: path for path in paths} for paths in hierarchies]
    persons = {(row[0], row[1], row[2]) for row in rows}
    passing = []
    for node in itertools.product(*(range(len(paths[0])) for paths in hierarchies)):
        classes: dict[tuple[str, ...], set[str]] = {}
        for pid, *qis in persons:
            key = tuple(labels[i][value][level] for i, (value, level) in enumerate(zip(qis, node)))
            classes.setdefault(key, set()).add(pid)
        if sum(len(c) for c in classes.values() if len(c) < k) <= max_suppressed:
            passing.append(node)
    return sorted(passing)


def _max_suppressed(job, persons: int) -> int:
    return job.suppression.max_suppressed(persons) if job.suppression.limit else 0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=person_tables())
def test_the_search_counts_persons_as_a_brute_force_does(tmp_path_factory, case):
    _check_search(tmp_path_factory, case, brute_force)


def _check_search(tmp_path_factory, case, oracle) -> None:
    """The search's passing nodes (Incognito, and the exhaustive strategy) on a random table of persons are the
    `oracle`'s (hierarchies, rows, k, the persons a node may suppress)."""
    hierarchies, rows, k, limit = case
    folder = tmp_path_factory.mktemp("persons")
    url = f"duckdb:///{folder / 't.duckdb'}"
    _load(url, rows)
    persons = len({row[0] for row in rows})
    try:
        job = _job(folder, url, hierarchies, k, limit)
        expected = oracle(hierarchies, rows, k, _max_suppressed(job, persons))
    except ConfigError:  # a limit that lets every person go
        return
    with warnings.catch_warnings():  # persons whose rows disagree are said to be
        warnings.simplefilter("ignore")
        assert sorted(search(job).satisfying) == expected
        assert sorted(search(dataclasses.replace(job, strategy="exhaustive")).satisfying) == expected


def _visits(persons: int = 60) -> list[tuple]:
    """Persons with 1-4 visits each; a person's QIs are the same in every visit, its diagnosis is not."""
    return [
        (f"p{p}", f"z{p % 7}", f"a{p % 5}", f"visit{v}", f"d{(p + v) % 3}")
        for p in range(persons)
        for v in range(1 + p % 4)
    ]


HIERARCHIES = [
    [[f"z{i}", f"Z{i % 2}", "*"] for i in range(7)],
    [[f"a{i}", f"A{i % 2}", "*"] for i in range(5)],
]


def _published(url: str, table: str, schema: str | None = None) -> tuple[list[tuple], int, int]:
    """Per class of the written table: (q0, q1, rows, persons); its rows and persons."""
    engine = sa.create_engine(url)
    ref = f'"{schema}".{table}' if schema else table
    with engine.connect() as conn:
        classes = conn.exec_driver_sql(
            f"SELECT q0, q1, COUNT(*), COUNT(DISTINCT pid) FROM {ref} GROUP BY q0, q1 ORDER BY q0, q1"
        ).all()
        rows, persons = conn.exec_driver_sql(f"SELECT COUNT(*), COUNT(DISTINCT pid) FROM {ref}").one()
    engine.dispose()
    return [tuple(c) for c in classes], rows, persons


def _check_publication(url: str, job, k: int, schema: str | None = None) -> None:
    result = anonymize(job, RunOptions(metadata_schema=f"{schema}_meta") if schema else None)
    classes, rows, persons = _published(url, "visits_anon", schema)
    visits = _visits()
    kept = persons
    assert result.audit.counted == "persons" and result.audit.rows == kept and result.audit.split_persons == 0
    assert all(n >= k for *_, n in classes), classes  # every class holds k persons, however many rows
    assert result.audit.min_class_size == min(n for *_, n in classes)
    suppressed = len({v[0] for v in visits}) - kept
    assert suppressed <= job.suppression.max_suppressed(60) and result.suppressed == suppressed
    # a published person keeps all of their rows: the rows per pseudonym are rows per person of the source
    engine = sa.create_engine(url)
    ref = f'"{schema}".visits_anon' if schema else "visits_anon"
    with engine.connect() as conn:
        per_pseudonym = conn.exec_driver_sql(f"SELECT pid, COUNT(*) FROM {ref} GROUP BY pid").all()
    engine.dispose()
    published = sorted(n for _, n in per_pseudonym)
    of_source: dict[str, int] = {}
    for v in visits:
        of_source[v[0]] = of_source.get(v[0], 0) + 1
    # each person's pseudonym (computed once per person in SQL) is the HMAC of their identifier, in all of their rows
    by_pseudonym = {_pseudonym(pid): n for pid, n in of_source.items()}
    assert all(by_pseudonym[pseudonym] == n for pseudonym, n in per_pseudonym)
    left = sorted(of_source.values())
    for n in published:
        left.remove(n)  # ValueError: a person published with a number of rows no person of the source has
    assert sum(published) == rows


def test_a_publication_counts_persons_and_keeps_their_rows_whole(tmp_path):
    url = f"duckdb:///{tmp_path / 't.duckdb'}"
    _load(url, _visits())
    job = _job(tmp_path, url, HIERARCHIES, 8, 0.1, output={"table": "visits_anon"})
    _check_publication(url, job, 8)
    # counting rows instead, the same k passes at finer nodes: classes of 8 rows may be 2 persons
    by_rows = dataclasses.replace(job, unit="rows", unit_column=None, strategy="exhaustive")
    assert set(search(by_rows).minimal) != set(search(job).minimal)


def test_postgresql_counts_persons_as_duckdb_does(pg_server: str, pg_schema: str, tmp_path: Path):
    _load(pg_server, _visits(), pg_schema)
    job = _job(tmp_path, pg_server, HIERARCHIES, 8, 0.1, pg_schema, output={"table": "visits_anon"})
    options = RunOptions(metadata_schema=f"{pg_schema}_meta")
    persons = 60
    expected = brute_force(HIERARCHIES, _visits(), 8, job.suppression.max_suppressed(persons))
    assert sorted(search(job, options).satisfying) == expected
    _check_publication(pg_server, job, 8, pg_schema)
    output = {"table": "visits_mondrian", "method": "mondrian"}
    mondrian = _job(tmp_path, pg_server, HIERARCHIES, 6, 0, pg_schema, output=output)
    assert anonymize(mondrian, options).audit.counted == "persons"
    classes, rows, persons = _published(pg_server, "visits_mondrian", pg_schema)
    assert (rows, persons) == (len(_visits()), 60) and all(n >= 6 for *_, n in classes)


@pytest.mark.spark
def test_spark_counts_persons_as_duckdb_does(spark_url: str, tmp_path: Path):
    csv = tmp_path / "visits.csv"
    csv.write_text("pid,q0,q1,visit,diagnosis\n" + "\n".join(",".join(row) for row in _varying_visits()) + "\n")
    load_csv(csv, "visits", spark_url, csv_options={"all_varchar": True}, replace=True)
    job = _job(tmp_path, spark_url, HIERARCHIES, 8, 0.1, output={"table": "visits_anon"})
    # two persons' rows disagree on a QI: they are counted at their values' common ancestors
    expected = common_ancestor_brute_force(HIERARCHIES, _varying_visits(), 8, job.suppression.max_suppressed(60))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert sorted(search(job).satisfying) == expected
        result = anonymize(job, replace=True)
        assert result.audit.counted == "persons" and result.audit.split_persons == 0
        assert audit(job, "visits_anon").min_class_size >= 8


def test_mondrian_partitions_persons_and_publishes_all_their_rows(tmp_path):
    url = f"duckdb:///{tmp_path / 't.duckdb'}"
    _load(url, _visits())
    job = _job(tmp_path, url, HIERARCHIES, 6, 0, output={"table": "visits_anon", "method": "mondrian"})
    result = anonymize(job)
    classes, rows, persons = _published(url, "visits_anon")
    assert rows == len(_visits()) and persons == 60  # every row, of every person
    assert set(_published_values(url, "visits_anon")) == {_pseudonym(f"p{p}") for p in range(60)}
    assert all(n >= 6 for *_, n in classes) and result.audit.min_class_size == min(n for *_, n in classes)
    assert result.audit.counted == "persons" and result.audit.split_persons == 0
    # counting rows, Mondrian cuts finer: some partition of 6 rows then holds fewer than 6 persons
    by_rows = dataclasses.replace(job, unit="rows", unit_column=None, output=dataclasses.replace(job.output, table="o"))
    anonymize(by_rows)
    assert min(n for *_, n in _published(url, "o")[0]) < 6


def _diagnosed(visits: list[tuple]) -> list[tuple]:
    """The visits with a diagnosis per person (the same in all of their rows)."""
    return [(p, z, a, v, f"d{int(p[1:]) % 5}") for p, z, a, v, _ in visits]


def _anatomy_job(tmp_path: Path, url: str):
    return job_from_dict(
        {
            "source": {"url": url, "table": "visits"},
            "identifying": {"pid": {"pseudonym": {"key_env": KEY_ENV}}},
            "unit": {"column": "pid"},
            "insensitive": ["visit"],
            "quasi_identifiers": ["q0", "q1"],
            "sensitive": ["diagnosis"],
            "output": {"table": "visits_anon", "method": "anatomy", "l": 3},
        },
        tmp_path,
    )


def _anatomy_by_persons(tmp_path: Path, url: str) -> list[tuple]:
    """Anatomy of the visits table by persons (l = 3): 60 persons, each in one bucket; the QI table's rows."""
    report = anonymize(_anatomy_job(tmp_path, url))
    assert report.rows == 60 and report.fewest_values >= 3
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        published = conn.exec_driver_sql("SELECT pid, q0, q1, visit FROM visits_anon").all()
        buckets_of_a_person = conn.exec_driver_sql(
            "SELECT MAX(n) FROM (SELECT COUNT(DISTINCT bucket) AS n FROM visits_anon GROUP BY pid) p"
        ).scalar_one()
        assert conn.exec_driver_sql('SELECT SUM("count") FROM visits_anon_sensitive').scalar_one() == 60
    engine.dispose()
    assert buckets_of_a_person == 1
    # each person's pseudonym, computed once per person, is the HMAC of their identifier
    assert {row[0] for row in published} == {_pseudonym(f"p{p}") for p in range(60)}
    return [tuple(row) for row in published]


def test_anatomy_buckets_persons_and_publishes_all_their_rows(tmp_path):
    url = f"duckdb:///{tmp_path / 't.duckdb'}"
    rows = _diagnosed(_visits())
    _load(url, rows)
    published = _anatomy_by_persons(tmp_path, url)
    assert len(published) == len(rows) and len({row[0] for row in published}) == 60


def test_the_audit_counts_persons_and_finds_one_in_two_classes(tmp_path):
    url = f"duckdb:///{tmp_path / 't.duckdb'}"
    rows = _visits()
    _load(url, rows)
    job = _job(tmp_path, url, HIERARCHIES, 3, 0)
    report = audit(job, "visits")
    # each (z, a) class of the table: its distinct persons, not its rows
    assert report.counted == "persons" and report.rows == 60 and report.split_persons == 0
    assert report.min_class_size == min(
        len({r[0] for r in rows if (r[1], r[2]) == cell}) for cell in {(r[1], r[2]) for r in rows}
    )
    _load(url, rows + [("p0", "z6", "a4", "visit9", "d0")])  # p0 now in two classes
    report = audit(job, "visits")
    assert report.split_persons == 1 and not report.ok


@pytest.mark.parametrize(
    "change, message",
    [
        ({"unit": {"column": "q0"}}, "is a quasi-identifier"),
        ({"unit": {"column": "visit"}}, "is sensitive or insensitive"),
        ({"unit": "nobody"}, "is not listed under identifying"),
        ({"identifying": ["pid"]}, "is dropped; publish it as a pseudonym"),
        ({"unit": 3}, "unit must be rows"),
    ],
)
def test_a_unit_the_job_cannot_count_by_is_refused(tmp_path, change: dict[str, Any], message: str):
    with pytest.raises(ConfigError, match=message):
        _job(tmp_path, "duckdb:///x.duckdb", HIERARCHIES, 3, 0, **change)


@pytest.mark.parametrize(
    "row, message",
    [
        ((None, "z0", "a0", "visit9", "d0"), r"unit column 'pid' is NULL in 1 row\(s\)"),
        (("p0", None, "a0", "visit9", "d0"), "column 'q0' has 1 NULL value"),
        (("p0", "z9", "a0", "visit9", "d0"), r"column 'q0': 1 value\(s\) missing from its hierarchy .*: 'z9'"),
    ],
)
def test_persons_the_run_cannot_count_stop_it_before_anything_is_written(tmp_path, row: tuple, message: str):
    url = f"duckdb:///{tmp_path / 't.duckdb'}"
    _load(url, _visits() + [row])
    job = _job(tmp_path, url, HIERARCHIES, 3, 0, output={"table": "visits_anon"})
    with pytest.raises((DataError, HierarchyError), match=message):
        anonymize(job)
    engine = sa.create_engine(url)
    assert not sa.inspect(engine).has_table("visits_anon")
    engine.dispose()


def test_inference_across_releases_reads_each_persons_rows_as_one(tmp_path):
    """Two releases of the visits by person (generalized, and Anatomy's buckets), inferred with the unit, give the
    probabilities of the same releases with one row per person (their distinct rows, made here in SQL)."""
    url = f"duckdb:///{tmp_path / 't.duckdb'}"
    _load(url, _diagnosed(_visits()))
    _job(tmp_path, url, HIERARCHIES, 4, 0)  # writes the hierarchy files

    def job(unit: bool = True, **changes: Any):
        return job_from_dict(
            {
                "source": {"url": url, "table": "visits"},
                "identifying": {"pid": {"pseudonym": {"key_env": KEY_ENV}}},
                **({"unit": {"column": "pid"}} if unit else {"unit": "rows"}),
                "insensitive": ["visit"],
                "quasi_identifiers": {f"q{i}": {"hierarchy": f"q{i}.csv"} for i in range(2)},
                "sensitive": ["diagnosis"],
                **changes,
            },
            tmp_path,
        )

    anonymize(job(criteria={"k_anonymity": {"k": 4}}, output={"table": "first"}))
    anonymize(job(quasi_identifiers=["q0", "q1"], output={"table": "second", "method": "anatomy", "l": 3}))
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # the same releases, one row per person
        conn.exec_driver_sql("CREATE TABLE first_1 AS SELECT DISTINCT pid, q0, q1, diagnosis FROM first")
        conn.exec_driver_sql("CREATE TABLE second_1 AS SELECT DISTINCT pid, q0, q1, bucket FROM second")
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM first_1").scalar_one() == 60
    engine.dispose()

    def inferred(first: str, second: str, table: str, unit: bool) -> dict[tuple[str, str], float]:
        series = [{"name": "a", "table": first}, {"name": "b", "table": second, "sensitive_table": "second_sensitive"}]
        releases = {"pseudonym": "pid", "series": series}
        report = inference(job(unit, releases=releases, inference={"table": table}))
        assert report.persons == 60
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            rows = conn.exec_driver_sql(f"SELECT pid, diagnosis, probability FROM {table}").all()
        engine.dispose()
        return {(p, d): float(v) for p, d, v in rows}

    by_person = inferred("first", "second", "by_person", unit=True)
    assert by_person == pytest.approx(inferred("first_1", "second_1", "by_row", unit=False))
    visit = {"pseudonym": "visit", "series": [{"name": "a", "table": "first"}]}
    with pytest.raises(ConfigError, match="releases.pseudonym is 'visit', but the persons are named by unit"):
        inference(job(releases=visit))


@st.composite
def varying_person_tables(draw):
    """`person_tables`, but each row of a person may hold other QI values than the person's first row."""
    hierarchies, rows, k, limit = draw(person_tables())
    columns = [[path[0] for path in paths] for paths in hierarchies]
    changed = [
        (pid, *(draw(st.sampled_from(c)) if draw(st.booleans()) else v for c, v in zip(columns, qis)), visit, d)
        for pid, *qis, visit, d in rows
    ]
    return hierarchies, changed, k, limit


def common_ancestor_brute_force(hierarchies, rows, k: int, max_suppressed: int) -> list[tuple[int, ...]]:
    """`brute_force`, where a person whose rows disagree on a QI is published, at a node below the lowest level
    where their values share a label, at that level's label (a class of its own, as no hierarchy here repeats a
    label across levels)."""
    labels = [{path[0]: path for path in paths} for paths in hierarchies]
    values: dict[str, list[set[str]]] = {}
    for pid, *qis, _, _ in rows:
        for found, value in zip(values.setdefault(pid, [set(), set()]), qis):
            found.add(value)
    meet = {
        pid: [
            min(level for level in range(len(labels[i][next(iter(v))])) if len({labels[i][x][level] for x in v}) == 1)
            for i, v in enumerate(found)
        ]
        for pid, found in values.items()
    }
    passing = []
    for node in itertools.product(*(range(len(paths[0])) for paths in hierarchies)):
        classes: dict[tuple[tuple[int, str], ...], set[str]] = {}
        for pid, found in values.items():
            key = tuple(
                (max(level, lowest), labels[i][next(iter(v))][max(level, lowest)])
                for i, (v, level, lowest) in enumerate(zip(found, node, meet[pid]))
            )
            classes.setdefault(key, set()).add(pid)
        if sum(len(c) for c in classes.values() if len(c) < k) <= max_suppressed:
            passing.append(node)
    return sorted(passing)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=varying_person_tables())
def test_persons_whose_rows_disagree_are_searched_at_their_common_ancestors_as_a_brute_force_does(
    tmp_path_factory, case
):
    _check_search(tmp_path_factory, case, common_ancestor_brute_force)


def _varying_visits() -> list[tuple]:
    """`_visits`, with p0 seen once in zip z2 (z0 elsewhere: they meet at Z0) and p1 once in age a3 (a1
    elsewhere: they meet at A1)."""
    return _visits() + [("p0", "z2", "a0", "visit9", "d0"), ("p1", "z1", "a3", "visit9", "d1")]


def _published_values(url: str, table: str, schema: str | None = None) -> dict[str, set[tuple[str, str]]]:
    """Per pseudonym, the distinct (q0, q1) of its rows in the written table."""
    engine = sa.create_engine(url)
    ref = f'"{schema}".{table}' if schema else table
    with engine.connect() as conn:
        found: dict[str, set[tuple[str, str]]] = {}
        for pid, q0, q1 in conn.exec_driver_sql(f"SELECT pid, q0, q1 FROM {ref}").all():
            found.setdefault(pid, set()).add((q0, q1))
    engine.dispose()
    return found


def _check_common_ancestors_published(url: str, tmp_path: Path, schema: str | None = None) -> None:
    """At the bottom node, the two persons whose rows disagree are published at their values' common ancestors in
    all of their rows, everyone else as they are; with k = 8, each class of the written table holds 8 persons."""
    options = RunOptions(metadata_schema=f"{schema}_meta") if schema else None
    job = _job(tmp_path, url, HIERARCHIES, 1, 0, schema, output={"table": "visits_anon"})
    with pytest.warns(UserWarning, match=r"1 person\(s\) of unit column 'pid' have rows with different values"):
        result = anonymize(job, options)
    assert result.node == (0, 0) and result.audit.split_persons == 0 and result.audit.rows == 60
    values = sorted(_published_values(url, "visits_anon", schema).values())
    assert [{("Z0", "a0")}, {("z1", "A1")}] == [v for v in values if "Z0" in str(v) or "A1" in str(v)]
    assert all(len(v) == 1 for v in values) and len(values) == 60  # every person in one class
    job = _job(tmp_path, url, HIERARCHIES, 8, 0.1, schema, output={"table": "visits_anon8"})
    expected = common_ancestor_brute_force(HIERARCHIES, _varying_visits(), 8, job.suppression.max_suppressed(60))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert sorted(search(job, options).satisfying) == expected
        result = anonymize(job, options)
        masked = anonymize(
            dataclasses.replace(
                job,
                suppression=dataclasses.replace(job.suppression, mode="mask"),
                output=dataclasses.replace(job.output, table="visits_masked"),
            ),
            options,
        )
    classes, _rows, persons = _published(url, "visits_anon8", schema)
    assert all(n >= 8 for *_, n in classes) and result.audit.split_persons == 0 and persons == result.audit.rows
    assert all(len(v) == 1 for v in _published_values(url, "visits_masked", schema).values())
    assert masked.audit.split_persons == 0 and masked.audit.rows == 60


def test_persons_whose_rows_disagree_are_published_at_their_common_ancestors(tmp_path):
    """By the lattice search's node, and by Mondrian's partitions."""
    url = f"duckdb:///{tmp_path / 't.duckdb'}"
    _load(url, _varying_visits())
    _check_common_ancestors_published(url, tmp_path)
    _check_mondrian_of_disagreeing_persons(url, tmp_path)


def test_postgresql_publishes_common_ancestors_as_duckdb_does(pg_server: str, pg_schema: str, tmp_path: Path):
    _load(pg_server, _varying_visits(), pg_schema)
    _check_common_ancestors_published(pg_server, tmp_path, pg_schema)
    _check_mondrian_of_disagreeing_persons(pg_server, tmp_path, pg_schema)


def _check_mondrian_of_disagreeing_persons(url: str, tmp_path: Path, schema: str | None = None) -> None:
    """Mondrian by persons whose rows disagree on a QI (k = 1, down to single persons, and k = 3): every row of a
    person is published with the same labels, each an ancestor (or the value) of every value of the person's rows
    in its hierarchy, and every class holds at least k persons, counted from the written table."""
    options = RunOptions(metadata_schema=f"{schema}_meta") if schema else None
    covers = [{path[0]: set(path) for path in paths} for paths in HIERARCHIES]
    for k in (1, 3):
        output = {"table": f"visits_mondrian{k}", "method": "mondrian"}
        job = _job(tmp_path, url, HIERARCHIES, k, 0, schema, output=output)
        with pytest.warns(UserWarning, match=r"1 person\(s\) of unit column 'pid' have rows with different values"):
            result = anonymize(job, options)
        assert result.audit.counted == "persons" and result.audit.split_persons == 0
        classes, rows, persons = _published(url, f"visits_mondrian{k}", schema)
        assert rows == len(_varying_visits()) and persons == 60 and all(n >= k for *_, n in classes)
        published = _published_values(url, f"visits_mondrian{k}", schema)
        assert all(len(labels) == 1 for labels in published.values())  # a person's rows in one class
        for pid, q0, q1, *_ in _varying_visits():
            ((label0, label1),) = published[_pseudonym(pid)]
            assert label0 in covers[0][q0] and label1 in covers[1][q1], (k, pid, q0, q1, label0, label1)
        # p0 (z0, z2) is published at Z0 or above in all of its rows; p1 (a1, a3) at A1 or above
        ((p0_zip, _),) = published[_pseudonym("p0")]
        ((_, p1_age),) = published[_pseudonym("p1")]
        assert p0_zip in {"Z0", "*"} and p1_age in {"A1", "*"}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=varying_person_tables())
def test_mondrian_of_random_disagreeing_persons_publishes_each_in_one_class_of_k(tmp_path_factory, case):
    """On random tables of persons whose rows may disagree: every row written, each person's rows in one class
    whose labels cover every value of theirs, at least k persons in every class (counted here, not by the audit)."""
    hierarchies, rows, k, _ = case
    folder = tmp_path_factory.mktemp("mondrian")
    url = f"duckdb:///{folder / 't.duckdb'}"
    _load(url, rows)
    job = _job(folder, url, hierarchies, k, 0, output={"table": "m", "method": "mondrian"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        anonymize(job)
    classes, written, persons = _published(url, "m")
    assert written == len(rows) and persons == len({row[0] for row in rows})
    assert all(n >= k for *_, n in classes)
    published = _published_values(url, "m")
    covers = [{path[0]: set(path) for path in paths} for paths in hierarchies]
    for pid, q0, q1, *_ in rows:
        ((label0, label1),) = published[_pseudonym(pid)]
        assert label0 in covers[0][q0] and label1 in covers[1][q1]


def _numbers(url: str, rows: list[tuple], schema: str | None = None) -> None:
    """The visits as table `numbers`, q1 a number (a1 -> 1)."""
    engine = sa.create_engine(url)
    table = f'"{schema}".numbers' if schema else "numbers"
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
        conn.exec_driver_sql(f"CREATE TABLE {table} (pid VARCHAR, q0 VARCHAR, q1 INTEGER, visit VARCHAR)")
        conn.execute(
            sa.text(f"INSERT INTO {table} VALUES (:p, :a, :b, :v)"),
            [{"p": p, "a": z, "b": None if a is None else int(a[1:]), "v": v} for p, z, a, v, _ in rows],
        )
    engine.dispose()


def _numbers_job(tmp_path: Path, url: str, k: int, schema: str | None = None, **output: Any):
    output = {"table": "numbers_anon", "method": "mondrian", **output}
    job = _job(tmp_path, url, HIERARCHIES[:1], k, 0, schema, output=output)
    q1 = dataclasses.replace(job.quasi_identifiers[0], column="q1", hierarchy=None)
    return dataclasses.replace(
        job,
        source=dataclasses.replace(job.source, table="numbers"),
        quasi_identifiers=[*job.quasi_identifiers, q1],
        insensitive=["visit"],
    )


@pytest.mark.parametrize("k", [1, 3])
def test_mondrian_cuts_persons_whose_numbers_disagree_by_their_smallest_and_publishes_their_range(tmp_path, k):
    url = f"duckdb:///{tmp_path / 't.duckdb'}"
    _numbers(url, _varying_visits())
    _check_ranges_of_persons(tmp_path, url, k)


def test_postgresql_publishes_persons_ranges_as_duckdb_does(pg_server: str, pg_schema: str, tmp_path: Path):
    _numbers(pg_server, _varying_visits(), pg_schema)
    _check_ranges_of_persons(tmp_path, pg_server, 3, pg_schema)


def _check_ranges_of_persons(tmp_path: Path, url: str, k: int, schema: str | None = None) -> None:
    """p1 has ages 1 and 3: cut by 1, published in a range that holds both (as is every person's rows' age)."""
    options = RunOptions(metadata_schema=f"{schema}_meta") if schema else None
    with pytest.warns(UserWarning, match="'q1': each is cut by the smallest of their values and published with a"):
        result = anonymize(_numbers_job(tmp_path, url, k, schema), options)
    assert result.audit.counted == "persons" and result.audit.split_persons == 0
    engine = sa.create_engine(url)
    table = f'"{schema}".numbers_anon' if schema else "numbers_anon"
    with engine.connect() as conn:
        published = conn.exec_driver_sql(f"SELECT pid, q0, q1 FROM {table}").all()
        classes = conn.exec_driver_sql(f"SELECT COUNT(DISTINCT pid) FROM {table} GROUP BY q0, q1").scalars().all()
    engine.dispose()
    assert len(published) == len(_varying_visits()) and min(classes) >= k
    labels: dict[str, set[str]] = {}
    for pid, _q0, q1 in published:
        labels.setdefault(pid, set()).add(q1)
    assert all(len(found) == 1 for found in labels.values())  # one range per person, in all of their rows
    for pid, _, age, *_ in _varying_visits():
        (label,) = labels[_pseudonym(pid)]
        low, _, high = label.strip("[]").partition("-")
        assert int(low) <= int(age[1:]) <= int(high or low), (pid, age, label)
    (p1,) = labels[_pseudonym("p1")]
    assert p1.startswith("[") and int(p1.strip("[]").split("-")[1]) >= 3


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ages=st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=3), min_size=2, max_size=25),
    k=st.integers(1, 4),
)
def test_mondrian_of_random_persons_ages_publishes_ranges_that_hold_every_age(tmp_path_factory, ages, k):
    """Random persons with 1-3 visits, each visit's age drawn anew: every row written, each person in one class
    whose range holds all of their ages, at least k persons in every class (counted here)."""
    folder = tmp_path_factory.mktemp("ranges")
    url = f"duckdb:///{folder / 't.duckdb'}"
    rows = [
        (f"p{p}", "z0", f"a{age}", f"visit{v}", "d0") for p, visits in enumerate(ages) for v, age in enumerate(visits)
    ]
    _numbers(url, rows)
    k = min(k, len(ages))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        anonymize(_numbers_job(folder, url, k))
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        published = conn.exec_driver_sql("SELECT pid, q1 FROM numbers_anon").all()
        classes = conn.exec_driver_sql("SELECT COUNT(DISTINCT pid) FROM numbers_anon GROUP BY q0, q1").scalars().all()
    engine.dispose()
    assert len(published) == len(rows) and min(classes) >= k
    labels: dict[str, set[str]] = {}
    for pid, label in published:
        labels.setdefault(pid, set()).add(label)
    for p, visits in enumerate(ages):
        (label,) = labels[_pseudonym(f"p{p}")]
        low, _, high = label.strip("[]").partition("-")
        assert all(int(low) <= age <= int(high or low) for age in visits), (visits, label)


def test_mondrian_refuses_numbers_a_range_cannot_say_and_anatomy_publishes_rows_as_they_are(tmp_path):
    url = f"duckdb:///{tmp_path / 't.duckdb'}"
    rows = _diagnosed(_varying_visits())
    _load(url, rows)
    _numbers(url, [*_varying_visits(), ("p2", "z2", None, "visit9", "d2")])  # p2: age 2, and NULL once
    with pytest.raises(DataError, match=r"1 person\(s\) .* have a NULL in some rows of the quasi-identifier 'q1'"):
        anonymize(_numbers_job(tmp_path, url, 3))
    _numbers(url, _varying_visits())
    with warnings.catch_warnings(), pytest.raises(DataError, match="output.numeric: mean publishes one number"):
        warnings.simplefilter("ignore")
        anonymize(_numbers_job(tmp_path, url, 3, numeric="mean"))
    engine = sa.create_engine(url)
    assert not sa.inspect(engine).has_table("numbers_anon")  # nothing written
    engine.dispose()
    published = _anatomy_by_persons(tmp_path, url)  # Anatomy publishes each row's QIs as they are
    assert sorted(row[1:] for row in published) == sorted((z, a, v) for _, z, a, v, _ in rows)


def test_the_loss_counts_a_person_at_their_common_ancestors_area(tmp_path):
    """ARX's loss of every minimal node, from the analysis' areas, against Python: a person's penalty at a QI is the
    hierarchy's own values under the label they are published at, their common ancestor's below its level."""
    url = f"duckdb:///{tmp_path / 't.duckdb'}"
    rows = _varying_visits()
    _load(url, rows)
    job = _job(tmp_path, url, HIERARCHIES, 3, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = analyze(job)
    values: dict[str, list[set[str]]] = {}
    for pid, *qis, _, _ in rows:
        for found, value in zip(values.setdefault(pid, [set(), set()]), qis):
            found.add(value)
    labels = [{path[0]: path for path in paths} for paths in HIERARCHIES]
    assert report.tables
    for table in report.tables:
        node = tuple(int(level) for level in table.label.split(","))
        penalty = 0.0
        for found in values.values():
            for paths, v, level in zip(labels, found, node):
                lowest = min(lv for lv in range(len(paths[next(iter(v))])) if len({paths[x][lv] for x in v}) == 1)
                label = paths[next(iter(v))][max(level, lowest)]
                under = sum(1 for path in paths.values() if path[max(level, lowest)] == label)
                penalty += (under - 1) / (len(paths) - 1)
        assert table.utility["loss"] == pytest.approx(penalty / (len(values) * 2)), table.label


def test_the_persons_table_has_planner_statistics_on_postgresql(pg_server: str, pg_schema: str, tmp_path: Path):
    """Every method joins the persons' table: made without statistics, PostgreSQL planned Mondrian's check of 1M
    persons' values against a 36,000-value hierarchy as a nested loop (654 s)."""
    from sqlanon.backends import open_database
    from sqlanon.engine.persons import person_table

    _load(pg_server, _visits(), pg_schema)
    job = _job(tmp_path, pg_server, HIERARCHIES, 3, 0, pg_schema)
    db = open_database(pg_server)
    try:
        with db.connect() as conn:
            persons = person_table(db, conn, job, db.q(pg_schema, "visits"), 999)
            estimated = conn.exec_driver_sql(f"SELECT reltuples FROM pg_class WHERE oid = '{persons}'::regclass")
            assert estimated.scalar_one() == 60
    finally:
        db.dispose()
