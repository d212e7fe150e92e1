"""DataFrames in and out of the Python API: a frame as the source (in memory, or a DuckDB file when asked), the
release read back whole, in chunks or as Arrow, `.frame()` on every result, and bad frames refused clearly."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pandas as pd
import pytest
import sqlalchemy as sa

from sqlanon import (
    RunOptions,
    analyze,
    analyze_table,
    anonymize,
    audit,
    hierarchies,
    node_metrics,
    search,
)
from sqlanon.errors import ConfigError, DataError

from .conftest import ADULT_DIR, PG_URL, adult_config, user_tables

QIS = ["sex", "age", "race", "education"]


@pytest.fixture(scope="module")
def adult_frame() -> pd.DataFrame:
    return pd.read_csv(ADULT_DIR / "adult.csv.gz", sep=";")


def frame_config(**extra) -> dict:
    """The Adult job without a source of its own: the verbs get the DataFrame."""
    config = adult_config("unused", QIS, k=5, suppression={"limit": 0.01}, sensitive=["occupation"], **extra)
    config.pop("source")
    return config


def sorted_rows(frame: pd.DataFrame) -> list[tuple]:
    return sorted(frame.astype(str).itertuples(index=False, name=None))


def test_a_frame_is_searched_and_published_in_memory_as_its_csv_is(adult_frame, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = frame_config()
    in_memory = anonymize(config, source=adult_frame)
    from_file = anonymize(config, RunOptions(db_url=str(tmp_path / "asked.duckdb")), source=adult_frame)
    csv_config = adult_config(
        f"duckdb:///{tmp_path / 'csv.duckdb'}", QIS, suppression={"limit": 0.01}, sensitive=["occupation"]
    )
    from_csv = anonymize({**csv_config, "output": {"table": "adult_anon"}})
    assert in_memory.search.minimal == from_csv.search.minimal == from_file.search.minimal
    assert in_memory.node == from_csv.node
    assert in_memory.output == "source_anon"  # the job names no output
    release = in_memory.frame()
    assert list(release.columns) == list(adult_frame.columns)
    assert len(release) == in_memory.audit.rows == len(adult_frame) - in_memory.suppressed
    assert sorted_rows(release) == sorted_rows(from_csv.frame()) == sorted_rows(from_file.frame())
    assert audit(config, release).ok  # the release read back holds the criteria, audited again in memory
    files = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".sqlanon-run.json"))
    assert files == ["asked.duckdb", "csv.duckdb"]  # in memory: no file


def test_a_release_is_read_in_chunks_and_as_arrow(adult_frame):
    published = anonymize(frame_config(), source=adult_frame)
    chunks = list(published.release.frames(rows=5000))
    assert len(chunks) > 1 and all(len(c) <= 5000 for c in chunks)
    assert sorted_rows(pd.concat(chunks)) == sorted_rows(published.frame())
    reader = published.release.arrow(rows=5000)
    assert reader.schema.names == list(adult_frame.columns)
    assert sum(batch.num_rows for batch in reader) == published.audit.rows
    with pytest.raises(ValueError, match="at least 1"):
        published.release.frames(rows=0)


def test_an_in_memory_release_lives_as_long_as_its_result(adult_frame):
    published = anonymize(frame_config(), source=adult_frame)
    gc.collect()
    assert len(published.frame()) == published.audit.rows  # the database went nowhere with the run's end
    held = published.release.held
    assert held is not None and held.in_memory
    del published, held
    gc.collect()


def test_every_verb_takes_a_frame_and_every_result_has_a_frame(adult_frame):
    config = frame_config()
    result = search(config, RunOptions(metrics=True), source=adult_frame)
    table = result.frame()
    assert [tuple(row) for row in table[QIS].itertuples(index=False)] == result.minimal
    assert {"height", "precision", "suppressed"} <= set(table.columns)
    assert set(hierarchies(config, source=adult_frame)) == set(QIS)
    assert set(node_metrics(config, result.minimal[:1], source=adult_frame)) == {result.minimal[0]}
    analysis = analyze(config, source=adult_frame)
    assert list(analysis.frame()["label"]) == [",".join(map(str, n)) for n in result.minimal]
    raw = audit(config, adult_frame)
    assert not raw.ok and raw.frame().loc[0, "criterion"] == "k_anonymity" and not raw.frame().loc[0, "holds"]
    released = anonymize(config, source=adult_frame).frame()
    checked = audit(config, released, source=adult_frame)  # remove mode: the missing rows counted as suppressed
    assert checked.ok and checked.suppressed == len(adult_frame) - len(released)
    assert analyze_table(config, released).frame().loc[0, "rows"] == len(released)


def test_mondrian_and_anatomy_results_give_their_tables(adult_frame):
    config = frame_config(output={"table": "m", "method": "mondrian"})
    config.pop("suppression")
    mondrian = anonymize(config, source=adult_frame)
    assert len(mondrian.frame()) == mondrian.rows == len(adult_frame)
    config = frame_config(output={"table": "a", "method": "anatomy", "l": 2})
    config.pop("suppression")
    config["quasi_identifiers"] = QIS  # published exact, beside each row's bucket
    config.pop("criteria")  # l-diverse buckets are anatomy's own guarantee
    anatomy = anonymize(config, source=adult_frame)
    assert len(anatomy.frame()) == len(adult_frame)
    assert anatomy.sensitive_frame()["count"].sum() == len(adult_frame)


def test_frame_types_nulls_and_names(tmp_path):
    people = pd.DataFrame(
        {
            "city": pd.Categorical(["Lyon", "Nice", "Lyon", "Nice"] * 3),
            "age": pd.array([30, 31, 30, 31] * 3, dtype="Int64"),
            "disease": ["flu", "hiv", "cancer", "flu"] * 3,
        }
    )
    hierarchy = tmp_path / "city.csv"
    hierarchy.write_text("Lyon;*\nNice;*\n")
    job = {
        "quasi_identifiers": {"city": str(hierarchy), "age": {"generate": "intervals", "widths": [10]}},
        "sensitive": ["disease"],
        "criteria": {"k_anonymity": {"k": 3}},
    }
    published = anonymize(job, source=people)
    assert published.node == (0, 0) and set(published.frame()["city"]) == {"Lyon", "Nice"}  # categories as text
    with_nan = people.assign(age=pd.array([30, None, 30, 31] * 3, dtype="Int64"))
    with pytest.raises(DataError, match="age"):  # NULLs in a QI: the database's own check names the column
        search(job, source=with_nan)
    with pytest.raises(ConfigError, match="pandas DataFrame"):
        search(job, source=people.to_dict())
    with pytest.raises(ConfigError, match="two columns named 'city'"):
        search(job, source=pd.concat([people, people[["city"]]], axis=1))
    with pytest.raises(ConfigError, match="non-empty text"):
        search(job, source=people.set_axis(["city", "age", 3], axis=1))
    mixed = people.assign(disease=["flu", 2, b"x", 1.5] * 3)
    with pytest.raises(DataError, match="DuckDB cannot read the DataFrame.*column 'disease' holds values of several"):
        search(job, source=mixed)


def test_a_job_without_a_source_needs_a_frame(tmp_path):
    job = frame_config()
    with pytest.raises(ConfigError, match="the job has no source.*source=frame"):
        search(job)


def test_a_frame_goes_into_a_duckdb_file_only_when_asked_and_is_reused_never_replacing(adult_frame, tmp_path):
    db_file = tmp_path / "asked.duckdb"
    options = RunOptions(db_url=str(db_file))
    config = frame_config()
    first = search(config, options, source=adult_frame)
    assert user_tables(f"duckdb:///{db_file}") == {("main", "source")}
    assert search(config, options, source=adult_frame).minimal == first.minimal  # the same frame: reused
    with pytest.raises(DataError, match="loaded from another DataFrame"):
        search(config, options, source=adult_frame.head(1000))
    engine = sa.create_engine(f"duckdb:///{db_file}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE mine AS SELECT 1 AS x")
    engine.dispose()
    with pytest.raises(DataError, match="'main.mine' already exists, loaded from something else"):
        search({**config, "source": {"url": "duckdb:///:memory:", "table": "mine"}}, options, source=adult_frame)
    with pytest.raises(ConfigError, match="read in memory here"):  # a verb that only reads writes no file
        audit(config, adult_frame, options=options)


@pytest.mark.postgres
def test_a_frame_is_refused_on_postgres_with_the_way_to_load_it(adult_frame, pg_server, pg_schema):
    with pytest.raises(ConfigError, match="write the frame to a table first"):
        search(frame_config(), RunOptions(db_url=PG_URL), source=adult_frame)


def test_the_cli_runs_in_memory(tmp_path):
    job = tmp_path / "job.yaml"
    config = adult_config("duckdb:///:memory:", QIS, output={"table": "anon"})
    import yaml

    job.write_text(yaml.safe_dump(config))
    from .test_cli import run as invoke

    result = invoke("anonymize", str(job))
    assert result.exit_code == 0, result.output
    assert "audit" in result.output.lower()
    assert not [p for p in tmp_path.iterdir() if p.name != "job.yaml"] and not os.path.exists(":memory:")


def test_an_in_memory_database_is_one_database_for_every_connection():
    from sqlanon.backends import open_database

    db = open_database("duckdb:///:memory:")
    with db.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t AS SELECT 1 AS x")
    db.dispose()  # the pool's connections closed: the database stays with its object
    with db.connect() as first, db.connect() as second, first.begin(), second.begin():
        assert first.exec_driver_sql("SELECT x FROM t").scalar() == second.exec_driver_sql("SELECT x FROM t").scalar()
    other = open_database("duckdb:///:memory:")
    with other.connect() as conn:
        assert not other.table_exists(conn, None, "t")  # each object its own database
    assert Path(":memory:").exists() is False
