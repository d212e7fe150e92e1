"""(epsilon, delta)-differential privacy by sampling and generalization as a publication method (`output.method:
differential_privacy`; SafePub, as ARX's EDDifferentialPrivacy implements it; the arithmetic in
sqlanon.model.differential_privacy).

A run samples the source in the database (each row kept with probability beta, drawn from a secret key: a scratch
table the run's star schema is built on), generalizes the sample to one node of the lattice, and suppresses every
class of fewer than k rows; (epsilon, delta) give beta and k. The node is the job's (`generalization`: ARX's
degree, or a level per QI) or chosen by the exponential mechanism (`search: {budget, steps, score}`), whose
scores are computed in SQL from the nodes' frequency sets over the sample, a batch of nodes per step. The table is
published through the generalization's path (sqlanon.publish.generalize: declared columns only, one transaction,
the audit of every class against k, ownership, `--replace`), and beside it the guarantee and its parameters
(`privacy_table`, by default TABLE_privacy: one row).

What it guarantees: (epsilon, delta)-differential privacy of the published table (and of the privacy table's
row, which holds the job's parameters and the node, chosen within the budget). The theorem holds for classes of
whole published records, so every published column is a generalized quasi-identifier: a column published as it
is (sensitive, insensitive, a pseudonym) is refused. What it does not: the guarantee is the row's, not the
person's (a person with several rows is refused: `unit`); the data owner's report (rows sampled, scores of the
nodes the walk met) is not differentially private and must not be published.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..backends import Database
from ..criteria import KAnonymity
from ..engine.metrics import MetricsEvaluator
from ..engine.node_releases import ClassSums
from ..engine.randomization import PRIVACY_COLUMNS, PRIVACY_SELECT
from ..engine.star import StarSchema
from ..errors import AuditError, ConfigError
from ..model.differential_privacy import (
    DEGREES,
    SCORES,
    Parameters,
    Release,
    Table,
    Walk,
    check_budget,
    degree_levels,
    entropy_score,
    keyed_fractions,
    parameters,
    walk,
)
from ..model.job import Job, Sample, Suppression
from ..model.noise import key_source, read_noise_key
from ..model.progress import Progress, silent
from .methods import PublicationMethod, refuse_criteria
from .ownership import Ownership
from .staging import Destination, Released, plain_rows, staged_table

__all__ = [
    "Choice",
    "DifferentialPrivacy",
    "PrivacyPlan",
    "PrivateRelease",
    "chosen_node",
    "sampled_table",
    "search_node",
    "write_privacy_table",
]

#: what lowers the k the guarantee implies, when a sample is smaller
REMEDY = "raise output.epsilon or output.delta, or publish a larger table"


class DifferentialPrivacy(PublicationMethod):
    """A random sample of the rows, generalized to one node, classes below k suppressed."""

    name = "differential_privacy"
    settings = ("epsilon", "delta", "generalization", "search", "noise_key", "privacy_table")
    companion = ("privacy_table", "privacy")  # the guarantee and its parameters

    @classmethod
    def parse(cls, output: Mapping[str, Any], base_dir: Path) -> dict[str, Any]:
        epsilon, delta = check_budget(output.get("epsilon"), output.get("delta"))
        generalization, search = output.get("generalization"), output.get("search")
        if (generalization is None) == (search is None):
            raise ConfigError(
                "output.method differential_privacy needs either generalization (a degree such as low_medium, or "
                "{COLUMN: LEVEL, ...}) or search: {budget: B, steps: N, score: loss}, not both"
            )
        table = output.get("privacy_table")
        if table is not None and not isinstance(table, str):
            raise ConfigError(f"output.privacy_table must be a table name, got {table!r}")
        return {
            "epsilon": epsilon,
            "delta": delta,
            "generalization": _generalization(generalization) if generalization is not None else None,
            "search": _search(search, epsilon) if search is not None else None,
            "privacy_table": table,
            "noise_key": key_source(output.get("noise_key"), base_dir),
        }

    @classmethod
    def check(cls, job: Job) -> None:
        own_k = "brings its own k (from epsilon and delta), suppressing every class below it"
        refuse_criteria(job, cls.name, "publishes a random sample", own_k)
        as_is = job.sensitive + job.insensitive + [i.column for i in job.identifying if i.action != "drop"]
        if as_is:
            raise ConfigError(
                f"column {as_is[0]!r} would be published as it is (or as a pseudonym), which splits the classes of k "
                "into records that may each be alone, and the guarantee holds for classes of whole records: make "
                "it a quasi-identifier with a hierarchy, or leave it out (drop it, or others: drop)"
            )
        bare = [qi.column for qi in job.quasi_identifiers if qi.hierarchy is None and not qi.generate]
        if bare:
            raise ConfigError(
                f"quasi-identifier {bare[0]!r} has no hierarchy; output.method differential_privacy generalizes every "
                "quasi-identifier: give it a hierarchy file or a generator"
            )
        assert job.output is not None
        search = job.output.settings["search"] or {}
        strangers = [t for t in search.get("targets", []) if t.lower() not in {q.lower() for q in job.qi_names}]
        if strangers:
            raise ConfigError(
                f"output.search.targets: {strangers[0]!r} is not a quasi-identifier; the classification score "
                f"predicts quasi-identifiers ({', '.join(job.qi_names)})"
            )
        levels = job.output.settings["generalization"]
        if isinstance(levels, dict):
            names = {qi.lower(): qi for qi in job.qi_names}
            unknown = [c for c in levels if c.lower() not in names]
            missing = [qi for qi in job.qi_names if qi.lower() not in {c.lower() for c in levels}]
            if unknown or missing:
                problem = f"{unknown[0]!r} is not a quasi-identifier" if unknown else f"{missing[0]!r} has no level"
                raise ConfigError(
                    f"output.generalization: {problem}; give each quasi-identifier its level "
                    f"({', '.join(job.qi_names)})"
                )


def _generalization(value: Any) -> str | dict[str, int]:
    """A degree's name (DEGREES) or a level per QI, checked."""
    if isinstance(value, str) and value.lower() in DEGREES:
        return value.lower()
    if isinstance(value, Mapping) and value:
        levels = {}
        for column, level in value.items():
            if isinstance(level, bool) or not isinstance(level, int) or level < 0:
                raise ConfigError(f"output.generalization.{column}: a level must be a whole number >= 0, got {level!r}")
            levels[str(column)] = level
        return levels
    raise ConfigError(
        f"output.generalization must be one of {', '.join(DEGREES)} (ARX's degrees: that share of each hierarchy's "
        f"height) or {{COLUMN: LEVEL, ...}}, got {value!r}"
    )


def _search(value: Any, epsilon: float) -> dict[str, Any]:
    """The search's budget (a share of epsilon), steps and score, checked."""
    if not isinstance(value, Mapping):
        raise ConfigError("output.search must be {budget: B, steps: N, score: loss}, e.g. {budget: 1.0, steps: 100}")
    unknown = set(value) - {"budget", "steps", "score", "targets"}
    if unknown:
        raise ConfigError(
            f"output.search: unknown setting {sorted(unknown)[0]!r}; it takes budget, steps, score (and targets)"
        )
    budget, steps, score = value.get("budget"), value.get("steps", 100), value.get("score", "loss")
    targets = value.get("targets", [])
    if isinstance(targets, str):
        targets = [targets]
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise ConfigError(f"output.search.targets must list quasi-identifiers, got {targets!r}")
    if (score == "classification") != bool(targets):
        raise ConfigError(
            "output.search.targets names the quasi-identifiers the classification score predicts: give them with "
            "score: classification, and only then"
        )
    if isinstance(budget, bool) or not isinstance(budget, int | float) or not math.isfinite(budget):
        raise ConfigError(
            f"output.search.budget must be a number, the share of epsilon the search spends, got {budget!r}"
        )
    if not 0 < budget < epsilon:
        raise ConfigError(
            f"output.search.budget must be above 0 and below epsilon ({epsilon:g}): the rest anonymizes; got {budget!r}"
        )
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ConfigError(f"output.search.steps must be a whole number >= 1, got {steps!r}")
    if score not in SCORES:
        raise ConfigError(f"output.search.score must be one of {', '.join(SCORES)}, got {score!r}")
    return {"budget": float(budget), "steps": steps, "score": score, "targets": list(targets)}


@dataclass(frozen=True)
class SuppressedBelowK(Suppression):
    """Every class below k suppressed (removed), however many rows that takes: all but one may go (a release of
    none is refused by the publication's audit)."""

    def max_suppressed(self, rows: int) -> int:
        return max(rows - 1, 0)


@dataclass(frozen=True)
class PrivacyPlan:
    """A job's differential privacy: its settings, the k and beta they imply, and the sampled job a run
    anonymizes (k-anonymity of the sample, every class below k suppressed)."""

    epsilon: float
    delta: float
    generalization: str | dict[str, int] | None
    search: dict[str, Any] | None
    implied: Parameters
    key: bytes = field(repr=False)
    reproducible: bool

    @staticmethod
    def of(job: Job) -> PrivacyPlan:
        """The job's plan, its key read now (the job's, or one drawn for this run)."""
        assert job.output is not None and job.output.method == DifferentialPrivacy.name
        settings = job.output.settings
        search = settings["search"]
        anonymizing = settings["epsilon"] - (search["budget"] if search else 0.0)
        key, reproducible = read_noise_key(settings["noise_key"])
        return PrivacyPlan(
            epsilon=settings["epsilon"],
            delta=settings["delta"],
            generalization=settings["generalization"],
            search=search,
            implied=parameters(anonymizing, settings["delta"]),
            key=key,
            reproducible=reproducible,
        )

    def describe(self) -> str:
        return f"({self.epsilon:g}, {self.delta:g})-differential privacy"

    def sampled_job(self, job: Job) -> Job:
        """The job a run anonymizes: the sample, k-anonymous with every violating class suppressed (removed)."""
        return dataclasses.replace(
            job,
            criteria=[KAnonymity(self.implied.k, implied_by=f"{self.describe()} (its random sample)", remedy=REMEDY)],
            suppression=SuppressedBelowK(limit=1.0, mode="remove"),
            sample=Sample(probability=self.implied.beta, key=self.key),
        )

    def fixed_node(self, qi_names: list[str], heights: list[int]) -> tuple[int, ...]:
        """The node the job fixes (without a search): its degree's, or its levels, checked against the heights."""
        if isinstance(self.generalization, str):
            return degree_levels(self.generalization, heights)
        assert self.generalization is not None, "a plan without a search fixes its generalization"
        levels = {column.lower(): level for column, level in self.generalization.items()}
        node = tuple(levels[qi.lower()] for qi in qi_names)
        for qi, level, height in zip(qi_names, node, heights):
            if level > height:
                raise ConfigError(f"output.generalization.{qi}: level {level} is above its hierarchy's top ({height})")
        return node


def sampled_table(star: StarSchema, rows: int, plan: PrivacyPlan) -> Table:
    """What the plan's scores read of a run's sample (`star`, built on it) and of the source's `rows`."""
    names = [d.column.lower() for d in star.dimensions]
    targets = (plan.search or {}).get("targets", [])
    return Table(
        rows=rows,
        sampled=star.rows,
        k=plan.implied.k,
        heights=tuple(star.heights),
        leaves=tuple(d.leaves for d in star.dimensions),
        single_top=tuple(len(d.shape.top_labels) == 1 for d in star.dimensions),
        targets=tuple(names.index(t.lower()) for t in targets),
    )


@dataclass(frozen=True)
class Choice:
    """The node to publish, the walk that chose it (None when the job fixes it) and, when the walk read them, the
    node's class sums (so that its metrics cost no statement more)."""

    node: tuple[int, ...]
    walk: Walk | None = None
    sums: ClassSums | None = None


def chosen_node(
    plan: PrivacyPlan, evaluator: MetricsEvaluator, table: Table, qi_names: list[str], progress: Progress = silent
) -> Choice:
    """The node to publish: the job's (`fixed_node`), or the search's with its walk (`search_node`)."""
    if plan.search is None:
        return Choice(plan.fixed_node(qi_names, list(table.heights)))
    return search_node(plan, evaluator, table, progress)


def search_node(plan: PrivacyPlan, evaluator: MetricsEvaluator, table: Table, progress: Progress = silent) -> Choice:
    """The exponential mechanism's walk from the top of the lattice (model.differential_privacy.walk), each
    step's new nodes scored from their frequency sets over the sample in one batch; the node it publishes, the
    walk and the node's class sums."""
    assert plan.search is not None
    score_of = SCORES[plan.search["score"]]
    steps = plan.search["steps"]
    read: dict[tuple[int, ...], ClassSums] = {}
    done = [0]

    def score(nodes: list[tuple[int, ...]]) -> dict[tuple[int, ...], float]:
        sums = evaluator.class_sums(nodes, value_squares=score_of is entropy_score, target_tops=table.targets)
        read.update(sums)
        done[0] += 1
        progress("search: the exponential mechanism's steps", min(done[0], steps), steps)
        return {node: score_of(_release(node, s), table) for node, s in sums.items()}

    found = walk(
        tuple(table.heights),
        score,
        steps=steps,
        epsilon=plan.search["budget"] / steps,
        fractions=keyed_fractions(plan.key, "exponential mechanism"),
    )
    return Choice(found.best, found, read[found.best])


def _release(node: tuple[int, ...], sums: ClassSums) -> Release:
    return Release(
        node=node,
        suppressed=sums.suppressed,
        classes=sums.classes,
        squares=sums.squares,
        penalties=sums.released_penalties,
        value_squares=sums.value_squares,
        target_tops=sums.target_tops,
    )


def privacy_row(plan: PrivacyPlan, qi_names: list[str], node: tuple[int, ...]) -> dict[str, Any]:
    """The privacy table's one row."""
    search = plan.search or {}
    targets = search.get("targets")
    score = f"{search['score']}{' of ' + ', '.join(targets) if targets else ''}" if search else None
    return {
        "epsilon": plan.epsilon,
        "delta": plan.delta,
        "k": plan.implied.k,
        "beta": plan.implied.beta,
        "search_budget": float(search.get("budget", 0.0)),
        "search_steps": int(search.get("steps", 0)),
        "search_score": score,
        "node": ", ".join(f"{qi}={level}" for qi, level in zip(qi_names, node)),
    }


def write_privacy_table(
    db: Database, conn: Connection, destination: Destination, row: dict[str, Any], ownership: Ownership, run_id: int
) -> None:
    """Write the privacy table's row (PRIVACY_COLUMNS) and check it as written, in the caller's transaction."""
    with staged_table(
        db, conn, destination=destination, select=PRIVACY_SELECT, params=row, ownership=ownership, run_id=run_id
    ) as staged:
        written = db.ref_table(staged.ref, list(PRIVACY_COLUMNS))
        found = [tuple(r) for r in db.execute(conn, sa.select(*written.c))]
        expected = tuple(row[c] for c in PRIVACY_COLUMNS)
        if len(found) != 1 or not _same_row(found[0], expected):
            name = str(destination.name)
            raise AuditError(f"the privacy table {name!r} does not hold the guarantee; nothing was written")
        staged.audited(1)


def _same_row(found: tuple[Any, ...], expected: tuple[Any, ...]) -> bool:
    return all(
        (math.isclose(float(a), float(b), rel_tol=1e-12) if isinstance(b, float) else a == b)
        for a, b in zip(found, expected, strict=True)
    )


@dataclass(kw_only=True)
class PrivateRelease(Released):
    """What a differentially private publication published: the table and the privacy table, the guarantee and
    what it implies, the node (and the walk that chose it), and for the data owner only, the rows sampled and
    suppressed (not differentially private: never to be published), the audit, the first rows and the seconds."""

    output: str
    privacy_table: str
    row: dict[str, Any]  # the privacy table's
    node_levels: dict[str, int]
    rows: int  # the source's
    sampled: int
    published: int
    walk: list[tuple[int, ...]]  # the nodes the search stood on (empty without a search)
    walk_scores: list[float]  # their scores
    score: float | None  # the published node's, with a search
    loss: float | list[float]  # the release's loss (model.quality, the job's aggregate), over the sample
    reproducible: bool
    audit: dict[str, Any]
    preview: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": DifferentialPrivacy.name,
            "output": self.output,
            "privacy_table": self.privacy_table,
            **self.row,
            "node_levels": self.node_levels,
            "rows": self.rows,
            "sampled": self.sampled,
            "published": self.published,
            "walk": [list(node) for node in self.walk],
            "walk_scores": self.walk_scores,
            "score": self.score,
            "loss": self.loss,
            "reproducible": self.reproducible,
            "audit": self.audit,
            "seconds": round(self.seconds, 3),
            "preview": plain_rows(self.preview),
        }
