"""ARX's quality models as selection metrics (sqlanon.model.quality): each figure against a pandas reference of
its definition on every node of a small Adult lattice, and the node each selects against ARX's own test cases
on Adult (tests/data/arx_quality_cases.json, read from ARX's test sources by bench/arx/quality_cases.py).

Where ARX's algorithm is exact, sqlanon's optimum and its figure are ARX's. Where it is not, sqlanon's is at least
as good by ARX's own figure and ARX's optimum passes sqlanon's criteria: ARX's heuristic searches (its Heuristic,
HeuristicTopDown and Genetic tests), practical monotonicity (ARX prunes as if every criterion were monotone), and
Grassberger's entropy, whose check in ARX (EntropyLDiversity.isAnonymous) stops adding c G(c) as soon as the sum
passes its bound, though G(1) is negative: it fails classes the definition passes, by the order of its hash
buckets. On the whole release's bounds (average risk, sample uniqueness) the optimum is ARX's and the figure
within a percent: which of the boundary's classes of equal size go ARX decides by their first rows' positions,
which a table in a database does not have. ARX's cases on a research subset of Adult (delta-presence, k-map counted
in the population, and its plain subsets: TestAnonymizationSubset's random rows, drawn as Java draws them) publish
the subset's rows of a copy of Adult that flags them.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest

from sqlanon import anonymize, node_metrics, search
from sqlanon.config import job_from_dict
from sqlanon.criteria import criteria_from_config
from sqlanon.engine import node_releases
from sqlanon.errors import ConfigError, DataError
from sqlanon.model.job import Output, Selection, Subset, Suppression
from sqlanon.model.quality import AGGREGATES, CostBenefit, QualitySettings, aggregate
from sqlanon.model.selection import METRICS, best_node

from .conftest import ADULT_DIR, ADULT_QIS, adult_config, adult_job, reclassified

CASES: list[dict[str, Any]] = json.loads((Path(__file__).parent / "data" / "arx_quality_cases.json").read_text())
HEURISTIC = {"TestAnonymizationHeuristic", "TestAnonymizationHeuristicTopDown", "TestAnonymizationGenetic"}
#: the bounds on the whole release, and how close ARX's figure is: which of a size's classes are suppressed is a
#: tie ARX breaks by their first row's position and sqlanon by their QI values (with population uniqueness at
#: 0.0001 and 4%, ARX's optimum suppresses 702 of its 4,703 unique records: which ones moves the non-monotonic
#: entropy by 1.4%)
WHOLE_RELEASE = {"average_risk": 1e-2, "sample_uniqueness": 1e-2, "population_uniqueness": 2e-2}
ARX_ROWS = 30162


def _label(case: dict[str, Any]) -> str:
    select = case["select"]
    settings = f"gs{select.get('gs_factor', 0.5)}-{select.get('aggregate', 'default')}"
    criteria = "+".join(sorted(case["criteria"]))
    subset = case.get("subset")
    subset = "" if subset is None else "-subset" if subset == "adult_subset" else f"-random{subset['java_random']}"
    return (
        f"{case['test'][len('TestAnonymization') :]}-{criteria}{subset}-{case['limit']}-{select['metric']}-{settings}"
    )


#: ARX's research subset of Adult (its data/adult_subset.csv), which its d-presence and k-map cases read: the
#: numbers of its rows (bench/arx/quality_cases.py)
SUBSET_ROWS = [int(row) for row in (Path(__file__).parent / "data" / "arx_adult_subset_rows.txt").read_text().split()]
SUBSET_FLAG = "in_subset"
JAVA_MASK = (1 << 48) - 1


def java_random_rows(size: int) -> list[int]:
    """TestAnonymizationSubset.getSubset(size): the distinct values of java.util.Random(0xDEADBEEF).nextInt(size)
    drawn size times (Java's linear congruential generator and its nextInt, the seed an int literal widened)."""
    seed = (-559038737 ^ 0x5DEECE66D) & JAVA_MASK  # 0xDEADBEEF as Java's int

    def bits31() -> int:
        nonlocal seed
        seed = (seed * 0x5DEECE66D + 0xB) & JAVA_MASK
        return seed >> 17

    def next_int(bound: int) -> int:
        if bound & -bound == bound:
            return (bound * bits31()) >> 31
        while True:
            bits = bits31()
            value = bits % bound
            if bits - value + bound - 1 < 1 << 31:  # Java's int would overflow: draw again
                return value

    return sorted({next_int(size) for _ in range(size)})


def _subset_rows(subset: Any) -> list[int]:
    return SUBSET_ROWS if subset == "adult_subset" else java_random_rows(subset["java_random"])


def _with_subset(url: str, subset: Any) -> str:
    """Adult with a column flagging the rows of a case's research subset ("adult_subset": ARX's data file;
    {"java_random": size}: `java_random_rows`), as a table of its own (made once per database); its name."""
    rows = _subset_rows(subset)
    table = "adult_subset" if subset == "adult_subset" else f"adult_random_{subset['java_random']}"
    with duckdb.connect(url.removeprefix("duckdb:///")) as con:
        found = f"SELECT COUNT(*) FROM information_schema.tables WHERE table_name = '{table}'"
        if not con.execute(found).fetchall()[0][0]:
            frame = pd.read_csv(ADULT_DIR / "adult.csv.gz", sep=";", dtype=str)
            frame[SUBSET_FLAG] = frame.index.isin(rows)
            con.register("rows_frame", frame)
            con.execute(f"CREATE TABLE {table} AS SELECT * FROM rows_frame")
    return table


def _job(url: str, case: dict[str, Any], output: str) -> Any:
    """ARX's case as a job: eight QIs (the ninth sensitive) or nine, its criteria, limit and quality model (and
    with delta-presence or k-map counted in the population, ARX's research subset of Adult)."""
    sensitive = case["sensitive"]
    job = adult_job(url, [q for q in ADULT_QIS if q != sensitive], load_csv=False)
    model = CostBenefit(**case.get("cost_benefit", {}))
    parsed = criteria_from_config(case["criteria"], ADULT_DIR / "hierarchies", model)  # the files its cases name
    if case.get("subset"):
        table = _with_subset(url, case["subset"])
        subset = Subset(column=SUBSET_FLAG)
        job = dataclasses.replace(job, source=dataclasses.replace(job.source, table=table), subset=subset)
    attributes = sorted({getattr(c, "attribute", None) for c in parsed} - {None})
    # ARX allows every row suppressed (1.0); sqlanon refuses a limit that could publish nothing: all but one
    rows = len(_subset_rows(case["subset"])) if job.subset else ARX_ROWS
    limit = case["limit"] if case["limit"] < 1 else rows - 1
    select = case["select"]
    return reclassified(
        job,
        criteria=parsed,
        sensitive=attributes,
        suppression=Suppression(limit),
        select=Selection(None, select["metric"], select.get("gs_factor", 0.5), select.get("aggregate"), model),
        output=Output(table=output),
    )


def _presence_beside_a_least_size(case: dict[str, Any]) -> bool:
    """delta-presence with d_min > 0 beside a criterion that sets ARX's least class size."""
    criteria = case["criteria"]
    sized = {"k_anonymity", "distinct_l_diversity", "entropy_l_diversity", "recursive_l_diversity"}
    return criteria.get("delta_presence", {}).get("d_min", 0) > 0 and bool(sized & set(criteria))


def _population_only(job: Any, node: tuple[int, ...]) -> int:
    """The classes of Adult at `node` (levels of the job's QIs) that hold no row of ARX's research subset (pandas)."""
    rows = pd.read_csv(ADULT_DIR / "adult.csv.gz", sep=";", dtype=str)
    qis = job.qi_names
    generalized = pd.DataFrame(
        {q: rows[q].map(dict(zip(_hierarchy(q)[0], _hierarchy(q)[level]))) for q, level in zip(qis, node)}
    )
    generalized["in_subset"] = rows.index.isin(SUBSET_ROWS)
    return int((generalized.groupby(qis)["in_subset"].sum() == 0).sum())


def _exact(case: dict[str, Any]) -> bool:
    heuristic = case["test"] in HEURISTIC or case["practical_monotonicity"]
    return not heuristic and not _grassberger(case)


def _grassberger(case: dict[str, Any]) -> bool:
    return bool(case["criteria"].get("entropy_l_diversity", {}).get("estimator") == "grassberger")


#: ARX's cases by the job they make (its heuristic tests repeat its other tests' jobs): one run each
JOBS: dict[str, list[dict[str, Any]]] = {}
for _case in CASES:
    JOBS.setdefault(
        json.dumps([_case.get(k) for k in ("criteria", "limit", "sensitive", "select", "subset", "cost_benefit")]), []
    ).append(_case)


@pytest.mark.parametrize("cases", list(JOBS.values()), ids=[_label(c[0]) for c in JOBS.values()])
def test_the_published_optimum_agrees_with_arx(adult_duck: str, cases: list[dict[str, Any]], worker_id: str):
    """The node `anonymize` publishes (its selection reads the passing nodes best bound first, where the model
    has bounds) against ARX's optimum and its figure, for each of ARX's cases of the job."""
    job = _job(adult_duck, cases[0], f"arx_quality_{worker_id}")
    if cases[0]["optimum"] is None:  # no transformation passes: sqlanon says so, up front or after its search
        assert all(case["optimum"] is None for case in cases)
        with pytest.raises((ConfigError, DataError)):
            anonymize(job, replace=True)
        return
    published = anonymize(job, replace=True)
    metric, ours = METRICS[cases[0]["select"]["metric"]], published.node
    figure = published.search.metrics[ours][metric.name]
    assert published.audit.ok
    for case in cases:
        theirs, expected = tuple(case["optimum"]), case["expected"]
        if theirs not in set(published.search.satisfying) and _presence_beside_a_least_size(case):
            # ARX checks a least class size (k, l) before delta-presence, so a class of the population without a
            # row of the subset fails the size, counts no tuple, and is never checked for d_min; sqlanon fails it
            assert _population_only(job, theirs) > 0, case["test"]
            continue
        if theirs not in set(published.search.satisfying) and case["practical_monotonicity"]:
            # ARX's practical monotonicity takes nodes for passing unchecked: in its profitability case on the
            # research subset with k=7 in the population, the node it reports suppresses 129 of the subset's 3,016
            # rows, above the 4% limit (120), and its figure is that of sqlanon's optimum
            limit = case["limit"] * len(_subset_rows(case["subset"]) if job.subset else ARX_ROWS)
            assert node_metrics(job, [theirs])[theirs]["suppressed"] > limit, case["test"]
            assert figure <= expected * (1 + 1e-9), case["test"]
            continue
        assert theirs in set(published.search.satisfying), f"{case['test']}: ARX's optimum fails"
        if _exact(case) and not WHOLE_RELEASE.keys() & set(case["criteria"]):
            assert (ours, figure) == (theirs, pytest.approx(expected, rel=1e-9)), case["test"]
        elif _exact(case):
            tolerance = max(WHOLE_RELEASE[c] for c in case["criteria"] if c in WHOLE_RELEASE)
            assert (ours, figure) == (theirs, pytest.approx(expected, rel=tolerance)), case["test"]
        else:  # ARX's answer is not exact: sqlanon's is as good by ARX's figure or better
            assert figure <= expected * (1 + 1e-9), case["test"]
            if not _grassberger(case) and ours != theirs:
                arx_figure = node_metrics(job, [theirs])[theirs][metric.name]
                assert arx_figure == pytest.approx(expected, rel=1e-9), case["test"]


@pytest.mark.parametrize(
    "metric, settings, limit",
    [
        ("loss", {"gs_factor": 0.5}, 0.1),
        ("non_uniform_entropy_nm", {}, 0.1),
        ("loss", {"aggregate": "rank"}, 0.3),
        ("aecs", {"gs_factor": 0.7}, 0.05),
        ("entropy_loss", {}, 0.1),
        ("publisher_payout", {"gs_factor": 0.6}, 0.05),
        ("normalized_entropy", {}, 0.1),
        ("precision_loss_nm", {"aggregate": "geometric_mean"}, 0.1),
        ("precision_loss", {"gs_factor": 0.3}, 0.1),
    ],
)
def test_the_bounded_selection_finds_the_best_of_every_passing_node(
    adult_duck: str, metric: str, settings: dict[str, Any], limit: float, worker_id: str, monkeypatch
):
    """The publication's selection, which stops reading nodes once their bounds are worse than its best, against
    the best of every passing node's figure (Adult, five QIs, k=10; batches of a few nodes, so that it stops
    within a lattice this small)."""
    monkeypatch.setattr(node_releases, "ROWS_PER_STATEMENT", 20_000)
    job = adult_job(adult_duck, ["sex", "age", "race", "marital-status", "education"], k=10, load_csv=False)
    select = Selection(None, metric, settings.get("gs_factor", 0.5), settings.get("aggregate"))
    job = dataclasses.replace(
        job, suppression=Suppression(limit), select=select, output=Output(table=f"bounded_{worker_id}")
    )
    published = anonymize(job, replace=True)
    every = node_metrics(job, published.search.satisfying)
    assert len(published.search.metrics) < len(every)  # some nodes were never read
    assert published.node == best_node(METRICS[metric], every)
    assert published.search.metrics[published.node][metric] == pytest.approx(every[published.node][metric])


# --- the definitions, in pandas, on every node of a small lattice -----------------------------------------------

QIS = ["sex", "race", "marital-status", "education"]


def _hierarchy(column: str) -> pd.DataFrame:
    return pd.read_csv(ADULT_DIR / "hierarchies" / f"{column}.csv", sep=";", header=None, dtype=str)


def _reference(rows: pd.DataFrame, node: tuple[int, ...], k: int, settings: QualitySettings) -> dict[str, Any]:
    """ARX's figures of `node` with k-anonymity (classes below k suppressed), by ARX's definitions: each tuple's
    share of the domain (loss), classes (AECS), squared sizes (DM*), and log2 of the generalized value's rows over
    the original value's (non-uniform entropy)."""
    g_factor, s_factor = settings.generalization, settings.suppression
    generalized = pd.DataFrame(
        {q: rows[q].map(dict(zip(_hierarchy(q)[0], _hierarchy(q)[level]))) for q, level in zip(QIS, node)}
    )
    sizes = generalized.groupby(QIS)[QIS[0]].transform("size")
    out = sizes < k
    n, suppressed = len(rows), int(out.sum())
    loss, entropy, entropy_nm, normalized, precision, precision_nm = [], [], [], [], [], []
    for q, level in zip(QIS, node):
        hierarchy = _hierarchy(q)
        relative = level / (hierarchy.shape[1] - 1)
        precision.append(g_factor * relative)
        precision_nm.append(((n - suppressed) * relative * g_factor + suppressed * s_factor) / n)
        leaves = len(hierarchy)
        under = hierarchy.groupby(level)[0].transform("size")
        share = generalized[q].map(dict(zip(hierarchy[level], under / leaves)))
        total = g_factor * share[~out].sum() + (share[out] + s_factor * (1 - share[out])).sum()
        least = g_factor * n / leaves
        loss.append(math.floor(max((total - least) / (n - least), 0) * 1e10) / 1e10)
        original, coarse = rows[q].value_counts(), generalized[q].value_counts()
        term = sum(
            original[v] * math.log2(original[v] / coarse[generalized[q][rows[q] == v].iloc[0]]) for v in original.index
        )
        lost = sum(c * math.log2(c / suppressed) for c in generalized[q][out].value_counts()) if suppressed else 0.0
        entropy.append(math.floor(-g_factor * term * 1e10) / 1e10 if term else 0.0)
        value = g_factor * term + s_factor * lost
        entropy_nm.append(math.floor(-value * 1e10) / 1e10 if value else 0.0)
        most = math.floor(-g_factor * sum(c * math.log2(c / n) for c in original) * 1e10) / 1e10
        normalized.append(entropy_nm[-1] / most)
    classes = int((~out).groupby([generalized[q] for q in QIS]).any().sum())
    groups = classes * s_factor + (g_factor if suppressed else 0)  # ARX swaps the factors here
    entropy_loss, payout = _entropy_loss_and_payout(generalized, node, k, settings)
    return {
        "classification": _classification(rows, generalized, out, settings, node),
        "entropy_loss": entropy_loss,
        "publisher_payout": payout,
        "loss": aggregate(loss, settings.aggregate or "arithmetic_mean"),
        "aecs": n / groups if groups else math.inf,
        "dm_star": float((generalized.groupby(QIS).size() ** 2).sum()),
        "non_uniform_entropy": aggregate(entropy, settings.aggregate or "sum"),
        "non_uniform_entropy_nm": aggregate(entropy_nm, settings.aggregate or "sum"),
        "normalized_entropy": aggregate(normalized, settings.aggregate or "sum"),
        "precision_loss": aggregate(precision, settings.aggregate or "arithmetic_mean"),
        "precision_loss_nm": aggregate(precision_nm, settings.aggregate or "arithmetic_mean"),
    }


def _classification(
    rows: pd.DataFrame, generalized: pd.DataFrame, out: pd.Series, settings: QualitySettings, node: tuple[int, ...]
) -> float | None:
    """ARX's classification metric, class by class as ARX counts it (MetricSDClassification.getPenaltyDistribution:
    a class whose two most frequent counts differ penalizes the tuples outside the most frequent value, one where
    they tie all of them; a QI target's classes are the released classes grouped by the other QIs' values, its
    values the generalized ones, its penalties moved towards the largest by 1 - (distinct values at its level - 1)
    / (leaves - 1), every tuple at the largest where that is 1: getInformationLossInternal)."""
    g_factor, s_factor, gs = settings.generalization, settings.suppression, settings.gs_factor
    if not settings.targets:
        return None
    most = max(g_factor, s_factor, gs)
    penalty = gs * int(out.sum()) * len(settings.targets)
    for target in settings.targets:
        if target in QIS:  # predicted from the other QIs: its generalized values, its penalties scaled
            hierarchy, level = _hierarchy(target), node[QIS.index(target)]
            leaves = hierarchy[0].nunique()
            scale = 0.0 if leaves == 1 else 1 - (hierarchy[level].nunique() - 1) / (leaves - 1)
            values, by = generalized[target][~out], [generalized[q][~out] for q in QIS if q != target]
            wrong, tied = g_factor * (1 - scale) + most * scale, s_factor * (1 - scale) + most * scale
        else:
            values, by = rows[target][~out], [generalized[q][~out] for q in QIS]
            scale, wrong, tied = 0.0, g_factor, s_factor
        for _, counts in values.groupby(by):
            frequencies = sorted(counts.value_counts(), reverse=True) + [-1]
            top1, top2, count = frequencies[0], frequencies[1], len(counts)
            if scale == 1:
                penalty += count * most
            else:
                penalty += (count - top1) * wrong if top1 != top2 else count * tied
    return penalty / (most * len(rows))


def _entropy_loss_and_payout(
    generalized: pd.DataFrame, node: tuple[int, ...], k: int, settings: QualitySettings
) -> tuple[float, float]:
    """ARX's entropy-based information loss and publisher payout (prosecutor) of `node`'s classes, as ARX computes
    them class by class: the log10 of the product of the values' domain shares over the log10 of the product of the
    domains' sizes, plus 1; a class's payout, the benefit times (1 - that loss), less the publisher's loss times
    1 / size where the adversary's gain times 1 / size exceeds the cost."""
    model, g_factor, s_factor = settings.cost_benefit, settings.generalization, settings.suppression
    shares = {}
    for q, level in zip(QIS, node):
        hierarchy = _hierarchy(q)
        shares[q] = dict(zip(hierarchy[level], hierarchy.groupby(level)[0].transform("size") / len(hierarchy)))
    max_il = math.log10(math.prod(len(_hierarchy(q)) for q in QIS))
    loss = payout = 0.0
    for values, size in generalized.groupby(QIS).size().items():
        if size < k:
            loss += s_factor * size
            payout += s_factor * size * model.publisher_benefit
            continue
        il = min(max(math.log10(math.prod(shares[q][v] for q, v in zip(QIS, values))) / max_il + 1, 0.0), 1.0)
        success = 1 / size
        attacked = model.adversary_gain * success - model.adversary_cost > 0
        class_payout = model.publisher_benefit * (1 - il) - (model.publisher_loss * success if attacked else 0.0)
        loss += g_factor * size * il
        payout += g_factor * size * (model.publisher_benefit - class_payout)
    return loss, payout


@pytest.mark.parametrize(
    "gs, aggregate_function, cost_benefit",
    [
        (0.5, None, CostBenefit()),
        (0.2, "arithmetic_mean", CostBenefit(120, 3000, 120, 20)),
        (0.9, "max", CostBenefit(1200, 300, 1200, 2)),
        (0.5, "rank", CostBenefit()),
        (0.0, "sum", CostBenefit(120, 3000, 1000, 20)),
        (0.2, None, CostBenefit()),
    ],
)
def test_every_node_s_figures_are_arx_s_definitions(
    adult_duck: str, gs: float, aggregate_function: str | None, cost_benefit: CostBenefit
):
    """Every node of a 4-QI lattice with k=10 and 3% suppression, each factor, aggregate function and cost/benefit
    model."""
    targets = ("salary-class", "occupation") if aggregate_function is None else ()  # the classification's own
    settings = QualitySettings(gs, aggregate_function, cost_benefit, targets)
    job = adult_job(adult_duck, QIS, k=10, load_csv=False)
    metric = "classification" if targets else "loss"
    select = Selection(None, metric, gs, aggregate_function, cost_benefit, targets)
    job = reclassified(job, suppression=Suppression(0.03), select=select, sensitive=list(targets))
    result = search(job)
    found = node_metrics(job, result.satisfying)
    rows = pd.read_csv(ADULT_DIR / "adult.csv.gz", sep=";", dtype=str)
    for node in result.satisfying:
        for name, expected in _reference(rows, node, 10, settings).items():
            assert found[node][name] == (expected if expected is None else pytest.approx(expected, rel=1e-9)), (
                node,
                name,
            )


@pytest.mark.parametrize(
    "gs, targets", [(0.5, ("education",)), (0.2, ("marital-status", "salary-class")), (0.9, ("sex", "race"))]
)
def test_the_classification_of_qi_targets_is_arx_s_definition(adult_duck: str, gs: float, targets: tuple[str, ...]):
    """Every passing node of the 4-QI lattice (k=10, 3% suppression), the classification metric predicting QIs (a
    sensitive attribute beside one), against ARX's definition computed class by class (`_classification`)."""
    settings = QualitySettings(gs, None, CostBenefit(), targets)
    sensitive = [t for t in targets if t not in QIS]
    job = adult_job(adult_duck, QIS, k=10, load_csv=False)
    select = Selection(None, "classification", gs, None, CostBenefit(), targets)
    job = reclassified(job, suppression=Suppression(0.03), select=select, sensitive=sensitive)
    result = search(job)
    found = node_metrics(job, result.satisfying)
    rows = pd.read_csv(ADULT_DIR / "adult.csv.gz", sep=";", dtype=str)
    for node in result.satisfying:
        expected = _reference(rows, node, 10, settings)["classification"]
        assert found[node]["classification"] == pytest.approx(expected, rel=1e-9), node


@pytest.mark.parametrize(
    "select, fragment",
    [
        ({"metric": "loss", "gs_factor": 1.5}, "gs_factor must be a number from 0"),
        ({"metric": "loss", "gs_factor": float("nan")}, "gs_factor must be a number from 0"),
        ({"metric": "loss", "aggregate": "median"}, "aggregate must be one of"),
        ({"metric": "aecs", "aggregate": "sum"}, "has one figure"),
        ({"metric": "discernibility", "gs_factor": 0.2}, "takes none"),
        ({"policy": "min_absolute_distance", "gs_factor": 0.2}, "takes none"),
    ],
)
def test_bad_quality_settings_are_refused(tmp_path: Path, select: dict[str, Any], fragment: str):
    config = adult_config(f"duckdb:///{tmp_path / 'x.duckdb'}", ["sex"], select=select)
    with pytest.raises(ConfigError, match=fragment):
        job_from_dict(config)


def test_aggregates_are_arx_s():
    values = [0.25, 0.0, 1.0]
    assert aggregate(values, "sum") == 1.25 and aggregate(values, "max") == 1.0
    assert aggregate(values, "arithmetic_mean") == pytest.approx(1.25 / 3)
    assert aggregate(values, "geometric_mean") == pytest.approx((1.25 * 1.0 * 2.0) ** (1 / 3) - 1)
    assert aggregate(values, "rank") == [1.0, 0.25, 0.0]
    assert set(AGGREGATES) == {"sum", "max", "arithmetic_mean", "geometric_mean", "rank"}


@pytest.mark.parametrize(
    "gain, cost, least, largest",
    [(1200, 2, 601, 599), (120, 20, 7, 5), (1000, 20, 51, 49), (10, 3, 4, 3), (0, 3, 1, 0), (5, 0, *[2**31 - 1] * 2)],
)
def test_the_cost_benefit_thresholds_are_arx_s(gain: float, cost: float, least: int, largest: int):
    """ARX's no-attack k (ProfitabilityProsecutorNoAttack.initialize: one past a whole ratio, else its ceiling; 1
    without gain; Integer.MAX_VALUE without cost) and the largest class an attack pays on (gain / size > cost)."""
    model = CostBenefit(adversary_gain=gain, adversary_cost=cost)
    assert (model.least_unattacked_size, model.largest_attacked_size) == (least, largest)


BENCH_OPTIMA = json.loads((Path(__file__).parent / "data" / "arx_bench_quality_optima.json").read_text())["cases"]


@pytest.mark.parametrize("case", BENCH_OPTIMA, ids=[f"{c['metric']}-{c['limit']}" for c in BENCH_OPTIMA])
def test_the_newer_models_publish_arx_s_optimum(adult_duck: str, case: dict[str, Any], worker_id: str):
    """ARX's optimum of its normalized entropy, precision, entropy-based loss and publisher payout on Adult's nine
    QIs with k=5 (measured by bench/arx/run.sh: ARX's own tests do not use them there): sqlanon publishes it, or a
    node of the same figure (precision at 0% ties two nodes of the same height; sqlanon takes the smaller vector)."""
    job = adult_job(adult_duck, ADULT_QIS, k=5, load_csv=False)
    select = Selection(None, case["metric"])
    job = dataclasses.replace(
        job, suppression=Suppression(case["limit"]), select=select, output=Output(table=f"newer_{worker_id}")
    )
    published = anonymize(job, replace=True)
    theirs = tuple(case["optimum"])
    assert theirs in set(published.search.satisfying)
    ours = published.search.metrics[published.node][case["metric"]]
    assert node_metrics(job, [theirs])[theirs][case["metric"]] == pytest.approx(ours, rel=1e-9)
    assert published.node == theirs or case["metric"] == "precision_loss_nm"
