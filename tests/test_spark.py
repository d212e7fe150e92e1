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


@pytest.fixture(scope="module")
def connect_url(spark_url, tmp_path_factory):
    """A Spark Connect server on this machine (pyspark's own start script), as a cluster would offer one."""
    import os
    import socket
    import subprocess
    import time

    import pyspark

    pytest.importorskip("grpc", reason='Spark Connect needs pip install "sqlanon[spark]" (pyspark[connect])')
    folder = tmp_path_factory.mktemp("connect")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    home = Path(pyspark.__file__).parent
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOG_DIR": str(folder),
        "SPARK_PID_DIR": str(folder),
        "PATH": f"{Path(os.sys.executable).parent}:{os.environ.get('PATH', '')}",
    }
    script = home / "sbin" / "start-connect-server.sh"
    subprocess.run(
        [
            "bash",
            str(script),
            "--conf",
            f"spark.connect.grpc.binding.port={port}",
            "--conf",
            f"spark.sql.warehouse.dir={folder / 'warehouse'}",
            "--conf",
            "spark.sql.shuffle.partitions=2",
        ],
        env=env,
        check=True,
        capture_output=True,
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


def test_spark_connect_gives_duckdbs_results(connect_url, adult_duck, tmp_path):
    """sc://HOST:PORT from a client process of its own (a process holds either a local session or a remote
    one): CSV load, search and an audited Parquet output, as on DuckDB."""
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
