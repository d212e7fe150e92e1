"""A job as plain data: what to anonymize, how, and where to write it (no connection, no file format).

`sqlanon.config` reads these from a YAML file or a mapping and checks names against the registries; a Python
user may build them directly. Each dataclass checks what it can on its own (a suppression limit, a metric's name);
checks that need the data (columns exist, values covered by hierarchies) happen against the database in
`sqlanon.engine.star`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .frames import FRAME_TABLE, MEMORY_URL, SourceFrame
from .lattice import Levels
from .quality import ATTACKERS, CostBenefit, QualitySettings
from .selection import METRICS, POLICIES, Rank, levels_rank, needs_every_passing_node, selection_metric

if TYPE_CHECKING:
    from ..criteria import Criterion

SUPPRESSION_MODES = ("remove", "mask")


#: what each role does to a column in the published table (ARX's attribute types)
ROLES = {
    "quasi_identifiers": "generalized by its hierarchy",
    "sensitive": "published as is, protected by the criteria",
    "insensitive": "published as is",
    "identifying": "removed, or replaced by a keyed pseudonym",
}


#: how messages name a column of each role
ROLE_NAMES = {
    "quasi_identifiers": "quasi-identifier",
    "sensitive": "sensitive attribute",
    "insensitive": "insensitive",
    "identifying": "identifying",
}


#: shortest pseudonym key accepted, in bytes (HMAC-SHA256 keys shorter than this are guessable)
MIN_KEY_BYTES = 16


@dataclass(kw_only=True)
class Source:
    url: str
    table: str
    schema: str | None = None
    csv: Path | None = None
    csv_options: dict[str, Any] = field(default_factory=dict)
    memory_limit: str | None = None  # DuckDB: e.g. "2GB" (default: half the machine's memory)
    temp_directory: Path | None = None  # DuckDB: where it spills what does not fit the limit
    parquet: Path | None = None  # Spark: Parquet files read in place as the source table (a temporary view)
    frame: SourceFrame | None = field(default=None, repr=False)  # the Python API's DataFrame (see model.frames)

    def loads(self) -> bool:
        """Whether the job loads its source table (from a file or a DataFrame) rather than reading one."""
        return self.csv is not None or self.frame is not None

    def record(self) -> dict[str, Any]:
        """The source as a run records it: paths as text, a DataFrame described (never its rows)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        fields["frame"] = self.frame.describe() if self.frame is not None else None
        return {k: str(v) if isinstance(v, Path) else v for k, v in fields.items()}


@dataclass(kw_only=True, frozen=True)
class Subset:
    """A research subset of the source table (ARX's DataSubset), which is then the population it was drawn from:
    only the subset's rows are anonymized and published, and the criteria that read the population (delta-presence)
    compare each class with the population's. The rows where `column` is true (a BOOLEAN, or an integer 0/1), or
    those whose `key` appears in the `key` column of table `table` (in `schema`)."""

    column: str | None = None
    table: str | None = None
    schema: str | None = None
    key: str | None = None

    def describe(self) -> str:
        if self.column is not None:
            return f"the rows where {self.column} is true"
        return f"the rows whose {self.key} is in table {self.table}"


@dataclass(frozen=True)
class Sample:
    """A random sample of the source's rows that a run anonymizes and publishes instead of the table (the
    differentially private publication's, sqlanon.publish.differential_privacy): each row kept with `probability`,
    drawn in the database from the secret `key` and the row's values in the columns the job names (see
    engine.randomization.sampled_select), never printed."""

    probability: float
    key: bytes = field(repr=False)


@dataclass(kw_only=True)
class QuasiIdentifier:
    """A QI column and where its hierarchy comes from: a file or a generator."""

    column: str
    hierarchy: Path | None = None
    generate: str | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        if self.hierarchy is None and self.generate is None:
            return "published as is (no hierarchy)"
        return str(self.hierarchy) if self.hierarchy else f"generated: {self.generate}"

    @property
    def has_hierarchy(self) -> bool:
        return self.hierarchy is not None or self.generate is not None


@dataclass(kw_only=True, frozen=True)
class Identifier:
    """A direct identifier: removed from the output (`drop`), or replaced by a keyed pseudonym.

    The pseudonym is HMAC-SHA256 of the value's text with a key read from an
    environment variable or a file at run time, or held by the database under
    a name (`key_name`: the run never reads it); only where the key comes from
    is part of the job, never the key itself.
    """

    column: str
    action: str = "drop"  # drop | pseudonym
    key_env: str | None = None
    key_file: Path | None = None
    key_name: str | None = None  # a key the database holds (store.keys), created by `sqlanon key create`

    def describe(self) -> str:
        if self.action == "drop":
            return "drop"
        if self.key_name is not None:
            return f"pseudonym (key {self.key_name!r} held by the database)"
        return f"pseudonym (key from {'$' + self.key_env if self.key_env else str(self.key_file)})"

    def key(self) -> bytes:
        """The pseudonym key, read now (never stored by sqlanon)."""
        return read_key(f"identifying.{self.column}.pseudonym", self.key_env, self.key_file)


def read_key(where: str, env: str | None, file: Path | None) -> bytes:
    """A secret key read now from the environment variable `env` or else from `file` (its last line break aside),
    at least MIN_KEY_BYTES long; `where` names the setting in errors. sqlanon never stores or logs it."""
    if env is not None:
        value = os.environ.get(env)
        if value is None:
            raise ConfigError(
                f"{where}: environment variable {env!r} is not set; set it to the secret key (at least "
                f"{MIN_KEY_BYTES} bytes)"
            )
        key = value.encode()
    else:
        assert file is not None, "a key comes from an environment variable or a file"
        if not file.is_file():
            raise ConfigError(f"{where}: key file {str(file)!r} not found")
        key = file.read_bytes().rstrip(b"\r\n")
    if len(key) < MIN_KEY_BYTES:
        raise ConfigError(
            f"{where}: the key has {len(key)} bytes; use at least {MIN_KEY_BYTES} random bytes "
            "(e.g. from: openssl rand -hex 32)"
        )
    return key


@dataclass(kw_only=True)
class Output:
    """Where the published table goes, and how it is made: `method` (see sqlanon.publish.methods; `generalize`
    by default) and that method's own settings, as its class parsed them (anatomy: l, sensitive_table, seed;
    mondrian: relaxed, numeric). A setting of another method is refused when the job is read."""

    table: str
    schema: str | None = None
    grant_to: list[str] = field(default_factory=list)  # roles given SELECT on the output (PostgreSQL)
    method: str = "generalize"
    settings: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        """The output as a job's JSON record shows it: the method's settings beside the common ones."""
        return {"table": self.table, "schema": self.schema, "grant_to": self.grant_to, "method": self.method} | dict(
            self.settings
        )


@dataclass(frozen=True)
class Suppression:
    """At most `limit` tuples (a count, or a fraction of the table when a float) may be suppressed.

    Suppressed tuples are those in classes that violate the criteria: removed
    from the output, or kept with every QI set to its hierarchy's top (mask).
    """

    limit: int | float = 0
    mode: str = "remove"

    def __post_init__(self) -> None:
        limit = self.limit
        if isinstance(limit, bool) or not isinstance(limit, (int, float)):
            raise ConfigError(
                f"suppression.limit must be a count (e.g. 100) or a fraction of the table (e.g. 0.02), got {limit!r}"
            )
        if not math.isfinite(limit):
            raise ConfigError(f"suppression.limit must be a finite number, got {limit}")
        if limit < 0:
            raise ConfigError(f"suppression.limit must be >= 0, got {limit}")
        if isinstance(limit, float) and limit > 1:
            raise ConfigError(
                f"suppression.limit {limit} is a fraction above 1; write a whole number for a "
                "count of tuples, or a fraction between 0 and 1"
            )
        _choice(self.mode, SUPPRESSION_MODES, "suppression.mode")

    def max_suppressed(self, rows: int) -> int:
        """MaxSup for a table of `rows` tuples: fewer than the table, or every tuple could go."""
        limit = int(self.limit * rows + 1e-9) if isinstance(self.limit, float) else self.limit
        if limit >= rows and limit > 0:
            raise ConfigError(
                f"suppression.limit {self.limit} lets all {rows} rows of the table be suppressed, "
                "which would publish nothing; use fewer than the table size, or a fraction such as "
                "0.02"
            )
        return limit


@dataclass(frozen=True)
class Selection:
    """How to pick the node to publish: a preference policy, or the best node by a utility metric."""

    policy: str | None = "min_absolute_distance"
    metric: str | None = None
    #: ARX's generalization/suppression factor and aggregate function, for ARX's quality models (model.quality)
    gs_factor: float = 0.5
    aggregate: str | None = None
    #: the job's cost/benefit model (`cost_benefit:`), which the publisher payout reads
    cost_benefit: CostBenefit = field(default_factory=CostBenefit)
    #: the classification metric's target attributes (sensitive ones or QIs; ARX's response variables)
    targets: tuple[str, ...] = ()
    #: the publisher payout's adversary (model.quality.QualitySettings.attacker)
    attacker: str = "prosecutor"

    def __post_init__(self) -> None:
        if (self.policy is None) == (self.metric is None):
            raise ConfigError("select takes exactly one of policy: NAME or metric: NAME")
        if self.policy is not None:
            _choice(self.policy, tuple(POLICIES), "select.policy")
        if self.metric is not None:
            _choice(self.metric, tuple(METRICS), "select.metric")
        QualitySettings(self.gs_factor, self.aggregate)  # checks the factor and the aggregate
        chosen = METRICS.get(self.metric or "")
        arx = [m for m in METRICS.values() if m.arx]
        if self.gs_factor != 0.5 and not (chosen and chosen.arx):
            raise ConfigError(
                f"select.gs_factor weighs ARX's quality models only ({', '.join(m.name for m in arx)}); "
                f"{self.describe()} takes none"
            )
        if (self.metric == "classification") != bool(self.targets):
            raise ConfigError(
                "select.targets names the attributes the classification metric predicts, and only it: "
                "select: {metric: classification, targets: [salary]} (sensitive attributes or QIs of the job)"
            )
        _choice(self.attacker, ATTACKERS, "select.attacker")
        if self.attacker != "prosecutor" and self.metric != "publisher_payout":
            raise ConfigError(f"select.attacker names the publisher payout's adversary; {self.describe()} takes none")
        if self.aggregate is not None and not (chosen and chosen.aggregate):
            raise ConfigError(
                "select.aggregate combines the per-QI figures of "
                f"{', '.join(m.name for m in arx if m.aggregate)} only; {self.describe()} has one figure"
            )

    @property
    def quality(self) -> QualitySettings:
        return QualitySettings(self.gs_factor, self.aggregate, self.cost_benefit, self.targets, self.attacker)

    def describe(self) -> str:
        return f"policy {self.policy}" if self.policy else f"metric {self.metric}"

    def reads_every_passing_node(self, max_suppressed: int) -> bool:
        """Whether the best node may lie above the minimal ones (see selection.needs_every_passing_node)."""
        metric = selection_metric(self.policy, self.metric)
        return needs_every_passing_node(metric, self.policy is not None, max_suppressed)

    def levels_rank(self, heights: list[int]) -> Callable[[Levels], Rank] | None:
        """Each node's rank where the choice depends on the levels alone (see selection.levels_rank)."""
        return levels_rank(selection_metric(self.policy, self.metric), heights)


@dataclass(kw_only=True)
class Job:
    source: Source
    quasi_identifiers: list[QuasiIdentifier]
    criteria: list[Criterion]
    output: Output | None = None
    sensitive: list[str] = field(default_factory=list)
    strategy: str = "auto"
    name: str = "job"
    base: str = "cube"  # where frequency sets without a computed child come from: cube | table
    suppression: Suppression = field(default_factory=Suppression)
    select: Selection = field(default_factory=Selection)
    assume_monotone: bool = False  # prune as if the criteria were monotone under suppression (heuristic)
    insensitive: list[str] = field(default_factory=list)  # published as they are
    identifying: list[Identifier] = field(default_factory=list)  # removed or pseudonymized
    population: tuple[str | None, str] | None = None  # (schema, table) the journalist and marketer risks match
    releases: ReleaseSeries | None = None  # earlier releases, for inference across them
    inference: InferenceSettings = field(default_factory=lambda: InferenceSettings())
    ledger: Ledger | None = None  # record every publication, and check each against the earlier ones
    #: what the criteria protect: None (persons, one row each: a direct identifier that repeats is refused) or
    #: "rows" (each row on its own, stated by the job)
    unit: str | None = None
    #: the column naming each row's person (`unit: {column: ...}`): the criteria count persons, not rows
    unit_column: str | None = None
    #: the research subset that is anonymized and published, of the source table as its population (`subset:`)
    subset: Subset | None = None
    #: the random sample of the source's rows anonymized and published instead of the table (set by a method)
    sample: Sample | None = None
    #: what becomes of the source's columns the job gives no role: None (the job is refused, naming them) or
    #: "drop" (left out of every output, listed in a warning when the run reads the source)
    others: str | None = None

    @property
    def qi_names(self) -> list[str]:
        return [qi.column for qi in self.quasi_identifiers]

    def column_roles(self) -> list[tuple[str, str]]:
        """(column, role) for every column the job classifies; every source column needs exactly one."""
        return (
            [(c, "quasi_identifiers") for c in self.qi_names]
            + [(c, "sensitive") for c in self.sensitive]
            + [(c, "insensitive") for c in self.insensitive]
            + [(i.column, "identifying") for i in self.identifying]
        )

    def with_url(self, url: str | None) -> Job:
        """The same job against another database (the CLI's --db: a URL as `backends.normalize_url` gives it)."""
        if not url:
            return self
        return replace(self, source=replace(self.source, url=url))

    def with_frame(self, frame: SourceFrame) -> Job:
        """The same job reading `frame` as its source table, in a DuckDB database of this process' memory (the
        caller's RunOptions.db_url may name another: see model.frames)."""
        source = Source(
            url=MEMORY_URL,
            table=self.source.table or FRAME_TABLE,
            schema=self.source.schema,
            memory_limit=self.source.memory_limit,
            temp_directory=self.source.temp_directory,
            frame=frame,
        )
        return replace(self, source=source)

    def to_json(self) -> str:
        """A JSON record of the job, stored with each run."""
        data = {
            "name": self.name,
            "source": self.source.record(),
            "quasi_identifiers": {qi.column: qi.describe() for qi in self.quasi_identifiers},
            "sensitive": self.sensitive,
            "criteria": {c.name: c.params() for c in self.criteria},
            "output": self.output.describe() if self.output else None,
            "strategy": self.strategy,
            "base": self.base,
            "suppression": asdict(self.suppression),
            "select": asdict(self.select),
            "assume_monotone": self.assume_monotone,
            "insensitive": self.insensitive,
            "identifying": {i.column: i.describe() for i in self.identifying},  # where keys come from, not keys
            "population": list(self.population) if self.population else None,
            "unit": self.unit,
            "unit_column": self.unit_column,
            "others": self.others,
            "subset": asdict(self.subset) if self.subset else None,
            "sample": self.sample.probability if self.sample else None,  # never its key
            "releases": asdict(self.releases) if self.releases else None,
            "inference": asdict(self.inference),
            "ledger": asdict(self.ledger) if self.ledger else None,
        }
        return json.dumps(data, sort_keys=True)


def require_lattice(job: Job) -> None:
    """A search needs criteria and a hierarchy for every QI; say what is missing and what needs none."""
    if not job.criteria:
        raise ConfigError(
            "the config has no criteria; add e.g. criteria: {k_anonymity: {k: 5}} (only output.method "
            "anatomy and sqlanon inference work without criteria)"
        )
    bare = [qi.column for qi in job.quasi_identifiers if not qi.has_hierarchy]
    if bare:
        raise ConfigError(
            f"quasi-identifier(s) {', '.join(bare)} have no hierarchy; generalization needs one for "
            "each (hierarchy: FILE or generate: KIND); only output.method anatomy publishes QIs as "
            "they are"
        )


@dataclass(kw_only=True, frozen=True)
class Release:
    """One published release: a generalized table, or a bucketized pair (QI table, sensitive table)."""

    name: str
    table: str  # the generalized table, or the QI table of a bucketized pair
    schema: str | None = None
    sensitive_table: str | None = None  # bucketized: (bucket, value, count)
    #: the release's generalized QIs, where they are not the job's (a ledger's earlier release)
    qi_columns: tuple[str, ...] = ()
    #: one person may have several identical rows (a release of a job with a unit): read its distinct rows
    distinct: bool = False
    #: its QI values are labels of the job's hierarchies (not so for Mondrian's ranges, which the ledger records)
    hierarchy_labels: bool = True
    #: a bucketized release's counterfeits (bucket, counterfeit): values of the bucket that no published person holds
    counterfeit_table: str | None = None

    @property
    def bucketized(self) -> bool:
        return self.sensitive_table is not None


@dataclass(frozen=True)
class ReleaseSeries:
    """Releases already published from earlier versions of the table, and the column that links them.

    Every release carries the `pseudonym` column (the same person has the
    same pseudonym in each); bucketized QI tables carry `bucket`.
    """

    pseudonym: str
    releases: tuple[Release, ...]
    bucket: str = "bucket"


LEDGER_CHECKS = ("inference", "m-invariance")


@dataclass(kw_only=True, frozen=True)
class Ledger:
    """The job's release ledger (`ledger:`): every publication is recorded with the persons it holds (by the
    pseudonym of `person`), and checked before it commits (see sqlanon.publish.ledger) by `check`: `inference`
    (the maximum-entropy inference over it and the earlier releases of the job finds no value of anyone's beyond
    what one release gives), `m-invariance` (Xiao and Tao: every group holds at least `m` persons with distinct
    sensitive values, and a person in the previous release keeps the same set of values), or None (recorded
    only). With `suppress` (a share of the release's persons), a release the inference finds disclosing is
    repaired instead of refused: the persons at stake leave it, with any class that then breaks the criteria."""

    person: str
    check: str | None = "inference"
    m: int | None = None  # m-invariance's m
    suppress: float = 0.0  # the share of a release's persons the inference check may remove to repair it

    def __post_init__(self) -> None:
        if self.check not in (*LEDGER_CHECKS, None):
            raise ConfigError(f"ledger.check must be one of {', '.join(LEDGER_CHECKS)} or false, got {self.check!r}")
        if (self.check == "m-invariance") != (self.m is not None):
            raise ConfigError(
                "ledger.m is m-invariance's m: give ledger: {check: m-invariance, m: M} (M >= 2), and m only with it"
            )
        if self.m is not None and (isinstance(self.m, bool) or not isinstance(self.m, int) or self.m < 2):
            raise ConfigError(f"ledger.m must be a whole number >= 2 (each group's distinct values), got {self.m!r}")
        suppress = self.suppress
        if isinstance(suppress, bool) or not isinstance(suppress, (int, float)) or not 0 <= suppress < 1:
            raise ConfigError(
                f"ledger.suppress must be a share of the release's persons, at least 0 and below 1, got {suppress!r}"
            )
        if suppress and self.check != "inference":
            raise ConfigError(
                "ledger.suppress repairs what the inference check finds (ledger.check: inference); m-invariance's "
                "repair is anatomy's invariant: true (counterfeits): remove ledger.suppress"
            )


@dataclass(kw_only=True, frozen=True)
class InferenceSettings:
    """Maximum-entropy inference across releases: when to flag a person, and when to stop iterating."""

    max_probability: float = 0.5  # positive disclosure: some P(s | person) above this
    min_probability: float = 0.01  # negative disclosure: a value a release allowed falls below this
    tolerance: float = 1e-4  # stop when no constraint is violated by more than this (in persons)
    max_iterations: int = 5000
    table: str | None = None  # where P(s | person) is written (kept only when named)
    schema: str | None = None

    def __post_init__(self) -> None:
        for name in ("max_probability", "min_probability"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
                raise ConfigError(f"inference.{name} must be a probability strictly between 0 and 1, got {value!r}")
        if self.min_probability >= self.max_probability:
            raise ConfigError(
                f"inference.min_probability ({self.min_probability}) must be below max_probability "
                f"({self.max_probability})"
            )
        tol = self.tolerance
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not math.isfinite(tol) or not 0 < tol < 1:
            raise ConfigError(f"inference.tolerance must be a number between 0 and 1 (e.g. 1e-4), got {tol!r}")
        iterations = self.max_iterations
        if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
            raise ConfigError(f"inference.max_iterations must be a whole number >= 1, got {iterations!r}")


def check_roles(job: Job, name_key: Callable[[str], str] = str) -> None:
    """A column has one role: listed twice (in one role or two) is an error naming both places.

    `name_key` compares names as the database will (DuckDB ignores case);
    the config alone compares them as written.
    """
    seen: dict[str, tuple[str, str]] = {}
    for column, role in job.column_roles():
        key = name_key(column)
        if key in seen:
            first, first_role = seen[key]
            where = f"twice under {role}" if first_role == role else f"under both {first_role} and {role}"
            alike = "" if first == column else f" (as {first!r} and {column!r}: the database does not tell them apart)"
            raise ConfigError(f"column {column!r} is listed {where}{alike}; give each column one role")
        seen[key] = (column, role)


def _choice(value: Any, choices: tuple[str, ...], where: str) -> str:
    if value not in choices:
        raise ConfigError(f"{where} {value!r} is unknown; choose one of {', '.join(choices)}")
    return str(value)
