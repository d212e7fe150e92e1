"""Bucketized publication (anatomy) and maximum-entropy inference across releases."""

from __future__ import annotations

import importlib
import itertools
import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
import yaml

from sqlanon import bucketize, inference, job_from_dict
from sqlanon.errors import ConfigError, DataError

from .conftest import user_tables
from .republishing_example import D1, D2, PATIENTS, example_config, write_example, write_release
from .test_cli import run as invoke


def run(*args: str) -> tuple[int, str, str]:
    result = invoke(*args)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def example_url(duck_url: str) -> str:
    write_example(duck_url)
    return duck_url


def probabilities(report_table: str, url: str) -> dict[tuple[str, str], float]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(f"SELECT pid, disease, probability FROM {report_table}").all()
    engine.dispose()
    return {(str(p), d): float(v) for p, d, v in rows}


def test_the_papers_example_reaches_the_papers_conclusions(example_url: str) -> None:
    job = job_from_dict(example_config(example_url, ["d1", "d2"], table="inferred"))
    report = inference(job)
    p = probabilities("inferred", example_url)
    assert p[("10", "Lung Cancer")] == pytest.approx(1, abs=1e-6)  # Patient 10 has Lung Cancer
    assert p[("14", "Flu")] == pytest.approx(0, abs=1e-6)  # Patient 14 cannot have Flu
    assert p[("11", "Flu")] == 0  # a zero constraint: Flu is not in 11's bucket of D1'
    assert p[("11", "Pneumonia")] == pytest.approx(0.5, abs=1e-6)
    assert report.converged and report.max_violation <= 1e-4
    assert {(d["pseudonym"], d["value"]) for d in report.positive} == {
        ("10", "Lung Cancer"),
        ("7", "Diabetes"),
        ("13", "Diabetes"),
    }
    assert ("14", "Flu") in {(d["pseudonym"], d["value"]) for d in report.negative}
    assert all(d["releases"] == "d1 + d2" for d in report.positive + report.negative)
    # the entropy of D1' alone by hand: 2 ln 2 + 2 ln 4 for {Flu x2, Pneumonia, Diabetes}, 3 ln 3 for the others
    d1 = report.entropy[0]
    assert d1.alone == pytest.approx(6 * math.log(2) + 9 * math.log(3))
    assert d1.together < d1.alone
    assert report.persons == 15 and report.one_constraints == 15 and report.relation_constraints == 24


def test_from_the_second_release_alone_pneumonia_and_flu_are_one_third_each(example_url: str) -> None:
    report = inference(job_from_dict(example_config(example_url, ["d2"], table="alone")))
    p = probabilities("alone", example_url)
    assert p[("11", "Pneumonia")] == pytest.approx(1 / 3) and p[("11", "Flu")] == pytest.approx(1 / 3)
    assert report.entropy[0].alone == pytest.approx(report.entropy[0].together)
    assert not report.disclosed


def maxent_oracle(
    releases: list[list[tuple[list[str], dict[str, int]]]], passes: int = 20000
) -> dict[tuple[str, str], float]:
    """Maximum entropy by plain iterative scaling in numpy, over (person, value) pairs of the zero constraints:
    no SQL, no snapping, many passes (slow near forced zeros, so compared within 1e-3)."""
    allowed: dict[str, set[str]] = {}
    for release in releases:
        for persons, counts in release:
            for person in persons:
                allowed[person] = allowed.get(person, set(counts)) & set(counts)
    pairs = sorted((i, s) for i, values in allowed.items() for s in values)
    index = {pair: j for j, pair in enumerate(pairs)}
    person_of = np.array([sorted(allowed).index(i) for i, _ in pairs])
    groups = []  # per release: group number of each pair (-1 outside the release), and the target per group
    for release in releases:
        of = np.full(len(pairs), -1)
        target = []
        for persons, counts in release:
            for s, c in counts.items():
                members = [index[(i, s)] for i in persons if (i, s) in index]
                of[members] = len(target)
                target.append(c)
        groups.append((of, np.array(target, dtype=float)))
    x = np.ones(len(pairs))
    for _ in range(passes):
        for of, target in groups:
            inside = of >= 0
            sums = np.bincount(of[inside], weights=x[inside], minlength=len(target))
            x[inside] *= target[of[inside]] / sums[of[inside]]
        x /= np.bincount(person_of, weights=x)[person_of]
    return {pair: float(v) for pair, v in zip(pairs, x)}


def _release(values: dict[int, str], buckets: list[list[int]]) -> list[tuple[list[str], dict[str, int]]]:
    out = []
    for bucket in buckets:
        counts: dict[str, int] = {}
        for person in bucket:
            counts[values[person]] = counts.get(values[person], 0) + 1
        out.append(([str(p) for p in bucket], counts))
    return out


def test_the_papers_example_against_plain_iterative_scaling(example_url: str) -> None:
    values = {pid: disease for pid, (_, _, disease) in PATIENTS.items()}
    expected = maxent_oracle([_release(values, D1), _release(values, D2)])
    inference(job_from_dict(example_config(example_url, ["d1", "d2"], table="inferred")))
    found = probabilities("inferred", example_url)
    for pair, value in expected.items():
        assert found[pair] == pytest.approx(value, abs=1e-3), pair
    assert all(v == 0 for pair, v in found.items() if pair not in expected)  # zero constraints


def _table_with_versions(url: str, seed: int, persons: int = 36, shared: int = 24) -> tuple[dict, dict]:
    """Two versions of a random table (pid, age, zip, disease) sharing `shared` persons, as v1 and v2; each
    person's zip is their own, so that a published row leads back to its person."""
    rng = random.Random(seed)
    diseases = ["flu", "hiv", "cancer", "asthma", "ulcer"]
    first = {pid: rng.choice(diseases) for pid in range(persons)}
    second = {pid: first[pid] for pid in range(persons - shared, persons)}
    second.update({pid: rng.choice(diseases) for pid in range(persons, 2 * persons - shared)})
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        for name, version in (("v1", first), ("v2", second)):
            conn.exec_driver_sql(f"CREATE TABLE {name} (pid INTEGER, age INTEGER, zip VARCHAR, disease VARCHAR)")
            for pid, disease in version.items():
                conn.execute(
                    sa.text(f"INSERT INTO {name} VALUES (:p, :a, :z, :d)"),
                    {"p": pid, "a": rng.randint(20, 80), "z": f"1{pid:04d}", "d": disease},
                )
    engine.dispose()
    return first, second


def _anatomy_config(url: str, table: str, l: int, key_file: Path | None = None) -> dict:
    identifying = {"pid": {"pseudonym": {"key_file": str(key_file)}}} if key_file else ["pid"]
    return {
        "source": {"url": url, "table": table},
        "quasi_identifiers": ["age", "zip"],
        "sensitive": ["disease"],
        "identifying": identifying,
        "output": {"table": f"{table}_qi", "method": "anatomy", "l": l},
    }


def _published_buckets(
    url: str, table: str, values: dict[int, str], key_column: dict[str, int]
) -> list[tuple[list[str], dict[str, int]]]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(f"SELECT pid, bucket FROM {table}_qi").all()
    engine.dispose()
    buckets: dict[int, list[int]] = {}
    for pseudonym, bucket in rows:
        buckets.setdefault(bucket, []).append(key_column[pseudonym])
    return [([str(p) for p in members], _release(values, [members])[0][1]) for members in buckets.values()]


@pytest.mark.parametrize("seed, l, persons", [(1, 2, 36), (2, 3, 36), (3, 3, 600)])
def test_anatomy_releases_of_a_changing_table_against_plain_iterative_scaling(
    duck_url: str, tmp_path: Path, seed: int, l: int, persons: int
) -> None:
    """Two versions bucketized by sqlanon (keyed pseudonyms: the same person, the same pseudonym), then the
    inference, compared with the numpy oracle over the same buckets. With 600 persons the iteration's parts
    reach the tolerance after different numbers of passes, so parts are set aside while others go on."""
    first, second = _table_with_versions(duck_url, seed, persons, persons * 5 // 6)
    key = tmp_path / "key"
    key.write_text("0123456789abcdef0123456789abcdef")
    for table in ("v1", "v2"):
        bucketize(job_from_dict(_anatomy_config(duck_url, table, l, key)))
    engine = sa.create_engine(duck_url)
    with engine.connect() as conn:
        pseudonyms = dict(
            conn.exec_driver_sql(
                "SELECT q.pid, s.pid FROM v1_qi q JOIN (SELECT pid, age, zip FROM v1) "
                "s ON s.age = q.age AND s.zip = q.zip"
            ).all()
        )
        pseudonyms.update(
            conn.exec_driver_sql(
                "SELECT q.pid, s.pid FROM v2_qi q JOIN (SELECT pid, age, zip FROM v2) "
                "s ON s.age = q.age AND s.zip = q.zip"
            ).all()
        )
    engine.dispose()
    expected = maxent_oracle(
        [_published_buckets(duck_url, "v1", first, pseudonyms), _published_buckets(duck_url, "v2", second, pseudonyms)],
        passes=80000 if persons > 36 else 20000,  # the larger case has more chains of forced zeros
    )
    config = {
        "source": {"url": duck_url, "table": "v2"},
        "quasi_identifiers": ["age", "zip"],
        "sensitive": ["disease"],
        "identifying": ["pid"],
        "releases": {
            "pseudonym": "pid",
            "series": [
                {"name": "v1", "table": "v1_qi", "sensitive_table": "v1_qi_sensitive"},
                {"name": "v2", "table": "v2_qi", "sensitive_table": "v2_qi_sensitive"},
            ],
        },
        "inference": {"table": "inferred"},
    }
    report = inference(job_from_dict(config))
    found = probabilities("inferred", duck_url)
    by_person = {(str(pseudonyms[p]), d): v for (p, d), v in found.items()}
    for pair, value in expected.items():
        assert by_person[pair] == pytest.approx(value, abs=2e-3), pair
    assert report.converged


def _distinct_buckets(persons: list[int], values: dict[int, str], rng: random.Random) -> list[list[int]]:
    """`persons` in buckets of 1 to 4 persons with distinct values (mostly 4: with 5 values, seeds 0 and 4 give
    buckets of four where the counting rules alone leave a pair no assignment uses)."""
    buckets: list[list[int]] = []
    rest = persons[:]
    rng.shuffle(rest)
    while rest:
        size, bucket = rng.choice([3, 4, 4]), [rest.pop()]
        for pid in list(rest):
            if len(bucket) < size and values[pid] not in {values[p] for p in bucket}:
                bucket.append(pid)
                rest.remove(pid)
        buckets.append(bucket)
    return buckets


def _assignable(bucket: list[int], possible: set[tuple[int, str]], counts: dict[str, int]) -> set[tuple[int, str]]:
    """The pairs of `bucket`'s persons that some assignment of the bucket's values (`counts`) uses, each person
    taking one value of `possible`."""
    values = [v for v, c in counts.items() for _ in range(c)]
    used: set[tuple[int, str]] = set()
    for order in set(itertools.permutations(values)):
        pairs = set(zip(bucket, order))
        if pairs <= possible:
            used |= pairs
    return used


@pytest.mark.parametrize("seed", range(5))
def test_small_buckets_of_distinct_values_need_no_matching(
    duck_url: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two releases of 3- and 4-person buckets of distinct values: propagation leaves the same
    pairs when the counting rules alone treat the buckets of at most three (propagation.COUNTED_GROUP) as when
    every small bucket is matched, and each pair it leaves lies on an assignment of each of its buckets."""
    from sqlanon.engine.maxent import propagation

    solve = importlib.import_module("sqlanon.engine.maxent.solve")  # the package exports its function `solve`
    rng = random.Random(seed)
    diseases = ["flu", "hiv", "cancer", "asthma", "ulcer"]
    patients = {pid: ("x", f"{pid:05d}", rng.choice(diseases)) for pid in range(60)}
    values = {pid: disease for pid, (_, _, disease) in patients.items()}
    releases = [_distinct_buckets(list(range(0, 48)), values, rng), _distinct_buckets(list(range(12, 60)), values, rng)]
    engine = sa.create_engine(duck_url)
    with engine.begin() as conn:
        for name, buckets in zip(("d1", "d2"), releases):
            write_release(conn, name, buckets, patients=patients)
        conn.exec_driver_sql("CREATE TABLE patients (pid INTEGER, gender VARCHAR, zip VARCHAR, disease VARCHAR)")
    engine.dispose()
    left: dict[int, set[tuple[int, str]]] = {}

    def propagate_and_keep(db, conn, tables, *args, **kwargs):  # type: ignore[no-untyped-def]
        possible, removed, rounds = propagation.propagate(db, conn, tables, *args, **kwargs)
        p, persons, vals = possible, tables.persons, tables.vals
        pairs = sa.select(persons.c.pseudonym, vals.c.label).select_from(
            p.join(persons, persons.c.person == p.c.person).join(vals, vals.c.value == p.c.value)
        )
        left[propagation.COUNTED_GROUP] = {(int(pid), label) for pid, label in db.execute(conn, pairs).all()}
        return possible, removed, rounds

    monkeypatch.setattr(solve, "propagate", propagate_and_keep)
    counted_alone = propagation.COUNTED_GROUP
    for counted in (counted_alone, 0):
        monkeypatch.setattr(propagation, "COUNTED_GROUP", counted)
        inference(job_from_dict(example_config(duck_url, ["d1", "d2"])))
    assert left[0] == left[counted_alone]
    for buckets in releases:
        for bucket in buckets:
            mine = {pair for pair in left[0] if pair[0] in bucket}
            assert mine == _assignable(bucket, mine, _release(values, [bucket])[0][1]), bucket


def test_anatomy_publishes_l_diverse_buckets_of_exact_qis(duck_url: str) -> None:
    first, _ = _table_with_versions(duck_url, 3, persons=40, shared=0)
    report = bucketize(job_from_dict(_anatomy_config(duck_url, "v1", 3)))
    engine = sa.create_engine(duck_url)
    with engine.connect() as conn:
        qi_columns = [c for c, *_ in conn.exec_driver_sql("DESCRIBE v1_qi").all()]
        sa_columns = [c for c, *_ in conn.exec_driver_sql("DESCRIBE v1_qi_sensitive").all()]
        poorest = conn.exec_driver_sql(
            "SELECT MIN(n) FROM (SELECT COUNT(*) AS n FROM v1_qi_sensitive GROUP BY bucket)"
        ).scalar_one()
        repeated = conn.exec_driver_sql('SELECT MAX("count") FROM v1_qi_sensitive').scalar_one()
        published = dict(conn.exec_driver_sql('SELECT disease, SUM("count") FROM v1_qi_sensitive GROUP BY 1').all())
        rows = conn.exec_driver_sql("SELECT COUNT(*) FROM v1_qi").scalar_one()
        exact = conn.exec_driver_sql(
            "SELECT COUNT(*) FROM v1_qi q JOIN v1 s ON s.age = q.age AND s.zip = q.zip"
        ).scalar_one()
    engine.dispose()
    assert qi_columns == ["age", "zip", "bucket"]  # the dropped identifier and the sensitive value are gone
    assert sa_columns == ["bucket", "disease", "count"]
    assert poorest >= 3 and repeated == 1  # every bucket: at least l values, each once
    counts: dict[str, int] = {}
    for disease in first.values():
        counts[disease] = counts.get(disease, 0) + 1
    assert published == counts and rows == 40 and exact >= 40
    assert report.buckets == 40 // 3 and report.largest_share <= 1 / 3 and report.fewest_values >= 3


def test_anatomy_refuses_what_no_bucketization_can_give(duck_url: str) -> None:
    _table_with_versions(duck_url, 4, persons=12, shared=0)
    before = user_tables(duck_url)
    with pytest.raises(DataError, match="lower output.l"):
        bucketize(job_from_dict(_anatomy_config(duck_url, "v1", 6)))
    engine = sa.create_engine(duck_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE v1 SET disease = NULL WHERE pid = 3")
    engine.dispose()
    with pytest.raises(DataError, match="NULL in 1 row"):
        bucketize(job_from_dict(_anatomy_config(duck_url, "v1", 2)))
    assert user_tables(duck_url) == before
    config = _anatomy_config(duck_url, "v1", 2)
    with pytest.raises(ConfigError, match="remove criteria"):
        job_from_dict({**config, "criteria": {"k_anonymity": {"k": 2}}})
    with pytest.raises(ConfigError, match="output.l must be a whole number"):
        job_from_dict({**config, "output": {"table": "t", "method": "anatomy", "l": 1}})
    with pytest.raises(ConfigError, match="no hierarchy"):
        from sqlanon import search

        search(job_from_dict({**config, "output": None, "criteria": {"k_anonymity": {"k": 2}}}))


def test_anatomy_writes_through_the_cli_and_replaces_only_its_own_tables(duck_url: str, tmp_path: Path) -> None:
    _table_with_versions(duck_url, 5, persons=20, shared=0)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(_anatomy_config(duck_url, "v1", 2)))
    code, out, _ = run("anonymize", str(path), "--format", "json")
    assert code == 0 and json.loads(out)["buckets"] == 10
    code, _, err = run("anonymize", str(path))
    assert code == 2 and "already exists" in err
    assert run("anonymize", str(path), "--replace")[0] == 0


def _write_cli_job(tmp_path: Path, config: dict) -> Path:
    path = tmp_path / "releases.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_inference_cli_exit_codes_and_output(example_url: str, tmp_path: Path) -> None:
    both = _write_cli_job(tmp_path, example_config(example_url, ["d1", "d2"]))
    code, out, _ = run("inference", str(both))
    assert code == 1 and "Lung Cancer" in out and "lower by" in out
    code, out, _ = run("inference", str(both), "--format", "json")
    assert code == 1 and json.loads(out)["positive_disclosures"] == 3
    alone = _write_cli_job(tmp_path, example_config(example_url, ["d2"]))
    assert run("inference", str(alone))[0] == 0
    code, _, err = run("inference", str(both), "--max-probability", "1.5")
    assert code == 2 and "strictly between 0 and 1" in err


def _one_line_error(tmp_path: Path, config: dict, expected: str, url: str) -> None:
    before = user_tables(url)
    code, _out, err = run("inference", str(_write_cli_job(tmp_path, config)))
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, err
    assert user_tables(url) == before  # inference.table not written


def test_inference_bad_input(example_url: str, tmp_path: Path) -> None:
    config = example_config(example_url, ["d1", "d2"], table="inferred")
    _one_line_error(
        tmp_path,
        {**config, "releases": {**config["releases"], "pseudonym": "patient"}},
        "has no pseudonym column 'patient'",
        example_url,
    )
    engine = sa.create_engine(example_url)
    with engine.begin() as conn:  # person 5 moves to a bucket whose values exclude all of D1's for them
        conn.exec_driver_sql("UPDATE d2_qi SET bucket = 2 WHERE pid = 3")
        conn.exec_driver_sql("UPDATE d2_qi SET bucket = 1 WHERE pid = 14")
        conn.exec_driver_sql("UPDATE d2_qi SET bucket = 3 WHERE pid = 15")
    engine.dispose()
    _one_line_error(tmp_path, config, "inconsistent", example_url)


def test_inference_bad_thresholds_and_releases(example_url: str, tmp_path: Path) -> None:
    config = example_config(example_url, ["d1", "d2"])
    for bad, expected in (
        ({"min_probability": 0.6}, "must be below max_probability"),
        ({"tolerance": 0}, "inference.tolerance"),
        ({"max_iterations": 0}, "max_iterations"),
    ):
        with pytest.raises(ConfigError, match=expected):
            job_from_dict({**config, "inference": bad})
    with pytest.raises(ConfigError, match="names must differ"):
        job_from_dict({**config, "releases": {"pseudonym": "pid", "series": [{"table": "d1_qi"}, {"table": "d1_qi"}]}})
    _one_line_error(
        tmp_path,
        {**config, "releases": {"pseudonym": "pid", "series": [{"name": "x", "table": "nope"}]}},
        "does not exist",
        example_url,
    )


def test_a_generalized_release_counts_as_its_classes(example_url: str, tmp_path: Path) -> None:
    """D1' as a generalized table whose classes are its buckets gives the same inference as the pair."""
    hierarchy = tmp_path / "zip.csv"
    hierarchy.write_text("".join(f"{PATIENTS[p][1]};b{n};*\n" for n, bucket in enumerate(D1, 1) for p in bucket))
    gender = tmp_path / "gender.csv"
    gender.write_text("male;*\nfemale;*\n")
    engine = sa.create_engine(example_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE d1_generalized (pid INTEGER, gender VARCHAR, zip VARCHAR, disease VARCHAR)")
        for n, bucket in enumerate(D1, 1):
            for pid in bucket:
                conn.execute(
                    sa.text("INSERT INTO d1_generalized VALUES (:p, '*', :z, :d)"),
                    {"p": pid, "z": f"b{n}", "d": PATIENTS[pid][2]},
                )
    engine.dispose()
    config = example_config(example_url, ["d2"], table="mixed")
    config["quasi_identifiers"] = {"gender": {"hierarchy": str(gender)}, "zip": {"hierarchy": str(hierarchy)}}
    config["releases"]["series"].insert(0, {"name": "d1", "table": "d1_generalized"})
    inference(job_from_dict(config))
    inference(job_from_dict(example_config(example_url, ["d1", "d2"], table="pairs")))
    assert probabilities("mixed", example_url) == pytest.approx(probabilities("pairs", example_url), abs=1e-9)
    engine = sa.create_engine(example_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE d1_generalized SET zip = '131**' WHERE pid = 1")
    engine.dispose()
    _one_line_error(tmp_path, {**config, "inference": {}}, "is not a label of its hierarchy", example_url)


def test_three_releases_name_the_pair_behind_each_disclosure(example_url: str) -> None:
    config = example_config(example_url, ["d1", "d2"], table="three")
    config["releases"]["series"].append({"name": "again", "table": "d2_qi", "sensitive_table": "d2_sa"})
    report = inference(job_from_dict(config))
    causes = {(d["pseudonym"], d["value"]): d["releases"] for d in report.positive}
    assert causes[("10", "Lung Cancer")] == "d1 + d2"  # the first pair that discloses it
    assert len(report.entropy) == 3 and report.entropy[2].together == pytest.approx(report.entropy[1].together)


def test_the_probability_table_is_replaced_only_when_asked(example_url: str) -> None:
    job = job_from_dict(example_config(example_url, ["d1", "d2"], table="inferred"))
    inference(job)
    with pytest.raises(DataError, match="already exists"):
        inference(job)
    assert inference(job, replace=True).table.endswith("inferred")
    engine = sa.create_engine(example_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE mine (x INTEGER)")
    engine.dispose()
    other = job_from_dict(example_config(example_url, ["d1", "d2"], table="mine"))
    with pytest.raises(DataError, match="not written by sqlanon"):
        inference(other, replace=True)


def _buckets_of(url: str, table: str) -> dict[int, int]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = dict(
            conn.exec_driver_sql(
                f"SELECT s.pid, q.bucket FROM {table} q JOIN v1 s ON s.age = q.age AND s.zip = q.zip"
            ).all()
        )
    engine.dispose()
    return rows


def test_the_same_seed_gives_the_same_buckets_and_another_seed_others(duck_url: str) -> None:
    _table_with_versions(duck_url, 6, persons=30, shared=0)
    config = _anatomy_config(duck_url, "v1", 3)
    bucketize(job_from_dict(config))
    first = _buckets_of(duck_url, "v1_qi")
    bucketize(job_from_dict(config), replace=True)
    assert _buckets_of(duck_url, "v1_qi") == first
    bucketize(job_from_dict({**config, "output": {**config["output"], "seed": 7}}), replace=True)
    assert _buckets_of(duck_url, "v1_qi") != first
    with pytest.raises(ConfigError, match="belong to method: anatomy"):
        job_from_dict({**config, "output": {"table": "t", "seed": 3}})
