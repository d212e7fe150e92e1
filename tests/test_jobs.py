"""Registered jobs: register, list, run, status, one run at a time, crash and resume."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml
from click.testing import CliRunner

from sqlanon import RunOptions, search
from sqlanon.api import register_job, run_job
from sqlanon.cli import main
from sqlanon.errors import ConfigError, DataError

from .conftest import ADULT_QIS, adult_config, adult_job


def _write(tmp_path: Path, config: dict, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config, sort_keys=False))  # QI order is priority order
    return path


# --- DuckDB: the registry round trip ----------------------------------------------------

@pytest.fixture
def duck_adult(tmp_path: Path) -> str:
    url = f"duckdb:///{tmp_path / 'w.duckdb'}"
    search(adult_job(url, ["sex"], k=1))  # loads the table
    return url


def test_register_list_run_status(duck_adult: str, tmp_path: Path):
    config = adult_config(duck_adult, ["sex", "age", "race"], k=5, load_csv=False, output={"table": "adult_out"},
                          name="ignored-name")
    runner = CliRunner()
    result = runner.invoke(main, ["job", "register", "census", str(_write(tmp_path, config)), "--db", duck_adult])
    assert result.exit_code == 0 and "3 file(s)" in result.output
    (tmp_path / "job.yaml").unlink()  # runs need only the database
    result = runner.invoke(main, ["job", "run", "census", "--db", duck_adult, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    expected = search(adult_job(duck_adult, ["sex", "age", "race"], k=5, load_csv=False))
    assert data["minimal"] == [list(n) for n in expected.minimal] and data["output"] == "adult_out"
    runs = json.loads(runner.invoke(main, ["job", "status", "census", "--db", duck_adult, "--json"]).output)
    assert [r["status"] for r in runs] == ["finished"] and runs[0]["command"] == "anonymize"
    jobs = json.loads(runner.invoke(main, ["job", "list", "--db", duck_adult, "--json"]).output)
    assert [(j["name"], j["status"]) for j in jobs] == [("census", "finished")]
    again = runner.invoke(main, ["job", "run", "census", "--db", duck_adult])  # replaces its output
    assert again.exit_code == 0 and "wrote adult_out" in again.output.replace("\n", " ")
    resume = runner.invoke(main, ["job", "resume", "census", "--db", duck_adult])
    assert resume.exit_code == 2 and "nothing to resume" in resume.output


def test_registration_errors(duck_adult: str, tmp_path: Path):
    with pytest.raises(ConfigError, match="remove source.csv"):
        register_job("x", _write(tmp_path, adult_config(duck_adult, ["sex"])), duck_adult)
    bad = adult_config(duck_adult, ["sex"], load_csv=False)
    bad["quasi_identifiers"]["sex"]["hierarchy"] = "nowhere.csv"
    with pytest.raises(ConfigError, match="'nowhere.csv' not found"):
        register_job("x", _write(tmp_path, bad), duck_adult)
    with pytest.raises(ConfigError, match="k must be >= 1"):
        register_job("x", _write(tmp_path, adult_config(duck_adult, ["sex"], k=0, load_csv=False)), duck_adult)
    with pytest.raises(ConfigError, match="no job named 'missing'"):
        run_job("missing", duck_adult)
    with pytest.raises(DataError, match="has never run"):
        register_job("fresh", _write(tmp_path, adult_config(duck_adult, ["sex"], load_csv=False)), duck_adult)
        run_job("fresh", duck_adult, resume=True)


# --- PostgreSQL: one run at a time, crash and resume ---------------------------------------

pg = pytest.mark.postgres


@pytest.fixture
def pg_job(pg_server: str, pg_schema: str, tmp_path: Path):
    """Adult in the test's schema and a registered 8-QI job (long enough to interrupt)."""
    meta = f"{pg_schema}_meta"
    search(adult_job(pg_server, ["sex"], k=1, schema=pg_schema), RunOptions(metadata_schema=meta))
    config = adult_config(pg_server, ADULT_QIS[:8], k=5, load_csv=False, schema=pg_schema)
    register_job("adult9", _write(tmp_path, config), pg_server, meta)
    return pg_server, meta


def _cli(url: str, meta: str, *args: str, app: str = "sqlanon-test") -> subprocess.Popen:
    """The CLI in a child process; its PostgreSQL sessions carry the application name `app` (libpq's PGAPPNAME)."""
    command = [sys.executable, "-m", "sqlanon.cli", "job", *args, "--db", url, "--metadata-schema", meta, "--json"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PGAPPNAME": app})


def _progress(url: str, meta: str) -> tuple[str, int]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        row = conn.execute(sa.text(f'SELECT status, iteration FROM "{meta}".runs WHERE job_name = \'adult9\' '
                                   "ORDER BY run_id DESC LIMIT 1")).first()
    engine.dispose()
    return (row[0], int(row[1])) if row else ("none", 0)


def _wait_for_iteration(url: str, meta: str, iteration: int, process: subprocess.Popen) -> None:
    deadline = time.time() + 120
    while _progress(url, meta)[1] < iteration:
        assert process.poll() is None, process.communicate()
        assert time.time() < deadline, "the run made no progress"
        time.sleep(0.2)


@pg
def test_killed_run_is_resumed_without_redoing_finished_iterations(pg_job):
    url, meta = pg_job
    runner = _cli(url, meta, "run", "adult9")
    _wait_for_iteration(url, meta, 4, runner)  # progress is visible from SQL while it runs
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait()
    deadline = time.time() + 30
    while json.loads(_cli(url, meta, "status", "adult9").communicate()[0])[0]["status"] != "interrupted":
        assert time.time() < deadline, "the killed run still looks alive"
        time.sleep(0.5)
    resumed = run_job("adult9", url, RunOptions(metadata_schema=meta), resume=True)
    fresh = run_job("adult9", url, RunOptions(metadata_schema=meta))
    assert resumed.satisfying == fresh.satisfying and resumed.minimal == fresh.minimal
    assert resumed.run_id != fresh.run_id
    assert resumed.stats.nodes_checked < fresh.stats.nodes_checked  # iterations 1-4 were not redone
    statuses = [r["status"] for r in json.loads(_cli(url, meta, "status", "adult9").communicate()[0])]
    assert statuses == ["finished", "finished"]


@pg
def test_a_second_run_of_the_same_job_is_refused(pg_job):
    url, meta = pg_job
    runner = _cli(url, meta, "run", "adult9")
    try:
        _wait_for_iteration(url, meta, 2, runner)
        with pytest.raises(DataError, match="job 'adult9' is already running \\(run \\d+"):
            run_job("adult9", url, RunOptions(metadata_schema=meta))
        second = _cli(url, meta, "run", "adult9")
        _, err = second.communicate(timeout=60)
        assert second.returncode == 2 and "already running" in err and "Traceback" not in err
    finally:
        runner.kill()
        runner.wait()


@pg
def test_a_terminated_backend_leaves_a_failed_run_that_resumes(pg_job):
    url, meta = pg_job
    app = f"runner-{meta}"
    runner = _cli(url, meta, "run", "adult9", app=app)
    _wait_for_iteration(url, meta, 3, runner)
    engine = sa.create_engine(url)
    with engine.connect() as conn:  # every session of the runner: its work and its lock
        killed = conn.execute(sa.text("SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                      "WHERE application_name = :app"), {"app": app}).scalar_one()
    engine.dispose()
    _, err = runner.communicate(timeout=120)
    assert killed >= 2 and runner.returncode != 0 and "Traceback" not in err
    status, _ = _progress(url, meta)
    assert status == "failed"  # the client recorded the failure on a new session
    resumed = run_job("adult9", url, RunOptions(metadata_schema=meta), resume=True)
    fresh = run_job("adult9", url, RunOptions(metadata_schema=meta))
    assert resumed.minimal == fresh.minimal
