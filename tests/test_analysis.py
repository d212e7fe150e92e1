"""`sqlanon analyze`: attacks, risk and utility of releases, against hand-worked answers and pandas."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pandas as pd
import pytest
import sqlalchemy as sa

from sqlanon import RunOptions, analyze, analyze_table, anonymize, node_metrics
from sqlanon.analysis.attacks import REVEALED_SHOWN, AnalysisSettings
from sqlanon.config import job_from_dict
from sqlanon.engine.star import read_hierarchy_files
from sqlanon.errors import ConfigError, DataError
from sqlanon.model.hierarchies import Hierarchy

from .conftest import Recorded, adult_job, reclassified
from .test_cli import run, write_config

OTHERS = ["marital-status", "education", "native-country", "workclass", "salary-class"]  # neither QI nor sensitive
PATIENTS = [  # zip, age, disease: three classes at (zip, age)
    ("130", "2", "flu"),
    ("130", "2", "flu"),
    ("130", "2", "flu"),
    ("148", "4", "flu"),
    ("148", "4", "cancer"),
    ("148", "4", "cancer"),
    ("148", "4", "hiv"),
    ("130", "3", "flu"),
    ("130", "3", "flu"),
    ("130", "3", "flu"),
    ("130", "3", "flu"),
    ("130", "3", "cold"),
]


def _patients(tmp_path: Path):
    url = f"duckdb:///{tmp_path / 'p.duckdb'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE patients (zip VARCHAR, age VARCHAR, disease VARCHAR)")
        conn.exec_driver_sql(
            "INSERT INTO patients VALUES " + ", ".join(f"('{z}', '{a}', '{d}')" for z, a, d in PATIENTS)
        )
    engine.dispose()
    return job_from_dict(
        {
            "source": {"url": url, "table": "patients"},
            "quasi_identifiers": {"zip": {"generate": "mask"}, "age": {"generate": "suppress"}},
            "sensitive": ["disease"],
            "criteria": {"k_anonymity": {"k": 3}},
        },
        tmp_path,
    )


def test_hand_worked_table(tmp_path: Path):
    settings, recorded = AnalysisSettings(near=0.8, risk_threshold=0.3), Recorded()
    report = analyze_table(_patients(tmp_path), "patients", options=RunOptions(progress=recorded), settings=settings)
    assert recorded.steps("analysis") == ["attacks and risk of the table"]
    [t] = report.tables
    assert (t.rows, t.classes, t.suppressed) == (12, 3, 0)
    assert (t.homogeneous_classes, t.homogeneous_tuples) == (1, 3) and t.revealed_values == ["flu"]
    assert (t.nearly_homogeneous_classes, t.nearly_homogeneous_tuples) == (2, 8)  # 4 flu of 5 >= 0.8
    # ruling out one value discloses the two-valued class too; two values, the three-valued one
    assert t.disclosed_by_background == {0: 3, 1: 8, 2: 12}
    assert t.highest_risk == pytest.approx(1 / 3) and t.records_at_risk == 3  # the class of 3: 1/3 > 0.3
    assert t.average_risk == pytest.approx(3 / 12) and t.unique_share == 0
    assert report.exceeds(0.3, None) and not report.exceeds(0.5, 3) and report.exceeds(None, 2)


def test_nodes_agree_with_pandas_on_their_published_table(adult_duck: str):
    qis = ["sex", "age", "race", "marital-status"]
    job = reclassified(
        adult_job(adult_duck, qis, k=5, load_csv=False, output={"table": "analysis_check"}), sensitive=["occupation"]
    )
    published = anonymize(job, replace=True)
    report = analyze(job, node=published.node, settings=AnalysisSettings(near=0.9, risk_threshold=0.1))
    [node] = report.tables
    [table] = analyze_table(job, "analysis_check", settings=AnalysisSettings(near=0.9, risk_threshold=0.1)).tables
    engine = sa.create_engine(adult_duck)
    with engine.connect() as conn:  # a 30k-row published table: pulled only to check the SQL independently
        frame = pd.read_sql_query(
            sa.text('SELECT sex, age, race, "marital-status", occupation FROM analysis_check'), conn
        )
    engine.dispose()
    classes = frame.groupby(qis)["occupation"]
    sizes, distinct = classes.size(), classes.nunique()
    top = classes.agg(lambda s: s.value_counts().iloc[0])
    for found in (node, table):
        assert found.rows == len(frame) and found.classes == len(sizes)
        assert found.homogeneous_tuples == int(sizes[distinct == 1].sum())
        assert found.nearly_homogeneous_tuples == int(sizes[top >= 0.9 * sizes].sum())
        assert found.disclosed_by_background[1] == int(sizes[distinct <= 2].sum())
        assert found.highest_risk == pytest.approx(1 / sizes.min())
        assert found.records_at_risk == int(sizes[1 / sizes > 0.1].sum())
    utility = node.utility
    assert utility["dm_star"] == pytest.approx(float((sizes**2).sum())) == utility["discernibility"]
    assert utility["aecs"] == pytest.approx(len(frame) / len(sizes))
    assert 0 < utility["loss"] < 1


def test_revealed_values_agree_with_pandas(adult_duck: str):
    """The values homogeneous classes reveal, read back from the cube's codes of the attribute (on DuckDB): the
    first of them in order, as pandas finds them on the table."""
    qis = ["sex", "age", "race", "marital-status"]
    job = reclassified(adult_job(adult_duck, qis, k=5, load_csv=False), sensitive=["occupation"])
    [table] = analyze(job, node=(0, 0, 0, 0)).tables
    engine = sa.create_engine(adult_duck)
    with engine.connect() as conn:  # 30k rows, pulled only to check the SQL independently
        frame = pd.read_sql_query(sa.text('SELECT sex, age, race, "marital-status", occupation FROM adult'), conn)
    engine.dispose()
    classes = frame.astype(str).groupby(qis)["occupation"]
    homogeneous = set(classes.first()[classes.nunique() == 1])
    assert len(homogeneous) > REVEALED_SHOWN  # some left out, and not the last ones
    assert table.revealed_values == sorted(homogeneous)[:REVEALED_SHOWN]


def test_suppressed_classes_are_left_out(adult_duck: str):
    qis = ["sex", "age", "race", "marital-status"]
    job = reclassified(
        adult_job(adult_duck, qis, k=20, load_csv=False),
        sensitive=["occupation"],
        suppression=__import__("sqlanon").Suppression(0.05),
    )
    report = analyze(job, node=(0, 1, 0, 0))
    [t] = report.tables
    assert t.suppressed > 0 and t.rows + t.suppressed == 30162
    assert t.highest_risk <= 1 / 20  # every released class holds at least k
    assert t.utility["suppressed"] == t.suppressed and t.utility["aecs"] == pytest.approx(30162 / (t.classes + 1))


def test_cli_gates_a_release_on_its_risk(tmp_path: Path):
    config = write_config(tmp_path, sensitive=["occupation"], insensitive=OTHERS)
    result = run("analyze", str(config), "--json")
    assert result.exit_code in (0, 1), result.output
    data = json.loads(result.stdout)
    assert data["sensitive"] == "occupation" and data["summary"]["tables"] == len(data["tables"]) >= 1
    assert run("analyze", str(config), "--max-risk", "1").exit_code == 0
    gated = run("analyze", str(config), "--max-risk", "0.0001")
    assert gated.exit_code == 1 and "over the limits" in gated.stderr
    csv_out = run("analyze", str(config), "--node", "0,4,1", "--format", "csv").stdout.splitlines()
    assert csv_out[0].startswith("release,rows,classes") and csv_out[1].startswith('"0,4,1",30162,')


def test_bad_analysis_input(tmp_path: Path):
    with pytest.raises(ConfigError, match="near-homogeneity share"):
        AnalysisSettings(near=1.5)
    with pytest.raises(ConfigError, match="risk threshold"):
        AnalysisSettings(risk_threshold=0)
    job = _patients(tmp_path)
    with pytest.raises(ConfigError, match="not a sensitive attribute of the job"):
        analyze_table(job, "patients", sensitive="zip")
    with pytest.raises(DataError, match="has no column 'disease'"):
        engine = sa.create_engine(job.source.url)
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE bare AS SELECT zip, age FROM patients")
        engine.dispose()
        analyze_table(job, "bare")
    config = write_config(tmp_path, sensitive=["occupation"], insensitive=OTHERS)
    for args, fragment in (
        (["--node", "0,9,0"], "is not in the lattice"),
        (["--near", "2"], "near-homogeneity"),
        (["--node", "0,0,0", "--table", "adult"], "not both"),
    ):
        result = run("analyze", str(config), *args)
        assert result.exit_code == 2 and fragment in result.stderr, (args, result.output)


def test_journalist_and_marketer_risk_against_a_population(adult_duck: str):
    qis = ["sex", "race", "salary-class"]
    engine = sa.create_engine(adult_duck)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE OR REPLACE TABLE young AS SELECT * FROM adult WHERE age < 30")
        sample = pd.read_sql_query(sa.text('SELECT sex, race, "salary-class" FROM young'), conn)
        population = pd.read_sql_query(sa.text('SELECT sex, race, "salary-class" FROM adult'), conn)
    engine.dispose()
    job = reclassified(
        adult_job(adult_duck, qis, k=1, load_csv=False),
        sensitive=["occupation"],
        source=dataclasses.replace(adult_job(adult_duck, qis).source, csv=None, table="young"),
        population=(None, "adult"),
    )
    [t] = analyze(job, node=(0, 0, 0), settings=AnalysisSettings(risk_threshold=0.01)).tables
    n = sample.groupby(qis).size()
    big_n = population.groupby(qis).size().reindex(n.index)
    assert t.journalist_highest_risk == pytest.approx(float((1 / big_n).max()))
    assert t.journalist_records_at_risk == int(n[1 / big_n > 0.01].sum())
    assert t.marketer_risk == pytest.approx(float((n / big_n).sum() / n.sum()))
    assert t.journalist_highest_risk <= t.highest_risk  # the population's classes are at least the sample's
    backwards = dataclasses.replace(
        job, source=dataclasses.replace(job.source, table="adult"), population=(None, "young")
    )
    with pytest.raises(DataError, match="population table holds fewer tuples than the release"):
        analyze(backwards, node=(0, 0, 0))


def test_the_job_names_its_population_table(tmp_path: Path):
    config = write_config(tmp_path, sensitive=["occupation"], insensitive=OTHERS, population={"table": "adult"})
    result = run("analyze", str(config), "--node", "0,0,0")
    assert result.exit_code in (0, 1) and "journalist max risk" in result.stdout
    bad = write_config(tmp_path, sensitive=["occupation"], insensitive=OTHERS, population={"tabel": "adult"})
    assert run("analyze", str(bad)).exit_code == 2


def test_bayes_optimal_audit_by_hand(tmp_path: Path):
    """The table as the adversary's prior: the posterior of a person's value is f(s | q) (the paper's Theorem
    3.1 reduces to it), whatever the node; only who is released changes."""
    from sqlanon.analysis.attacks import BayesSettings

    job = _patients(tmp_path)
    [t] = analyze(job, node=(1, 1)).tables  # classes (13*, *): 8 tuples, flu and cold; (14*, *): 4 tuples
    # positive: the three (130, 2) patients have flu with posterior 1; negative: for them, cold has posterior
    # 0 though their class shows it (the (130, 3) group keeps cold at 0.2, flu at 0.8: neither below 0.05)
    assert t.bayes == {"positive_disclosure_tuples": 3, "negative_disclosure_tuples": 3, "rho_breach_tuples": 0}
    [loose] = analyze(job, node=(1, 1), bayes=BayesSettings(delta=0.25)).tables
    assert loose.bayes["positive_disclosure_tuples"] == 3 + 4  # the (130, 3) flu patients: 0.8 > 0.75
    with pytest.raises(ConfigError, match="rho1"):
        BayesSettings(rho1=0.9, rho2=0.5)


def test_bayes_positive_disclosure_agrees_with_pandas(adult_duck: str):
    qis = ["sex", "race", "marital-status"]
    job = reclassified(adult_job(adult_duck, qis, k=5, load_csv=False), sensitive=["salary-class"])
    [t] = analyze(job, node=(1, 0, 1)).tables
    engine = sa.create_engine(adult_duck)
    with engine.connect() as conn:
        frame = pd.read_sql_query(sa.text('SELECT sex, race, "marital-status", "salary-class" FROM adult'), conn)
    engine.dispose()
    share = frame.groupby(qis)["salary-class"].value_counts(normalize=True)
    counts = frame.groupby(qis)["salary-class"].value_counts()
    assert t.bayes["positive_disclosure_tuples"] == int(counts[share > 0.95].sum())
    assert t.bayes["rho_breach_tuples"] == 0  # the posterior equals the prior for every released person


def test_bayes_figures_of_one_valued_and_mixed_cells_agree_with_pandas(tmp_path: Path):
    """Most original cells hold one tuple (so one value, the audit's short way); a few hold several values, some
    of them NULL: every figure at the bottom node against pandas, over every original cell."""
    from sqlanon.analysis.attacks import BayesSettings

    rng = random.Random(5)
    rows = [
        (f"{rng.randrange(60):03d}", str(rng.randrange(8)), rng.choice(["flu", "cold", "gout", None]))
        for _ in range(300)
    ]
    rows += [("999", "1", d) for d in ["flu", "flu", "flu", "cold", None]] + [("998", "2", None)] * 3
    url = f"duckdb:///{tmp_path / 'cells.duckdb'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE visits (zip VARCHAR, age VARCHAR, disease VARCHAR)")
        conn.execute(sa.text("INSERT INTO visits VALUES (:z, :a, :d)"), [{"z": z, "a": a, "d": d} for z, a, d in rows])
    engine.dispose()
    job = job_from_dict(
        {
            "source": {"url": url, "table": "visits"},
            "quasi_identifiers": {"zip": {"generate": "mask"}, "age": {"generate": "suppress"}},
            "sensitive": ["disease"],
            "criteria": {"k_anonymity": {"k": 1}},
        },
        tmp_path,
    )
    settings = BayesSettings(delta=0.4, epsilon=0.3, rho1=0.3, rho2=0.5)
    [t] = analyze(job, node=(0, 0), bayes=settings).tables
    frame = pd.DataFrame(rows, columns=["zip", "age", "disease"])
    c = frame.groupby(["zip", "age"])["disease"].value_counts(dropna=False).rename("c").reset_index()
    c["n"] = c.groupby(["zip", "age"])["c"].transform("sum")
    alpha = c["c"] / c["n"]
    c["negative"] = (alpha < settings.epsilon) & (c["c"] < c["n"])
    low, high = (
        (alpha < settings.rho1) & (alpha > settings.rho2),
        (alpha > 1 - settings.rho1) & (alpha < 1 - settings.rho2),
    )
    c["breach"] = low | high
    cells = c.groupby(["zip", "age"]).agg(n=("n", "first"), negative=("negative", "any"), breach=("breach", "any"))
    assert (cells["n"] == 1).sum() > 100 and (c.groupby(["zip", "age"]).size() > 1).any()  # both ways are taken
    assert t.bayes == {
        "positive_disclosure_tuples": int(c.loc[alpha > 1 - settings.delta, "c"].sum()),
        "negative_disclosure_tuples": int(cells.loc[cells["negative"], "n"].sum()),
        "rho_breach_tuples": int(cells.loc[cells["breach"], "n"].sum()),
    }


def test_the_report_as_a_data_frame_and_bayes_options(tmp_path: Path):
    config = write_config(tmp_path, sensitive=["occupation"], insensitive=OTHERS)
    result = run("analyze", str(config), "--node", "0,1,1", "--delta", "0.2", "--rho", "0.1", "0.9", "--json")
    data = json.loads(result.stdout)
    assert set(data["tables"][0]["bayes"]) == {
        "positive_disclosure_tuples",
        "negative_disclosure_tuples",
        "rho_breach_tuples",
    }
    assert run("analyze", str(config), "--rho", "0.9", "0.1").exit_code == 2
    frame = analyze_table(_patients(tmp_path), "patients").frame()
    assert list(frame["label"]) == ["patients"] and frame.loc[0, "disclosed_b0"] == 3


def test_background_knowledge_follows_the_jobs_l(tmp_path: Path):
    from sqlanon.analysis.attacks import default_background
    from sqlanon.criteria import criteria_from_config

    job = _patients(tmp_path)
    assert default_background(job) == 2
    diverse = dataclasses.replace(
        job,
        criteria=criteria_from_config(
            {"k_anonymity": {"k": 2}, "distinct_l_diversity": {"attribute": "disease", "l": 5}}
        ),
    )
    assert default_background(diverse) == 3


def test_every_minimal_release_agrees_with_pandas(adult_duck: str):
    """The minimal nodes' releases, analyzed in batches over the packed cube, against pandas grouping the table
    itself at each node (an independent path): attacks, risk, ARX's utility and the Bayes-optimal audit, with
    the classes under k suppressed."""
    from sqlanon import Suppression
    from sqlanon.analysis.attacks import BayesSettings

    qis, k, limit = ["sex", "age", "race", "marital-status"], 25, 0.03
    job = reclassified(
        adult_job(adult_duck, qis, k=k, load_csv=False), sensitive=["occupation"], suppression=Suppression(limit)
    )
    report = analyze(job)
    assert len(report.tables) > 1  # several nodes in one batch
    hierarchies = read_hierarchy_files(job)
    engine = sa.create_engine(adult_duck)
    with engine.connect() as conn:  # 30k rows, pulled only to check the SQL independently
        frame = pd.read_sql_query(sa.text('SELECT sex, age, race, "marital-status", occupation FROM adult'), conn)
    engine.dispose()
    frame = frame.astype(str)
    bayes = BayesSettings()
    cells = frame.groupby(qis + ["occupation"]).size().rename("cnt").reset_index()
    cells["nq"] = cells.groupby(qis)["cnt"].transform("sum")
    cells["share"] = cells["cnt"] / cells["nq"]
    for table in report.tables:
        node = tuple(int(level) for level in table.label.split(","))
        published = frame.copy()
        for qi, level in zip(qis, node):
            paths = {path[0]: path[level] for path in hierarchies[qi].paths}
            published[qi] = published[qi].map(paths)
        groups = published.groupby(qis)["occupation"]
        sizes, distinct = groups.size(), groups.nunique()
        kept = sizes >= k
        assert table.suppressed == int(sizes[~kept].sum()) <= limit * len(frame)
        assert (table.rows, table.classes) == (int(sizes[kept].sum()), int(kept.sum()))
        assert table.homogeneous_tuples == int(sizes[kept & (distinct == 1)].sum())
        revealed = sorted(set(groups.first()[kept & (distinct == 1)]))[:REVEALED_SHOWN]
        assert table.revealed_values == revealed  # read back from the cube's codes (on DuckDB)
        assert table.highest_risk == pytest.approx(1 / sizes[kept].min())
        assert table.utility["dm_star"] == pytest.approx(float((sizes**2).sum()))
        penalty = sum(
            (frame[qi].map(_leaves(hierarchies[qi], level)) - 1) / (len(hierarchies[qi].paths) - 1)
            for qi, level in zip(qis, node)
        )
        released = published.set_index(qis).index.isin(sizes[kept].index)
        loss = (penalty[released].sum() + (~released).sum() * len(qis)) / (len(frame) * len(qis))
        assert table.utility["loss"] == pytest.approx(loss)
        # the audit: a released person's posterior is f(s|q); negative also when the class shows a value q lacks
        classes = cells[qis].copy()
        for qi, level in zip(qis, node):
            classes[qi] = classes[qi].map({path[0]: path[level] for path in hierarchies[qi].paths})
        index = classes.set_index(qis).index
        in_release = index.isin(sizes[kept].index)
        class_values = distinct.reindex(index).to_numpy()
        mine = cells[in_release]
        positive = int(mine.loc[mine["share"] > 1 - bayes.delta, "cnt"].sum())
        person = cells.assign(
            low=(cells["share"] < bayes.epsilon) & (cells["cnt"] < cells["nq"]),
            values=cells.groupby(qis)["cnt"].transform("size"),
            shown=class_values,
        )[in_release]
        flagged = person.groupby(qis).agg(n=("nq", "first"), low=("low", "max"), values=("values", "first"))
        flagged["shown"] = person.groupby(qis)["shown"].first()
        negative = int(flagged.loc[flagged["low"] | (flagged["shown"] > flagged["values"]), "n"].sum())
        assert table.bayes == {
            "positive_disclosure_tuples": positive,
            "negative_disclosure_tuples": negative,
            "rho_breach_tuples": 0,
        }
    # the metrics, computed from the analysis' own class sums, against the metrics' own batches (node_metrics)
    nodes = [tuple(int(level) for level in table.label.split(",")) for table in report.tables]
    separate = node_metrics(job, nodes)
    for table, node in zip(report.tables, nodes):
        assert {name: table.utility[name] for name in separate[node]} == pytest.approx(separate[node]), node


def _leaves(hierarchy: Hierarchy, level: int) -> pd.Series:
    """Per original value: the leaves under its generalization at `level`."""
    above = pd.Series({path[0]: path[level] for path in hierarchy.paths})
    return above.map(above.value_counts())


RISK_FIGURES = ["rows", "classes", "suppressed", "highest_risk", "average_risk", "records_at_risk", "unique_share"]


def test_a_job_without_a_sensitive_attribute_gets_the_risk_and_utility_of_its_releases(adult_duck: str, tmp_path):
    """k-anonymity alone (the README's example): the risk and utility figures of each minimal release are those the
    same releases have with a sensitive attribute (they read class sizes only), and no attack figure appears."""
    qis = ["sex", "age", "race", "marital-status"]
    plain = reclassified(
        adult_job(adult_duck, qis, k=20, load_csv=False), suppression=__import__("sqlanon").Suppression(0.02)
    )
    with_sensitive = reclassified(plain, sensitive=["occupation"])
    without, within = analyze(plain), analyze(with_sensitive)
    assert without.sensitive is None and [t.label for t in without.tables] == [t.label for t in within.tables]
    for bare, full in zip(without.tables, within.tables):
        assert {n: getattr(bare, n) for n in RISK_FIGURES} == {n: getattr(full, n) for n in RISK_FIGURES}
        same_utility = {k: v for k, v in full.utility.items() if k != "kl_divergence"}  # KL reads the sensitive
        assert {k: bare.utility[k] for k in same_utility} == pytest.approx(same_utility)
        assert not {"homogeneous_classes", "revealed_values", "bayes"} & set(bare.to_dict())
    assert "homogeneous_tuples" not in without.frame().columns
    assert without.summary() == {
        "tables": len(without.tables),
        "highest_risk": max(t.highest_risk for t in without.tables),
    }
    anonymize(dataclasses.replace(plain, output=__import__("sqlanon").Output(table="plain_anon")), replace=True)
    [published] = analyze_table(plain, "plain_anon").tables
    assert published.sensitive is None and published.highest_risk <= 1 / 20
    config = write_config(tmp_path, insensitive=OTHERS + ["occupation"])
    shown = run("analyze", str(config))
    assert shown.exit_code == 0 and "no attack on a sensitive value applies" in shown.output
    assert "re-identification risk" in shown.output and "attacks on" not in shown.output
    refused = run("analyze", str(config), "--max-homogeneous", "0")
    assert refused.exit_code == 2 and "the job has none" in refused.stderr
