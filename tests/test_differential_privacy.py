"""(epsilon, delta)-differential privacy by sampling and generalization (output.method differential_privacy): k and
beta against ARX's ParameterCalculation, the exponential mechanism's draws against their closed form, the score
functions against their definitions, the published table against an independent computation of the sample and
its release in Python, both databases, reproducibility, and bad input."""

from __future__ import annotations

import gzip
import hashlib
import json
import math
from collections import Counter
from typing import Any

import pytest
import sqlalchemy as sa
import yaml

from sqlanon import anonymize, job_from_dict
from sqlanon.errors import ConfigError, SqlanonError
from sqlanon.model.differential_privacy import (
    Release,
    Table,
    aecs_score,
    degree_levels,
    discernibility_score,
    draw,
    keyed_fractions,
    loss_score,
    parameters,
    precision_score,
    predecessors,
    selection_probabilities,
    walk,
)
from sqlanon.publish.differential_privacy import PrivateRelease

from .conftest import ADULT_DIR, ADULT_QIS, PG_URL, adult_config, user_tables
from .test_cli import run as invoke
from .test_randomize import _text

KEY = "a-key-of-the-tests-0123456789abcdef"
LN2, LN3 = math.log(2), math.log(3)

#: (epsilon, delta, k) as ARX's ParameterCalculation gives them (bench/arx/ArxDp.java prints them)
ARX_K = [
    *((0.01, d, k) for d, k in zip((1e-3, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9), (27, 50, 61, 73, 84, 96))),
    *((0.1, d, k) for d, k in zip((1e-3, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9), (27, 50, 61, 73, 84, 96))),
    *((0.5, d, k) for d, k in zip((1e-3, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9), (28, 52, 64, 76, 88, 102))),
    *((LN2, d, k) for d, k in zip((1e-3, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9), (32, 56, 68, 81, 95, 107))),
    *((1.0, d, k) for d, k in zip((1e-3, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9), (35, 62, 75, 92, 105, 119))),
    *((LN3, d, k) for d, k in zip((1e-3, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9), (36, 66, 82, 93, 109, 124))),
    *((1.5, d, k) for d, k in zip((1e-3, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9), (45, 81, 100, 118, 137, 155))),
    *((2.0, d, k) for d, k in zip((1e-3, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9), (65, 114, 132, 165, 183, 201))),
    *((3.0, d, k) for d, k in zip((1e-3, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9), (137, 227, 272, 317, 423, 470))),
]


def test_k_and_beta_are_arxs():
    for epsilon, delta, k in ARX_K:
        found = parameters(epsilon, delta)
        assert (found.k, found.beta) == (k, pytest.approx(1 - math.exp(-epsilon), rel=1e-14)), (epsilon, delta)


def test_k_is_one_above_the_least_k_whose_delta_is_below_delta():
    """The paper's formula, computed here by summing the binomial's terms one by one (not the module's tail):
    delta(k) for ARX's k - 1 is below delta, and for k - 2 it is not."""

    def delta_of(k: int, epsilon: float) -> float:
        beta = 1 - math.exp(-epsilon)
        gamma = (math.exp(epsilon) - 1 + beta) / math.exp(epsilon)
        n, found, bound = math.ceil(k / gamma - 1), -math.inf, math.inf
        while found < bound:
            tail = sum(
                math.comb(n, j) * beta**j * (1 - beta) ** (n - j) for j in range(math.floor(n * gamma) + 1, n + 1)
            )
            found, bound = max(found, tail), math.exp(-n * (gamma * math.log(gamma / beta) - (gamma - beta)))
            n += 1
        return found

    for epsilon, delta in ((1.0, 1e-5), (1.5, 1e-6), (0.5, 1e-3)):
        k = parameters(epsilon, delta).k
        assert delta_of(k - 1, epsilon) < delta <= delta_of(k - 2, epsilon)


def test_the_exponential_mechanism_draws_with_its_closed_form_probabilities():
    """Many seeded walks of one step from the top of a 3 x 3 lattice: the first pivot is one of the top's two
    predecessors, each drawn with probability exp(eps/2 score) over their sum; a chi-square test of the counts
    (1 degree of freedom, the 0.999 quantile: 10.83) passes, and fails for a mechanism that draws uniformly."""
    scores = {(1, 2): -1.0, (2, 1): -3.0, (2, 2): -10.0}
    epsilon, draws = 1.2, 4000
    counts: Counter = Counter()
    for seed in range(draws):
        found = walk(
            (2, 2),
            lambda nodes: {n: scores[n] for n in nodes},
            steps=1,
            epsilon=epsilon,
            fractions=keyed_fractions(f"seed {seed}".encode(), "test"),
        )
        counts[found.pivots[1]] += 1
    weights = {n: math.exp(epsilon / 2 * scores[n]) for n in ((1, 2), (2, 1))}
    total = sum(weights.values())

    def chi_square(expected: dict) -> float:
        return sum((counts[n] - draws * p) ** 2 / (draws * p) for n, p in expected.items())

    assert chi_square({n: w / total for n, w in weights.items()}) < 10.83
    assert chi_square({(1, 2): 0.5, (2, 1): 0.5}) > 10.83


def test_selection_probabilities_and_draws():
    probabilities = selection_probabilities([0.0, math.log(3) * 2], 1.0)  # weights 1 and 3
    assert probabilities == pytest.approx([0.25, 0.75])
    assert selection_probabilities([-1e6, -1e6 - 2], 1.0) == pytest.approx([1 / (1 + math.exp(-1)), 1 / (1 + math.e)])
    assert [draw([0.25, 0.75], f) for f in (0.0, 0.2499, 0.25, 0.999999)] == [0, 0, 1, 1]


def test_the_walk_descends_and_publishes_its_best_pivot():
    heights = (2, 3)
    score = {(a, b): -(abs(a - 1) + abs(b - 1)) for a in range(3) for b in range(4)}  # best at (1, 1)
    found = walk(
        heights,
        lambda nodes: {n: score[n] for n in nodes},
        steps=50,
        epsilon=20.0,
        fractions=keyed_fractions(b"k", "t"),
    )
    for i, pivot in enumerate(found.pivots[1:], start=1):  # each a predecessor of a pivot before it
        assert any(pivot in predecessors(earlier) for earlier in found.pivots[:i])
    assert found.best == (1, 1)


def _classes(table: Table, node: tuple[int, ...], sizes: list[int], shares: list[list[float]]) -> Release:
    """A release of the sample's classes of `sizes` (each with its QIs' shares of their domains) at `node`."""
    kept = [(n, s) for n, s in zip(sizes, shares) if n >= table.k]
    penalties = tuple(
        sum(n * (s[q] * leaves - 1) / (leaves - 1) for n, s in kept) for q, leaves in enumerate(table.leaves)
    )
    return Release(
        node=node,
        suppressed=sum(n for n in sizes if n < table.k),
        classes=len(kept),
        squares=float(sum(n * n for n, _ in kept)),
        penalties=penalties,
    )


def test_the_scores_are_arxs_definitions():
    """Each score from a release's classes against ARX's getScore written out for them: loss sums the released
    tuples' shares of the domains and 1 per QI and tuple left out (unsampled ones too), over d (k - 1); precision
    the released tuples' level over the height and the tuples left out, over d (k - 1); discernibility the
    squared class sizes and rows per tuple left out, over rows (k^2 / (k - 1) + 1); AECS the classes, plus one
    for the tuples left out."""
    table = Table(rows=100, sampled=60, k=5, heights=(2, 3), leaves=(4, 8))
    sizes = [20, 30, 6, 4]
    shares = [[0.5, 0.25], [0.25, 1.0], [1.0, 0.5], [0.5, 0.5]]
    release = _classes(table, (1, 2), sizes, shares)
    out = 4 + 40  # the class of 4 and the 40 rows not sampled
    released_shares = sum(n * (s[0] + s[1]) for n, s in zip(sizes[:3], shares[:3]))
    assert loss_score(release, table) == pytest.approx(-(released_shares + 2 * out) / 2 / 4)
    assert precision_score(release, table) == pytest.approx(-(56 * 1 / 2 + out + 56 * 2 / 3 + out) / 2 / 4)
    assert discernibility_score(release, table) == pytest.approx(-(100 * out + 400 + 900 + 36) / (100 * (25 / 4 + 1)))
    assert aecs_score(release, table) == 4.0
    whole = Table(rows=60, sampled=60, k=1, heights=(2, 3), leaves=(4, 8))
    assert aecs_score(_classes(whole, (1, 2), sizes, shares), whole) == 4.0  # nothing left out: no extra class
    assert discernibility_score(_classes(whole, (1, 2), sizes, shares), whole) == pytest.approx(-1352 / (60 * 5))


def test_arxs_degrees_give_arxs_levels_on_adult():
    """ARX's data-independent cases on Adult: the levels its tests expect for each degree (its column order)."""
    heights = (1, 4, 1, 2, 3, 2, 2, 2, 1)  # sex, age, race, marital-status, education, native-country, workclass,
    # occupation, salary-class
    assert degree_levels("low_medium", heights) == (0, 2, 0, 1, 1, 1, 1, 1, 0)
    assert degree_levels("medium", heights) == (1, 2, 1, 1, 2, 1, 1, 1, 1)
    assert degree_levels("medium_high", heights) == (1, 2, 1, 1, 2, 1, 1, 1, 1)
    assert degree_levels("high", heights) == (1, 3, 1, 2, 2, 2, 2, 2, 1)


def _config(url: str, qis: list[str], **output: Any) -> dict[str, Any]:
    """Adult's `qis` published, the other columns dropped (a column published as it is is refused)."""
    config = adult_config(url, qis)
    del config["criteria"], config["insensitive"]
    config["others"] = "drop"
    config["output"] = {"table": "adult_dp", "method": "differential_privacy", **output}
    return config


def _keyed(monkeypatch) -> dict[str, Any]:
    monkeypatch.setenv("TEST_DP_KEY", KEY)
    return {"noise_key": {"key_env": "TEST_DP_KEY"}}


def _read(url: str, sql: str) -> list[tuple[Any, ...]]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = [tuple(r) for r in conn.exec_driver_sql(sql)]
    engine.dispose()
    return rows


def _hierarchy(column: str) -> dict[str, list[str]]:
    lines = (ADULT_DIR / "hierarchies" / f"{column}.csv").read_text().splitlines()
    return {line.split(";")[0]: line.split(";") for line in lines if line}


def expected_release(url: str, table: str, qis: list[str], node: tuple[int, ...], k: int, beta: float) -> Counter:
    """The published rows (the QIs) computed in Python from the definitions: a row (the job's columns) is sampled
    where the first 13 hex digits of md5(key hex | its values' texts | its occurrence) over 2^52 are below
    beta (engine.randomization), its QIs generalized to the node's levels by the hierarchy files, and the classes
    of fewer than k rows dropped."""
    columns = [c for c in ADULT_QIS if c in qis]  # the job's columns, in the source's order: the others dropped
    rows = _read(url, "SELECT " + ", ".join(f'"{c}"' for c in columns) + f" FROM {table}")
    hierarchies = {q: _hierarchy(q) for q in qis}
    at = [columns.index(q) for q in qis]
    seen: Counter = Counter()
    released: Counter = Counter()
    for row in rows:
        seen[row] += 1
        text = "|".join([KEY.encode().hex(), *(_text(v) for v in row), str(seen[row])])
        if int(hashlib.md5(text.encode()).hexdigest()[:13], 16) / 2**52 >= beta:
            continue
        released[tuple(hierarchies[q][str(row[i])][level] for q, i, level in zip(qis, at, node))] += 1
    return Counter({r: n for r, n in released.items() if n >= k})


@pytest.mark.parametrize("url_kind", ["duckdb", "postgresql"])
def test_the_release_is_the_sample_generalized_with_small_classes_removed(url_kind, duck_url, pg_schema, monkeypatch):
    qis = ["sex", "age", "race", "education"]
    url, schema = (duck_url, None) if url_kind == "duckdb" else (PG_URL, pg_schema)
    config = _config(url, qis, epsilon=1.0, delta=1e-5, generalization="low_medium", **_keyed(monkeypatch))
    if schema:
        config["source"]["schema"] = schema
    report = anonymize(job_from_dict(config, ADULT_DIR))
    assert isinstance(report, PrivateRelease)
    k, beta = parameters(1.0, 1e-5).k, 1 - math.exp(-1.0)
    assert (report.row["k"], report.row["beta"]) == (k, pytest.approx(beta, rel=1e-14))
    node = degree_levels("low_medium", (1, 4, 1, 3))
    assert tuple(report.node_levels.values()) == node
    where = f'"{schema}".' if schema else ""
    published = Counter(_read(url, "SELECT " + ", ".join(f'"{c}"' for c in qis) + f" FROM {where}adult_dp"))
    assert published == expected_release(url, f"{where}adult", qis, node, k, beta)
    assert min(published.values()) >= k
    privacy = _read(url, f"SELECT * FROM {where}adult_dp_privacy")
    assert privacy == [(1.0, 1e-5, k, pytest.approx(beta), 0.0, 0, None, "sex=0, age=2, race=0, education=1")]


def _leaves(column: str, level: int) -> dict[str, int]:
    """Per value of the column's hierarchy at `level`, the leaves under it."""
    found: Counter = Counter()
    for path in _hierarchy(column).values():
        found[path[level]] += 1
    return found


def _expected_score(score: str, released: Counter, qis: list[str], node: tuple[int, ...], k: int, rows: int) -> float:
    """ARX's score of a release (the rows published, every column) written out: loss, the released tuples'
    shares of each QI's domain and one per QI for each tuple left out (suppressed or unsampled), over d (k - 1);
    entropy, per QI the released tuples' values' counts squared (the table's rows per tuple where the value is
    the single top) and the rows per tuple left out, over rows d (k^2 / (k - 1) + 1)."""
    at = range(len(qis))  # the released rows are the QIs' values
    published, d = sum(released.values()), len(qis)
    out = rows - published
    if score == "classification":  # ARX's with QI targets: sex and race here
        total = 0.0
        for t in ("sex", "race"):
            i = qis.index(t)
            tops: Counter = Counter()
            for r, n in released.items():
                tops[(r[:i] + r[i + 1 :], r[i])] += n
            best: dict = {}
            for (others, _), n in tops.items():
                best[others] = max(best.get(others, 0), n)
            height = len(next(iter(_hierarchy(t).values()))) - 1
            total += sum(best.values()) * (1 - node[i] / height)
        return total / (k * 2)
    if score == "loss":
        shares = 0.0
        for q, i, level in zip(qis, at, node):
            leaves = _leaves(q, level)
            shares += sum(n * leaves[r[i]] / len(_hierarchy(q)) for r, n in released.items())
        return -(shares + d * out) / d / (k - 1)
    total = 0.0
    for q, i, level in zip(qis, at, node):
        top = len(next(iter(_hierarchy(q).values()))) - 1
        values: Counter = Counter()
        for r, n in released.items():
            values[r[i]] += n
        total += (rows * published if level == top else sum(c * c for c in values.values())) + rows * out
    return -total / (rows * d) / (k * k / (k - 1) + 1)


@pytest.mark.parametrize("score", ["loss", "entropy", "classification"])
def test_the_search_publishes_its_best_pivot_whose_score_is_recomputed_from_the_release(score, duck_url, monkeypatch):
    """A data-dependent run: the published node is the best-scored node the walk stood on, and its score,
    recomputed in Python from the release computed from the definitions (expected_release) and ARX's formula,
    is the one the walk used."""
    qis = ["sex", "age", "race", "education"]
    search = {
        "budget": 0.5,
        "steps": 8,
        "score": score,
        **({"targets": ["sex", "race"]} if score == "classification" else {}),
    }
    config = _config(duck_url, qis, epsilon=1.5, delta=1e-5, search=search, **_keyed(monkeypatch))
    report = anonymize(job_from_dict(config, ADULT_DIR))
    assert isinstance(report, PrivateRelease)
    node = tuple(report.node_levels.values())
    assert report.walk[0] == (1, 4, 1, 3) and node in report.walk and len(report.walk) == 9
    assert report.score == max(report.walk_scores)
    k, beta = parameters(1.0, 1e-5).k, 1 - math.exp(-1.0)  # epsilon less the search's budget anonymizes
    assert report.row["k"] == k and report.row["search_steps"] == 8 and report.row["search_score"].startswith(score)
    released = expected_release(duck_url, "adult", qis, node, k, beta)
    sample = sum(expected_release(duck_url, "adult", qis, node, 1, beta).values())
    rows = _read(duck_url, "SELECT COUNT(*) FROM adult")[0][0]
    assert report.score == pytest.approx(_expected_score(score, released, qis, node, k, rows), rel=1e-12)
    assert report.sampled == sample and report.published == sum(released.values())
    assert Counter(_read(duck_url, "SELECT " + ", ".join(f'"{c}"' for c in qis) + " FROM adult_dp")) == released


def test_the_same_key_gives_the_same_release_and_no_key_a_new_one(duck_url, monkeypatch):
    search = {"budget": 1.0, "steps": 5, "score": "discernibility"}
    config = _config(duck_url, ["sex", "age", "race"], epsilon=2.0, delta=1e-6, search=search, **_keyed(monkeypatch))
    first = anonymize(job_from_dict(config, ADULT_DIR))
    table = "SELECT * FROM adult_dp ORDER BY ALL"
    released = _read(duck_url, table)
    again = anonymize(job_from_dict(config, ADULT_DIR), replace=True)
    assert (again.walk, _read(duck_url, table)) == (first.walk, released) and first.reproducible
    del config["output"]["noise_key"]
    fresh = anonymize(job_from_dict(config, ADULT_DIR), replace=True)
    assert not fresh.reproducible and _read(duck_url, table) != released


def test_the_key_is_in_no_record(duck_url, monkeypatch):
    anonymize(
        job_from_dict(
            _config(duck_url, ["sex", "age"], epsilon=1.0, delta=1e-5, generalization="low", **_keyed(monkeypatch)),
            ADULT_DIR,
        )
    )
    records = _read(duck_url, "SELECT * FROM sqlanon.runs")
    assert records and KEY not in repr(records) and KEY.encode().hex() not in repr(records)


@pytest.mark.parametrize(
    ("output", "error"),
    [
        ({"epsilon": 0, "delta": 1e-5, "generalization": "low"}, "output.epsilon must be a finite number above 0"),
        ({"epsilon": float("inf"), "delta": 1e-5, "generalization": "low"}, "output.epsilon must be a finite number"),
        ({"epsilon": 6, "delta": 1e-5, "generalization": "low"}, "output.epsilon 6 is above 5"),
        ({"epsilon": 1, "delta": 1, "generalization": "low"}, "output.delta must be a number between 0 and 1"),
        ({"epsilon": 1, "delta": 0, "generalization": "low"}, "output.delta must be a number between 0 and 1"),
        ({"epsilon": 1, "delta": 1e-5}, "needs either generalization"),
        ({"epsilon": 1, "delta": 1e-5, "generalization": "low", "search": {"budget": 0.5}}, "not both"),
        ({"epsilon": 1, "delta": 1e-5, "generalization": "lowest"}, "output.generalization must be one of none"),
        ({"epsilon": 1, "delta": 1e-5, "generalization": {"sex": -1, "age": 1}}, "a level must be a whole number"),
        ({"epsilon": 1, "delta": 1e-5, "generalization": {"sex": 0}}, "'age' has no level"),
        (
            {"epsilon": 1, "delta": 1e-5, "generalization": {"sex": 0, "age": 1, "x": 1}},
            "'x' is not a quasi-identifier",
        ),
        (
            {"epsilon": 1, "delta": 1e-5, "search": {"budget": 1}},
            "output.search.budget must be above 0 and below epsilon",
        ),
        ({"epsilon": 1, "delta": 1e-5, "search": {"budget": 0.5, "steps": 0}}, "output.search.steps must be a whole"),
        ({"epsilon": 1, "delta": 1e-5, "search": {"budget": 0.5, "score": "kl"}}, "output.search.score must be one of"),
        ({"epsilon": 1, "delta": 1e-5, "search": {"budget": 0.5, "limit": 3}}, "unknown setting 'limit'"),
        ({"epsilon": 1, "delta": 1e-5, "search": {"budget": 0.5, "score": "classification"}}, "names the quasi-id"),
        ({"epsilon": 1, "delta": 1e-5, "search": {"budget": 0.5, "targets": ["sex"]}}, "names the quasi-identifiers"),
        (
            {"epsilon": 1, "delta": 1e-5, "search": {"budget": 0.5, "score": "classification", "targets": ["x"]}},
            "'x' is not a quasi-identifier",
        ),
    ],
)
def test_bad_settings_are_refused_when_the_job_is_read(duck_url, output, error):
    with pytest.raises(ConfigError, match=error):
        job_from_dict(_config(duck_url, ["sex", "age"], **output), ADULT_DIR)


def test_what_cannot_be_published_is_refused_and_nothing_written(duck_url, tmp_path):
    config = _config(duck_url, ["sex", "age"], epsilon=1.0, delta=1e-5, generalization={"sex": 0, "age": 9})
    before = user_tables(duck_url)
    with pytest.raises(ConfigError, match="output.generalization.age: level 9 is above its hierarchy's top"):
        anonymize(job_from_dict(config, ADULT_DIR))
    with pytest.raises(ConfigError, match="brings its own k"):
        job_from_dict({**config, "criteria": {"k_anonymity": {"k": 5}}}, ADULT_DIR)
    small = tmp_path / "small.csv"  # 40 rows: the sample cannot hold classes of k = 62
    with gzip.open(ADULT_DIR / "adult.csv.gz", "rt") as f:
        small.write_text("".join(next(f) for _ in range(41)))
    tiny = _config(duck_url, ["sex", "age"], epsilon=1.0, delta=1e-5, generalization="high")
    tiny["source"].update(csv=str(small), table="small")
    with pytest.raises(ConfigError, match=r"needs classes of at least k=62 rows, more than the"):
        anonymize(job_from_dict(tiny, ADULT_DIR))
    assert user_tables(duck_url) - before <= {("main", "adult"), ("main", "small")}  # the sources, loaded from files


def test_a_table_of_the_users_in_the_privacy_tables_place_stops_both_and_replace_rewrites_sqlanons(duck_url):
    """The privacy table goes through ownership as the table does: a table sqlanon did not create under its name
    stops the run before anything is written; a second run replaces both of sqlanon's only with `replace`."""
    config = _config(duck_url, ["sex", "age"], epsilon=1.0, delta=1e-5, generalization="low")
    engine = sa.create_engine(duck_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE adult_dp_privacy (note VARCHAR)")
    engine.dispose()
    with pytest.raises(SqlanonError, match="adult_dp_privacy"):
        anonymize(job_from_dict(config, ADULT_DIR))
    assert ("main", "adult_dp") not in user_tables(duck_url)
    config["output"]["privacy_table"] = "adult_guarantee"
    anonymize(job_from_dict(config, ADULT_DIR))
    with pytest.raises(SqlanonError, match="already exists"):
        anonymize(job_from_dict(config, ADULT_DIR))
    anonymize(job_from_dict(config, ADULT_DIR), replace=True)
    assert _read(duck_url, "SELECT note FROM adult_dp_privacy") == []  # the user's table, untouched
    assert _read(duck_url, "SELECT k FROM adult_guarantee") == [(parameters(1.0, 1e-5).k,)]


def test_the_cli_shows_the_guarantee_and_warns_that_the_rows_are_the_owners(duck_url, tmp_path):
    config = _config(duck_url, ["sex", "age"], epsilon=1.0, delta=1e-5, search={"budget": 0.5, "steps": 3})
    path = tmp_path / "dp.yaml"
    path.write_text(yaml.safe_dump(config))
    result = invoke("anonymize", str(path))
    assert result.exit_code == 0, result.output
    assert (
        "(1, 1e-05)-differential privacy" in result.stdout
        and "node chosen by the exponential mechanism" in result.stdout
    )
    assert "they are not differentially private" in result.stderr
    shown = json.loads(invoke("anonymize", str(path), "--replace", "--json").stdout)
    assert shown["method"] == "differential_privacy" and shown["k"] == parameters(0.5, 1e-5).k
    assert len(shown["walk"]) == len(shown["walk_scores"]) == 4
