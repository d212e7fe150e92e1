"""`sqlanon apply`: a published transformation applied to a new batch of the same table, audited, all or nothing."""

from __future__ import annotations

import json
from pathlib import Path

import sqlalchemy as sa

from .conftest import user_tables
from .test_cli import run, write_config


def _published(tmp_path: Path, **changes) -> tuple[Path, dict]:
    """The small Adult job anonymized once (its run's JSON), and batches cut from the source."""
    config = write_config(tmp_path, **changes)
    result = run("anonymize", str(config), "--json")
    assert result.exit_code == 0, result.output
    engine = sa.create_engine(_url(tmp_path))
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE batch AS SELECT * FROM adult WHERE age BETWEEN 20 AND 60 LIMIT 4000")
        conn.exec_driver_sql("CREATE TABLE odd AS SELECT * FROM adult WHERE age > 80 OR race = 'Other' LIMIT 60")
    engine.dispose()
    return config, json.loads(result.stdout)


def _url(tmp_path: Path) -> str:
    return f"duckdb:///{tmp_path / 'adult.duckdb'}"


def _values(tmp_path: Path, sql: str) -> set:
    engine = sa.create_engine(_url(tmp_path))
    with engine.connect() as conn:
        found = {tuple(r) for r in conn.exec_driver_sql(sql)}
    engine.dispose()
    return found


def test_a_batch_is_generalized_as_the_run_published_and_audited(tmp_path: Path):
    config, first = _published(tmp_path)
    result = run("apply", str(config), "--table", "batch", "--run", str(first["run_id"]), "--json")
    assert result.exit_code == 0, result.output
    applied = json.loads(result.stdout)
    assert applied["node"] == first["node"] and applied["output"] == "batch_anon"
    assert applied["audit"]["k_anonymity"]["holds"] and applied["audit"]["rows"] == 4000
    # the same node gives the same labels: every generalized tuple of the batch is one of the first release's
    published = _values(tmp_path, "SELECT sex, age, race FROM adult_anon")
    assert _values(tmp_path, "SELECT sex, age, race FROM batch_anon") <= published
    # the node can also be given directly
    again = run(
        "apply",
        str(config),
        "--table",
        "batch",
        "--node",
        ",".join(map(str, first["node"])),
        "--output",
        "batch_again",
        "--json",
    )
    assert again.exit_code == 0, again.output
    assert _values(tmp_path, "SELECT * FROM batch_again") == _values(tmp_path, "SELECT * FROM batch_anon")


def test_a_batch_that_violates_the_criteria_is_refused_with_its_classes(tmp_path: Path):
    config, first = _published(tmp_path)
    before = user_tables(_url(tmp_path))
    result = run("apply", str(config), "--table", "odd", "--run", str(first["run_id"]))
    assert result.exit_code == 2, result.output
    message = result.stderr.strip()
    assert "batch 'odd' alone violates the criteria at node" in message and "tuple(s) in" in message
    assert "class(es), with no suppression; e.g. (" in message and "Nothing was written" in message
    assert len(message.splitlines()) == 1 and "Traceback" not in message
    assert user_tables(_url(tmp_path)) == before


def test_the_jobs_suppression_limit_applies_to_the_batch(tmp_path: Path):
    config, _ = _published(tmp_path, suppression={"limit": 30})  # a count: up to 30 of the batch's 60 rows
    strict = run("apply", str(config), "--table", "odd", "--node", "0,1,1")
    assert strict.exit_code == 2 and "with the job's suppression limit of 30" in strict.stderr
    result = run("apply", str(config), "--table", "odd", "--node", "0,3,1", "--json")
    assert result.exit_code == 0, result.output
    applied = json.loads(result.stdout)
    assert 0 < applied["suppressed"] <= 30 and applied["audit"]["k_anonymity"]["holds"]
    rows = _values(tmp_path, "SELECT COUNT(*) FROM odd_anon")
    assert rows == {(60 - applied["suppressed"],)}


def test_what_to_apply_must_be_clear(tmp_path: Path):
    config, _first = _published(tmp_path)
    for args, fragment in (
        (["--run", "1", "--node", "0,0,0"], "not both"),
        ([], "not both"),
        (["--run", "999"], "run 999 not found"),
        (["--node", "0,x"], "one whole-number level"),
        (["--node", "0,9,0"], "is not in the lattice"),
    ):
        result = run("apply", str(config), "--table", "batch", *args)
        assert result.exit_code == 2 and fragment in result.stderr, (args, result.output)
    searched = json.loads(run("search", str(config), "--json").stdout)
    result = run("apply", str(config), "--table", "batch", "--run", str(searched["run_id"]))
    assert result.exit_code == 2 and "published no table" in result.stderr
