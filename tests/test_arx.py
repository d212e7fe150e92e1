"""The search against ARX, the reference anonymizer, on Adult: every transformation ARX tagged anonymous is among
sqlanon's satisfying nodes, every one it tagged not anonymous is not, and ARX's optimum is one of sqlanon's minimal
nodes (nine QIs with k=5, or with each risk model alone; eight with occupation or age sensitive and each criterion
ARX has). The tags are ARX's own (its default Flash search and loss metric), as bench/arx/run.sh writes them, kept
in tests/data/arx_adult_lattices.tsv.gz: they confirm that the criteria mean what ARX's do, which the exhaustive
oracle (sqlanon's own definitions) cannot. One exception: with Grassberger's entropy and suppression, ARX prunes as
if the estimator were monotone under generalization, and tags some passing transformations not anonymous (8 of
573 with 2%); each is checked to pass by the definition, evaluated in pandas."""

from __future__ import annotations

import csv
import dataclasses
import functools
import gzip
import math
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest

from sqlanon import search
from sqlanon.criteria import criteria_from_config
from sqlanon.model.job import Suppression
from sqlanon.testing import ARX_RISK_CASES

from .conftest import ADULT_DIR, ADULT_QIS, CASES, adult_job, reclassified
from .test_entropy_estimators import grassberger_entropy

TAGS = Path(__file__).parent / "data" / "arx_adult_lattices.tsv.gz"
OCCUPATION = {
    **CASES,
    "k=5 only": {},
    "t hierarchical 0.2": {
        "t_closeness": {
            "attribute": "occupation",
            "t": 0.2,
            "distance": "hierarchical",
            "hierarchy": str(ADULT_DIR / "hierarchies" / "occupation.csv"),
        }
    },
}

OCCUPATION["beta enhanced 3.0"] = {"beta_likeness": {"attribute": "occupation", "beta": 3.0, "variant": "enhanced"}}
OCCUPATION["t ordered 0.2"] = {  # ARX orders the values of a string as strings
    "t_closeness": {
        "attribute": "occupation",
        "t": 0.2,
        "distance": "ordered",
        "order": sorted(
            line.split(";")[0]
            for line in (ADULT_DIR / "hierarchies" / "occupation.csv").read_text(encoding="utf-8").splitlines()
        ),
    }
}
OCCUPATION["entropy l=3 grassberger"] = {
    "entropy_l_diversity": {"attribute": "occupation", "l": 3, "estimator": "grassberger"}
}

#: the jobs whose criteria ARX prunes on as if they were monotone under generalization, and are not
ARX_ASSUMES_MONOTONE = {"entropy l=3 grassberger"}

#: the risk models alone (no k-anonymity), on all nine QIs
RISKS = ARX_RISK_CASES

AGE = {"t ordered 0.2": {"t_closeness": {"attribute": "age", "t": 0.2, "distance": "ordered"}}}


def arx_tags() -> dict[tuple[str, str, float], list[tuple[dict[str, int], str, bool]]]:
    """Per job (dataset, criteria, suppression): each transformation ARX kept, its tag, whether it is the optimum."""
    jobs = defaultdict(list)
    with gzip.open(TAGS, "rt") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            levels = {a: int(lv) for a, lv in (pair.split("=") for pair in row["node"].split(","))}
            jobs[(row["dataset"], row["criteria"], float(row["suppression"]))].append(
                (levels, row["anonymity"], row["optimum"] == "true")
            )
    return jobs


ARX = arx_tags()


@pytest.mark.parametrize(
    "dataset, criteria, limit",
    [
        # with suppression, criteria other than k-anonymity take the filtered search: seconds each
        pytest.param(*job, marks=pytest.mark.slow) if job[2] and job[1] not in ("k=5", "k=5 only") else job
        for job in sorted(ARX)
    ],
)
def test_the_search_agrees_with_arx(adult_duck: str, dataset: str, criteria: str, limit: float):
    if dataset == "adult":  # all nine QIs, k=5 or a risk model alone
        job = adult_job(adult_duck, ADULT_QIS, load_csv=False)
        if criteria in RISKS:
            job = reclassified(job, criteria=criteria_from_config(RISKS[criteria]))
    else:  # eight QIs, the ninth sensitive (insensitive for k alone)
        sensitive = "age" if dataset.endswith("age sensitive") else "occupation"
        spec = (AGE if sensitive == "age" else OCCUPATION)[criteria]
        job = adult_job(adult_duck, [q for q in ADULT_QIS if q != sensitive], load_csv=False)
        if spec:
            job = reclassified(
                job, criteria=criteria_from_config({"k_anonymity": {"k": 5}, **spec}), sensitive=[sensitive]
            )
    result = search(dataclasses.replace(job, suppression=Suppression(limit)))
    satisfying = set(result.satisfying)
    nodes = ARX[(dataset, criteria, limit)]
    decided = [(levels, tag) for levels, tag, _ in nodes if tag in ("ANONYMOUS", "NOT_ANONYMOUS")]
    assert len(decided) >= len(nodes) - 1  # ARX may leave one node (the top) untagged
    disagree = [
        levels
        for levels, tag in decided
        if (tuple(levels[qi] for qi in result.qi) in satisfying) != (tag == "ANONYMOUS")
    ]
    if criteria in ARX_ASSUMES_MONOTONE:
        # ARX prunes as if Grassberger's entropy were monotone under generalization: some transformations it tags
        # not anonymous pass; each is checked against the definition, evaluated in pandas
        limit_tuples, tags = Suppression(limit).max_suppressed(len(_adult_rows())), {str(lv): t for lv, t in decided}
        misjudged = [
            levels
            for levels in disagree
            if tags[str(levels)] == "NOT_ANONYMOUS" and _grassberger_violations(levels, 5, 3) <= limit_tuples
        ]
        disagree = [levels for levels in disagree if levels not in misjudged]
    assert not disagree, f"{len(disagree)} of ARX's {len(nodes)} tags differ, e.g. {disagree[:3]}"
    (optimum,) = [tuple(levels[qi] for qi in result.qi) for levels, _, best in nodes if best]
    assert optimum in result.minimal


@functools.cache
def _adult_rows() -> pd.DataFrame:
    return pd.read_csv(ADULT_DIR / "adult.csv.gz", sep=";", dtype=str)


def _grassberger_violations(levels: dict[str, int], k: int, l: int) -> int:
    """The tuples in classes of `levels` (the Adult QIs' levels, occupation sensitive) that violate k-anonymity or
    entropy l-diversity with Grassberger's estimator (l distinct values too), by the definitions, in pandas."""
    rows = _adult_rows()
    generalized = {}
    for column, level in levels.items():
        paths = (ADULT_DIR / "hierarchies" / f"{column}.csv").read_text(encoding="utf-8").splitlines()
        up = {path[0]: path[level] for path in (line.split(";") for line in paths if line)}
        generalized[column] = rows[column].map(up)
    counts = pd.DataFrame(generalized).assign(s=rows["occupation"]).value_counts().reset_index(name="c")
    violating = 0
    for _, values in counts.groupby(list(levels))["c"]:
        n = int(values.sum())
        if n < k or len(values) < l or grassberger_entropy(list(values)) < math.log(l) - 1e-9:
            violating += n
    return violating
