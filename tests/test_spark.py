"""What only Spark has (one local session for the whole run): its outputs as Parquet tables written after their
audit, Parquet files as a source, a Spark Connect server as the session, and the error without Java or pyspark.
The verbs every backend supports, Spark's gaps among them, are in test_backends_shared."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sqlanon import anonymize, audit, search
from sqlanon.config import job_from_dict
from sqlanon.errors import ConfigError, DataError

from .conftest import adult_config, adult_job

pytestmark = pytest.mark.spark
QIS = ["sex", "age", "race", "marital-status"]


def test_anonymize_writes_an_audited_parquet_table(spark_adult):
    """The output is a Parquet table that the audit command accepts, replaced only when asked (its node, suppressed
    tuples and metrics are checked against DuckDB's in tests/test_backends_shared.py)."""
    job = adult_job(spark_adult, ["sex", "race"], k=5, load_csv=False, output={"table": "adult_anon"})
    assert anonymize(job, replace=True).audit.ok
    with pytest.raises(DataError, match="already exists"):
        anonymize(job)
    report = audit(job, "adult_anon")
    assert report.ok and report.rows == 30162
    from sqlanon.backends.spark_dbapi import session_for

    files = session_for("local[2]").sql("DESCRIBE TABLE EXTENDED adult_anon").collect()
    assert any(row[0] == "Provider" and row[1] == "parquet" for row in files)


def test_spark_without_java_or_pyspark(monkeypatch):
    from sqlanon.backends import spark_dbapi as spark

    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(ConfigError, match="openjdk-17-jre-headless"):
        spark.require_spark()
    monkeypatch.setattr(spark.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r'pip install "sqlanon\[spark\]"'):
        spark.require_spark()


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _spark_environment(folder: Path) -> dict[str, str]:
    """pyspark's own distribution as SPARK_HOME, its logs in `folder`, this interpreter for Python workers."""
    import os
    import sys

    import pyspark

    return {
        **os.environ,
        "SPARK_HOME": str(Path(pyspark.__file__).parent),
        "SPARK_LOG_DIR": str(folder),
        "SPARK_PID_DIR": str(folder),
        "PYSPARK_PYTHON": sys.executable,
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    }


#: what an application may take of the cluster (two workers of one core each, on a 2-core machine beside the local
#: session): one core, so that the Spark Connect server's application and a driver's run side by side
CLUSTER_CONF = "spark.executor.memory=512m,spark.executor.cores=1,spark.cores.max=1,spark.sql.shuffle.partitions=2"


@pytest.fixture(scope="module")
def spark_cluster(spark_url, tmp_path_factory):
    """A standalone Spark cluster on this machine from pyspark's own distribution (no download): a master and two
    workers, each a JVM of its own, so the executors the jobs run on are separate processes (what is shipped to
    them, temporary views, checkpoints, is shipped for real). Yields the master's URL and its status page's port."""
    import subprocess

    folder = tmp_path_factory.mktemp("cluster")
    env = _spark_environment(folder)
    spark_class = str(Path(env["SPARK_HOME"]) / "bin" / "spark-class")
    port, ui = _free_port(), _free_port()
    master = f"spark://127.0.0.1:{port}"
    commands = [[spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)]]
    commands[0] += ["--webui-port", str(ui)]
    for worker in (1, 2):
        work = folder / f"worker{worker}"
        commands.append(
            [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1"]
            + ["--memory", "1g", "--webui-port", "0", "--work-dir", str(work), master]
        )
    processes = []
    try:
        for number, command in enumerate(commands):
            log = (folder / f"process{number}.log").open("w")
            processes.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT))
            if number == 0:
                _wait_for(lambda: _status(ui) is not None, "the master's status page")
        _wait_for(lambda: len((_status(ui) or {}).get("workers", [])) == 2, "two workers registered")
        yield master, ui
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def _status(ui: int) -> dict | None:
    """The standalone master's status (its web UI's JSON), or None while it does not answer."""
    import json as json_module
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as page:
            found: dict = json_module.load(page)
            return found
    except OSError:
        return None


def _wait_for(done, what: str, seconds: float = 120) -> None:
    import time

    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"the Spark cluster did not come up: no {what} after {seconds:g} s")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def connect_url(spark_cluster, tmp_path_factory):
    """A Spark Connect server (pyspark's own start script) whose executors run on the standalone cluster, as a
    cluster would offer one."""
    import socket
    import subprocess
    import time

    pytest.importorskip("grpc", reason='Spark Connect needs pip install "sqlanon[spark]" (pyspark[connect])')
    master, _ = spark_cluster
    folder = tmp_path_factory.mktemp("connect")
    port = _free_port()
    env = _spark_environment(folder)
    home = Path(env["SPARK_HOME"])
    settings = [f"spark.connect.grpc.binding.port={port}", f"spark.sql.warehouse.dir={folder / 'warehouse'}"]
    settings += CLUSTER_CONF.split(",")
    command = ["bash", str(home / "sbin" / "start-connect-server.sh"), "--master", master]
    subprocess.run(
        command + [a for setting in settings for a in ("--conf", setting)], env=env, check=True, capture_output=True
    )
    try:
        for _ in range(120):
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}?metadata=duckdb:///{folder / 'metadata.duckdb'}"
    finally:
        subprocess.run(["bash", str(home / "sbin" / "stop-connect-server.sh")], env=env, capture_output=True)


def test_spark_connect_gives_duckdbs_results(connect_url, spark_cluster, adult_duck, tmp_path):
    """sc://HOST:PORT from a client process of its own (a process holds either a local session or a remote
    one), the server's executors on the standalone cluster: CSV load, search and an audited Parquet output, as on
    DuckDB."""
    import subprocess
    import sys

    qis = ["sex", "race", "marital-status"]
    config = tmp_path / "job.json"
    config.write_text(json.dumps(adult_config(connect_url, qis, k=5, output={"table": "adult_remote"})))
    done = subprocess.run(
        [sys.executable, "-m", "sqlanon", "anonymize", str(config), "--format", "json", "--replace"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    remote = json.loads(done.stdout)
    duck = anonymize(adult_job(adult_duck, qis, k=5, load_csv=False, output={"table": "adult_remote"}), replace=True)
    assert tuple(remote["node"]) == duck.node and remote["audit"]["min_class_size"] >= 5
    assert _ran_on_the_cluster(spark_cluster, "Spark Connect server")


def _ran_on_the_cluster(spark_cluster: tuple[str, int], name: str) -> bool:
    """Whether an application named `name` ran executors on the cluster's workers (the master's status)."""
    status = _status(spark_cluster[1]) or {}
    apps = status.get("activeapps", []) + status.get("completedapps", [])
    return any(name in app.get("name", "") for app in apps)


def test_a_standalone_cluster_gives_duckdbs_results(spark_cluster, adult_duck, tmp_path):
    """spark://HOST:PORT: a driver of its own (a client process) attached to the standalone master, its executors
    JVMs of the two workers, the metadata in PostgreSQL (as a cluster's clients share it): CSV load, search and an
    audited Parquet output, as on DuckDB, and the run recorded in PostgreSQL."""
    import os
    import subprocess
    import sys
    import uuid

    import sqlalchemy as sa

    from sqlanon.backends import unreachable_reason

    from .conftest import PG_URL

    if problem := unreachable_reason(PG_URL):
        pytest.fail(f"the cluster's metadata goes to PostgreSQL, unreachable at {PG_URL}: {problem}")
    master, _ = spark_cluster
    metadata = f"t_{uuid.uuid4().hex[:10]}_meta"
    url = f"{master}?warehouse={tmp_path / 'warehouse'}&metadata={PG_URL.replace('+', '%2B')}"
    qis = ["sex", "race", "marital-status"]
    config = tmp_path / "job.json"
    config.write_text(json.dumps(adult_config(url, qis, k=5, output={"table": "adult_cluster"})))
    env = {**os.environ, "SQLANON_SPARK_CONF": CLUSTER_CONF, "PYSPARK_PYTHON": sys.executable}
    command = [sys.executable, "-m", "sqlanon", "anonymize", str(config), "--format", "json", "--replace"]
    engine = sa.create_engine(PG_URL)
    try:
        done = subprocess.run(
            [*command, "--metadata-schema", metadata], capture_output=True, text=True, timeout=600, env=env
        )
        assert done.returncode == 0, done.stderr[-2000:]
        found = json.loads(done.stdout)
        duck = search(adult_job(adult_duck, qis, k=5, load_csv=False))
        assert tuple(found["node"]) in duck.minimal and found["audit"]["min_class_size"] >= 5
        assert _ran_on_the_cluster(spark_cluster, "sqlanon")
        with engine.connect() as conn:
            runs = conn.exec_driver_sql(f'SELECT command FROM "{metadata}".runs').scalars().all()
        assert "anonymize" in runs
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{metadata}" CASCADE')
        engine.dispose()


def test_parquet_files_as_the_source(spark_adult, adult_duck, tmp_path):
    """source.parquet: files read in place (a temporary view), as a warehouse's exported table would be."""
    from sqlanon.backends.spark_dbapi import session_for

    files = tmp_path / "adult_parquet"
    session_for("local[2]").table("adult").write.parquet(str(files))
    config = adult_config(spark_adult, QIS, k=5, load_csv=False, table="adult_files")
    config["source"]["parquet"] = str(files)
    spark = search(job_from_dict(config, tmp_path))
    duck = search(adult_job(adult_duck, QIS, k=5, load_csv=False))
    assert spark.satisfying == duck.satisfying and spark.minimal == duck.minimal
    config["source"]["parquet"] = str(tmp_path / "missing")
    with pytest.raises(DataError, match="cannot read Parquet files"):
        search(job_from_dict(config, tmp_path))


def test_parquet_source_is_for_spark(adult_duck, tmp_path):
    config = adult_config(adult_duck, QIS, k=5, load_csv=False, table="adult_files")
    config["source"]["parquet"] = str(tmp_path)
    with pytest.raises(ConfigError, match="source.parquet reads files in place on Spark"):
        search(job_from_dict(config, tmp_path))


def test_the_release_ledger_is_refused_on_spark_before_the_search(spark_adult, monkeypatch):
    """The ledger checks a release in its publication's transaction: Spark has none, and says so first."""
    monkeypatch.setenv("SQLANON_TEST_LEDGER_KEY", "0123456789abcdef0123456789abcdef")
    config = adult_config(spark_adult, ["sex", "race"], k=5, load_csv=False, output={"table": "adult_ledgered"})
    config |= {
        "insensitive": [c for c in config["insensitive"] if c not in ("native-country", "occupation")],
        "sensitive": ["occupation"],
        "identifying": {"native-country": {"pseudonym": {"key_env": "SQLANON_TEST_LEDGER_KEY"}}},
        "ledger": {"person": "native-country"},
        "unit": "rows",
    }
    with pytest.raises(ConfigError, match=r"the release ledger \(ledger: in the job\) is not available on spark"):
        anonymize(job_from_dict(config))
