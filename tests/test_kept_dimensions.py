"""Dimension tables kept across runs on DuckDB (engine.star.KeptDimensions): a run reads its hierarchy file's
kept table instead of parsing the file and building the table, for the same text only, and answers alike; only a
run that succeeds keeps what it built; at most KEPT_DIMENSIONS stay, the oldest kept going first."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import sqlalchemy as sa

from sqlanon import RunOptions, analyze, search
from sqlanon.engine import star
from sqlanon.errors import HierarchyError
from sqlanon.model.hierarchies import HierarchyFile

from .conftest import ADULT_DIR, adult_job, kept_dimension_tables

QIS = ["sex", "age", "race", "education"]


@pytest.fixture
def built(monkeypatch) -> list[str]:
    """The columns whose dimension tables runs build, in order."""
    found: list[str] = []
    create = star._create_dimension_table
    monkeypatch.setattr(
        star, "_create_dimension_table", lambda db, conn, dim: found.append(dim.column) or create(db, conn, dim)
    )
    return found


def _rounded(value: object) -> object:
    """Floats to 12 significant digits, in any nesting of dicts and lists."""
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, dict):
        return {key: _rounded(v) for key, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rounded(v) for v in value]
    return value


def _url(tmp_path: Path) -> str:
    return f"duckdb:///{tmp_path / 'adult.duckdb'}"


def test_a_second_run_reads_the_kept_tables_and_answers_alike(tmp_path: Path, built: list[str], monkeypatch):
    """As on a large table, where no small dimension is looked up from its codes (which parses its file)."""
    monkeypatch.setattr(star, "LOOKUP_ROWS", 0)
    url = _url(tmp_path)
    job = adult_job(url, QIS, k=5)
    first = search(job, RunOptions(metrics=True))
    node = first.minimal[0]
    figures = _rounded(analyze(job, node=node).tables[0].to_dict())
    assert built == QIS  # the search built every table; the analysis after it read them as kept
    assert len(kept_dimension_tables(url)) == len(QIS)
    parsed: list[str] = []
    load = HierarchyFile.load
    monkeypatch.setattr(HierarchyFile, "load", lambda self: parsed.append(self.column) or load(self))
    built.clear()
    again = search(job, RunOptions(metrics=True))
    assert (again.satisfying, again.minimal, again.level_examples) == (
        first.satisfying,
        first.minimal,
        first.level_examples,
    )
    assert _rounded(again.metrics) == _rounded(first.metrics)  # parallel sums' last bits may differ
    assert _rounded(analyze(job, node=node).tables[0].to_dict()) == figures
    assert built == []  # every table read as kept
    assert set(parsed) <= {"age"}  # an integer column's codes index an array: its file is parsed for them


def test_an_edited_hierarchy_file_gets_a_table_of_its_own(tmp_path: Path, built: list[str]):
    url = _url(tmp_path)
    own = tmp_path / "sex.csv"
    shutil.copy(ADULT_DIR / "hierarchies" / "sex.csv", own)
    job = adult_job(url, ["sex", "race"], k=5)
    job.quasi_identifiers[0] = dataclasses.replace(job.quasi_identifiers[0], hierarchy=own)
    first = search(job)
    own.write_text("Male;person\nFemale;person\n")  # another top label: another text
    built.clear()
    edited = search(job)
    assert built == ["sex"] and len(kept_dimension_tables(url)) == 3
    assert edited.satisfying == first.satisfying and edited.level_examples[0][1] == ["person"]
    exhaustive = search(dataclasses.replace(job, strategy="exhaustive"))
    assert edited.satisfying == exhaustive.satisfying


def test_a_run_that_fails_keeps_nothing(tmp_path: Path):
    url = _url(tmp_path)
    search(adult_job(url, ["race"], k=5))
    kept = kept_dimension_tables(url)
    partial = tmp_path / "sex.csv"
    partial.write_text("Male;*\n")  # Female is missing: the run fails after building its tables
    job = adult_job(url, ["sex", "age"], k=5, load_csv=False)
    job.quasi_identifiers[0] = dataclasses.replace(job.quasi_identifiers[0], hierarchy=partial)
    with pytest.raises(HierarchyError, match="missing from its hierarchy"):
        search(job)
    assert kept_dimension_tables(url) == kept


def test_at_most_so_many_stay_the_oldest_kept_going_first(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(star, "KEPT_DIMENSIONS", 2)
    url = _url(tmp_path)
    names: list[str] = []
    for qi in ["race", "sex", "education"]:
        search(adult_job(url, [qi], k=5, load_csv=qi == "race"))
        (new,) = kept_dimension_tables(url) - set(names)
        names.append(new)
    assert kept_dimension_tables(url) == set(names[1:])


def test_a_kept_table_that_does_not_read_as_one_is_built_again_and_replaced(tmp_path: Path, built: list[str]):
    url = _url(tmp_path)
    job = adult_job(url, ["race"], k=5)
    first = search(job)
    (name,) = kept_dimension_tables(url)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"COMMENT ON TABLE sqlanon.\"{name}\" IS 'not a note'")
    engine.dispose()
    built.clear()
    assert search(job).satisfying == first.satisfying and built == ["race"]
    built.clear()
    assert search(job).satisfying == first.satisfying and built == []  # replaced, and read again
