"""Randomization (output.method randomize) and the reconstruction of a randomized column's distribution: the noise
against an independent computation of it in Python, its distribution, reproducibility, both databases, the
reconstruction against an independent implementation of the iteration, and bad input."""

from __future__ import annotations

import hashlib
import math
import random
from collections import Counter
from typing import Any

import pytest
import sqlalchemy as sa

from sqlanon import anonymize, job_from_dict, reconstruct
from sqlanon.analysis.reconstruction import chi_square, chi_square_threshold
from sqlanon.errors import ConfigError, DataError
from sqlanon.publish.randomize import RandomizationReport

from .conftest import PG_URL, user_tables
from .test_cli import run as invoke

KEY = "a-key-of-the-tests-0123456789abcdef"
CITIES = ["Lyon", "Nice", "Lille", "Brest"]


def _people(url: str, rows: list[tuple[Any, ...]], schema: str | None = None, income: str = "INTEGER") -> None:
    """`rows` (pid, age, income, city) as table people."""
    table = f'"{schema}".people' if schema else "people"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE {table} (pid INTEGER, age INTEGER, income {income}, city VARCHAR)")
        conn.execute(
            sa.text(f"INSERT INTO {table} VALUES (:p, :a, :i, :c)"),
            [dict(zip("paic", row)) for row in rows],
        )
    engine.dispose()


def _rows(n: int, seed: int = 7) -> list[tuple[Any, ...]]:
    rng = random.Random(seed)
    found = [
        (i % 50, rng.randint(18, 90), None if i % 11 == 0 else rng.randint(0, 5000), rng.choice(CITIES))
        for i in range(n)
    ]
    return found + found[:5]  # five rows twice: each occurrence gets its own noise


def _job(url: str, noise: dict[str, Any], schema: str | None = None, **output: Any):
    return job_from_dict(
        {
            "source": {"url": url, "table": "people", **({"schema": schema} if schema else {})},
            "quasi_identifiers": ["age"],
            "insensitive": ["pid", "income", "city"],
            "output": {"table": "people_noisy", "method": "randomize", "noise": noise, **output},
        }
    )


def _keyed(monkeypatch) -> dict[str, Any]:
    monkeypatch.setenv("TEST_NOISE_KEY", KEY)
    return {"noise_key": {"key_env": "TEST_NOISE_KEY"}}


def _text(value: Any) -> str:
    """A value as the noise's row key writes it (its text prefixed with its length, NULL as '-')."""
    return "-" if value is None else f"{len(str(value))}:{value}"


def expected_rows(rows: list[tuple[Any, ...]], noises: dict[int, tuple[str, float]], key: bytes) -> Counter:
    """The published rows, computed in Python from the definition (engine.randomization's module docstring): each
    row's key is md5 of the key, its values and its occurrence among identical rows; the first noised column's
    noise comes from the row's key, column j's from md5(row key '#' j)."""
    seen: Counter = Counter()
    published: Counter = Counter()
    for row in rows:
        seen[row] += 1
        text = "|".join([key.hex(), *(_text(v) for v in row), str(seen[row])])
        row_key = hashlib.md5(text.encode()).hexdigest()
        out = list(row)
        for j, (position, (distribution, scale)) in enumerate(sorted(noises.items())):
            if row[position] is None:
                continue
            drawn = row_key if j == 0 else hashlib.md5(f"{row_key}#{j}".encode()).hexdigest()
            u1, u2 = int(drawn[:13], 16) / 2**52, int(drawn[13:26], 16) / 2**52
            if distribution == "uniform":
                noise = scale * (u1 - 0.5)
            else:
                noise = scale * math.sqrt(-2 * math.log(1 - u1)) * math.cos(2 * math.pi * u2)
            out[position] = round(row[position] + noise, 6)
        published[tuple(out)] += 1
    return published


def published(url: str, schema: str | None = None, table: str = "people_noisy") -> Counter:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        ref = f'"{schema}".{table}' if schema else table
        found = conn.exec_driver_sql(f"SELECT pid, age, income, city FROM {ref}").all()
    engine.dispose()
    return Counter(tuple(round(v, 6) if isinstance(v, float) else v for v in row) for row in found)


def test_every_value_gets_the_noise_its_definition_gives(duck_url, monkeypatch):
    rows = _rows(400)
    _people(duck_url, rows)
    noise = {"age": {"distribution": "uniform", "width": 10}, "income": {"distribution": "gaussian", "sd": 250}}
    report = anonymize(_job(duck_url, noise, **_keyed(monkeypatch)))
    assert isinstance(report, RandomizationReport) and report.rows == len(rows) and report.reproducible
    assert all(report.audit.values()) and len(report.audit) == 1 + 3 + 2  # income is unbounded: no width check
    assert published(duck_url) == expected_rows(rows, {1: ("uniform", 10), 2: ("gaussian", 250)}, KEY.encode())
    engine = sa.create_engine(duck_url)
    with engine.connect() as conn:
        described = conn.exec_driver_sql("SELECT * FROM people_noisy_noise ORDER BY attribute").all()
        types = dict(
            conn.exec_driver_sql(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'people_noisy'"
            ).all()
        )
    engine.dispose()
    assert described == [("age", "uniform", 10.0, 10 / math.sqrt(12)), ("income", "gaussian", None, 250.0)]
    assert types == {"pid": "INTEGER", "age": "DOUBLE", "income": "DOUBLE", "city": "VARCHAR"}


def test_postgresql_publishes_the_rows_duckdb_does(duck_url, pg_schema, monkeypatch):
    rows = _rows(200)
    _people(duck_url, rows)
    _people(PG_URL, rows, pg_schema)
    noise = {"age": {"distribution": "gaussian", "sd": 3}}
    keyed = _keyed(monkeypatch)
    anonymize(_job(duck_url, noise, **keyed))
    report = anonymize(_job(PG_URL, noise, pg_schema, **keyed))
    assert all(report.audit.values())
    assert (
        published(PG_URL, pg_schema) == published(duck_url) == expected_rows(rows, {1: ("gaussian", 3)}, KEY.encode())
    )


def test_the_same_key_gives_the_same_release_and_no_key_a_new_one(duck_url, monkeypatch):
    _people(duck_url, _rows(300))
    noise = {"age": {"distribution": "uniform", "width": 4}}
    anonymize(_job(duck_url, noise, **_keyed(monkeypatch)))
    first = published(duck_url)
    anonymize(_job(duck_url, noise, **_keyed(monkeypatch)), replace=True)
    assert published(duck_url) == first
    fresh = anonymize(_job(duck_url, noise), replace=True)
    assert not fresh.reproducible and published(duck_url) != first


@pytest.mark.parametrize(("distribution", "scale"), [("uniform", 8.0), ("gaussian", 2.0)])
def test_the_noise_has_its_distribution(duck_url, distribution, scale):
    """On a column of zeros the published values are the noise itself: its Kolmogorov-Smirnov distance to the
    declared distribution is within the 1% critical value (a fixed key makes the draw fixed: no flakiness)."""
    n = 5000
    _people(duck_url, [(i, 0, 0, "Lyon") for i in range(n)])
    job = _job(duck_url, {"age": {"distribution": distribution, "width" if distribution == "uniform" else "sd": scale}})
    anonymize(job)
    engine = sa.create_engine(duck_url)
    with engine.connect() as conn:
        noise = sorted(conn.exec_driver_sql("SELECT age FROM people_noisy").scalars())
    engine.dispose()

    def cdf(x: float) -> float:
        if distribution == "uniform":
            return min(1.0, max(0.0, x / scale + 0.5))
        return 0.5 * (1 + math.erf(x / (scale * math.sqrt(2))))

    distance = max(max(abs(cdf(x) - i / n), abs(cdf(x) - (i + 1) / n)) for i, x in enumerate(noise))
    assert distance < 1.63 / math.sqrt(n)
    if distribution == "uniform":
        assert -scale / 2 <= noise[0] and noise[-1] <= scale / 2


def reference_reconstruction(counts: list[int], kernel, values: int, tolerance: float) -> tuple[list[float], int]:
    """The iteration in plain Python, from the interval counts and K(distance in intervals), to the same rule."""
    k = len(counts)
    estimate = [1 / k] * k
    threshold = tolerance * chi_square_threshold(k - 1)
    for iteration in range(1, 1001):
        following = [0.0] * k
        for z, n in enumerate(counts):
            weights = [kernel(z - a) * estimate[a] for a in range(k)]
            total = sum(weights)
            if n and total > 0:
                for a in range(k):
                    following[a] += n * weights[a] / total
        s = sum(following)
        following = [f / s for f in following]
        change, estimate = chi_square(following, estimate, values), following
        if change < threshold:
            return estimate, iteration
    return estimate, 1000


@pytest.mark.parametrize("engine_name", ["duckdb", "postgres"])
@pytest.mark.parametrize(("distribution", "scale"), [("uniform", 30.0), ("gaussian", 10.0)])
def test_the_reconstruction_is_the_iteration_it_states(
    duck_url, request, monkeypatch, engine_name, distribution, scale
):
    rng = random.Random(3)
    ages = [int(rng.gauss(30, 4)) if i % 2 else int(rng.gauss(60, 5)) for i in range(3000)]  # two modes
    url, schema = duck_url, None
    if engine_name == "postgres":
        url, schema = PG_URL, request.getfixturevalue("pg_schema")
    _people(url, [(i, a, None, "Lyon") for i, a in enumerate(ages)], schema)
    parameter = "width" if distribution == "uniform" else "sd"
    anonymize(_job(url, {"age": {"distribution": distribution, parameter: scale}}, schema, **_keyed(monkeypatch)))
    found = reconstruct(url, "people_noisy", "age", schema, intervals=25, original="people", original_schema=schema)
    width = found.intervals[0].high - found.intervals[0].low
    counts = [round(i.perturbed * found.values) for i in found.intervals]

    def kernel(steps: int) -> float:
        d = steps * width
        if distribution == "uniform":
            return max(0.0, min(d + width / 2, scale / 2) - max(d - width / 2, -scale / 2))
        return math.exp(-0.5 * (d / scale) ** 2)

    expected, iterations = reference_reconstruction(counts, kernel, found.values, 0.01)
    assert found.converged and found.iterations == iterations
    assert [i.reconstructed for i in found.intervals] == pytest.approx(expected, abs=1e-9)
    assert found.l1_reconstructed < 0.75 * found.l1_perturbed  # the point of it: closer to the truth


def test_the_noise_can_be_given_instead_of_its_table(duck_url):
    _people(duck_url, [(i, 20 + i % 40, None, "Lyon") for i in range(500)])
    anonymize(_job(duck_url, {"age": {"distribution": "uniform", "width": 6}}, noise_table="described"))
    with pytest.raises(DataError, match="no noise table 'people_noisy_noise'"):
        reconstruct(duck_url, "people_noisy", "age")
    by_table = reconstruct(duck_url, "people_noisy", "AGE", noise_table="described")
    given = reconstruct(duck_url, "people_noisy", "age", noise={"distribution": "uniform", "width": 6})
    assert by_table.frame().equals(given.frame()) and by_table.column == "age"
    with pytest.raises(DataError, match="holds VARCHAR, not numbers"):
        reconstruct(duck_url, "people_noisy", "city", noise={"distribution": "uniform", "width": 6})
    with pytest.raises(ConfigError, match="width must be a finite number above 0"):
        reconstruct(duck_url, "people_noisy", "age", noise={"distribution": "uniform", "width": -1})


def test_the_cli_publishes_and_reconstructs(duck_url, tmp_path):
    import yaml

    _people(duck_url, [(i, 20 + i % 40, i, "Lyon") for i in range(500)])
    config = tmp_path / "job.yaml"
    job = {
        "source": {"url": duck_url, "table": "people"},
        "quasi_identifiers": ["age"],
        "insensitive": ["pid", "income", "city"],
        "output": {
            "table": "people_noisy",
            "method": "randomize",
            "noise": {"age": {"distribution": "uniform", "width": 6}},
        },
    }
    config.write_text(yaml.safe_dump(job))
    result = invoke("anonymize", str(config))
    assert result.exit_code == 0, result.output
    assert "Published randomized, audited:" in result.output and "uniform, width 6" in result.output
    result = invoke("reconstruct", "people_noisy", "--column", "age", "--db", duck_url, "--original", "people")
    assert result.exit_code == 0, result.output
    assert "L1 to the original: reconstructed" in result.output and "converged" in result.output
    result = invoke(
        "reconstruct", "people_noisy", "--column", "age", "--db", duck_url, "--uniform", "2", "--gaussian", "1"
    )
    assert result.exit_code == 2 and "give the noise once" in result.output


def test_the_key_is_in_no_record(duck_url, monkeypatch):
    _people(duck_url, _rows(50))
    anonymize(_job(duck_url, {"age": {"distribution": "uniform", "width": 4}}, **_keyed(monkeypatch)))
    engine = sa.create_engine(duck_url)
    with engine.connect() as conn:
        records = conn.exec_driver_sql("SELECT * FROM sqlanon.runs").all()
    engine.dispose()
    assert records and KEY not in repr(records) and KEY.encode().hex() not in repr(records)


@pytest.mark.parametrize(
    ("noise", "output", "error"),
    [
        ({"age": {"distribution": "uniform", "width": 0}}, {}, "width must be a finite number above 0"),
        ({"age": {"distribution": "gaussian", "sd": float("nan")}}, {}, "sd must be a finite number above 0"),
        ({"age": {"distribution": "laplace", "b": 1}}, {}, "must be {distribution: uniform"),
        ({"age": {"distribution": "uniform", "sd": 1}}, {}, "takes width: NUMBER only"),
        ({}, {}, "output.noise must map each column"),
        ({"age": {"distribution": "uniform", "width": 2}}, {"noise_key": {"key": "x"}}, "takes one of key_env"),
    ],
)
def test_bad_settings_are_refused_when_the_job_is_read(duck_url, noise, output, error):
    with pytest.raises(ConfigError, match=error.replace("{", "\\{")):
        _job(duck_url, noise, **output)


def test_what_randomization_cannot_publish_is_refused_and_nothing_written(duck_url, tmp_path):
    _people(duck_url, _rows(50), income="DOUBLE")
    before = user_tables(duck_url)
    uniform = {"distribution": "uniform", "width": 2}
    with pytest.raises(DataError, match="column 'city' holds VARCHAR, not numbers"):
        anonymize(_job(duck_url, {"age": uniform, "city": uniform}))
    with pytest.raises(ConfigError, match="the job publishes no column 'salary'"):
        anonymize(_job(duck_url, {"age": uniform, "salary": uniform}))
    with pytest.raises(ConfigError, match="quasi-identifier 'age' would be published as it is"):
        anonymize(_job(duck_url, {"income": uniform}))
    short = tmp_path / "short.key"
    short.write_text("too short")
    with pytest.raises(ConfigError, match="the key has 9 bytes"):
        anonymize(_job(duck_url, {"age": uniform}, noise_key={"key_file": str(short)}))
    engine = sa.create_engine(duck_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE people SET income = 'NaN' WHERE pid = 3")
    engine.dispose()
    with pytest.raises(DataError, match="column 'income' holds 2 values that are not finite numbers"):
        anonymize(_job(duck_url, {"age": uniform, "income": uniform}))
    assert user_tables(duck_url) == before
    with pytest.raises(ConfigError, match="adds noise to every record and checks no criteria"):
        job_from_dict(
            {
                "source": {"url": duck_url, "table": "people"},
                "quasi_identifiers": ["age"],
                "insensitive": ["pid", "income", "city"],
                "criteria": {"k_anonymity": {"k": 2}},
                "output": {"table": "people_noisy", "method": "randomize", "noise": {"age": uniform}},
            }
        )


def test_the_audit_fails_a_table_whose_noise_is_not_the_declared_one(duck_url):
    """The audit's checks are independent of the SELECT: a release whose values moved further than the width, or
    whose mean moved, is refused."""
    from sqlanon.engine.randomization import Figures
    from sqlanon.errors import AuditError
    from sqlanon.model.noise import Noise
    from sqlanon.publish.randomize import audit_noise

    noise = [Noise("age", "uniform", 2.0)]
    source = (100, [Figures(100, 100, 20.0, 60.0, 40.0)])
    assert all(audit_noise("t", noise, source, (100, [Figures(100, 100, 19.2, 60.9, 40.1)])).values())
    with pytest.raises(AuditError, match="within the noise's width"):
        audit_noise("t", noise, source, (100, [Figures(100, 100, 18.0, 60.0, 40.0)]))
    with pytest.raises(AuditError, match="mean kept"):
        audit_noise("t", noise, source, (100, [Figures(100, 100, 19.5, 60.5, 40.9)]))
    with pytest.raises(AuditError, match="values where the source has them"):
        audit_noise("t", noise, source, (100, [Figures(99, 99, 19.5, 60.5, 40.0)]))


def test_a_registered_job_reads_no_noise_key_file(duck_url, tmp_path):
    import yaml

    from sqlanon.api import register_job

    (tmp_path / "noise.key").write_text(KEY)
    config = tmp_path / "job.yaml"
    output = {"table": "people_noisy", "method": "randomize", "noise": {"age": {"distribution": "uniform", "width": 2}}}
    job = {
        "source": {"table": "people"},
        "quasi_identifiers": ["age"],
        "insensitive": ["pid", "income", "city"],
        "output": {**output, "noise_key": {"key_file": "noise.key"}},
    }
    config.write_text(yaml.safe_dump(job))
    with pytest.raises(ConfigError, match="cannot read a noise key from a file"):
        register_job("noisy", config, duck_url)


def test_hostile_column_names_are_quoted(duck_url):
    column = 'Age "in years"; DROP TABLE x'
    engine = sa.create_engine(duck_url)
    with engine.begin() as conn:
        conn.exec_driver_sql('CREATE TABLE "People" ("Age ""in years""; DROP TABLE x" INTEGER, city VARCHAR)')
        conn.exec_driver_sql("""INSERT INTO "People" SELECT 20 + i % 50, 'Lyon' FROM range(300) t(i)""")
    engine.dispose()
    job = job_from_dict(
        {
            "source": {"url": duck_url, "table": "People"},
            "quasi_identifiers": [column],
            "insensitive": ["city"],
            "output": {
                "table": "Noisy People",
                "method": "randomize",
                "noise": {column: {"distribution": "gaussian", "sd": 2}},
            },
        }
    )
    report = anonymize(job)
    assert report.rows == 300 and all(report.audit.values())
    found = reconstruct(duck_url, "Noisy People", column, original="People")
    assert found.column == column and found.converged
