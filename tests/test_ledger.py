"""The release ledger (`ledger:`): every publication of a job recorded, and a release that discloses together
with the earlier ones refused before it commits, nothing written.

Four persons, two QIs and a diagnosis: grouped by `a` (node 0,1) or by `b` (node 1,0), every class is 2-anonymous
and 2-diverse, but a person is in one class of each, and the two classes share one value: the two releases together
give every person's diagnosis (the maximum-entropy inference finds it with probability 1). The m-invariance
check and anatomy's m-invariant re-publication (counterfeits) are checked on the same persons joining and
leaving, and on random series of changing tables against the published tables read back in Python.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqlanon import RunOptions, anonymize, apply, releases
from sqlanon.backends import open_database
from sqlanon.config import job_from_dict
from sqlanon.criteria import KAnonymity
from sqlanon.engine.audit import PublishedClasses
from sqlanon.errors import ConfigError, DataError

KEY_ENV = "SQLANON_TEST_LEDGER_KEY"
ROWS = [("p1", "x", "u", "flu"), ("p2", "x", "v", "cancer"), ("p3", "y", "u", "hiv"), ("p4", "y", "v", "flu")]
BY_A, BY_B, TOP = (0, 1), (1, 0), (1, 1)


@pytest.fixture(autouse=True)
def pseudonym_key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "0123456789abcdef0123456789abcdef")


def make_job(folder: Path, url: str, schema: str | None = None, **extra: Any):
    (folder / "a.csv").write_text("x;*\ny;*\n")
    (folder / "b.csv").write_text("u;*\nv;*\n")
    return job_from_dict(
        {
            "name": "clinic",
            "source": {"url": url, "table": "patients", **({"schema": schema} if schema else {})},
            "identifying": {"pid": {"pseudonym": {"key_env": KEY_ENV}}},
            "quasi_identifiers": {"a": {"hierarchy": "a.csv"}, "b": {"hierarchy": "b.csv"}},
            "sensitive": ["diagnosis"],
            "criteria": {"k_anonymity": {"k": 2}, "distinct_l_diversity": {"attribute": "diagnosis", "l": 2}},
            "ledger": {"person": "pid"},
            **extra,
        },
        folder,
    )


def load(url: str, rows=ROWS, schema: str | None = None, table: str = "patients") -> None:
    engine = sa.create_engine(url)
    name = f'"{schema}".{table}' if schema else table
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {name}")
        conn.exec_driver_sql(f"CREATE TABLE {name} (pid VARCHAR, a VARCHAR, b VARCHAR, diagnosis VARCHAR)")
        conn.execute(sa.text(f"INSERT INTO {name} VALUES (:p, :a, :b, :d)"), [dict(zip("pabd", r)) for r in rows])
    engine.dispose()


def tables(url: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def publish(job, node, output: str, batch: str = "patients", **options: Any):
    return apply(job, batch, node=node, output=output, options=RunOptions(**options))


@pytest.fixture
def duck(tmp_path: Path) -> str:
    url = f"duckdb:///{tmp_path / 'clinic.duckdb'}"
    load(url)
    return url


def test_a_release_that_discloses_with_an_earlier_one_is_refused_and_nothing_written(tmp_path: Path, duck: str):
    job = make_job(tmp_path, duck)
    first = publish(job, BY_A, "release_a")
    assert first.ledger is not None and first.ledger.earlier == [] and first.ledger.persons == 4
    with pytest.raises(DataError, match=r"together disclose \d+ diagnosis value") as refused:
        publish(job, BY_B, "release_b")
    assert "probability 1.00" in str(refused.value) and "Nothing was written" in str(refused.value)
    assert "release_b" not in tables(duck)
    assert [r["tables"].split(".")[-1] for r in releases(job)] == ["release_a"]


def test_the_same_classes_or_coarser_ones_disclose_nothing_new_and_are_recorded(tmp_path: Path, duck: str):
    job = make_job(tmp_path, duck)
    first = publish(job, BY_A, "release_a")
    again = publish(job, BY_A, "release_a2")
    top = publish(job, TOP, "release_top")
    assert again.ledger is not None and again.ledger.earlier == [first.search.run_id]
    assert again.ledger.checked == ["diagnosis"]
    assert top.ledger is not None and top.ledger.earlier == [first.search.run_id, again.search.run_id]
    listed = releases(job)
    assert [(r["node"], r["persons"], r["rows"], r["state"]) for r in listed] == [
        ("0,1", 4, 4, "present"),
        ("0,1", 4, 4, "present"),
        ("1,1", 4, 4, "present"),
    ]
    assert listed[0]["method"] == "generalize" and "k-anonymity" in listed[0]["criteria"].replace("_", "-")


def test_a_dropped_release_stops_the_next_one_until_it_is_forgotten(tmp_path: Path, duck: str):
    job = make_job(tmp_path, duck)
    first = publish(job, BY_A, "release_a")
    engine = sa.create_engine(duck)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE release_a")
    engine.dispose()
    assert releases(job)[0]["state"].startswith("dropped")
    with pytest.raises(DataError, match=rf"run {first.search.run_id} .* was dropped .*--forget"):
        publish(job, TOP, "release_top")
    assert "release_top" not in tables(duck)
    assert releases(job, forget=first.search.run_id) == []
    assert publish(job, BY_B, "release_b").ledger.earlier == []
    with pytest.raises(ConfigError, match="no release of run"):
        releases(job, forget=first.search.run_id)


def test_a_changed_release_or_another_key_is_refused(tmp_path: Path, duck: str, monkeypatch):
    job = make_job(tmp_path, duck)
    publish(job, BY_A, "release_a")
    monkeypatch.setenv(KEY_ENV, "another key, just as long as the first")
    with pytest.raises(DataError, match="with another key"):
        publish(make_job(tmp_path, duck), TOP, "release_top")
    engine = sa.create_engine(duck)
    with engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM release_a WHERE a = 'x'")
    engine.dispose()
    with pytest.raises(DataError, match=r"was changed \(2 rows, 4 when published\)"):
        publish(job, TOP, "release_top")
    assert "release_top" not in tables(duck)


def test_check_false_records_only(tmp_path: Path, duck: str):
    job = make_job(tmp_path, duck, ledger={"person": "pid", "check": False})
    publish(job, BY_A, "release_a")
    second = publish(job, BY_B, "release_b")
    assert second.ledger is not None and second.ledger.checked == [] and len(releases(job)) == 2


def test_a_person_with_several_rows_counts_once(tmp_path: Path):
    """With a unit, the release is read one row per person (the publication checked that a person's rows agree)."""
    url = f"duckdb:///{tmp_path / 'visits.duckdb'}"
    load(url, ROWS + [("p1", "x", "u", "flu"), ("p3", "y", "u", "hiv")])
    job = make_job(tmp_path, url, unit={"column": "pid"})
    first = publish(job, BY_A, "release_a")
    assert first.ledger is not None and first.ledger.persons == 4
    with pytest.raises(DataError, match="together disclose"):
        publish(job, BY_B, "release_b")
    assert releases(job)[0]["rows"] == 6


@pytest.mark.parametrize(
    ("ledger", "message"),
    [
        ({}, "ledger.person is missing"),
        ({"person": "a"}, "not listed under identifying"),
        ({"person": "pid", "check": "yes"}, "ledger.check must be one of inference, m-invariance or false"),
        ({"person": "pid", "check": "m-invariance"}, "ledger.m is m-invariance's m"),
        ({"person": "pid", "check": "m-invariance", "m": 1}, "ledger.m must be a whole number >= 2"),
        ({"person": "pid", "m": 3}, "ledger.m is m-invariance's m"),
        ({"person": "pid", "suppress": 1}, "ledger.suppress must be a share of the release's persons"),
        ({"person": "pid", "suppress": -0.1}, "ledger.suppress must be a share"),
        ({"person": "pid", "suppress": True}, "ledger.suppress must be a share"),
        (
            {"person": "pid", "check": "m-invariance", "m": 2, "suppress": 0.1},
            "ledger.suppress repairs what the inference check finds",
        ),
    ],
)
def test_bad_ledger_settings_are_refused(tmp_path: Path, ledger, message):
    with pytest.raises(ConfigError, match=message):
        make_job(tmp_path, "duckdb:///:memory:", ledger=ledger)


def test_a_dropped_person_column_or_no_sensitive_column_is_refused(tmp_path: Path):
    with pytest.raises(ConfigError, match="is dropped"):
        make_job(tmp_path, "duckdb:///:memory:", identifying=["pid"])
    with pytest.raises(ConfigError, match="lists no sensitive column"):
        make_job(
            tmp_path, "duckdb:///:memory:", sensitive=[], insensitive=["diagnosis"], criteria={"k_anonymity": {"k": 2}}
        )


@pytest.mark.postgres
def test_the_ledger_on_postgres(tmp_path: Path, pg_server: str, pg_schema: str):
    load(pg_server, schema=pg_schema)
    job = make_job(tmp_path, pg_server, schema=pg_schema)
    options = {"metadata_schema": f"{pg_schema}_meta"}
    first = publish(job, BY_A, "release_a", **options)
    with pytest.raises(DataError, match="together disclose"):
        publish(job, BY_B, "release_b", **options)
    top = publish(job, TOP, "release_top", **options)
    assert top.ledger is not None and top.ledger.earlier == [first.search.run_id]
    listed = releases(job, RunOptions(**options))
    assert [r["tables"].rsplit(".", 1)[-1] for r in listed] == ["release_a", "release_top"]
    invariant = make_job(
        tmp_path, pg_server, schema=pg_schema, ledger={"person": "pid", "check": "m-invariance", "m": 2}
    )
    with pytest.raises(DataError, match="hold fewer than 2 persons or a diagnosis value twice"):
        publish(invariant, TOP, "again", **options)
    with pytest.raises(DataError, match=r"4 person\(s\) of the previous release .* would change signature"):
        publish(invariant, BY_A, "by_a", **options)


@pytest.mark.postgres
def test_a_runner_keeps_a_ledger_through_the_stores_routines(tmp_path: Path, runner, pg_server: str, pg_schema: str):
    """A role set up as the PostgreSQL guide says (`sqlanon grant-runner`) records and checks its releases through
    the store's routines, which list a role's own entries (and every role's to the store's owner)."""
    from .conftest import RUNNER

    url = runner[0]
    load(pg_server, schema=pg_schema)
    engine = sa.create_engine(pg_server)
    with engine.begin() as conn:  # a batch is published beside its table: the DBA lets the runner create there
        conn.exec_driver_sql(f'GRANT SELECT ON "{pg_schema}".patients TO "{RUNNER}"')
        conn.exec_driver_sql(f'GRANT CREATE ON SCHEMA "{pg_schema}" TO "{RUNNER}"')
    engine.dispose()
    options = {"metadata_schema": f"{pg_schema}_meta"}
    as_runner = make_job(tmp_path, url, schema=pg_schema)
    first = apply(as_runner, "patients", node=BY_A, output="release_a", options=RunOptions(**options))
    first_out = f"{pg_schema}.release_a"
    with pytest.raises(DataError, match="together disclose"):
        apply(as_runner, "patients", node=BY_B, output="release_b", options=RunOptions(**options))
    as_dba = make_job(tmp_path, pg_server, schema=pg_schema)
    assert [r["run"] for r in releases(as_dba, RunOptions(**options))] == [first.search.run_id]  # the owner's view
    assert [r["tables"] for r in releases(as_runner, RunOptions(**options))] == [first_out]


def test_the_cli_lists_the_ledger_and_says_what_each_release_was_checked_against(tmp_path: Path, duck: str):
    import json

    import yaml
    from click.testing import CliRunner

    from sqlanon.cli import main

    make_job(tmp_path, duck)  # writes the hierarchy files
    config = {
        "name": "clinic",
        "source": {"url": duck, "table": "patients"},
        "identifying": {"pid": {"pseudonym": {"key_env": KEY_ENV}}},
        "quasi_identifiers": {"a": {"hierarchy": "a.csv"}, "b": {"hierarchy": "b.csv"}},
        "sensitive": ["diagnosis"],
        "criteria": {"k_anonymity": {"k": 2}},
        "ledger": {"person": "pid"},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(config))
    cli = CliRunner()
    job = str(tmp_path / "job.yaml")
    first = cli.invoke(main, ["apply", job, "--table", "patients", "--node", "0,1", "--output", "release_a"])
    assert first.exit_code == 0 and "the job's first release" in first.output, first.output
    second = cli.invoke(main, ["apply", job, "--table", "patients", "--node", "1,1", "--output", "release_top"])
    assert second.exit_code == 0 and "checked against the release(s) of run 1" in second.output, second.output
    refused = cli.invoke(main, ["apply", job, "--table", "patients", "--node", "1,0", "--output", "release_b"])
    assert refused.exit_code != 0 and "together disclose" in refused.output and "Traceback" not in refused.output
    listed = cli.invoke(main, ["releases", job])
    assert listed.exit_code == 0 and "release_top" in listed.output and "present" in listed.output, listed.output
    as_json = json.loads(cli.invoke(main, ["releases", job, "--format", "json"]).output)
    assert [r["node"] for r in as_json] == ["0,1", "1,1"]


def other_method(folder: Path, url: str, method: dict[str, Any], table: str):
    """A job of the same name publishing by another method: anatomy reads the QIs exact, Mondrian cuts them along
    the same hierarchies."""
    config: dict[str, Any] = {"output": {"table": table, **method}}
    if method["method"] == "anatomy":
        config |= {"quasi_identifiers": ["a", "b"], "criteria": None}
    return make_job(folder, url, **config)


@pytest.mark.parametrize("method", [{"method": "anatomy", "l": 2}, {"method": "mondrian"}])
def test_anatomy_and_mondrian_releases_are_recorded_and_checked(tmp_path: Path, duck: str, method):
    """Their two groups of two are either a's classes or b's: whichever they are, a generalization by the other QI
    discloses with them (refused), and one by the same QI gives nothing new (admitted)."""
    from sqlanon import anonymize

    first = anonymize(other_method(tmp_path, duck, method, "release_m"))
    assert first.ledger is not None and first.ledger.persons == 4
    listed = releases(make_job(tmp_path, duck))
    assert [r["method"] for r in listed] == [method["method"]]
    admitted, refused = [], []
    for node, output in ((BY_A, "by_a"), (BY_B, "by_b")):
        try:
            publish(make_job(tmp_path, duck), node, output)
            admitted.append(output)
        except DataError as error:
            assert "together disclose" in str(error)
            refused.append(output)
    assert len(admitted) == len(refused) == 1
    assert not tables(duck) & set(refused)
    second = anonymize(other_method(tmp_path, duck, method, "release_m2"))  # the same groups again: admitted
    assert second.ledger is not None and len(second.ledger.earlier) == 2 and second.ledger.checked == ["diagnosis"]


def test_m_invariance_keeps_each_persons_signature_and_every_group_m_unique(tmp_path: Path, duck: str):
    """Anatomy's buckets (l = 2) are 2-unique: the first release passes, and so does the same bucketization again.
    A generalization is admitted only where its classes give every person the values of their bucket (a's classes
    or b's, whichever the buckets are), and one class of all four (flu twice) is not 2-unique."""
    from sqlanon import anonymize

    invariant = {"ledger": {"person": "pid", "check": "m-invariance", "m": 2}}
    job = make_job(tmp_path, duck, **invariant)
    buckets = {"quasi_identifiers": ["a", "b"], "criteria": None, **invariant}
    for table in ("release_m", "release_m2"):
        output = {"table": table, "method": "anatomy", "l": 2}
        bucketized = anonymize(make_job(tmp_path, duck, output=output, **buckets))
        assert bucketized.ledger is not None and bucketized.ledger.checked == ["diagnosis"]
    admitted, refused = [], []
    for node, output in ((BY_A, "by_a"), (BY_B, "by_b")):
        try:
            publish(job, node, output)
            admitted.append(output)
        except DataError as error:
            assert "is not 2-invariant" in str(error) and "would change signature" in str(error), error
            refused.append(output)
    assert len(admitted) == len(refused) == 1
    with pytest.raises(DataError, match="1 group.s. hold fewer than 2 persons or a diagnosis value twice"):
        publish(job, TOP, "everyone")
    assert not tables(duck) & {*refused, "everyone"}


def signatures(url: str, release: str, schema: str | None = None) -> dict[str, set[str]]:
    """Each published person's signature, read back from a bucketized release's tables: the values of their bucket
    (counterfeits included: the sensitive table lists them)."""
    prefix = f'"{schema}".' if schema else ""
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            f"SELECT q.pid, s.diagnosis FROM {prefix}{release} q JOIN {prefix}{release}_sensitive s "
            "ON s.bucket = q.bucket"
        ).all()
    engine.dispose()
    found: dict[str, set[str]] = {}
    for pid, value in rows:
        found.setdefault(pid, set()).add(value)
    return found


def test_an_invariant_bucketization_keeps_signatures_with_new_persons_and_counterfeits(tmp_path: Path, duck: str):
    """Release 2: p1 left, p5 (flu) takes their place beside p2, p6 and p7 form a bucket of their own. Release 3: p2
    left and no one with cancer came, so p5's bucket holds a counterfeit cancer. Every person keeps the values of
    their bucket from release to release (read back from the published tables), the ledger's m-invariance check
    agrees, and the inference over the three releases (counterfeits as persons of their own) discloses nothing."""
    invariant_series(tmp_path, duck)


@pytest.mark.postgres
def test_an_invariant_bucketization_on_postgres(tmp_path: Path, pg_server: str, pg_schema: str):
    invariant_series(tmp_path, pg_server, pg_schema)


def test_an_invariant_bucketization_of_persons_with_several_rows(tmp_path: Path, duck: str):
    """With a unit, the persons are bucketized (each once), and every row of a person goes to their bucket."""
    invariant_series(tmp_path, duck, visits=True)


@pytest.mark.postgres
def test_an_invariant_bucketization_of_persons_with_several_rows_on_postgres(
    tmp_path: Path, pg_server: str, pg_schema: str
):
    invariant_series(tmp_path, pg_server, pg_schema, visits=True)


def invariant_series(folder: Path, url: str, schema: str | None = None, visits: bool = False) -> None:
    from sqlanon import anonymize, inference

    options = RunOptions(metadata_schema=f"{schema}_meta") if schema else None
    settings: dict[str, Any] = {
        "quasi_identifiers": ["a", "b"],
        "criteria": None,
        "ledger": {"person": "pid", "check": "m-invariance", "m": 2},
    }
    later = [("p5", "x", "u", "flu"), ("p6", "y", "v", "cold"), ("p7", "x", "v", "mumps")]
    versions = [ROWS, ROWS[1:] + later, ROWS[2:] + later]
    if visits:  # p3 and p6 come twice, p4 three times
        settings["unit"] = {"column": "pid"}
        versions = [
            rows + [r for r in rows if r[0] in ("p3", "p4", "p6")] + [r for r in rows if r[0] == "p4"]
            for rows in versions
        ]
    published = []
    for n, rows in enumerate(versions, start=1):
        load(url, rows, schema=schema)
        output = {"table": f"r{n}", "method": "anatomy", "l": 2, "invariant": True}
        published.append(anonymize(make_job(folder, url, schema=schema, output=output, **settings), options))
    assert [p.counterfeits for p in published] == [0, 0, 1]
    assert [p.invariant for p in published[1:]] == [
        {"stayed": 3, "took_a_place": 1, "bucketized_afresh": 2, "counterfeits": 0},
        {"stayed": 5, "took_a_place": 0, "bucketized_afresh": 0, "counterfeits": 1},
    ]
    assert published[2].counterfeit_table == f"{schema or 'main'}.r3_counterfeits"
    assert [p.ledger.checked for p in published] == [["diagnosis"]] * 3
    seen = [signatures(url, f"r{n}", schema) for n in (1, 2, 3)]
    for before, after in itertools.pairwise(seen):
        assert all(after[p] == before[p] for p in before.keys() & after.keys())
        assert all(len(values) == 2 for values in after.values())
    if visits:  # the inference verb reads one row per person: the ledger's check above read persons
        return
    series = [
        {
            "name": f"r{n}",
            "table": f"r{n}",
            "sensitive_table": f"r{n}_sensitive",
            "counterfeit_table": f"r{n}_counterfeits",
        }
        | ({"schema": schema} if schema else {})
        for n in (1, 2, 3)
    ]
    releases = {"pseudonym": "pid", "series": series}
    solved = inference(make_job(folder, url, schema=schema, releases=releases, **settings), options)
    assert solved.positive_count == 0 and solved.combined_count == 0
    assert solved.persons == 7 + 1  # the counterfeit is a person of its own


def test_an_invariant_bucketization_that_cannot_be_is_refused(tmp_path: Path, duck: str):
    settings = {
        "quasi_identifiers": ["a", "b"],
        "criteria": None,
        "ledger": {"person": "pid", "check": "m-invariance", "m": 2},
    }
    output = {"table": "r1", "method": "anatomy", "l": 2, "invariant": True}
    anonymize_job = make_job(tmp_path, duck, output=output, **settings)
    from sqlanon import anonymize

    anonymize(anonymize_job)
    load(duck, ROWS + [("p5", "x", "u", "flu")])  # one new person with no place to take: no bucket of two
    with pytest.raises(DataError, match=r"the 1 new person\(s\) .* cannot be bucketized 2-unique \(fewer than 2\)"):
        anonymize(make_job(tmp_path, duck, output=output | {"table": "r2"}, **settings))
    load(duck, [("p1", "x", "u", "cold"), *ROWS[1:]])  # p1's diagnosis is not one of their bucket's
    with pytest.raises(DataError, match="hold a sensitive value now that their group there did not"):
        anonymize(make_job(tmp_path, duck, output=output | {"table": "r2"}, **settings))
    assert not tables(duck) & {"r2", "r2_sensitive", "r2_counterfeits"}
    with pytest.raises(ConfigError, match="output.invariant bucketizes after the job's previous release"):
        make_job(tmp_path, duck, output=output, quasi_identifiers=["a", "b"], criteria=None)


@st.composite
def changing_tables(draw):
    """Three versions of a table of persons (p0..p29) with one diagnosis each (6 values): each version keeps some
    persons of the one before and adds new ones."""
    values = [f"d{i}" for i in range(6)]
    diagnosis = {f"p{i}": draw(st.sampled_from(values)) for i in range(30)}
    versions, pool = [], list(diagnosis)
    present = set(draw(st.lists(st.sampled_from(pool), min_size=8, max_size=20, unique=True)))
    for _ in range(3):
        versions.append(sorted(present))
        staying = {p for p in present if draw(st.booleans()) or draw(st.booleans())}
        joining = set(draw(st.lists(st.sampled_from(pool), max_size=8, unique=True))) - present
        present = staying | joining | set(pool[:4])  # a table is never empty
    return diagnosis, versions


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=changing_tables())
def test_invariant_bucketizations_of_random_series_keep_every_signature(tmp_path_factory, case):
    """Against a check in Python of the published tables (a different code path): each release publishes every
    person of its version once, every bucket holds l = 2 distinct values (counterfeits counted, as many as the
    counterfeits table says), and a person in two consecutive releases has the same values in both; or the release
    is refused (a value too frequent, new persons that cannot be bucketized) and nothing of it is written."""
    from sqlanon import anonymize

    diagnosis, versions = case
    folder = tmp_path_factory.mktemp("series")
    url = f"duckdb:///{folder / 'series.duckdb'}"
    settings_ = {
        "quasi_identifiers": ["a", "b"],
        "criteria": None,
        "ledger": {"person": "pid", "check": "m-invariance", "m": 2},
    }
    published: list[tuple[int, dict[str, set[str]]]] = []
    for n, persons in enumerate(versions, start=1):
        load(url, [(p, "x", "u", diagnosis[p]) for p in persons])
        output = {"table": f"r{n}", "method": "anatomy", "l": 2, "invariant": True}
        try:
            anonymize(make_job(folder, url, output=output, **settings_))
        except DataError as refused:
            why = ("cannot be bucketized 2-unique", "more than n / l", "different value(s); buckets of l = 2")
            assert any(reason in str(refused) for reason in why), refused
            assert not tables(url) & {f"r{n}", f"r{n}_sensitive", f"r{n}_counterfeits"}
            continue
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            people = conn.exec_driver_sql(f"SELECT COUNT(*), COUNT(DISTINCT pid) FROM r{n}").one()
            held = conn.exec_driver_sql(
                f"SELECT bucket, COUNT(*), SUM(count), MAX(count) FROM r{n}_sensitive GROUP BY bucket"
            ).all()
            members = dict(conn.exec_driver_sql(f"SELECT bucket, COUNT(*) FROM r{n} GROUP BY bucket").all())
            fakes = dict(conn.exec_driver_sql(f"SELECT bucket, COUNT(*) FROM r{n}_counterfeits GROUP BY bucket").all())
        engine.dispose()
        assert tuple(people) == (len(persons), len(persons))
        for bucket, distinct, total, most in held:
            assert distinct >= 2 and most == 1 and total == members.get(bucket, 0) + fakes.get(bucket, 0)
        published.append((n, signatures(url, f"r{n}")))
    for (n, before), (m, after) in itertools.pairwise(published):
        if m == n + 1:  # consecutive releases: whoever is in both keeps their values
            assert all(after[p] == before[p] for p in before.keys() & after.keys())


def test_replacing_an_earlier_releases_table_is_refused_until_it_is_forgotten(tmp_path: Path, duck: str):
    job = make_job(tmp_path, duck)
    first = publish(job, BY_A, "release_a")
    with pytest.raises(DataError, match=rf"holds the release of run {first.search.run_id} .* --forget"):
        apply(job, "patients", node=TOP, output="release_a", options=RunOptions(), replace=True)
    assert releases(job)[0]["state"] == "present" and releases(job)[0]["node"] == "0,1"  # the first, untouched
    releases(job, forget=first.search.run_id)
    assert apply(job, "patients", node=TOP, output="release_a", replace=True).ledger.earlier == []


#: four more persons, alike in both releases (a = z, b = t) with four diagnoses: the two releases together
#: disclose p1-p4's diagnoses only
MORE = [(f"p{i}", "z", "t", d) for i, d in zip(range(5, 9), ("flu", "cancer", "hiv", "asthma"))]


def _published_persons(url: str, table: str, schema: str | None = None) -> int:
    engine = sa.create_engine(url)
    name = f'"{schema}".{table}' if schema else table
    try:
        with engine.connect() as conn:
            return conn.exec_driver_sql(f"SELECT COUNT(DISTINCT pid) FROM {name}").scalar_one()
    finally:
        engine.dispose()


def _repair_job(folder: Path, url: str, schema: str | None, suppress: float):
    """`make_job` over ROWS + MORE (a third value of each QI) with ledger.suppress."""
    job = make_job(folder, url, schema, ledger={"person": "pid", "suppress": suppress})
    (folder / "a.csv").write_text("x;*\ny;*\nz;*\n")
    (folder / "b.csv").write_text("u;*\nv;*\nt;*\n")
    return job


def _check_repair(tmp_path: Path, url: str, schema: str | None = None) -> None:
    """ledger.suppress: the second release loses the four persons at stake, and holds nothing else disclosing; a
    smaller share refuses it, and nothing is written."""
    options = {"metadata_schema": f"{schema}_meta"} if schema else {}
    strict = _repair_job(tmp_path, url, schema, 0.25)
    publish(strict, BY_A, "release_a", **options)
    with pytest.raises(DataError, match=r"would remove 4 of its 8 persons .* ledger.suppress 0.25 allows \(2\)"):
        publish(strict, BY_B, "release_b", **options)
    assert not _exists(url, "release_b", schema)
    repaired = publish(_repair_job(tmp_path, url, schema, 0.5), BY_B, "release_b", **options)
    assert repaired.ledger is not None and repaired.ledger.suppressed == 4 and repaired.ledger.persons == 4
    assert repaired.audit.rows == 4 and repaired.audit.ok
    assert _published_persons(url, "release_b", schema) == 4
    listed = releases(strict, RunOptions(**options))
    assert [(r["persons"], r["rows"]) for r in listed] == [(8, 8), (4, 4)]
    # the repaired release and the first disclose nothing together: a third release at the first's node passes
    again = publish(strict, BY_A, "release_a2", **options)
    assert again.ledger is not None and again.ledger.suppressed == 0


def _exists(url: str, table: str, schema: str | None) -> bool:
    engine = sa.create_engine(url)
    try:
        return sa.inspect(engine).has_table(table, schema=schema)
    finally:
        engine.dispose()


def test_a_disclosing_release_is_repaired_by_removing_the_persons_at_stake(tmp_path: Path):
    url = f"duckdb:///{tmp_path / 'clinic.duckdb'}"
    load(url, ROWS + MORE)
    _check_repair(tmp_path, url)


def test_a_disclosing_mondrian_release_is_repaired(tmp_path: Path):
    """Mondrian cuts by `a` (the first of two QIs as wide), the first release was by `b`: p1-p4 leave it."""
    url = f"duckdb:///{tmp_path / 'clinic.duckdb'}"
    load(url, ROWS + MORE)
    publish(_repair_job(tmp_path, url, None, 0.5), BY_B, "release_b")
    mondrian = make_job(
        tmp_path, url, ledger={"person": "pid", "suppress": 0.5}, output={"table": "m", "method": "mondrian"}
    )
    _repair_job(tmp_path, url, None, 0.5)  # its hierarchy files
    repaired = anonymize(mondrian)
    assert repaired.ledger is not None and repaired.ledger.suppressed == 4 and repaired.audit.rows == 4
    assert _published_persons(url, "m") == 4


def test_a_disclosure_of_persons_the_release_does_not_hold_is_not_repaired(tmp_path: Path):
    """p9 is in the first release's class z with p5-p8, and in the second's class u with p1 and p3: once p1-p4 and
    p9 leave the second, its class t (p5-p8, four diagnoses) still gives away p9's, the fifth."""
    url = f"duckdb:///{tmp_path / 'clinic.duckdb'}"
    load(url, [*ROWS, *MORE, ("p9", "z", "u", "gout")])
    job = _repair_job(tmp_path, url, None, 0.9)
    publish(job, BY_A, "release_a")
    with pytest.raises(DataError, match="persons this release does not hold, whom its other persons' values give"):
        publish(job, BY_B, "release_b")
    assert not _exists(url, "release_b", None)


def test_anatomy_releases_are_not_repaired(tmp_path: Path):
    anatomy = {"table": "o", "method": "anatomy", "l": 2}
    with pytest.raises(ConfigError, match="anatomy's releases are not repaired by suppression"):
        make_job(
            tmp_path,
            "duckdb:///:memory:",
            quasi_identifiers=["a", "b"],
            criteria=None,
            output=anatomy,
            ledger={"person": "pid", "suppress": 0.1},
        )


def _check_removal_of_violating_classes(url: str, schema: str | None = None) -> None:
    """A repair's second step: the classes that break the criteria after persons left (here one of a person whose
    QI is NULL, and one of a person with two rows) go, all of their rows; the others stay."""
    rows = [
        ("p1", "x", "u", "flu"),
        ("p2", "x", "u", "cancer"),
        ("p3", "y", None, "hiv"),
        ("p4", "z", "v", "flu"),
        ("p4", "z", "v", "flu"),
        ("p5", "z", "v", "hiv"),
        ("p6", "w", "t", "gout"),
        ("p6", "w", "t", "gout"),
    ]
    load(url, rows, schema, table="released")
    classes = PublishedClasses(qi_columns=["a", "b"], sensitive=["diagnosis"], criteria=[KAnonymity(2)], unit="pid")
    db = open_database(url)
    ref = db.q(schema, "released")
    try:
        with db.connect() as conn, conn.begin():
            classes.remove_violating(db, conn, ref, "violating_test")
            left = sorted(conn.exec_driver_sql(f"SELECT pid, a, b FROM {ref}").all())
            assert classes.audit(db, conn, ref).ok
    finally:
        db.dispose()
    assert left == [("p1", "x", "u"), ("p2", "x", "u"), ("p4", "z", "v"), ("p4", "z", "v"), ("p5", "z", "v")]


def test_a_repair_removes_the_classes_that_break_the_criteria(tmp_path: Path):
    _check_removal_of_violating_classes(f"duckdb:///{tmp_path / 'r.duckdb'}")


@pytest.mark.postgres
def test_a_repair_on_postgres(tmp_path: Path, pg_server: str, pg_schema: str):
    load(pg_server, ROWS + MORE, pg_schema)
    _check_repair(tmp_path, pg_server, pg_schema)
    _check_removal_of_violating_classes(pg_server, pg_schema)
