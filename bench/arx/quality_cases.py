"""ARX's own test cases on Adult whose quality model and privacy models sqlanon has, as sqlanon jobs: read from
ARX's test sources (src/test/.../TestAnonymization*.java) and written to tests/data/arx_quality_cases.json, which
tests/test_quality.py runs (sqlanon's optimum and its figure against ARX's expected ones).

    python bench/arx/quality_cases.py ARX_SOURCE

Each case: the ARX test it comes from, the suppression limit, the selection (`select:` of a job), the criteria
(`criteria:` of a job), the sensitive attribute (eight QIs) or none (nine), ARX's expected figure of its optimum,
its optimum (levels in the data's column order; None: no transformation passes), whether ARX ran it with
practical monotonicity, and its cost/benefit model where it sets one. Cases of models sqlanon lacks (profitability
with an attack, differential privacy, ...) and of other data are left out, and counted on stderr. ARX's research
subset of Adult (data/adult_subset.csv, which its d-presence cases read) is written as the numbers of its rows in
Adult (from 0) to tests/data/arx_adult_subset_rows.txt.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

OUT = Path(__file__).parents[2] / "tests" / "data" / "arx_quality_cases.json"
SUBSET_ROWS = OUT.with_name("arx_adult_subset_rows.txt")
#: a case's research subset, where it has one: "adult_subset" (ARX's data/adult_subset.csv: SUBSET_ROWS), or
#: {"java_random": size} (the distinct draws of java.util.Random(0xDEADBEEF).nextInt(size), size times)
SUBSET = "subset"
ADULT_HIERARCHIES = Path(__file__).parents[2] / "sqlanon" / "data" / "adult" / "hierarchies"

NUMBER = r"(-?[0-9.E+-]+)d?"
USA = 317238626  # ARXPopulationModel.Region.USA


def metric(call: str) -> dict[str, Any] | None:
    """`select:` for ARX's Metric.create...(...) call, or None where sqlanon has not the model."""
    name, args = re.fullmatch(r"Metric\.create(\w+)\((.*)\)", call).groups()  # type: ignore[union-attr]
    values = [a.strip().rstrip("d") for a in args.split(",") if a.strip()]
    if name == "PrecomputedEntropyMetric":  # (threshold[, monotonic]): the threshold only decides precomputing
        monotonic = len(values) > 1 and values[1] == "true"
        return {"metric": "non_uniform_entropy" if monotonic else "non_uniform_entropy_nm"}
    if name == "EntropyMetric" and not values:
        return {"metric": "non_uniform_entropy_nm"}
    if name == "LossMetric":  # (gsFactor): ARX's default aggregate, the geometric mean
        select = {"metric": "loss", "aggregate": "geometric_mean"}
        return select | ({"gs_factor": float(values[0])} if values else {})
    if name == "PrecomputedLossMetric":
        return {"metric": "loss", "aggregate": "geometric_mean"}
    if name == "AECSMetric" and not values:
        return {"metric": "aecs"}
    if name == "EntropyBasedInformationLossMetric":  # ([gsFactor])
        return {"metric": "entropy_loss"} | ({"gs_factor": float(values[0])} if values else {})
    if name == "PublisherPayoutMetric" and values[0] == "false":  # (journalist[, gsFactor]): the prosecutor's
        return {"metric": "publisher_payout"} | ({"gs_factor": float(values[1])} if len(values) > 1 else {})
    if name == "DiscernabilityMetric":
        return {"metric": "dm_star" if values == ["true"] else "discernibility"}
    return None


def criterion(call: str) -> dict[str, Any] | None:
    """A `criteria:` entry for ARX's privacy model constructor call, or None."""
    # TestAnonymizationRiskBased's helper: the population of the USA, ARX's solver deterministic, 15 steps a try
    population = re.fullmatch(r"getPopulationUniqueness\(([0-9.]+)d?, PopulationUniquenessModel\.(\w+)\)", call.strip())
    if population:
        threshold, model = float(population.group(1)), population.group(2).lower()
        settings = {"threshold": threshold, "model": model, "population_size": USA, "iterations_per_try": 15}
        return {"population_uniqueness": settings}
    match = re.fullmatch(r"new (\w+)\((.*)\)", call.strip(), re.S)
    if not match:
        return None
    name, args = match.groups()
    parts = [re.sub(r"(?<=[0-9.])d$", "", a.strip()) for a in re.split(r",(?![^(]*\))", args)]
    attribute = parts[0].strip('"') if parts and parts[0].startswith('"') else None
    if name == "KAnonymity":
        return {"k_anonymity": {"k": int(parts[0])}}
    if name == "DistinctLDiversity":
        return {"distinct_l_diversity": {"attribute": attribute, "l": int(parts[1])}}
    if name == "EntropyLDiversity":
        estimator = "grassberger" if len(parts) > 2 and "GRASSBERGER" in parts[2] else "shannon"
        return {"entropy_l_diversity": {"attribute": attribute, "l": int(float(parts[1])), "estimator": estimator}}
    if name == "RecursiveCLDiversity":
        return {"recursive_l_diversity": {"attribute": attribute, "c": float(parts[1]), "l": int(parts[2])}}
    if name == "EqualDistanceTCloseness":
        return {"t_closeness": {"attribute": attribute, "t": float(parts[1]), "distance": "equal"}}
    if name == "HierarchicalDistanceTCloseness":
        hierarchy = f"{attribute}.csv"  # in sqlanon's copy of Adult's hierarchies (the tests resolve it there)
        t = float(parts[1])
        return {"t_closeness": {"attribute": attribute, "t": t, "distance": "hierarchical", "hierarchy": hierarchy}}
    if name == "OrderedDistanceTCloseness":  # ARX orders a string attribute's values as strings
        ordered: dict[str, Any] = {"attribute": attribute, "t": float(parts[1]), "distance": "ordered"}
        if attribute != "age":
            leaves = (ADULT_HIERARCHIES / f"{attribute}.csv").read_text(encoding="utf-8").splitlines()
            ordered["order"] = sorted(line.split(";")[0] for line in leaves)
        return {"t_closeness": ordered}
    if name == "AverageReidentificationRisk":
        names = ("threshold", "highest_risk", "records_at_risk")
        return {"average_risk": {n: float(v) for n, v in zip(names, parts)}}
    if name == "SampleUniqueness":
        return {"sample_uniqueness": {"threshold": float(parts[0])}}
    if name == "KMap" and "Region.USA" in args:  # estimated from the sample, Adult drawn from the USA
        estimator = "zero_truncated_poisson" if "ZERO_TRUNCATED" in args else "poisson"
        k_map = {"k": int(parts[0]), "significance": float(parts[1]), "population_size": USA, "estimator": estimator}
        return {"k_map": k_map}
    if name == "Inclusion":  # ARX's plain research subset: TestAnonymizationSubset's getSubset(size)
        return {SUBSET: {"java_random": int(re.fullmatch(r"getSubset\((\d+)\)", args.strip()).group(1))}}  # type: ignore[union-attr]
    if name == "KMap" and "adult_subset.csv" in args:  # counted in the population: Adult, of which SUBSET_ROWS
        return {"k_map": {"k": int(parts[0])}}
    if name == "DPresence" and "adult_subset.csv" in args:  # the research subset: SUBSET_ROWS
        return {"delta_presence": {"d_min": float(parts[0]), "d_max": float(parts[1])}}
    if name == "ProfitabilityProsecutorNoAttack":
        return {"profitability": {"attacker": "prosecutor"}}
    if name == "ProfitabilityJournalistNoAttack" and "adult_subset.csv" in args:  # the population: Adult
        return {"profitability": {"attacker": "journalist"}}
    if name in ("BasicBLikeness", "EnhancedBLikeness"):
        variant = "basic" if name.startswith("Basic") else "enhanced"
        return {"beta_likeness": {"attribute": attribute, "beta": float(parts[1]), "variant": variant}}
    return None


COST_BENEFIT = {  # ARXCostBenefitConfiguration's setters, as the job's cost_benefit: names them
    "PublisherBenefit": "publisher_benefit",
    "PublisherLoss": "publisher_loss",
    "AdversaryGain": "adversary_gain",
    "AdversaryCost": "adversary_cost",
}


def cost_benefit(case: str, text: str) -> dict[str, float] | None:
    """The cost/benefit model a case sets (`.setCostBenefitConfiguration(getConfigN())`, read from the test's
    getConfigN), or None for ARX's defaults (sqlanon's too)."""
    called = re.search(r"setCostBenefitConfiguration\((\w+)\(\)\)", case)
    if called is None:
        return None
    body = re.search(r"ARXCostBenefitConfiguration " + called.group(1) + r"\(\)\s*\{(.*?)\}", text, re.S)
    assert body is not None, f"{called.group(1)} is defined in the test"
    setters = re.findall(r"\.set(\w+)\(" + NUMBER + r"\)", body.group(1))
    return {COST_BENEFIT[setter]: float(value) for setter, value in setters}


def calls(text: str, opening: str) -> list[str]:
    """Every balanced call in `text` that starts with `opening` (ending with its open parenthesis)."""
    found, start = [], 0
    while (at := text.find(opening, start)) >= 0:
        depth, end = 0, at + len(opening) - 1
        for end in range(at + len(opening) - 1, len(text)):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            if depth == 0:
                break
        found.append(text[at : end + 1])
        start = end + 1
    return found


def cases(source: Path) -> tuple[list[dict[str, Any]], Counter[str]]:
    kept, left_out = [], Counter()
    for file in sorted((source / "src" / "test").rglob("TestAnonymization*.java")):
        text = file.read_text(encoding="utf-8")
        for case in calls(text, "new ARXAnonymizationTestCase("):
            if '"./data/adult.csv"' not in case or "ARXConfiguration.create(" not in case:
                continue
            limit = float(re.search(r"ARXConfiguration\.create\(" + NUMBER, case).group(1))  # type: ignore[union-attr]
            select = metric(re.search(r"Metric\.create\w+\([^)]*\)", case).group(0))  # type: ignore[union-attr]
            models = [criterion(c[len("addPrivacyModel(") : -1]) for c in calls(case, "addPrivacyModel(")]
            if select is None or not models or None in models:
                left_out[file.stem] += 1
                continue
            tail = case[case.rindex('"./data/adult.csv"') :]  # the data, after any subset read from it
            sensitive = re.search(r'\)\)*,\s*"(\w[\w-]*)",\s*"\./data/adult\.csv"', case)
            expected = re.match(r'"\./data/adult\.csv",\s*"?' + NUMBER + r'"?,', tail)
            node = re.search(r"new int\[\]\s*\{([^}]*)\}", tail)
            practical = re.search(r"(?:\}|null),\s*(true|false)", tail)
            if expected is None:
                left_out[file.stem] += 1
                continue
            criteria: dict[str, Any] = {}
            for model in models:
                criteria.update(model)  # type: ignore[arg-type]
            subset = criteria.pop(SUBSET, "adult_subset" if "adult_subset.csv" in case else None)
            if file.stem == "TestAnonymizationTCloseness" and "t_closeness" not in criteria:
                # the test adds hierarchical 0.2-closeness on the sensitive attribute to a case that has none
                hierarchy = f"{sensitive.group(1)}.csv"  # type: ignore[union-attr]
                criteria["t_closeness"] = {
                    "attribute": sensitive.group(1),  # type: ignore[union-attr]
                    "t": 0.2,
                    "distance": "hierarchical",
                    "hierarchy": hierarchy,
                }
            kept.append(
                {
                    "test": file.stem,
                    "limit": limit,
                    "select": select,
                    "criteria": criteria,
                    "sensitive": sensitive.group(1) if sensitive else None,
                    "expected": float(expected.group(1)),
                    "optimum": [int(v) for v in node.group(1).split(",")] if node else None,  # None: none passes
                    "practical_monotonicity": bool(practical and practical.group(1) == "true"),
                    **({SUBSET: subset} if subset else {}),
                    **({"cost_benefit": model} if (model := cost_benefit(case, text)) else {}),
                }
            )
    return kept, left_out


def subset_rows(source: Path) -> list[int]:
    """The rows of Adult that ARX's research subset holds, as ARX's DataSubset.create matches them: each subset
    row takes a row of the data with the same values (which of equal rows does not change any class)."""
    lines = (source / "data" / "adult.csv").read_text(encoding="utf-8").splitlines()[1:]
    wanted = Counter((source / "data" / "adult_subset.csv").read_text(encoding="utf-8").splitlines()[1:])
    found = []
    for number, line in enumerate(lines):
        if wanted[line] > 0:
            wanted[line] -= 1
            found.append(number)
    assert not +wanted, "every row of the subset is a row of the data"
    return found


def main() -> None:
    found, left_out = cases(Path(sys.argv[1]))
    OUT.write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
    SUBSET_ROWS.write_text("".join(f"{row}\n" for row in subset_rows(Path(sys.argv[1]))), encoding="utf-8")
    print(f"{len(found)} cases written to {OUT}; left out: {dict(left_out)}", file=sys.stderr)


if __name__ == "__main__":
    main()
