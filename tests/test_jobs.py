"""Registered jobs: register, list, run, status, one run at a time, crash and resume."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
import time
import uuid
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


@pg
def test_run_job_from_sql_alone_equals_the_cli_run(pg_job):
    """CALL sqlanon.run_job('name') runs the same search in-server (PL/Python), through the same code."""
    url, meta = pg_job
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        _plpython_or_skip(conn, meta)
        in_server = conn.execute(sa.text(f'CALL "{meta}".run_job(:job)'), {"job": "adult9"}).scalar_one()
        conn.commit()
    engine.dispose()
    from_cli = run_job("adult9", url, RunOptions(metadata_schema=meta))
    assert in_server["minimal"] == [list(n) for n in from_cli.minimal]
    assert in_server["satisfying_count"] == len(from_cli.satisfying)
    assert in_server["stats"]["nodes_checked"] == from_cli.stats.nodes_checked


def _plpython_or_skip(conn, meta: str, set_path: bool = True) -> None:
    installed = conn.execute(sa.text("SELECT to_regprocedure(:p) IS NOT NULL"),
                             {"p": f'"{meta}".run_job(text, boolean, json)'}).scalar_one()
    if not installed:
        message = "PL/Python is not installed in this PostgreSQL server (package postgresql-plpython3-NN)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    if not set_path:
        return
    # the server's Python finds sqlanon in this interpreter's site-packages (editable install included)
    conn.execute(sa.text("SELECT set_config('sqlanon.python_path', :p, false)"),
                 {"p": sysconfig.get_paths()["purelib"]})


@pg
def test_register_run_list_and_publish_from_sql(pg_server: str, pg_schema: str):
    """A DBA's whole workflow in SQL: register from JSON, run, list runs and nodes, publish another node."""
    meta = f"{pg_schema}_meta"
    search(adult_job(pg_server, ["sex"], k=1, schema=pg_schema), RunOptions(metadata_schema=meta))
    qis = ["sex", "race", "marital-status"]
    config = adult_config("ignored", qis, k=10, load_csv=False, schema=pg_schema, output={"table": "adult_sql"})
    files = {}
    for q in qis:  # the files travel as text: the config names them by key
        files[f"h/{q}.csv"] = Path(config["quasi_identifiers"][q]["hierarchy"]).read_text()
        config["quasi_identifiers"][q]["hierarchy"] = f"h/{q}.csv"
    engine = sa.create_engine(pg_server)
    with engine.connect() as conn:
        _plpython_or_skip(conn, meta)
        stored = conn.execute(sa.text(f'SELECT "{meta}".register_job(:n, CAST(:c AS json), CAST(:f AS json))'),
                              {"n": "census", "c": json.dumps(config), "f": json.dumps(files)}).scalar_one()
        result = conn.execute(sa.text(f'CALL "{meta}".run_job(:j)'), {"j": "census"}).scalar_one()
        runs = conn.execute(sa.text(f'SELECT run_id, status FROM "{meta}".job_runs(:j)'), {"j": "census"}).all()
        nodes = conn.execute(sa.text(f'SELECT node, minimal, selected FROM "{meta}".run_nodes(:r)'),
                             {"r": runs[0].run_id}).all()
        passing = conn.execute(sa.text(f'SELECT node FROM "{meta}".passing_nodes(:r)'),
                               {"r": runs[0].run_id}).scalars().all()
        other = next(n.node for n in nodes if n.minimal and not n.selected) if len(nodes) > 1 else nodes[0].node
        published = conn.execute(sa.text(f'CALL "{meta}".publish(:r, :n, :t, :s)'),
                                 {"r": runs[0].run_id, "n": other, "t": "adult_other", "s": pg_schema}).scalar_one()
        with pytest.raises(sa.exc.DBAPIError, match="failed its audit"):  # level 0 is not 10-anonymous
            conn.execute(sa.text(f'CALL "{meta}".publish(:r, :n, :t)'),
                         {"r": runs[0].run_id, "n": "0,0,0", "t": "adult_zero"})
        conn.rollback()
        tables = set(conn.execute(sa.text("SELECT table_name FROM information_schema.tables WHERE table_schema = :s"),
                                  {"s": pg_schema}).scalars())
    engine.dispose()
    cli = search(adult_job(pg_server, qis, k=10, load_csv=False, schema=pg_schema), RunOptions(metadata_schema=meta))
    assert stored == 3 and result["minimal"] == [list(n) for n in cli.minimal] and result["output"] == "adult_sql"
    assert runs[0].status == "finished" and any(n.selected for n in nodes)
    assert sorted(passing) == sorted(",".join(map(str, n)) for n in cli.satisfying)
    assert published["audit"]["k_anonymity"]["holds"] and published["node"] == [int(v) for v in other.split(",")]
    assert {"adult_sql", "adult_other"} <= tables and "adult_zero" not in tables


@pg
def test_the_docker_setup_prepares_a_database_where_run_job_works(pg_server: str):
    """The compose flow on this server, without the container: the image's first-start SQL
    (docker/python-path.sql, filled in as the Dockerfile does), docker/init.sh twice (`setup` runs at every
    `docker compose up`), then the README's `psql ... -c "CALL sqlanon.run_job('adult')"`."""
    name = f"sqlanon_init_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(pg_server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = sa.engine.make_url(pg_server).set(database=name)
    libpq = url.set(drivername="postgresql").render_as_string(hide_password=False)
    url = url.render_as_string(hide_password=False)
    docker = Path(__file__).parent.parent / "docker"
    first_start = (docker / "python-path.sql").read_text().replace("@SITE_PACKAGES@", sysconfig.get_paths()["purelib"])
    try:
        _psql(libpq, first_start)
        for _ in range(2):
            done = subprocess.run(["sh", str(docker / "init.sh"), url], capture_output=True, text=True, timeout=300,
                                  env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
            assert done.returncode == 0, done.stderr
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            rows = conn.exec_driver_sql("SELECT COUNT(*) FROM adult").scalar_one()
            jobs = conn.exec_driver_sql("SELECT name FROM sqlanon.jobs").scalars().all()
            _plpython_or_skip(conn, "sqlanon", set_path=False)
        engine.dispose()
        assert rows == 30162 and jobs == ["adult"]
        result = json.loads(_psql(libpq, "CALL sqlanon.run_job('adult')").strip())
        assert result["output"] == "adult_anon" and result["node"] in result["minimal"]
        assert result["audit"]["k_anonymity"]["holds"]
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE "{name}" WITH (FORCE)')
        admin.dispose()


def _psql(url: str, sql: str) -> str:
    done = subprocess.run(["psql", url, "-v", "ON_ERROR_STOP=1", "-qAt", "-c", sql], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_compose_files_fit_together():
    """What `docker compose up` relies on, short of a Docker engine: every file the Dockerfile copies exists,
    setup runs the script the image holds against the postgres service's database, and the healthcheck waits
    for TCP (during first-time initialization the server listens on its socket only)."""
    root = Path(__file__).parent.parent
    compose = yaml.safe_load((root / "docker-compose.yml").read_text())
    postgres, setup = compose["services"]["postgres"], compose["services"]["setup"]
    dockerfile = (root / postgres["build"]["dockerfile"]).read_text()
    copies = [line.split()[1:] for line in dockerfile.splitlines() if line.startswith("COPY ")]
    assert all((root / source).exists() for source, _ in copies)
    assert setup["image"] == postgres["image"] and setup["build"] == postgres["build"]
    script_in_image = setup["entrypoint"][1]
    assert ["docker/init.sh", script_in_image] in copies
    database = postgres["environment"]["POSTGRES_DB"]
    assert setup["entrypoint"][2].endswith(f"@postgres:5432/{database}")
    assert setup["depends_on"]["postgres"]["condition"] == "service_healthy"
    check = postgres["healthcheck"]["test"]
    assert check[check.index("-h") + 1] == "127.0.0.1" and check[check.index("-d") + 1] == database
    assert "@SITE_PACKAGES@" in (root / "docker" / "python-path.sql").read_text() and "@SITE_PACKAGES@" in dockerfile
