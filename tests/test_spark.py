"""The same jobs on Apache Spark SQL (one local session for the whole run): DuckDB's results, Parquet outputs
written after their audit, the same one-line errors."""

from __future__ import annotations

import json
import random
import warnings
from pathlib import Path

import pytest

from sqlanon import anonymize, audit, search
from sqlanon.config import job_from_dict
from sqlanon.errors import ConfigError, DataError

from .conftest import adult_config, adult_job
from .test_criteria import RANDOM_CASES, _named

pytestmark = pytest.mark.spark
QIS = ["sex", "age", "race", "marital-status"]


def _random_rows(seed: int) -> list[tuple]:
    rng = random.Random(seed)
    return [
        (
            rng.choice(["v0", "v1", "v2", "v3"]),
            rng.choice(["w0", "w1", "w2"]),
            rng.choice("abcd"),
            rng.choice("xy"),
            rng.randint(1, 4),
        )
        for _ in range(rng.randint(8, 40))
    ]


def _random_job(tmp: Path, url: str, table: str, rows: list[tuple], spec: dict, limit: int):
    (tmp / "data.csv").write_text("p,q,occupation,extra,cost\n" + "\n".join(",".join(map(str, r)) for r in rows))
    (tmp / "p.csv").write_text("v0;A;*\nv1;A;*\nv2;B;*\nv3;B;*\n")
    (tmp / "q.csv").write_text("w0;*\nw1;*\nw2;*\n")
    (tmp / "occ.csv").write_text("a;G1;*\nb;G1;*\nc;G2;*\nd;G2;*\n")
    return job_from_dict(
        {
            "source": {"url": url, "table": table, "csv": "data.csv"},
            "quasi_identifiers": {"p": "p.csv", "q": "q.csv"},
            "criteria": spec,
            "insensitive": [c for c in ("occupation", "extra", "cost") if c not in _named(spec)],
            "suppression": {"limit": limit},
        },
        tmp,
    )


@pytest.mark.parametrize("case", range(len(RANDOM_CASES)))
def test_random_tables_equal_duckdb(spark_url, tmp_path, case):
    """Every criterion of the random-table cases, on a seeded random table, with and without suppression."""
    spec, rows = RANDOM_CASES[case], _random_rows(case)
    distinct = {"occupation": len({r[2] for r in rows}), "extra": len({r[3] for r in rows})}
    if any(
        p.get("l", 1) > min(distinct[a] for a in p.get("attributes", [p.get("attribute")]) if a in distinct)
        for p in spec.values()
        if "l" in p
    ):
        rows = rows + [("v0", "w0", v, e, 1) for v in "abcd" for e in "xy"]  # every value, so l is possible
    limit = case % 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # don't-care values absent from a small random table
        spark = search(_random_job(tmp_path, spark_url, f"random_{case}", rows, spec, limit))
        duck = search(_random_job(tmp_path, f"duckdb:///{tmp_path / 'r.duckdb'}", "t", rows, spec, limit))
    assert spark.satisfying == duck.satisfying and spark.minimal == duck.minimal


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
