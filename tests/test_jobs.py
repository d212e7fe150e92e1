"""Registered jobs: register, list, run, status, one run at a time, crash and resume."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import threading
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
from sqlanon.config import job_from_dict
from sqlanon.errors import ConfigError, DataError
from sqlanon.model.names import run_of_table

from .conftest import ADULT_QIS, RUNNER, adult_config, adult_job, plpython_or_skip


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
    config = adult_config(
        duck_adult, ["sex", "age", "race"], k=5, load_csv=False, output={"table": "adult_out"}, name="ignored-name"
    )
    del config["source"]["url"]  # a registered job reads the database it is registered in
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


def test_a_groups_file_is_stored_with_the_job(duck_adult: str, tmp_path: Path):
    """A groups generator's mapping file is one of the job's stored files, as a hierarchy file is: the run needs
    no file and equals the job with the same groups written inline."""
    (tmp_path / "marital.csv").write_text(
        "Married-civ-spouse;married\nMarried-AF-spouse;married\nDivorced;was married\n"
    )
    config = adult_config(duck_adult, ["sex"], k=5, load_csv=False, output={"table": "grouped"})
    config["quasi_identifiers"]["marital-status"] = {"generate": "groups", "groups": "marital.csv", "other": "other"}
    config["insensitive"].remove("marital-status")
    assert register_job("grouped", _write(tmp_path, config), duck_adult) == 2
    (tmp_path / "marital.csv").unlink()
    inline = {"married": ["Married-civ-spouse", "Married-AF-spouse"], "was married": ["Divorced"]}
    config["quasi_identifiers"]["marital-status"]["groups"] = inline
    assert run_job("grouped", duck_adult).search.minimal == search(job_from_dict(config)).minimal


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


def _tamper(url: str, *statements: tuple[str, dict]) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        for statement, params in statements:
            conn.execute(sa.text(statement), params)
    engine.dispose()


@pytest.mark.parametrize(
    "path", ["/tmp/sqlanon-pwned.csv", "../../sqlanon-pwned.csv", "files/../../pwned.csv", "C:\\\\pwned.csv"]
)
def test_stored_files_are_never_written_to_disk(duck_adult: str, tmp_path: Path, path: str):
    """Whoever can write job_files decides file names and contents, but a run reads them from the database and
    writes no file: a name that is not a plain relative path is refused."""
    register_job("j", _write(tmp_path, adult_config(duck_adult, ["sex"], load_csv=False)), duck_adult)
    _tamper(duck_adult, ("INSERT INTO sqlanon.job_files VALUES ('j', :p, 'owned')", {"p": path}))
    with pytest.raises(ConfigError, match="is not a plain relative path"):
        run_job("j", duck_adult)
    assert not Path("/tmp/sqlanon-pwned.csv").exists() and not (tmp_path.parent / "pwned.csv").exists()


@pytest.mark.parametrize(
    "change, fragment",
    [
        ({"source": {"csv": "/etc/hostname"}}, "remove source.csv"),
        ({"quasi_identifiers": {"sex": {"hierarchy": "/etc/hostname"}}}, "not among the job's stored files"),
        ({"quasi_identifiers": {"sex": {"generate": "groups", "groups": "/etc/hostname"}}}, "not among the job's"),
        ({"identifying": {"x": {"pseudonym": {"key_file": "/etc/hostname"}}}}, "key_env"),
        ({"source": {"parquet": "/etc"}}, "remove source.parquet"),
        ({"source": {"temp_directory": "/var/lib/postgresql"}}, "remove source.temp_directory"),
    ],
)
def test_stored_configs_are_checked_again_when_loaded(duck_adult: str, tmp_path: Path, change: dict, fragment: str):
    """A config row edited in the table reaches no file of the machine that runs it."""
    register_job("j", _write(tmp_path, adult_config(duck_adult, ["sex"], load_csv=False)), duck_adult)
    engine = sa.create_engine(duck_adult)
    with engine.connect() as conn:
        config = json.loads(conn.exec_driver_sql("SELECT config FROM sqlanon.jobs WHERE name = 'j'").scalar_one())
    engine.dispose()
    for key, value in change.items():
        config[key] = {**config.get(key, {}), **value} if key != "identifying" else value
    _tamper(duck_adult, ("UPDATE sqlanon.jobs SET config = :c WHERE name = 'j'", {"c": json.dumps(config)}))
    with pytest.raises(ConfigError, match=fragment):
        run_job("j", duck_adult)


# --- PostgreSQL: one run at a time, crash and resume ---------------------------------------

pg = pytest.mark.postgres


@pytest.fixture
def pg_job(pg_server: str, pg_schema: str, tmp_path: Path):
    """Adult in the test's schema and a registered 8-QI job (long enough to interrupt)."""
    meta = f"{pg_schema}_meta"
    search(adult_job(pg_server, ["sex"], k=1, schema=pg_schema), RunOptions(metadata_schema=meta))
    config = adult_config(
        pg_server, ADULT_QIS[:8], k=5, load_csv=False, schema=pg_schema, search={"strategy": "incognito"}
    )  # the resumable, iteration by iteration search
    register_job("adult9", _write(tmp_path, config), pg_server, meta)
    return pg_server, meta


def _cli(url: str, meta: str, *args: str, app: str = "sqlanon-test") -> subprocess.Popen:
    """The CLI in a child process; its PostgreSQL sessions carry the application name `app` (libpq's PGAPPNAME)."""
    command = [sys.executable, "-m", "sqlanon.cli", "job", *args, "--db", url, "--metadata-schema", meta, "--json"]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PGAPPNAME": app}
    )


def _progress(url: str, meta: str, job: str = "adult9") -> tuple[str, int]:
    """The status and iteration of the job's latest run, as its job_runs() lists them to the role of `url`."""
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        row = conn.execute(
            sa.text(f'SELECT status, iteration FROM "{meta}".job_runs(job => CAST(:j AS text)) LIMIT 1'), {"j": job}
        ).first()
    engine.dispose()
    return (row[0], int(row[1])) if row else ("none", 0)


def _call_in_background(
    conn: sa.Connection, meta: str, job: str, before: str | None = None
) -> tuple[threading.Thread, dict]:
    """CALL run_job(job) on `conn` in a thread (after the statement `before`); the dict gets the call's error
    message under "error" (None when it succeeded)."""
    outcome: dict = {}

    def call() -> None:
        try:
            if before:
                conn.exec_driver_sql(before)
            conn.execute(sa.text(f'CALL "{meta}".run_job(job => CAST(:j AS text))'), {"j": job})
            outcome["error"] = None
        except sa.exc.DBAPIError as exc:
            outcome["error"] = exc.orig.diag.message_primary

    worker = threading.Thread(target=call)
    worker.start()
    return worker, outcome


def _wait_until_underway(worker: threading.Thread, url: str, meta: str, job: str = "adult9") -> None:
    """Until the job's run is well into its search (iteration 2), as the role of `url` sees it."""
    deadline = time.time() + 120
    while _progress(url, meta, job)[1] < 2:
        assert worker.is_alive() and time.time() < deadline
        time.sleep(0.2)


def _wait_for_iteration(url: str, meta: str, iteration: int, process: subprocess.Popen) -> None:
    deadline = time.time() + 120
    while _progress(url, meta)[1] < iteration:
        assert process.poll() is None, process.communicate()
        assert time.time() < deadline, "the run made no progress"
        time.sleep(0.2)


def _running_at(url: str, meta: str, iteration: int, process: subprocess.Popen) -> bool:
    """Wait until the job's latest run is running at `iteration` or later (True), or `process` ended (False)."""
    deadline = time.time() + 120
    while True:
        status, reached = _progress(url, meta)
        if status == "running" and reached >= iteration:
            return True
        if process.poll() is not None:
            return False
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
    """A second run while the first runs is refused, in process and from the CLI. The CLI's process takes seconds
    to start, and on a loaded machine the first run may end before it asks: that try proves nothing and is made
    again."""
    url, meta = pg_job
    for _ in range(3):
        runner = _cli(url, meta, "run", "adult9")
        try:
            if not _running_at(url, meta, 2, runner):
                continue  # ended before it was seen running
            with pytest.raises(DataError, match="job 'adult9' is already running \\(run \\d+"):
                run_job("adult9", url, RunOptions(metadata_schema=meta))
            second = _cli(url, meta, "run", "adult9")
            _, err = second.communicate(timeout=60)
            if second.returncode == 0 and runner.poll() is not None:
                continue  # the first run had ended: no overlap
            assert second.returncode == 2 and "already running" in err and "Traceback" not in err
            return
        finally:
            runner.kill()
            runner.wait()
    pytest.fail("the first run ended before a second one started, three times")


@pg
def test_a_terminated_backend_leaves_a_failed_run_that_resumes(pg_job):
    url, meta = pg_job
    app = f"runner-{meta}"
    runner = _cli(url, meta, "run", "adult9", app=app)
    _wait_for_iteration(url, meta, 3, runner)
    engine = sa.create_engine(url)
    with engine.connect() as conn:  # every session of the runner: its work and its lock
        killed = conn.execute(
            sa.text("SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = :app"),
            {"app": app},
        ).scalar_one()
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
        plpython_or_skip(conn, meta)
        in_server = conn.execute(sa.text(f'CALL "{meta}".run_job(:job)'), {"job": "adult9"}).scalar_one()
        conn.commit()
    engine.dispose()
    from_cli = run_job("adult9", url, RunOptions(metadata_schema=meta))
    assert in_server["minimal"] == [list(n) for n in from_cli.minimal]
    assert in_server["satisfying_count"] == len(from_cli.satisfying)
    assert in_server["stats"]["nodes_checked"] == from_cli.stats.nodes_checked


@pg
def test_analyze_a_registered_job_from_sql(pg_job, tmp_path: Path):
    """SELECT sqlanon.analyze_job(name [, node]) gives what the Python API gives for the same registered job."""
    from sqlanon.api import analyze_registered

    url, meta = pg_job
    config = adult_config(
        url, ["sex", "age", "race"], k=5, load_csv=False, schema=meta[: -len("_meta")], sensitive=["occupation"]
    )
    register_job("risky", _write(tmp_path, config, "risky.yaml"), url, meta)
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        plpython_or_skip(conn, meta)
        every = conn.execute(sa.text(f'SELECT "{meta}".analyze_job(:job)'), {"job": "risky"}).scalar_one()
        one = conn.execute(
            sa.text(f'SELECT "{meta}".analyze_job(:job, :node)'), {"job": "risky", "node": "0,1,1"}
        ).scalar_one()
        with pytest.raises(sa.exc.DBAPIError, match="not in the lattice"):
            conn.execute(sa.text(f'SELECT "{meta}".analyze_job(:job, :node)'), {"job": "risky", "node": "0,9,1"})
    engine.dispose()
    expected = analyze_registered("risky", url, RunOptions(metadata_schema=meta)).to_dict()
    assert every["summary"] == expected["summary"] and every["sensitive"] == "occupation"
    assert [t["label"] for t in every["tables"]] == [t["label"] for t in expected["tables"]]
    assert [t["label"] for t in one["tables"]] == ["0,1,1"]


def test_register_run_list_and_publish_from_sql(pg_server: str, pg_schema: str):
    """A DBA's whole workflow in SQL: register from JSON, run, list runs and nodes, publish another node."""
    meta = f"{pg_schema}_meta"
    search(adult_job(pg_server, ["sex"], k=1, schema=pg_schema), RunOptions(metadata_schema=meta))
    qis = ["sex", "race", "marital-status"]
    config, files = _sql_job(
        adult_config("ignored", qis, k=10, load_csv=False, schema=pg_schema, output={"table": "adult_sql"})
    )
    engine = sa.create_engine(pg_server)
    with engine.connect() as conn:
        plpython_or_skip(conn, meta)
        stored = conn.execute(
            sa.text(f'SELECT "{meta}".register_job(:n, CAST(:c AS json), CAST(:f AS json))'),
            {"n": "census", "c": json.dumps(config), "f": json.dumps(files)},
        ).scalar_one()
        result = conn.execute(sa.text(f'CALL "{meta}".run_job(:j)'), {"j": "census"}).scalar_one()
        runs = conn.execute(sa.text(f'SELECT run_id, status FROM "{meta}".job_runs(:j)'), {"j": "census"}).all()
        nodes = conn.execute(
            sa.text(f'SELECT node, minimal, selected FROM "{meta}".run_nodes(:r)'), {"r": runs[0].run_id}
        ).all()
        passing = (
            conn.execute(sa.text(f'SELECT node FROM "{meta}".passing_nodes(:r)'), {"r": runs[0].run_id}).scalars().all()
        )
        other = next(n.node for n in nodes if n.minimal and not n.selected) if len(nodes) > 1 else nodes[0].node
        published = conn.execute(
            sa.text(f'CALL "{meta}".publish(:r, :n, :t, :s)'),
            {"r": runs[0].run_id, "n": other, "t": "adult_other", "s": pg_schema},
        ).scalar_one()
        with pytest.raises(sa.exc.DBAPIError, match="failed its audit"):  # level 0 is not 10-anonymous
            conn.execute(
                sa.text(f'CALL "{meta}".publish(:r, :n, :t)'), {"r": runs[0].run_id, "n": "0,0,0", "t": "adult_zero"}
            )
        conn.rollback()
        tables = set(
            conn.execute(
                sa.text("SELECT table_name FROM information_schema.tables WHERE table_schema = :s"), {"s": pg_schema}
            ).scalars()
        )
    engine.dispose()
    cli = search(adult_job(pg_server, qis, k=10, load_csv=False, schema=pg_schema), RunOptions(metadata_schema=meta))
    assert stored == 3 and result["minimal"] == [list(n) for n in cli.minimal] and result["output"] == "adult_sql"
    assert runs[0].status == "finished" and any(n.selected for n in nodes)
    assert sorted(passing) == sorted(",".join(map(str, n)) for n in cli.satisfying)
    assert published["audit"]["k_anonymity"]["holds"] and published["node"] == [int(v) for v in other.split(",")]
    assert {"adult_sql", "adult_other"} <= tables and "adult_zero" not in tables


@pg
def test_the_docker_setup_prepares_a_database_where_run_job_works(pg_server: str):
    """The compose flow on this server, without the container: docker/init.sh twice (`setup` runs at every
    `docker compose up`), then docs/postgresql.md's `psql ... -c "CALL sqlanon.run_job('adult'::text)"`."""
    name = f"sqlanon_init_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(pg_server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = sa.engine.make_url(pg_server).set(database=name)
    libpq = url.set(drivername="postgresql").render_as_string(hide_password=False)
    url = url.render_as_string(hide_password=False)
    docker = Path(__file__).parent.parent / "docker"
    try:
        for _ in range(2):
            done = subprocess.run(
                ["sh", str(docker / "init.sh"), url],
                capture_output=True,
                text=True,
                timeout=300,
                env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
            )
            assert done.returncode == 0, done.stderr
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            rows = conn.exec_driver_sql("SELECT COUNT(*) FROM adult").scalar_one()
            jobs = conn.exec_driver_sql("SELECT name FROM sqlanon.jobs").scalars().all()
            plpython_or_skip(conn, "sqlanon", set_path=False)
        engine.dispose()
        assert rows == 30162 and jobs == ["adult"]
        result = json.loads(_psql(libpq, "CALL sqlanon.run_job('adult'::text)").strip())
        assert result["output"] == "adult_anon" and result["node"] in result["minimal"]
        assert result["audit"]["k_anonymity"]["holds"]
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE "{name}" WITH (FORCE)')
        admin.dispose()


def _psql(url: str, sql: str) -> str:
    done = subprocess.run(
        ["psql", url, "-v", "ON_ERROR_STOP=1", "-qAt", "-c", sql], capture_output=True, text=True, timeout=300
    )
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
    assert "--python-path" in (root / "docker" / "init.sh").read_text()  # set by a superuser, not at first start


@pytest.mark.parametrize("backend", ["duckdb", "postgresql"])
def test_runs_killed_at_random_points_leave_nothing_behind(backend: str, tmp_path: Path, request):
    """kill -9 of the client mid-run, four times at random points: the next cleanup closes every such run as
    interrupted and drops its tables; the output is all or nothing."""
    if backend == "duckdb":
        url, meta, schema = f"duckdb:///{tmp_path / 'k.duckdb'}", "sqlanon", None
    else:
        url, schema = request.getfixturevalue("pg_server"), request.getfixturevalue("pg_schema")
        meta = f"{schema}_meta"
    search(
        adult_job(url, ["sex"], k=1, schema=schema) if schema else adult_job(url, ["sex"], k=1),
        RunOptions(metadata_schema=meta),
    )
    extra = {"schema": schema} if schema else {}
    config = _write(tmp_path, adult_config(url, ADULT_QIS, k=5, load_csv=False, output={"table": "killed"}, **extra))
    command = [sys.executable, "-m", "sqlanon.cli", "anonymize", str(config), "--replace", "--metadata-schema", meta]
    rng = random.Random(11)
    for _ in range(4):
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.5, 6.0))
        process.send_signal(signal.SIGKILL)
        process.wait()
    deadline = time.time() + 60
    while True:  # a killed client's backend ends when PostgreSQL notices the closed socket
        cleaned = CliRunner().invoke(main, ["cleanup", "--db", url, "--metadata-schema", meta])
        assert cleaned.exit_code == 0, cleaned.output
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            running = conn.exec_driver_sql(f"SELECT COUNT(*) FROM \"{meta}\".runs WHERE status = 'running'").scalar()
            tables = conn.execute(
                sa.text("SELECT table_name FROM information_schema.tables WHERE table_schema = :s"), {"s": meta}
            ).scalars()
            left = [name for name in tables if run_of_table(name) is not None]  # a run's, not a kept dimension table
            statuses = conn.exec_driver_sql(f"SELECT status FROM \"{meta}\".runs WHERE command = 'anonymize'").all()
            output = conn.execute(
                sa.text(
                    "SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'killed' AND table_schema = :s"
                ),
                {"s": schema or "main"},
            ).scalar()
            rows = (
                conn.exec_driver_sql(
                    f"SELECT COUNT(*) FROM {(chr(34) + schema + chr(34) + '.') if schema else ''}killed"
                ).scalar()
                if output
                else None
            )
        engine.dispose()
        if running == 0 or time.time() > deadline:
            break
        time.sleep(1)
    assert running == 0 and not left
    assert {s for (s,) in statuses} <= {"interrupted", "finished"}
    assert rows in (None, 30162)  # published whole, or not at all


@pytest.mark.parametrize("command", ["cleanup", "anatomy", "mondrian"])
def test_cleanup_drops_the_tables_of_runs_that_ended_without_finishing(tmp_path: Path, command: str):
    """A failed run's dimension, parent-code and search scratch tables (a killed session's, on PostgreSQL, where the
    cube is a table of the caller's work schema) are dropped by cleanup, and when any run starts, an anatomy or
    Mondrian publication included; a finished run keeps its tables (--keep)."""
    url = f"duckdb:///{tmp_path / 'c.duckdb'}"
    search(adult_job(url, ["sex"], k=1))
    engine = sa.create_engine(url)
    tables = {
        run: [f"dim_{run}_0", f"parents_{run}", f"packed_cube_{run}", f"packed_rows_{run}"] for run in (900001, 900002)
    }
    with engine.begin() as conn:
        for run, status in ((900001, "failed"), (900002, "finished")):
            conn.exec_driver_sql(
                "INSERT INTO sqlanon.runs (run_id, job_name, command, strategy, config, status, "
                f"started_at) VALUES ({run}, 'j', 'search', 'auto', '{{}}', '{status}', now())"
            )
            for table in tables[run]:
                conn.exec_driver_sql(f"CREATE TABLE sqlanon.{table} (x INTEGER)")
    if command == "cleanup":
        cleaned = CliRunner().invoke(main, ["cleanup", "--db", url])
        assert cleaned.exit_code == 0, cleaned.output
    else:
        from sqlanon import bucketize, partition

        config = adult_config(url, ["sex", "race"], k=5, load_csv=False, output={"table": "out", "method": command})
        if command == "anatomy":
            config.update(quasi_identifiers=["sex", "race"], sensitive=["occupation"])
            config["output"]["l"] = 2
            del config["criteria"]
            config["insensitive"].remove("occupation")
        (bucketize if command == "anatomy" else partition)(job_from_dict(config, tmp_path))
    with engine.connect() as conn:
        left = set(
            conn.exec_driver_sql(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'sqlanon'"
            ).scalars()
        )
    engine.dispose()
    assert not left & set(tables[900001]) and set(tables[900002]) <= left


def _sql_job(config: dict) -> tuple[dict, dict[str, str]]:
    """A config whose hierarchy files travel as text, as register_job(name, config, files) takes them."""
    files = {}
    for q, spec in config["quasi_identifiers"].items():
        files[f"h/{q}.csv"] = Path(spec["hierarchy"]).read_text()
        spec["hierarchy"] = f"h/{q}.csv"
    return config, files


def register_from_sql(conn: sa.Connection, meta: str, name: str, config: dict) -> None:
    """Register `config` (its hierarchy files as text) as job `name`, from SQL as docs/postgresql.md writes it."""
    config, files = _sql_job(config)
    conn.execute(
        sa.text(
            f'SELECT "{meta}".register_job(name => CAST(:n AS text), config => CAST(:c AS json), '
            "files => CAST(:f AS json))"
        ),
        {"n": name, "c": json.dumps(config), "f": json.dumps(files)},
    )


@pg
def test_a_runner_role_registers_runs_resumes_and_publishes_from_sql(runner, pg_schema: str):
    """No superuser and no trust auth: a login role set up by `sqlanon grant-runner` (and granted its source and
    output schema) registers a job, runs it, cancels it (pg_cancel_backend of its own session), resumes it and
    publishes another node, all from SQL and as docs/postgresql.md writes the calls (schema and argument types
    named), as itself."""
    url, out, loopback_auth = runner
    meta = f"{pg_schema}_meta"
    if os.environ.get("CI"):
        assert loopback_auth == "peer", "CI maps the server's OS user to the runner role (see .ci/run)"
    config = adult_config(
        "ignored",
        ADULT_QIS[:8],
        k=5,
        load_csv=False,
        schema=pg_schema,
        output={"table": "published", "schema": out},
        search={"strategy": "incognito"},
    )  # long enough to stop
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        register_from_sql(conn, meta, "granted", config)
        conn.commit()
        pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        worker, outcome = _call_in_background(conn, meta, "granted")
        _wait_until_underway(worker, url, meta, "granted")  # as the runner itself sees it
        with engine.connect() as other:  # a role may cancel its own sessions
            other.execute(sa.text("SELECT pg_cancel_backend(:p)"), {"p": pid})
        worker.join(60)
        conn.rollback()
        result = conn.execute(
            sa.text(f'CALL "{meta}".run_job(job => CAST(:j AS text), resume => true)'), {"j": "granted"}
        ).scalar_one()
        conn.commit()
        # the resumed run is the cancelled one
        statuses = (
            conn.execute(sa.text(f'SELECT status FROM "{meta}".job_runs(job => CAST(:j AS text))'), {"j": "granted"})
            .scalars()
            .all()
        )
        run_id = conn.execute(
            sa.text(f'SELECT max(run_id) FROM "{meta}".job_runs(job => CAST(:j AS text))'), {"j": "granted"}
        ).scalar()
        top = ",".join(str(h) for h in result["heights"])
        published = conn.execute(
            sa.text(
                f'CALL "{meta}".publish(run => CAST(:r AS bigint), node => CAST(:n AS text), target_table => '
                "CAST(:t AS text), target_schema => CAST(:s AS text))"
            ),
            {"r": run_id, "n": top, "t": "top", "s": out},
        ).scalar_one()
        conn.commit()
        owners = dict(
            conn.execute(sa.text("SELECT tablename, tableowner FROM pg_tables WHERE schemaname = :s"), {"s": out}).all()
        )
        with pytest.raises(sa.exc.DBAPIError) as failure:  # errors come back as one line
            conn.execute(sa.text(f'CALL "{meta}".run_job(job => CAST(:j AS text))'), {"j": "nope"})
        conn.rollback()
    engine.dispose()
    assert "the calling statement was stopped" in outcome["error"]
    assert statuses == ["finished"] and result["audit"]["k_anonymity"]["holds"]
    assert published["audit"]["k_anonymity"]["holds"] and owners == {"published": RUNNER, "top": RUNNER}
    message = failure.value.orig.diag.message_primary  # (PL/Python still adds its traceback as CONTEXT)
    assert "no job named 'nope'" in message and len(message.splitlines()) == 1


@pg
@pytest.mark.parametrize("stop", ["pg_cancel_backend", "statement_timeout"])
def test_a_cancelled_call_stops_its_loopback_work_and_resumes(pg_job, stop: str):
    """Cancelling CALL run_job (or its statement_timeout) stops the run mid-search, not at its end: its loopback
    sessions end, the job lock is free, the run is recorded as cancelled, and a resume finishes it."""
    url, meta = pg_job
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        plpython_or_skip(conn, meta)
        pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        # the session's first call imports sqlanon into its PL/Python interpreter (over a second on a slow
        # machine): done here, so that the timeout falls within the run, not within the import
        with pytest.raises(sa.exc.DBAPIError, match="no job named"):
            conn.execute(sa.text(f'CALL "{meta}".run_job(job => CAST(:j AS text))'), {"j": "nope"})
        conn.rollback()
        # a statement_timeout well before the run's end (about 3 s on a fast machine, 6 s on a slow one)
        worker, outcome = _call_in_background(
            conn, meta, "adult9", "SET statement_timeout = '1s'" if stop == "statement_timeout" else None
        )
        if stop == "pg_cancel_backend":
            _wait_until_underway(worker, url, meta)
            with engine.connect() as admin:
                admin.execute(sa.text("SELECT pg_cancel_backend(:p)"), {"p": pid})
        worker.join(60)
        assert not worker.is_alive() and outcome["error"], outcome
        conn.rollback()
        conn.exec_driver_sql("RESET statement_timeout")
    assert "the calling statement was stopped" in outcome["error"]
    deadline = time.time() + 20
    while True:  # the loopback sessions are gone
        with engine.connect() as check:
            left = check.exec_driver_sql(
                "SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = "
                "'sqlanon-in-server' AND datname = current_database()"
            ).scalar_one()
        if left == 0 or time.time() > deadline:
            break
        time.sleep(0.5)
    assert left == 0
    assert _progress(url, meta)[0] == "cancelled"
    with engine.connect() as check:
        stopped_after = check.exec_driver_sql(
            f"SELECT nodes_checked FROM \"{meta}\".runs WHERE job_name = 'adult9' ORDER BY run_id DESC LIMIT 1"
        ).scalar_one()
    engine.dispose()
    resumed = run_job("adult9", url, RunOptions(metadata_schema=meta), resume=True)  # the lock is free
    full = search(
        adult_job(
            url, ADULT_QIS[:8], k=5, load_csv=False, schema=meta.removesuffix("_meta"), search={"strategy": "incognito"}
        ),
        RunOptions(metadata_schema=meta),
    )
    assert resumed.minimal == full.minimal
    assert stopped_after < full.stats.nodes_checked  # stopped where the cancel came, not at the end


@pg
def test_a_dead_client_stops_its_call_and_the_run_resumes(pg_job):
    """The client of CALL run_job dies (kill -9 of psql): its backend notices within seconds, the loopback
    sessions end, the job lock is free, the run is no longer running, and a resume finishes it."""
    url, meta = pg_job
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        plpython_or_skip(conn, meta)
    parsed = sa.engine.make_url(url)
    client = subprocess.Popen(
        [
            "psql",
            "-h",
            parsed.host,
            "-p",
            str(parsed.port or 5432),
            "-U",
            parsed.username,
            "-d",
            parsed.database,
            "-c",
            "SET client_connection_check_interval = '1s'",
            "-c",
            f"CALL \"{meta}\".run_job('adult9')",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for_iteration(url, meta, 2, client)
    client.kill()
    client.wait()
    deadline = time.time() + 30
    while True:
        with engine.connect() as check:
            left = check.exec_driver_sql(
                "SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = "
                "'sqlanon-in-server' AND datname = current_database()"
            ).scalar_one()
        status = _job_status(url, meta)
        if (left == 0 and status != "running") or time.time() > deadline:
            break
        time.sleep(0.5)
    engine.dispose()
    assert left == 0 and status in ("cancelled", "interrupted"), status
    resumed = run_job("adult9", url, RunOptions(metadata_schema=meta), resume=True)  # the lock is free
    full = search(
        adult_job(
            url, ADULT_QIS[:8], k=5, load_csv=False, schema=meta.removesuffix("_meta"), search={"strategy": "incognito"}
        ),
        RunOptions(metadata_schema=meta),
    )
    assert resumed.minimal == full.minimal


def _job_status(url: str, meta: str) -> str:
    """The latest run's status as `sqlanon job status` shows it (a run marked running with no live session
    is interrupted)."""
    from sqlanon.registry import opened_registry

    with opened_registry(url, meta) as registry:
        return registry.runs("adult9", 1)[0].status


def test_a_cancel_that_comes_after_the_run_finished_leaves_its_result_standing():
    """A statement_timeout that fires after the run's last check (the run committed on its loopback session) ends
    the CALL with a notice, not an error that would say nothing was done."""
    from sqlanon.inserver import settle_late_cancel

    class FakePlpy:
        class SPIError(Exception):
            pass

        def __init__(self, pending: bool) -> None:
            self.pending, self.notices = pending, []

        def execute(self, sql: str) -> None:
            if self.pending:
                self.pending = False
                raise self.SPIError("canceling statement due to statement timeout")

        def notice(self, message: str) -> None:
            self.notices.append(message)

    late, on_time = FakePlpy(pending=True), FakePlpy(pending=False)
    settle_late_cancel(late, "adult9")
    settle_late_cancel(on_time, "adult9")
    assert on_time.notices == [] and len(late.notices) == 1
    assert "statement timeout" in late.notices[0] and "its result stands" in late.notices[0]


@pg
def test_a_terminated_loopback_session_records_its_cause(pg_job):
    """pg_terminate_backend of the session an in-server run works on ends the CALL with one line, and the run is
    recorded as failed with the cause (not a follow-up error of the dead session's), and resumes."""
    url, meta = pg_job
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        plpython_or_skip(conn, meta)
        worker, outcome = _call_in_background(conn, meta, "adult9")
        _wait_until_underway(worker, url, meta)
        with engine.connect() as admin:
            admin.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = "
                    "'sqlanon-in-server' AND datname = current_database()"
                )
            )
        worker.join(60)
        conn.rollback()
    with engine.connect() as check:
        status, error = check.execute(
            sa.text(f"SELECT status, error FROM \"{meta}\".runs WHERE job_name = 'adult9' ORDER BY run_id DESC LIMIT 1")
        ).one()
    engine.dispose()
    assert "terminating connection" in outcome["error"] and len(outcome["error"].splitlines()) == 1
    # libpq reports the server's FATAL message when it read it before the socket closed, else the closed socket
    died = ("terminating connection" in error) or ("server closed the connection" in error)
    assert status == "failed" and died and "PendingRollback" not in error, error
    resumed = run_job("adult9", url, RunOptions(metadata_schema=meta), resume=True)
    assert resumed.minimal


class Interrupt:
    """A progress callback that interrupts the run (as Ctrl-C does, inside the search) when `phase` begins."""

    def __init__(self, phase: str):
        self.phase = phase

    def __call__(self, phase: str, done: int, total: int | None) -> None:
        if phase == self.phase:
            raise KeyboardInterrupt


def test_an_interrupted_file_run_resumes_where_it_stopped_and_only_the_same_job(tmp_path: Path):
    """A DuckDB job resumes as a registered job does (`--resume`): from its last completed Incognito iteration,
    to the result of a fresh run, and only while the job and its hierarchies are those of the stopped run."""
    url = f"duckdb:///{tmp_path / 'adult.duckdb'}"
    job = adult_job(url, ADULT_QIS, search={"strategy": "incognito"})
    with pytest.raises(DataError, match="no earlier search run in this database to resume"):
        search(job, RunOptions(resume=True))
    with pytest.raises(KeyboardInterrupt):
        search(job, RunOptions(progress=Interrupt("iteration 5/9")))
    with pytest.raises(DataError, match="changed since run 1 stopped \\(criteria\\)"):
        search(adult_job(url, ADULT_QIS, k=6, search={"strategy": "incognito"}), RunOptions(resume=True))
    resumed = search(job, RunOptions(resume=True))
    fresh = search(job)
    assert resumed.run_id == 1 and fresh.run_id == 2
    assert set(resumed.satisfying) == set(fresh.satisfying) and resumed.minimal == fresh.minimal
    assert resumed.stats.nodes_checked < fresh.stats.nodes_checked  # iterations 1-4 were not checked again
    with pytest.raises(DataError, match="the last search run of job 'job' \\(run 2\\) finished; nothing to resume"):
        search(job, RunOptions(resume=True))
    with pytest.raises(KeyboardInterrupt):
        search(job, RunOptions(progress=Interrupt("iteration 3/9")))
    edited = tmp_path / "sex.csv"
    edited.write_text("Male;person\nFemale;person\n")  # the same QI, another hierarchy file
    changed = job_from_dict(adult_config(url, ADULT_QIS, search={"strategy": "incognito"}), tmp_path)
    changed.quasi_identifiers[0] = dataclasses.replace(changed.quasi_identifiers[0], hierarchy=edited)
    with pytest.raises(DataError, match="changed since run 3 stopped \\(hierarchy_digests, quasi_identifiers\\)"):
        search(changed, RunOptions(resume=True))
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump(adult_config(url, ["sex", "age"], output={"table": "m", "method": "mondrian"})))
    refused = CliRunner().invoke(main, ["anonymize", str(config), "--resume"])
    assert refused.exit_code == 2 and "there is no search to resume" in refused.stderr
