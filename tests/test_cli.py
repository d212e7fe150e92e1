"""The command line: JSON output, anonymize, and every bad input the issue names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml
from click.testing import CliRunner

from sqlanon.cli import main

from .conftest import ADULT_DIR, METADATA_TABLES, metadata_tables, user_tables, with_rest_insensitive


def write_config(tmp_path: Path, **changes) -> Path:
    """A small Adult job (3 QIs) in tmp_path, with hierarchies copied beside it."""
    hierarchies = tmp_path / "hierarchies"
    hierarchies.mkdir(exist_ok=True)
    for name in ("sex", "age", "race", "education"):
        (hierarchies / f"{name}.csv").write_bytes((ADULT_DIR / "hierarchies" / f"{name}.csv").read_bytes())
    config = {
        "source": {
            "url": "duckdb:///adult.duckdb",
            "table": "adult",
            "csv": str(ADULT_DIR / "adult.csv.gz"),
            "csv_options": {"delimiter": ";"},
        },
        "quasi_identifiers": {
            "sex": {"hierarchy": "hierarchies/sex.csv"},
            "age": {"hierarchy": "hierarchies/age.csv"},
            "race": {"hierarchy": "hierarchies/race.csv"},
        },
        "criteria": {"k_anonymity": {"k": 5}},
        "output": {"table": "adult_anon"},
    }
    config = with_rest_insensitive(config)
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            config[section][field] = value
        elif value is None:
            config.pop(section)
        else:
            config[section] = value
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_search_json_shape(tmp_path: Path):
    result = run("search", str(write_config(tmp_path)), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["qi"] == ["sex", "age", "race"]
    assert data["heights"] == [1, 4, 1]
    assert all(len(node) == 3 for node in data["minimal"]) and data["minimal"]
    assert data["satisfying_count"] >= len(data["minimal"])
    assert set(data["stats"]) == {
        "nodes_checked",
        "rollups",
        "base_scans",
        "seconds",
        "statements",
        "unchecked_above_passing",
        "unchecked_outranked",
    }
    assert data["every_passing_node"] and data["every_minimal_node"]


def test_db_option_overrides_the_config_url(tmp_path: Path):
    other = tmp_path / "other.duckdb"
    result = run("search", str(write_config(tmp_path)), "--db", str(other), "--json")
    assert result.exit_code == 0, result.output
    assert other.exists() and not (tmp_path / "adult.duckdb").exists()


def test_anonymize_writes_an_audited_table(tmp_path: Path):
    config = write_config(tmp_path)
    result = run("anonymize", str(config), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["output"] == "adult_anon" and data["node"] in data["minimal"]
    engine = sa.create_engine(f"duckdb:///{tmp_path / 'adult.duckdb'}")
    with engine.connect() as conn:
        smallest = conn.exec_driver_sql(
            "SELECT MIN(n) FROM (SELECT COUNT(*) n FROM adult_anon GROUP BY sex, age, race)"
        ).scalar_one()
        rows = conn.exec_driver_sql("SELECT COUNT(*) FROM adult_anon").scalar_one()
        columns = conn.exec_driver_sql("SELECT * FROM adult_anon LIMIT 0").keys()
    engine.dispose()
    assert smallest >= 5 and rows == 30162
    assert list(columns)[:3] == ["sex", "age", "race"]  # every source column, in order


def test_anonymize_picks_the_lowest_smallest_node(tmp_path: Path):
    data = json.loads(run("anonymize", str(write_config(tmp_path)), "--json").stdout)
    heights = [sum(n) for n in data["minimal"]]
    assert sum(data["node"]) == min(heights)
    assert data["node"] == min(n for n in data["minimal"] if sum(n) == min(heights))


def test_human_output_has_a_table(tmp_path: Path):
    result = run("anonymize", str(write_config(tmp_path)))
    assert result.exit_code == 0, result.output
    assert "minimal generalization" in result.output and "wrote adult_anon" in result.output


def test_output_table_exists_needs_replace(tmp_path: Path):
    config = write_config(tmp_path)
    assert run("anonymize", str(config)).exit_code == 0
    again = run("anonymize", str(config))
    assert again.exit_code == 2 and "already exists" in again.stderr and "--replace" in again.stderr
    assert run("anonymize", str(config), "--replace").exit_code == 0


def test_example_and_help(tmp_path: Path):
    assert "anonymize" in run("--help").output
    result = run("example", str(tmp_path / "ex"))
    assert result.exit_code == 0
    assert (tmp_path / "ex" / "adult.yaml").exists() and (tmp_path / "ex" / "hierarchies" / "age.csv").exists()


# --- bad input: one line, exit code 2, nothing left behind ----------------------


def _expect_error(tmp_path: Path, config: Path, fragment: str, *extra: str) -> None:
    url = f"duckdb:///{tmp_path / 'adult.duckdb'}"
    before = user_tables(url) if (tmp_path / "adult.duckdb").exists() else set()
    result = run("anonymize", str(config), *extra)
    assert result.exit_code == 2, result.output
    message = result.stderr.strip()
    assert fragment in message, message
    assert len(message.splitlines()) == 1, message
    assert "Traceback" not in result.output
    if (tmp_path / "adult.duckdb").exists():
        assert user_tables(url) - before <= {("main", "adult")}  # at most the source loaded from csv
        assert metadata_tables(url) <= METADATA_TABLES


def _loaded(tmp_path: Path) -> None:
    assert run("search", str(write_config(tmp_path)), "--json").exit_code == 0


def test_unknown_column(tmp_path: Path):
    config = write_config(
        tmp_path, quasi_identifiers={"sex": {"hierarchy": "hierarchies/sex.csv"}, "zipcode": {"generate": "mask"}}
    )
    _expect_error(tmp_path, config, "'zipcode' is not in table 'adult'")


def test_unknown_table(tmp_path: Path):
    _loaded(tmp_path)
    source = {"url": "duckdb:///adult.duckdb", "table": "adults"}
    _expect_error(tmp_path, write_config(tmp_path, source=source), "table 'adults' not found")


def test_hierarchy_file_missing(tmp_path: Path):
    config = write_config(tmp_path)
    (tmp_path / "hierarchies" / "race.csv").unlink()
    _expect_error(tmp_path, config, "hierarchy file for 'race' not found")


def test_hierarchy_file_malformed(tmp_path: Path):
    config = write_config(tmp_path)
    (tmp_path / "hierarchies" / "race.csv").write_text("White;*\nBlack\n")
    _expect_error(tmp_path, config, "line 2 has 1 fields")


def test_values_missing_from_hierarchy(tmp_path: Path):
    config = write_config(tmp_path)
    (tmp_path / "hierarchies" / "race.csv").write_text("White;*\nBlack;*\n")
    _expect_error(tmp_path, config, "3 value(s) missing from its hierarchy")


@pytest.mark.parametrize(
    "k, fragment",
    [
        (0, "k must be >= 1"),
        (-3, "k must be >= 1"),
        (2.5, "whole number"),
        ("five", "whole number"),
        (True, "whole number"),
    ],
)
def test_bad_k(tmp_path: Path, k, fragment):
    _expect_error(tmp_path, write_config(tmp_path, criteria={"k_anonymity": {"k": k}}), fragment)


def test_k_larger_than_the_table(tmp_path: Path):
    config = write_config(tmp_path, criteria={"k_anonymity": {"k": 40000}})
    _expect_error(tmp_path, config, "larger than the table (30162 rows)")


def test_output_table_exists(tmp_path: Path):
    config = write_config(tmp_path)
    assert run("anonymize", str(config)).exit_code == 0
    _expect_error(tmp_path, config, "output table 'main.adult_anon' already exists")


def with_holes(tmp_path: Path, column: str, where: str) -> None:
    """Table `holes`: the loaded Adult table with NULL in `column` on the rows matching `where`."""
    _loaded(tmp_path)
    engine = sa.create_engine(f"duckdb:///{tmp_path / 'adult.duckdb'}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE holes AS SELECT * FROM adult")
        conn.exec_driver_sql(f"UPDATE holes SET {column} = NULL WHERE {where}")
    engine.dispose()


def test_nulls_in_a_quasi_identifier(tmp_path: Path):
    with_holes(tmp_path, "race", "age = 39")
    source = {"url": "duckdb:///adult.duckdb", "table": "holes"}
    config = write_config(tmp_path, source=source, output={"table": "holes_anon"})
    _expect_error(tmp_path, config, "column 'race' has 786 NULL value(s)")
    # mapped explicitly in the hierarchy (a line with an empty value), NULLs are fine
    race = tmp_path / "hierarchies" / "race.csv"
    race.write_text(race.read_text() + ";*\n")
    assert run("anonymize", str(config)).exit_code == 0


def test_bad_yaml_and_unknown_keys(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("source: [unclosed\n")
    _expect_error(tmp_path, bad, "not valid YAML")
    _expect_error(tmp_path, write_config(tmp_path, criteria={"k_anonimity": {"k": 5}}), "unknown criterion")
    _expect_error(tmp_path, write_config(tmp_path, source__tabel="x"), "unknown key 'tabel'")
    _expect_error(tmp_path, tmp_path / "nope.yaml", "not found")


def test_hostile_identifiers_are_quoted_not_injected(tmp_path: Path):
    """Table and column names with quotes and semicolons work as plain names."""
    _loaded(tmp_path)
    table = 'we"ird; DROP TABLE adult; --'
    column = "a'ge\"; --"
    engine = sa.create_engine(f"duckdb:///{tmp_path / 'adult.duckdb'}")
    with engine.begin() as conn:
        conn.exec_driver_sql(
            'CREATE TABLE "we""ird; DROP TABLE adult; --" AS SELECT sex, age AS "a\'ge""; --", race FROM adult'
        )
    engine.dispose()
    (tmp_path / "hierarchies" / "weird.csv").write_bytes((tmp_path / "hierarchies" / "age.csv").read_bytes())
    config = write_config(
        tmp_path,
        source={"url": "duckdb:///adult.duckdb", "table": table},
        quasi_identifiers={"sex": {"hierarchy": "hierarchies/sex.csv"}, column: {"hierarchy": "hierarchies/weird.csv"}},
        insensitive=["race"],
        output={"table": "out'; DROP TABLE adult; --"},
    )
    result = run("anonymize", str(config), "--json")
    assert result.exit_code == 0, result.output
    tables = user_tables(f"duckdb:///{tmp_path / 'adult.duckdb'}")
    assert {("main", "adult"), ("main", table), ("main", "out'; DROP TABLE adult; --")} <= tables


def test_load_a_csv_into_a_table(tmp_path: Path):
    url = f"duckdb:///{tmp_path / 'x.duckdb'}"
    csv = str(ADULT_DIR / "adult.csv.gz")
    loaded = run("load", csv, "--table", "adult", "--delimiter", ";", "--db", url)
    assert loaded.exit_code == 0 and "30,162 rows" in loaded.stdout
    again = run("load", csv, "--table", "adult", "--delimiter", ";", "--db", url)
    assert again.exit_code == 2 and "already exists" in again.stderr and "--replace" in again.stderr
    assert run("load", csv, "--table", "adult", "--option", "delim=;", "--db", url, "--replace").exit_code == 0
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        columns = [r[0] for r in conn.exec_driver_sql("DESCRIBE adult").fetchall()]
    engine.dispose()
    assert columns[:2] == ["sex", "age"] and len(columns) == 9
    for option, fragment in (("bogus=1", "unknown CSV option 'bogus'"), ("nullstr", "write NAME=VALUE")):
        result = run("load", csv, "--table", "b", "--db", url, "--option", option)
        assert result.exit_code == 2 and fragment in result.stderr, result.output
    missing = run("load", str(tmp_path / "none.csv"), "--table", "t", "--db", url)
    assert missing.exit_code == 2 and "CSV file not found" in missing.stderr
    assert user_tables(url) == {("main", "adult")}
