"""Condensation (output.method condense): the grouping against an independent k-d grouping in Python, the groups'
statistics, the synthetic records against their definition computed in Python, the covariance they keep, the
groups table kept from the output's readers, and bad input."""

from __future__ import annotations

import hashlib
import math
import random
import statistics
from collections import Counter
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa

from sqlanon import anonymize, condense, condense_add, job_from_dict
from sqlanon.engine.condensation import Group
from sqlanon.errors import ConfigError, DataError
from sqlanon.publish.condense import CondensationReport

from .conftest import PG_URL, user_tables

KEY = "a-key-of-the-tests-0123456789abcdef"
QIS = ["age", "income", "hours"]


def _people(url: str, rows: list[tuple[Any, ...]], schema: str | None = None, table: str = "people") -> None:
    """`rows` (age, income, hours) as a new table `table`."""
    ref = f'"{schema}".{table}' if schema else table
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE {ref} (age INTEGER, income INTEGER, hours DOUBLE PRECISION)")
        conn.execute(sa.text(f"INSERT INTO {ref} VALUES (:a, :i, :h)"), [dict(zip("aih", r)) for r in rows])
    engine.dispose()


def _rows(n: int, seed: int = 5) -> list[tuple[int, int, float]]:
    """Three correlated attributes (income and hours grow with age), some records repeated."""
    rng = random.Random(seed)
    found = []
    for _ in range(n):
        age = rng.randint(18, 80)
        found.append((age, int(age * 900 + rng.gauss(0, 8000)), round(20 + age / 4 + rng.gauss(0, 5), 1)))
    return found + found[:7]


def _job(url: str, k: int, schema: str | None = None, others: str | None = None, **output: Any):
    source = {"url": url, "table": "people", **({"schema": schema} if schema else {})}
    return job_from_dict(
        {
            "source": source,
            "quasi_identifiers": QIS,
            **({"others": others} if others else {}),
            "output": {"table": "people_synthetic", "method": "condense", "k": k, **output},
        }
    )


def _keyed(monkeypatch) -> dict[str, Any]:
    monkeypatch.setenv("TEST_NOISE_KEY", KEY)
    return {"noise_key": {"key_env": "TEST_NOISE_KEY"}}


def reference_groups(
    points: list[tuple[float, ...]], k: int, first: int = 1, spread_of: list[tuple[float, ...]] | None = None
) -> dict[int, list[tuple[float, ...]]]:
    """The k-d grouping as the module states it, in Python: a group of at least 2k records is cut in halves
    (floor(n/2) first) along the attribute of largest variance over the table's (`spread_of`'s, by default the
    points'; to 1e-9), records in order of that attribute and then of all; halves numbered 2g and 2g + 1 from
    group `first`."""
    d = len(points[0])
    table = spread_of or points
    weights = [1 / v if (v := statistics.pvariance([p[j] for p in table])) > 0 else 0.0 for j in range(d)]
    open_groups, final = {first: points}, {}
    while open_groups:
        following = {}
        for g, members in open_groups.items():
            if len(members) < 2 * k:
                final[g] = members
                continue
            spreads = [
                math.floor(statistics.pvariance([p[j] for p in members]) * weights[j] * 1e9 + 0.5) for j in range(d)
            ]
            dim = spreads.index(max(spreads))
            ordered = sorted(members, key=lambda p: (p[dim], *p))
            following[2 * g], following[2 * g + 1] = ordered[: len(members) // 2], ordered[len(members) // 2 :]
        open_groups = following
    return final


def groups_table(url: str, schema: str | None = None) -> list[dict[str, Any]]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        table = f'"{schema}".people_synthetic_groups' if schema else "people_synthetic_groups"
        found = [dict(r._mapping) for r in conn.exec_driver_sql(f"SELECT * FROM {table} ORDER BY grp")]
    engine.dispose()
    return found


def synthetic(url: str, schema: str | None = None) -> list[tuple[float, ...]]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        table = f'"{schema}".people_synthetic' if schema else "people_synthetic"
        found = [tuple(r) for r in conn.exec_driver_sql(f"SELECT age, income, hours FROM {table}")]
    engine.dispose()
    return found


def expected_records(groups: list[dict[str, Any]], key: str, d: int) -> Counter:
    """The synthetic records from the groups table, computed in Python from the definition: draw i of group g reads
    md5(key|g|i|m) for pair m, two 52-bit fractions each; the record is the mean plus, along each axis, its width
    times (fraction - 1/2)."""
    found: Counter = Counter()
    for g in groups:
        for i in range(1, g["n"] + 1):
            hashes = [hashlib.md5(f"{key}|{g['grp']}|{i}|{m}".encode()).hexdigest() for m in range((d + 1) // 2)]
            u = [int(hashes[a // 2][13 * (a % 2) : 13 * (a % 2) + 13], 16) / 2**52 - 0.5 for a in range(d)]
            record = [
                g[f"mean_{j}"] + sum(g[f"axis_{l}_{j}"] * g[f"width_{l}"] * u[l - 1] for l in range(1, d + 1))
                for j in range(1, d + 1)
            ]
            found[tuple(round(v, 6) for v in record)] += 1
    return found


@pytest.mark.parametrize("engine_name", ["duckdb", "postgres"])
def test_the_groups_are_the_kd_grouping_and_the_records_their_draws(duck_url, request, monkeypatch, engine_name):
    rows = _rows(600)
    url, schema = duck_url, None
    if engine_name == "postgres":
        url, schema = PG_URL, request.getfixturevalue("pg_schema")
    _people(url, rows, schema)
    k = 7
    report = anonymize(_job(url, k, schema, **_keyed(monkeypatch)))
    assert isinstance(report, CondensationReport) and all(report.audit.values()) and report.rows == len(rows)
    expected = reference_groups([tuple(float(v) for v in r) for r in rows], k)
    found = groups_table(url, schema)
    assert [g["grp"] for g in found] == sorted(expected)
    for g in found:
        members = np.array(expected[g["grp"]])
        assert g["n"] == len(members) and k <= g["n"] < 2 * k
        assert [g[f"sum_{j}"] for j in (1, 2, 3)] == pytest.approx(members.sum(axis=0).tolist(), rel=1e-12)
        assert g["sum_1_2"] == pytest.approx(float((members[:, 0] * members[:, 1]).sum()), rel=1e-12)
        covariance = np.cov(members.T, bias=True)
        axes = np.array([[g[f"axis_{l}_{j}"] for l in (1, 2, 3)] for j in (1, 2, 3)])
        widths = np.array([g[f"width_{l}"] for l in (1, 2, 3)])
        rebuilt = axes @ np.diag(widths**2 / 12) @ axes.T  # V diag(lambda) V'
        assert rebuilt == pytest.approx(covariance, rel=1e-6, abs=1e-6 * np.abs(covariance).max())
    assert Counter(tuple(round(v, 6) for v in r) for r in synthetic(url, schema)) == expected_records(
        found, KEY.encode().hex(), 3
    )
    assert (report.groups, report.smallest, report.largest) == (
        len(found),
        min(len(m) for m in expected.values()),
        max(len(m) for m in expected.values()),
    )


def test_the_synthetic_table_keeps_the_covariance(duck_url):
    rows = _rows(4000)
    _people(duck_url, rows)
    condense(_job(duck_url, 10))
    original = np.corrcoef(np.array(rows, dtype=float).T)
    drawn = np.corrcoef(np.array(synthetic(duck_url)).T)
    assert np.abs(original - drawn).max() < 0.03
    means = np.array(rows, dtype=float).mean(axis=0)
    assert np.array(synthetic(duck_url)).mean(axis=0) == pytest.approx(means, rel=0.01)


def test_the_same_key_draws_the_same_records_and_no_key_new_ones(duck_url, monkeypatch):
    _people(duck_url, _rows(300))
    anonymize(_job(duck_url, 5, **_keyed(monkeypatch)))
    first = Counter(synthetic(duck_url))
    anonymize(_job(duck_url, 5, **_keyed(monkeypatch)), replace=True)
    assert Counter(synthetic(duck_url)) == first
    fresh = anonymize(_job(duck_url, 5), replace=True)
    assert not fresh.reproducible and Counter(synthetic(duck_url)) != first


def test_the_groups_table_is_not_granted_to_the_readers(pg_schema):
    _people(PG_URL, _rows(200), pg_schema)
    engine = sa.create_engine(PG_URL)
    role = f"{pg_schema}_reader"
    with engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE ROLE "{role}"')
        conn.exec_driver_sql(f'GRANT USAGE ON SCHEMA "{pg_schema}" TO "{role}"')
    try:
        condense(_job(PG_URL, 5, pg_schema, grant_to=[role]))
        with engine.connect() as conn:
            granted = {
                table: conn.execute(
                    sa.text("SELECT has_table_privilege(:r, :t, 'SELECT')"), {"r": role, "t": f'"{pg_schema}".{table}'}
                ).scalar()
                for table in ("people_synthetic", "people_synthetic_groups")
            }
        assert granted == {"people_synthetic": True, "people_synthetic_groups": False}
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f'DROP OWNED BY "{role}"')
            conn.exec_driver_sql(f'DROP ROLE "{role}"')
        engine.dispose()


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"k": 0}, "output.k must be a whole number of at least 1"),
        ({"k": True}, "output.k must be a whole number of at least 1"),
        ({"k": 2.5}, "output.k must be a whole number of at least 1"),
        ({"k": 3, "noise_key": {"key_env": ""}}, "output.noise_key.key_env must be a name"),
    ],
)
def test_bad_settings_are_refused_when_the_job_is_read(duck_url, change, error):
    with pytest.raises(ConfigError, match=error):
        job_from_dict(
            {
                "source": {"url": duck_url, "table": "people"},
                "quasi_identifiers": QIS,
                "output": {"table": "people_synthetic", "method": "condense", **change},
            }
        )


@pytest.mark.filterwarnings("ignore:others. drop leaves")
def test_what_condensation_cannot_publish_is_refused_and_nothing_written(duck_url):
    _people(duck_url, _rows(30))
    before = user_tables(duck_url)
    with pytest.raises(DataError, match="k = 100 is above the table's 37 records"):
        condense(_job(duck_url, 100))
    engine = sa.create_engine(duck_url)
    income = "UPDATE people SET income = NULL WHERE age = (SELECT MIN(age) FROM people)"
    _refused_after(engine, income, "column 'income' holds .* records without a number \\(NULL\\)", _job(duck_url, 5))
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE people SET income = 1 WHERE income IS NULL")
        conn.exec_driver_sql("UPDATE people SET hours = 'NaN' WHERE age = (SELECT MAX(age) FROM people)")
    with pytest.raises(DataError, match="column 'hours' holds .* records without a number \\(NaN or an infinity\\)"):
        condense(_job(duck_url, 5))
    with engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE people ADD COLUMN city VARCHAR")
    engine.dispose()
    config = {
        "source": {"url": duck_url, "table": "people"},
        "quasi_identifiers": ["age", "city"],
        "others": "drop",
        "output": {"table": "people_synthetic", "method": "condense", "k": 2},
    }
    with pytest.raises(DataError, match="quasi-identifier 'city' holds VARCHAR, not numbers"):
        condense(job_from_dict(config))
    assert user_tables(duck_url) == before
    refused = {
        "criteria": ({"criteria": {"k_anonymity": {"k": 2}}}, "publishes synthetic records and checks no criteria"),
        "insensitive": ({"insensitive": ["city"]}, "column 'city' cannot be published"),
        "pseudonym": (
            {"identifying": {"city": {"pseudonym": {"key_env": "X"}}}},
            "a synthetic record belongs to nobody",
        ),
    }
    for change, error in refused.values():
        with pytest.raises(ConfigError, match=error):
            job_from_dict({**config, "quasi_identifiers": ["age"], **change})


def _refused_after(engine: sa.Engine, statement: str, error: str, job: Any) -> None:
    """`statement` run on the source, then the job's condensation refused with `error`."""
    with engine.begin() as conn:
        conn.exec_driver_sql(statement)
    with pytest.raises(DataError, match=error):
        condense(job)


def _batch(url: str, rows: list[tuple[Any, ...]], schema: str | None = None) -> None:
    _people(url, rows, schema, "batch")


def test_a_split_is_the_exercise_s_closed_form():
    """Exercise 6: a group of 2k records spread uniformly along its longest eigenvector V (eigenvalue lambda)
    splits into halves whose means are mu +- sqrt(12 lambda) / 4 V, with variance lambda / 4 along V and the rest
    unchanged; the halves' sums add up to the group's."""
    rng = np.random.default_rng(1)
    points = rng.normal(size=(10, 3)) @ np.array([[3.0, 1, 0], [0, 1, 0.5], [0, 0, 0.2]])
    group = Group(7, 10, points.sum(axis=0), points.T @ points)
    values, vectors = np.linalg.eigh(group.covariance)
    lam, axis = values[-1], vectors[:, -1]
    first, second = group.halves(8, 9)
    assert (first.grp, first.n, second.grp, second.n) == (8, 5, 9, 5)
    offsets = sorted([first.mean - group.mean, second.mean - group.mean], key=lambda v: float(v @ axis))
    assert offsets[0] == pytest.approx(-math.sqrt(12 * lam) / 4 * axis)
    assert offsets[1] == pytest.approx(math.sqrt(12 * lam) / 4 * axis)
    expected = group.covariance - 0.75 * lam * np.outer(axis, axis)
    assert first.covariance == pytest.approx(expected) and second.covariance == pytest.approx(expected)
    assert first.sums + second.sums == pytest.approx(group.sums)
    assert first.products + second.products == pytest.approx(group.products)


def reference_addition(
    before: list[dict[str, Any]], batch: list[tuple[float, ...]], weigh_by: list[dict[str, Any]] | None = None
) -> dict[int, tuple[int, list[float]]]:
    """Each batch record to the group of nearest mean (squared distance, each attribute over its variance over
    the groups' records, of `weigh_by`'s groups where given; ties to the lowest group), in Python: the touched
    groups' counts and sums."""
    spread = weigh_by or before
    total = sum(g["n"] for g in spread)
    weights = []
    for j in (1, 2, 3):
        mean = sum(g[f"sum_{j}"] for g in spread) / total
        weights.append(1 / (sum(g[f"sum_{j}_{j}"] for g in spread) / total - mean * mean))
    touched: dict[int, tuple[int, list[float]]] = {}
    for record in batch:
        grp = min(
            before,
            key=lambda g: (
                sum(w * (x - g[f"mean_{j}"]) ** 2 for j, (w, x) in enumerate(zip(weights, record), 1)),
                g["grp"],
            ),
        )
        n, sums = touched.get(grp["grp"], (grp["n"], [grp[f"sum_{j}"] for j in (1, 2, 3)]))
        touched[grp["grp"]] = (n + 1, [s + x for s, x in zip(sums, record)])
    return touched


@pytest.mark.parametrize("engine_name", ["duckdb", "postgres"])
def test_new_records_join_their_nearest_groups_which_split_at_2k(duck_url, request, monkeypatch, engine_name):
    url, schema = duck_url, None
    if engine_name == "postgres":
        url, schema = PG_URL, request.getfixturevalue("pg_schema")
    rows = _rows(400)
    first, added = rows[:300], rows[300:] + [(150, 0, 12.5), (19, 900000, 80.0)]  # two outliers: far from any cell
    rows = first + added
    _people(url, first, schema)
    _batch(url, added, schema)
    job = _job(url, 5, schema, **_keyed(monkeypatch))
    condense(job)
    before = groups_table(url, schema)
    report = condense_add(job, "batch")
    assert report.added == len(added) and report.rows == len(rows) and all(report.audit.values())
    after = {g["grp"]: g for g in groups_table(url, schema)}
    touched = reference_addition(before, [tuple(float(v) for v in r) for r in added])
    untouched = [g for g in before if g["grp"] not in touched]
    assert all(after[g["grp"]] == g for g in untouched)  # the groups no record joined are kept as they were
    grown = {grp: n for grp, (n, _) in touched.items()}
    assert sum(1 for n in grown.values() if n >= 10) == report.splits  # each split once (no group reached 4k)
    for grp, (n, sums) in touched.items():
        if n < 10:
            assert after[grp]["n"] == n and [after[grp][f"sum_{j}"] for j in (1, 2, 3)] == pytest.approx(sums)
        else:
            assert grp not in after
    assert all(5 <= g["n"] < 10 for g in after.values())
    totals = np.array(rows, dtype=float).sum(axis=0)
    assert [sum(g[f"sum_{j}"] for g in after.values()) for j in (1, 2, 3)] == pytest.approx(totals.tolist())
    assert len(synthetic(url, schema)) == len(rows)
    # the groups no record joined draw the same records as before (the same key, group and draw numbers)
    assert expected_records(untouched, KEY.encode().hex(), 3) <= Counter(
        tuple(round(v, 6) for v in r) for r in synthetic(url, schema)
    )


def test_an_addition_needs_the_groups_and_numbers(duck_url):
    _people(duck_url, _rows(50))
    _batch(duck_url, [(30, 1000, None)])
    job = _job(duck_url, 5)
    with pytest.raises(DataError, match="no groups table 'main.people_synthetic_groups': publish the job first"):
        condense_add(job, "batch")
    condense(job)
    before = groups_table(duck_url)
    with pytest.raises(DataError, match="column 'hours' holds 1 records without a number"):
        condense_add(job, "batch")
    assert groups_table(duck_url) == before


def _graded(url: str, rows: list[tuple[Any, ...]], schema: str | None = None, table: str = "people") -> None:
    """`rows` (age, income, hours, grade) as a new table `table`: grade is the class label."""
    ref = f'"{schema}".{table}' if schema else table
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {ref} (age INTEGER, income INTEGER, hours DOUBLE PRECISION, grade VARCHAR(8))"
        )
        conn.execute(sa.text(f"INSERT INTO {ref} VALUES (:a, :i, :h, :g)"), [dict(zip("aihg", r)) for r in rows])
    engine.dispose()


def _grades(rows: list[tuple[Any, ...]], seed: int = 3) -> list[tuple[Any, ...]]:
    """Each record with a grade that leans on its age (three values, of unequal counts)."""
    rng = random.Random(seed)
    return [(*r, "low" if r[0] + rng.randint(-15, 15) < 40 else rng.choice(["high", "mid", "mid"])) for r in rows]


def _labelled_job(url: str, k: int, schema: str | None = None, **output: Any):
    """The condensation of `people` (`_graded`) within each grade, the grade published beside the records."""
    source = {"url": url, "table": "people", **({"schema": schema} if schema else {})}
    out = {"table": "people_synthetic", "method": "condense", "k": k, "label": "grade", **output}
    return job_from_dict({"source": source, "quasi_identifiers": QIS, "insensitive": ["grade"], "output": out})


@pytest.mark.parametrize("engine_name", ["duckdb", "postgres"])
def test_with_a_label_the_groups_form_within_each_of_its_values(duck_url, request, monkeypatch, engine_name):
    """Each grade's records grouped on their own (the k-d grouping of the grade's records alone, its first group
    numbered 2^D + the grade's rank, D = 2 bits for three grades), and each synthetic record drawn from its group
    carries the group's grade."""
    url, schema = duck_url, None
    if engine_name == "postgres":
        url, schema = PG_URL, request.getfixturevalue("pg_schema")
    rows = _grades(_rows(500))
    _graded(url, rows, schema)
    k = 6
    report = anonymize(_labelled_job(url, k, schema, **_keyed(monkeypatch)))
    assert all(report.audit.values()) and "the groups of each label hold its records" in report.audit
    found = groups_table(url, schema)
    expected: dict[int, tuple[str, list[tuple[float, ...]]]] = {}
    everyone = [tuple(float(v) for v in r[:3]) for r in rows]  # the variances the cuts are normalized by
    for rank, grade in enumerate(sorted({r[3] for r in rows})):
        points = [tuple(float(v) for v in r[:3]) for r in rows if r[3] == grade]
        for grp, members in reference_groups(points, k, first=4 + rank, spread_of=everyone).items():
            expected[grp] = (grade, members)
    assert [g["grp"] for g in found] == sorted(expected)
    for g in found:
        grade, members = expected[g["grp"]]
        assert (g["label"], g["n"]) == (grade, len(members)) and k <= g["n"] < 2 * k
        assert [g[f"sum_{j}"] for j in (1, 2, 3)] == pytest.approx(np.array(members).sum(axis=0).tolist())
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        table = f'"{schema}".people_synthetic' if schema else "people_synthetic"
        drawn = [tuple(r) for r in conn.exec_driver_sql(f"SELECT age, income, hours, grade FROM {table}")]
    engine.dispose()
    assert Counter(r[3] for r in drawn) == Counter(r[3] for r in rows)
    for grade in {r[3] for r in rows}:  # each record drawn from a group of its own grade
        groups = [g for g in found if g["label"] == grade]
        assert Counter(tuple(round(v, 6) for v in r[:3]) for r in drawn if r[3] == grade) == expected_records(
            groups, KEY.encode().hex(), 3
        )


@pytest.mark.parametrize("engine_name", ["duckdb", "postgres"])
def test_with_a_label_new_records_join_the_nearest_group_of_their_value(duck_url, request, monkeypatch, engine_name):
    url, schema = duck_url, None
    if engine_name == "postgres":
        url, schema = PG_URL, request.getfixturevalue("pg_schema")
    rows = _grades(_rows(400))
    first, added = rows[:300], rows[300:]
    _graded(url, first, schema)
    _graded(url, added, schema, table="batch")
    job = _labelled_job(url, 5, schema, **_keyed(monkeypatch))
    condense(job)
    before = groups_table(url, schema)
    report = condense_add(job, "batch")
    assert report.added == len(added) and all(report.audit.values())
    after = {g["grp"]: g for g in groups_table(url, schema)}
    touched: dict[int, tuple[int, list[float]]] = {}
    for grade in {r[3] for r in added}:  # the nearest group of the record's grade, in Python
        joined = reference_addition(
            [g for g in before if g["label"] == grade],
            [tuple(float(v) for v in r[:3]) for r in added if r[3] == grade],
            weigh_by=before,
        )
        touched |= joined
    for grp, (n, sums) in touched.items():
        if n < 10:
            assert after[grp]["n"] == n and [after[grp][f"sum_{j}"] for j in (1, 2, 3)] == pytest.approx(sums)
    assert all(5 <= g["n"] < 10 for g in after.values())
    grades = Counter(r[3] for r in rows)
    assert {grade: sum(g["n"] for g in after.values() if g["label"] == grade) for grade in grades} == grades


@pytest.mark.filterwarnings("ignore:others. drop leaves")
def test_a_label_that_cannot_be_condensed_is_refused_and_nothing_written(duck_url):
    rows = _grades(_rows(100))
    _graded(duck_url, rows)
    before = user_tables(duck_url)
    fewest = min(Counter(r[3] for r in rows).items(), key=lambda item: item[1])
    with pytest.raises(DataError, match=f"value '{fewest[0]}' has {fewest[1]} records, fewer than k = 60"):
        condense(_labelled_job(duck_url, 60))
    engine = sa.create_engine(duck_url)
    grade = "UPDATE people SET grade = NULL WHERE age = (SELECT MIN(age) FROM people)"
    _refused_after(
        engine, grade, "column 'grade' \\(output.label\\) holds .* records without a value", _labelled_job(duck_url, 5)
    )
    assert user_tables(duck_url) == before
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE people SET grade = 'low' WHERE grade IS NULL")
    engine.dispose()
    condense(_labelled_job(duck_url, 5))
    _graded(duck_url, [(30, 20000, 30.0, "new")], table="batch")
    published = groups_table(duck_url)
    with pytest.raises(DataError, match="value 'new' has no group to join \\(1 records of the batch\\)"):
        condense_add(_labelled_job(duck_url, 5), "batch")
    with pytest.raises(ConfigError, match="was made within each value of a label, and the job names none"):
        condense_add(_job(duck_url, 5, others="drop"), "batch")
    assert groups_table(duck_url) == published
    config = {
        "source": {"url": duck_url, "table": "people"},
        "quasi_identifiers": QIS,
        "output": {"table": "people_synthetic", "method": "condense", "k": 5, "label": "grade"},
    }
    with pytest.raises(ConfigError, match="output.label 'grade' is not a sensitive or insensitive column"):
        job_from_dict(config)
    with pytest.raises(ConfigError, match="output.label 'age' is not a sensitive or insensitive column"):
        job_from_dict({**config, "insensitive": ["grade"], "output": {**config["output"], "label": "age"}})
    with pytest.raises(ConfigError, match="output.label must name a column"):
        job_from_dict({**config, "output": {**config["output"], "label": 3}})
