"""Mondrian (output.method mondrian): against an independent in-memory Mondrian, audited, bad input."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml

from sqlanon import anonymize, bucketize, job_from_dict, partition
from sqlanon.engine import mondrian
from sqlanon.errors import ConfigError
from sqlanon.publish.mondrian import MondrianReport

from .conftest import user_tables
from .test_cli import run as invoke

CITIES = {
    "Lyon": "South",
    "Nice": "South",
    "Marseille": "South",
    "Lille": "North",
    "Paris": "North",
    "Rouen": "North",
    "Brest": "West",
}
DISEASES = ["flu", "hiv", "cancer", "asthma"]


def _table(url: str, seed: int, rows: int, age_type: str = "INTEGER") -> list[tuple[int, int, str, str]]:
    rng = random.Random(seed)
    data = [(i, rng.randint(20, 60), rng.choice(list(CITIES)), rng.choice(DISEASES)) for i in range(rows)]
    _store_people(url, "people", data, age_type)
    return data


def _store_people(url: str, table: str, rows: list[tuple[int, int, str, str]], age_type: str = "INTEGER") -> None:
    """`rows` (pid, age, city, disease) as a new table `table` (a quoted name)."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE {table} (pid INTEGER, age {age_type}, city VARCHAR, disease VARCHAR)")
        conn.execute(
            sa.text(f"INSERT INTO {table} VALUES (:p, :a, :c, :d)"),
            [dict(zip(("p", "a", "c", "d"), row)) for row in rows],
        )
    engine.dispose()


def _config(url: str, tmp_path: Path, criteria: dict, **output) -> dict:
    hierarchy = tmp_path / "city.csv"
    hierarchy.write_text("".join(f"{city};{region};*\n" for city, region in CITIES.items()))
    return {
        "source": {"url": url, "table": "people"},
        "quasi_identifiers": {"age": None, "city": str(hierarchy)},
        "sensitive": ["disease"],
        "identifying": ["pid"],
        "criteria": criteria,
        "output": {"table": "people_mondrian", "method": "mondrian", **output},
    }


def oracle(
    rows: list[tuple[int, int | None, str, str]],
    k: int,
    l: int = 1,
    relaxed: bool = False,
    cities: dict[str, str] = CITIES,
) -> dict[int, tuple[str | None, str]]:
    """Strict (or relaxed) Mondrian in memory, recursively: per partition, the widest QI whose cut leaves every
    part with >= k rows (and >= l diseases); age at its lower median, city down its hierarchy (`cities`: each
    city's region)."""
    leaves = {
        "*": len(cities),
        **{r: sum(1 for v in cities.values() if v == r) for r in set(cities.values())},
        **dict.fromkeys(cities, 1),
    }
    numbers = [r[1] for r in rows if r[1] is not None]
    span = max(numbers) - min(numbers)
    out: dict[int, tuple[str | None, str]] = {}

    def order(age: int | None) -> float:  # a NULL age is below every number
        return -math.inf if age is None else age

    def published_age(part: list) -> str | None:
        ages = [r[1] for r in part if r[1] is not None]
        if not ages:
            return None
        low, high = min(ages), max(ages)
        return (str(low) if low == high else f"[{low}-{high}]") + (" or NULL" if len(ages) < len(part) else "")

    def city_at(city: str, level: int) -> str:
        return [city, cities[city], "*"][level]

    def ok(part: list) -> bool:
        return len(part) >= k and len({r[3] for r in part}) >= l

    def cuts(part: list, level: int) -> list[tuple[float, int, list[list]]]:
        found = []
        ages = sorted((order(r[1]), r[0]) for r in part)
        if ages[-1][0] > ages[0][0]:
            n = len(part)
            if relaxed:
                left_ids = {pid for _, pid in ages[: math.ceil(n / 2)]}
                pieces = [[r for r in part if r[0] in left_ids], [r for r in part if r[0] not in left_ids]]
            else:
                cut = ages[math.ceil(n / 2) - 1][0]
                pieces = [[r for r in part if order(r[1]) <= cut], [r for r in part if order(r[1]) > cut]]
            least = min(a for a, _ in ages if a > -math.inf)  # NULLs add nothing to the width
            if all(pieces):
                found.append(((ages[-1][0] - least) / span if span else 0, 0, pieces))
        if level > 0:
            children: dict[str, list] = {}
            for r in part:
                children.setdefault(city_at(r[2], level - 1), []).append(r)
            if len(children) > 1:
                found.append((leaves[city_at(part[0][2], level)] / len(cities), 1, list(children.values())))
        return found

    def split(part: list, level: int) -> None:
        allowed = [(w, dim, pieces) for w, dim, pieces in cuts(part, level) if all(ok(p) for p in pieces)]
        if not allowed:
            age = published_age(part)
            for r in part:
                out[r[0]] = (age, city_at(r[2], level))
            return
        _, dim, pieces = max(allowed, key=lambda a: (a[0], -a[1]))
        for piece in pieces:
            split(piece, level - 1 if dim == 1 else level)

    split(rows, 2)
    return out


def _published(url: str, schema: str | None = None) -> list[tuple[str, str, str]]:
    engine = sa.create_engine(url)
    table = f'"{schema}".people_mondrian' if schema else "people_mondrian"
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(f"SELECT COALESCE(age, '(NULL)'), city, disease FROM {table}").all()
    engine.dispose()
    return sorted(tuple(r) for r in rows)


@pytest.mark.parametrize(
    "seed, k, l, relaxed", [(1, 3, 1, False), (2, 5, 1, False), (3, 4, 2, False), (4, 3, 1, True), (5, 2, 2, True)]
)
def test_mondrian_equals_an_in_memory_mondrian(
    duck_url: str, tmp_path: Path, seed: int, k: int, l: int, relaxed: bool
) -> None:
    rows = _table(duck_url, seed, 80)
    diversity = {"distinct_l_diversity": {"l": l, "attribute": "disease"}} if l > 1 else {}
    criteria = {"k_anonymity": {"k": k}, **diversity}
    report = partition(job_from_dict(_config(duck_url, tmp_path, criteria, relaxed=relaxed)))
    expected = oracle(rows, k, l, relaxed)
    assert _published(duck_url) == sorted((*expected[r[0]], r[3]) for r in rows)
    assert report.audit.ok and report.result.smallest >= k
    assert report.result.partitions == len(set(expected.values())) or relaxed


@pytest.mark.parametrize(
    "seed, k, l, relaxed, age_type",
    [(7, 3, 1, False, "INTEGER"), (8, 3, 2, False, "BIGINT"), (9, 2, 1, True, "DOUBLE")],
)
def test_the_other_ways_of_a_round_give_the_same_partitions(
    duck_url: str,
    tmp_path: Path,
    seed: int,
    k: int,
    l: int,
    relaxed: bool,
    age_type: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rows sorted by partition between rounds, and the parts of every cut counted in one join (both only on
    large tables otherwise); a numeric QI that the rounds carry as a double."""
    monkeypatch.setattr(mondrian, "SORT_GROWTH", 2)  # the work table sorted whenever the partitions have doubled
    monkeypatch.setattr(mondrian, "WIDE_CUTS", 1)
    rows = _table(duck_url, seed, 80, age_type)
    diversity = {"distinct_l_diversity": {"l": l, "attribute": "disease"}} if l > 1 else {}
    partition(job_from_dict(_config(duck_url, tmp_path, {"k_anonymity": {"k": k}, **diversity}, relaxed=relaxed)))
    expected = oracle(rows, k, l, relaxed)
    assert _published(duck_url) == sorted((*expected[r[0]], r[3]) for r in rows)


def test_every_criterion_holds_on_the_output(duck_url: str, tmp_path: Path) -> None:
    _table(duck_url, 6, 120)
    for criteria in (
        {"entropy_l_diversity": {"l": 2, "attribute": "disease"}},
        {"t_closeness": {"t": 0.3, "attribute": "disease"}},
        {"recursive_l_diversity": {"c": 3, "l": 2, "attribute": "disease"}},
        {"beta_likeness": {"beta": 1.0, "attribute": "disease"}},
        {"delta_disclosure": {"delta": 1.0, "attribute": "disease"}},  # not monotone: each part is checked
    ):
        report = partition(job_from_dict(_config(duck_url, tmp_path, criteria)), replace=True)
        assert report.audit.ok, criteria
        if "delta_disclosure" in criteria:  # some partition was cut, so the audit read more than the whole table
            assert report.result.partitions > 1
    # anonymize publishes by the job's method: here the same partitioning again
    again = anonymize(job_from_dict(_config(duck_url, tmp_path, criteria)), replace=True)
    assert isinstance(again, MondrianReport) and again.rows == report.rows and again.audit.ok


def test_null_values_a_hierarchy_maps_are_partitioned_like_any_other(duck_url: str, tmp_path: Path) -> None:
    """NULL cities, mapped by the hierarchy's empty line (in region North), against the in-memory Mondrian with
    the empty city as one more leaf: a partition of NULLs only publishes NULL, as a generalization's level 0
    does. Unmapped, NULLs are refused with the fix."""
    rng = random.Random(11)
    cities = {**CITIES, "": "North"}
    rows = [(i, rng.randint(20, 60), rng.choice(list(cities)), rng.choice(DISEASES)) for i in range(120)]
    _store_people(duck_url, "people", [(p, a, c or None, d) for p, a, c, d in rows])  # type: ignore[misc]
    config = _config(duck_url, tmp_path, {"k_anonymity": {"k": 3}})
    _cli_error(tmp_path, config, "map them in its hierarchy file with a line whose value is empty", duck_url)
    hierarchy = Path(config["quasi_identifiers"]["city"])
    hierarchy.write_text(hierarchy.read_text() + ";North;*\n")
    report = partition(job_from_dict(config))
    expected = oracle(rows, 3, cities=cities)
    engine = sa.create_engine(duck_url)
    with engine.connect() as conn:
        published = sorted(conn.exec_driver_sql("SELECT age, COALESCE(city, '(NULL)'), disease FROM people_mondrian"))
    engine.dispose()
    shown = {"": "(NULL)"}
    assert [tuple(r) for r in published] == sorted(
        (expected[r[0]][0], shown.get(expected[r[0]][1], expected[r[0]][1]), r[3]) for r in rows
    )
    assert ("(NULL)" in {r[1] for r in published}) and report.audit.ok


@pytest.mark.parametrize(
    "seed, k, nulls, relaxed, wide",
    [(12, 3, 0.3, False, False), (13, 5, 0.03, False, False), (14, 3, 0.2, True, False), (15, 4, 0.1, False, True)],
)
def test_null_numbers_are_below_every_number(
    duck_url: str,
    tmp_path: Path,
    seed: int,
    k: int,
    nulls: float,
    relaxed: bool,
    wide: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A numeric QI's NULLs are partitioned as a value below every number (medians, cuts and ranks order them
    first; they add nothing to a range's width), against the in-memory Mondrian: a partition of NULLs only
    publishes NULL, one of numbers and a few NULLs its numbers' range and " or NULL"; so does a mean."""
    if wide:  # the parts of every cut counted in one join, the rows sorted between rounds
        monkeypatch.setattr(mondrian, "SORT_GROWTH", 2)
        monkeypatch.setattr(mondrian, "WIDE_CUTS", 1)
    rng = random.Random(seed)
    rows = [
        (i, None if rng.random() < nulls else rng.randint(20, 60), rng.choice(list(CITIES)), rng.choice(DISEASES))
        for i in range(120)
    ]
    _store_people(duck_url, "people", rows)  # type: ignore[arg-type]
    report = partition(job_from_dict(_config(duck_url, tmp_path, {"k_anonymity": {"k": k}}, relaxed=relaxed)))
    expected = oracle(rows, k, relaxed=relaxed)
    shown = [(expected[r[0]][0] or "(NULL)", expected[r[0]][1], r[3]) for r in rows]
    assert _published(duck_url) == sorted(shown)
    assert report.audit.ok and report.result.smallest >= k
    assert any(age is None or age.endswith(" or NULL") for age, _ in expected.values())
    config = _config(duck_url, tmp_path, {"k_anonymity": {"k": k}}, numeric="mean")
    config["output"]["table"] = "people_means"
    partition(job_from_dict(config))
    engine = sa.create_engine(duck_url)
    with engine.connect() as conn:
        means = conn.exec_driver_sql("SELECT age FROM people_means").scalars().all()
    engine.dispose()
    assert {m is None or m.endswith(" or NULL") for m in means} != {False}
    assert all(m is None or float(m.removesuffix(" or NULL")) >= 20 for m in means)


def test_means_instead_of_ranges(duck_url: str, tmp_path: Path) -> None:
    _table(duck_url, 7, 40)
    partition(job_from_dict(_config(duck_url, tmp_path, {"k_anonymity": {"k": 4}}, numeric="mean")))
    ages = {r[0] for r in _published(duck_url)}
    assert all("[" not in a and float(a) >= 20 for a in ages)
    assert all(len(a.split(".")[1]) == 1 for a in ages)  # an integer column's mean: one decimal


def _cli_error(tmp_path: Path, config: dict, expected: str, url: str) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    before = user_tables(url)
    result = invoke("anonymize", str(path))
    assert result.exit_code == 2 and expected in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert user_tables(url) == before


def test_bad_input(duck_url: str, tmp_path: Path) -> None:
    _table(duck_url, 8, 30)
    config = _config(duck_url, tmp_path, {"k_anonymity": {"k": 3}})
    _cli_error(tmp_path, {**config, "criteria": {"k_anonymity": {"k": 31}}}, "whole table", duck_url)
    text_qi = {**config, "quasi_identifiers": {"age": None, "city": None}}
    _cli_error(tmp_path, text_qi, "give it a hierarchy", duck_url)
    engine = sa.create_engine(duck_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE people SET city = 'Berlin' WHERE pid = 2")
    engine.dispose()
    _cli_error(tmp_path, config, "not in its hierarchy", duck_url)
    with pytest.raises(ConfigError, match="needs criteria"):
        job_from_dict({**config, "criteria": None})
    with pytest.raises(ConfigError, match="output.numeric"):
        job_from_dict({**config, "output": {**config["output"], "numeric": "median"}})


def test_cli_json_and_postgresql(duck_url: str, tmp_path: Path, pg_server: str, pg_schema: str) -> None:
    """The CLI's summary and audit; the same partitions, ranges and means on PostgreSQL, NULL ages included."""
    rows = [(p, None if p % 9 == 0 else a, c, d) for p, a, c, d in _table(duck_url, 9, 60)]
    engine = sa.create_engine(duck_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE people SET age = NULL WHERE pid % 9 = 0")
    engine.dispose()
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(_config(duck_url, tmp_path, {"k_anonymity": {"k": 4}})))
    result = invoke("anonymize", str(path), "--format", "json")
    summary = json.loads(result.stdout)
    assert result.exit_code == 0 and summary["smallest_partition"] >= 4
    assert summary["partitioning_seconds"] > 0 and summary["publishing_seconds"] > 0
    audited = invoke("audit", str(path), "--table", "people_mondrian", "--format", "json")  # ranges as QI values
    assert audited.exit_code == 0 and json.loads(audited.stdout)["k_anonymity"]["holds"]
    duck = _published(duck_url)
    _store_people(pg_server, f'"{pg_schema}".people', rows)  # type: ignore[arg-type]
    config = _config(pg_server, tmp_path, {"k_anonymity": {"k": 4}})
    config["source"]["schema"] = pg_schema
    partition(job_from_dict(config))
    assert _published(pg_server, pg_schema) == duck  # the same partitions on both databases
    for url in (duck_url, pg_server):  # and the same means, printed alike
        config = _config(url, tmp_path, {"k_anonymity": {"k": 4}}, numeric="mean")
        config["source"]["schema"] = pg_schema if url == pg_server else None
        partition(job_from_dict(config), replace=True)
    engine = sa.create_engine(pg_server)
    with engine.connect() as conn:
        means = conn.exec_driver_sql(f"""SELECT COALESCE(age, '(NULL)') FROM "{pg_schema}".people_mondrian""")
        pg_means = sorted(r[0] for r in means)
    engine.dispose()
    assert pg_means == sorted(r[0] for r in _published(duck_url))


@pytest.mark.parametrize("seed, k, l, relaxed", [(3, 4, 2, False), (4, 3, 1, True)])
def test_postgresql_equals_an_in_memory_mondrian(
    duck_url: str, tmp_path: Path, pg_server: str, pg_schema: str, seed: int, k: int, l: int, relaxed: bool
) -> None:
    """PostgreSQL's own SQL for a round (its median, its ranks for relaxed cuts), against the oracle."""
    rows = _table(duck_url, seed, 80)  # the same random rows as the DuckDB test of this seed
    _store_people(pg_server, f'"{pg_schema}".people', rows)
    diversity = {"distinct_l_diversity": {"l": l, "attribute": "disease"}} if l > 1 else {}
    config = _config(pg_server, tmp_path, {"k_anonymity": {"k": k}, **diversity}, relaxed=relaxed)
    config["source"]["schema"] = pg_schema
    report = partition(job_from_dict(config))
    expected = oracle(rows, k, l, relaxed)
    assert _published(pg_server, pg_schema) == sorted((*expected[r[0]], r[3]) for r in rows)
    assert report.audit.ok and report.result.smallest >= k


@pytest.mark.parametrize("subset", ["table", "column"])
def test_mondrian_of_a_research_subset_partitions_and_publishes_its_rows_alone(
    duck_url: str, tmp_path: Path, subset: str
) -> None:
    """The rows of the subset (a table of keys, or a flag column that is never published) are partitioned as
    the in-memory Mondrian partitions a table of them alone; the other rows are not published."""
    rows = _table(duck_url, 11, 150)
    study = [row for row in rows if row[0] % 3 != 1]
    with sa.create_engine(duck_url).begin() as conn:
        if subset == "table":
            conn.exec_driver_sql("CREATE TABLE study AS SELECT pid FROM people WHERE pid % 3 != 1")
        else:
            conn.exec_driver_sql("ALTER TABLE people ADD COLUMN in_study BOOLEAN")
            conn.exec_driver_sql("UPDATE people SET in_study = pid % 3 != 1")
    config = _config(
        duck_url, tmp_path, {"k_anonymity": {"k": 4}, "distinct_l_diversity": {"l": 2, "attribute": "disease"}}
    )
    config["subset"] = {"table": "study", "key": "pid"} if subset == "table" else {"column": "in_study"}
    report = partition(job_from_dict(config))
    expected = oracle(study, 4, 2)
    assert _published(duck_url) == sorted((*expected[r[0]], r[3]) for r in study)
    assert report.audit.ok and report.rows == len(study)
    with sa.create_engine(duck_url).connect() as conn:
        published = list(conn.exec_driver_sql("SELECT * FROM people_mondrian LIMIT 0").keys())
    assert "in_study" not in published and "pid" not in published
    config["criteria"] = {"delta_presence": {"d_min": 0.0, "d_max": 0.9}}
    with pytest.raises(ConfigError, match="delta_presence compares each class with the population"):
        job_from_dict(config)


def test_postgresql_partitions_a_research_subset_as_the_in_memory_mondrian_does(
    duck_url: str, tmp_path: Path, pg_server: str, pg_schema: str
) -> None:
    rows = _table(duck_url, 12, 120)
    _store_people(pg_server, f'"{pg_schema}".people', rows)
    with sa.create_engine(pg_server).begin() as conn:
        conn.exec_driver_sql(
            f'CREATE TABLE "{pg_schema}".study AS SELECT pid FROM "{pg_schema}".people WHERE MOD(pid, 4) != 0'
        )
    config = _config(pg_server, tmp_path, {"k_anonymity": {"k": 3}})
    config["source"]["schema"] = pg_schema
    config["subset"] = {"table": "study", "key": "pid", "schema": pg_schema}
    report = partition(job_from_dict(config))
    study = [row for row in rows if row[0] % 4 != 0]
    expected = oracle(study, 3)
    assert _published(pg_server, pg_schema) == sorted((*expected[r[0]], r[3]) for r in study)
    assert report.audit.ok and report.rows == len(study)


def test_anatomy_of_a_research_subset_bucketizes_its_rows_as_a_table_of_them_alone(duck_url: str, tmp_path: Path):
    """Anatomy's buckets of the subset's rows are those of a table that holds them alone (same seed); the other
    rows are not published."""
    rows = _table(duck_url, 13, 90)
    _store_people(duck_url, "study_people", [row for row in rows if row[0] % 3 != 1])
    with sa.create_engine(duck_url).begin() as conn:
        conn.exec_driver_sql("CREATE TABLE study AS SELECT pid FROM people WHERE pid % 3 != 1")
    base = {
        "quasi_identifiers": ["age", "city"],
        "sensitive": ["disease"],
        "insensitive": ["pid"],
    }
    published = {}
    for name, table, subset in (
        ("subset", "people", {"table": "study", "key": "pid"}),
        ("alone", "study_people", None),
    ):
        config = {
            **base,
            "source": {"url": duck_url, "table": table},
            "output": {"table": f"anatomy_{name}", "method": "anatomy", "l": 2, "seed": "s"},
            **({"subset": subset} if subset else {}),
        }
        report = bucketize(job_from_dict(config, tmp_path))
        with sa.create_engine(duck_url).connect() as conn:
            qi = conn.exec_driver_sql(f"SELECT pid, age, city, bucket FROM anatomy_{name} ORDER BY pid").all()
            values = conn.exec_driver_sql(f"SELECT * FROM anatomy_{name}_sensitive ORDER BY 1, 2").all()
        published[name] = (report.rows, qi, values)
    assert published["subset"] == published["alone"]
    assert published["subset"][0] == 60 and all(pid % 3 != 1 for pid, *_ in published["subset"][1])
