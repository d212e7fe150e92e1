"""`sqlanon profile`: each column's and each small combination's singled-out share against a count in Python, the
roles it suggests, and a job file that runs as it is; on DuckDB and PostgreSQL."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from sqlanon import profile, search
from sqlanon.cli import main
from sqlanon.config import job_from_dict
from sqlanon.errors import ConfigError

ROWS = [
    # id, email, zip, birth year, sex, country, cost, visits of the person
    (i, f"p{i}@example.org", f"130{i % 7}", 1950 + (i * 7) % 40, "FM"[i % 2], "NZ", round(i * 1.37, 2), i % 3)
    for i in range(400)
]
COLUMNS = ["id", "email", "zip", "birth_year", "sex", "country", "cost", "visits"]
TYPES = ["INTEGER", "VARCHAR", "VARCHAR", "INTEGER", "VARCHAR", "VARCHAR", "DOUBLE PRECISION", "INTEGER"]


def _load(url: str, schema: str | None = None) -> None:
    engine = sa.create_engine(url)
    table = f'"{schema}".people' if schema else "people"
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
        conn.exec_driver_sql(f"CREATE TABLE {table} ({', '.join(f'{c} {t}' for c, t in zip(COLUMNS, TYPES))})")
        names = ", ".join(f":{c}" for c in COLUMNS)
        conn.execute(sa.text(f"INSERT INTO {table} VALUES ({names})"), [dict(zip(COLUMNS, r)) for r in ROWS])
    engine.dispose()


def alone(columns: tuple[str, ...]) -> float:
    """The share of rows alone in their combination of `columns`' values, counted in Python."""
    index = [COLUMNS.index(c) for c in columns]
    counts = Counter(tuple(row[i] for i in index) for row in ROWS)
    return sum(1 for row in ROWS if counts[tuple(row[i] for i in index)] == 1) / len(ROWS)


def _check(found) -> None:
    roles = {c.name: c.role for c in found.columns}
    assert roles["id"] == roles["email"] == "identifying"
    assert roles["cost"] == "measurement" and roles["country"] == "constant"
    for column in found.columns:
        assert column.singled_out == pytest.approx(alone((column.name,)))
    candidates = ["zip", "birth_year", "visits", "sex"]  # the ones left, by most values
    tried = {frozenset(c.columns): c for c in found.combinations}
    for size in (1, 2, 3):
        for combination in itertools.combinations(candidates, size):
            assert tried[frozenset(combination)].singled_out == pytest.approx(alone(combination)), combination
    # the smallest combination singling out half the rows, or the most singling one
    reaching = [c for c in found.combinations if c.singled_out >= 0.5]
    chosen = min(reaching, key=lambda c: (len(c.columns), -c.singled_out)) if reaching else None
    assert chosen is not None and set(found.quasi_identifiers) == set(chosen.columns)


def test_profile_counts_what_each_column_and_combination_singles_out(tmp_path: Path):
    url = f"duckdb:///{tmp_path / 'p.duckdb'}"
    _load(url)
    found = profile(url, "people")
    _check(found)
    # the suggested job runs as it is
    job = job_from_dict(found.job(), tmp_path)
    assert search(job).minimal


def test_profile_on_postgresql(pg_server: str, pg_schema: str):
    _load(pg_server, pg_schema)
    _check(profile(pg_server, "people", pg_schema))


def greedy(start: tuple[str, ...], columns: list[str], steps: int) -> list[tuple[tuple[str, ...], float]]:
    """The greedy search in Python: each step adds the column that singles out the most with those chosen."""
    found, chosen = [], start
    for _ in range(steps):
        rest = [c for c in columns if c not in chosen]
        if not rest:
            break
        best = max(rest, key=lambda c: alone((*chosen, c)))
        if alone((*chosen, best)) <= alone(chosen):
            break
        chosen = (*chosen, best)
        found.append((chosen, alone(chosen)))
    return found


@pytest.mark.parametrize("steps", [0, 1, 3])
def test_the_greedy_search_adds_columns_beyond_the_candidates_as_python_does(tmp_path: Path, steps: int):
    """One candidate (birth_year, the most values) and combinations of one column: the greedy search then adds
    columns the candidates left out (zip, visits), one at a time as a search in Python does."""
    url = f"duckdb:///{tmp_path / 'p.duckdb'}"
    _load(url)
    found = profile(url, "people", max_size=1, candidates=1, greedy=steps)
    tried = [(c.columns, c.singled_out) for c in found.combinations if c.greedy]
    expected = greedy(("birth_year",), ["zip", "birth_year", "visits", "sex"], steps)
    assert [columns for columns, _ in tried] == [columns for columns, _ in expected]
    assert [share for _, share in tried] == pytest.approx([share for _, share in expected])
    # birth_year and zip single out 40%, with visits everyone: nothing more to add after two steps
    assert len(tried) == len(expected) == min(steps, 2) and all(len(c) == 2 + i for i, (c, _) in enumerate(tried))
    if steps == 3:  # the smallest combination reaching half, now of three columns: the greedy one
        assert set(found.quasi_identifiers) == set(min((c for c, s in tried if s >= 0.5), key=len))


def test_profile_by_person(tmp_path: Path):
    """With a unit column, a person's repeated rows count once: a zip shared by one person's visits only
    singles that person out."""
    url = f"duckdb:///{tmp_path / 'p.duckdb'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE visits AS SELECT i % 50 AS pid, 'z' || (i % 50) AS zip, i AS visit FROM range(200) t(i)"
        )
    engine.dispose()
    by_row, by_person = profile(url, "visits"), profile(url, "visits", unit="pid")
    zip_rows = next(c for c in by_row.columns if c.name == "zip")
    zip_persons = next(c for c in by_person.columns if c.name == "zip")
    assert zip_rows.singled_out == 0.0 and zip_persons.singled_out == 1.0 and by_person.persons == 50
    assert by_person.job()["unit"] == {"column": "pid"}


def test_the_command_prints_the_tables_and_writes_the_job(tmp_path: Path):
    url = f"duckdb:///{tmp_path / 'p.duckdb'}"
    _load(url)
    job_file = tmp_path / "job.yaml"
    answer = CliRunner().invoke(main, ["profile", "people", "--db", url, "--job", str(job_file)])
    assert answer.exit_code == 0, answer.output
    assert "identifying" in answer.output and "suggested quasi-identifiers:" in answer.output
    assert job_from_dict(__import__("yaml").safe_load(job_file.read_text()), tmp_path).quasi_identifiers
    again = CliRunner().invoke(main, ["profile", "people", "--db", url, "--job", str(job_file)])
    assert again.exit_code == 2 and "exists" in again.output


def test_bad_profile_requests_are_refused(tmp_path: Path):
    url = f"duckdb:///{tmp_path / 'p.duckdb'}"
    _load(url)
    with pytest.raises(ConfigError, match="--unit 'nobody' is not a column"):
        profile(url, "people", unit="nobody")
    with pytest.raises(ConfigError, match="--max-size must be between 1 and 4"):
        profile(url, "people", max_size=7)
    with pytest.raises(ConfigError, match="--greedy must be 0 or more"):
        profile(url, "people", greedy=-1)
    answer = CliRunner().invoke(main, ["profile", "nobody", "--db", url])
    assert answer.exit_code == 2 and "not found" in answer.output
