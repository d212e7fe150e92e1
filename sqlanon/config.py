"""Job configuration: what to anonymize, how, and where to write it.

A job is read from a YAML file (relative paths resolve against the file's folder)
or built in Python from the dataclasses below. Validation here covers the shape
of the configuration; checks that need the data (columns exist, values covered
by hierarchies) happen against the database in `sqlanon.engine.star`.
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import yaml
from sqlalchemy.engine import make_url

from .criteria import Criterion, criteria_from_config
from .errors import ConfigError

GENERATORS = ("mask", "intervals", "date", "suppress")
STRATEGIES = ("auto", "incognito", "topdown", "bottomup", "border", "filtered", "samarati", "exhaustive")
BASES = ("cube", "table")
SUPPRESSION_MODES = ("remove", "mask")
#: what each role does to a column in the published table (ARX's attribute types)
ROLES = {
    "quasi_identifiers": "generalized by its hierarchy",
    "sensitive": "published as is, protected by the criteria",
    "insensitive": "published as is",
    "identifying": "removed, or replaced by a keyed pseudonym",
}
#: how messages name a column of each role
ROLE_NAMES = {"quasi_identifiers": "quasi-identifier", "sensitive": "sensitive attribute",
              "insensitive": "insensitive", "identifying": "identifying"}
#: shortest pseudonym key accepted, in bytes (HMAC-SHA256 keys shorter than this are guessable)
MIN_KEY_BYTES = 16


@dataclass
class Source:
    url: str
    table: str
    schema: str | None = None
    csv: Path | None = None
    csv_options: dict[str, Any] = field(default_factory=dict)
    memory_limit: str | None = None  # DuckDB: e.g. "2GB" (default: half the machine's memory)
    temp_directory: Path | None = None  # DuckDB: where it spills what does not fit the limit
    parquet: Path | None = None  # Spark: Parquet files read in place as the source table (a temporary view)


@dataclass
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


@dataclass(frozen=True)
class Identifier:
    """A direct identifier: removed from the output (`drop`), or replaced by a keyed pseudonym.

    The pseudonym is HMAC-SHA256 of the value's text with a key read from an
    environment variable or a file at run time; only where the key comes from
    is part of the job, never the key itself.
    """

    column: str
    action: str = "drop"  # drop | pseudonym
    key_env: str | None = None
    key_file: Path | None = None

    def describe(self) -> str:
        if self.action == "drop":
            return "drop"
        return f"pseudonym (key from {'$' + self.key_env if self.key_env else str(self.key_file)})"

    def key(self) -> bytes:
        """The pseudonym key, read now (never stored by sqlanon)."""
        where = f"identifying.{self.column}.pseudonym"
        if self.key_env is not None:
            value = os.environ.get(self.key_env)
            if value is None:
                raise ConfigError(f"{where}: environment variable {self.key_env!r} is not set; set it to the secret "
                                  f"key (at least {MIN_KEY_BYTES} bytes)")
            key = value.encode()
        else:
            assert self.key_file is not None
            if not self.key_file.is_file():
                raise ConfigError(f"{where}: key file {str(self.key_file)!r} not found")
            key = self.key_file.read_bytes().rstrip(b"\r\n")
        if len(key) < MIN_KEY_BYTES:
            raise ConfigError(f"{where}: the key has {len(key)} bytes; use at least {MIN_KEY_BYTES} random bytes "
                              "(e.g. from: openssl rand -hex 32)")
        return key


OUTPUT_METHODS = ("generalize", "anatomy", "mondrian")
NUMERIC_OUTPUTS = ("range", "mean")


@dataclass
class Output:
    """Where the published table goes, and how it is made.

    `generalize` (the default) publishes one table at the node the search
    chose; `anatomy` publishes two tables with exact QIs: `table` (QIs, a
    bucket id per record) and `sensitive_table` (bucket, value, count), every
    bucket holding `l` different sensitive values.
    """

    table: str
    schema: str | None = None
    grant_to: list[str] = field(default_factory=list)  # roles given SELECT on the output (PostgreSQL)
    method: str = "generalize"
    l: int | None = None  # anatomy: different sensitive values in every bucket
    sensitive_table: str | None = None  # anatomy: the bucket, value, count table (default: TABLE_sensitive)
    seed: str | int = 0  # anatomy: the records' pseudo-random order within a value (a new seed, new buckets)
    relaxed: bool = False  # mondrian: cut numeric QIs into halves of the sorted rows (equal values either side)
    numeric: str = "range"  # mondrian: publish a numeric QI as its partition's range or mean

    @property
    def partitioned(self) -> bool:
        return self.method == "mondrian"

    @property
    def bucketized(self) -> bool:
        return self.method == "anatomy"

    @property
    def sensitive_table_name(self) -> str:
        return self.sensitive_table or f"{self.table}_sensitive"


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
            raise ConfigError(f"suppression.limit must be a count (e.g. 100) or a fraction of the table "
                              f"(e.g. 0.02), got {limit!r}")
        if not math.isfinite(limit):
            raise ConfigError(f"suppression.limit must be a finite number, got {limit}")
        if limit < 0:
            raise ConfigError(f"suppression.limit must be >= 0, got {limit}")
        if isinstance(limit, float) and limit > 1:
            raise ConfigError(f"suppression.limit {limit} is a fraction above 1; write a whole number for a "
                              "count of tuples, or a fraction between 0 and 1")
        _choice(self.mode, SUPPRESSION_MODES, "suppression.mode")

    def max_suppressed(self, rows: int) -> int:
        """MaxSup for a table of `rows` tuples: fewer than the table, or every tuple could go."""
        limit = int(self.limit * rows + 1e-9) if isinstance(self.limit, float) else self.limit
        if limit >= rows and limit > 0:
            raise ConfigError(f"suppression.limit {self.limit} lets all {rows} rows of the table be suppressed, "
                              "which would publish nothing; use fewer than the table size, or a fraction such as "
                              "0.02")
        return limit

    @classmethod
    def from_config(cls, raw: Any) -> "Suppression":
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):  # shorthand: `suppression: 0.02`
            return cls(raw)
        spec = _mapping(raw, "suppression", {"limit", "mode"})
        return cls(_required(spec, "limit", "suppression"), spec.get("mode", "remove"))


@dataclass(frozen=True)
class Selection:
    """How to pick the node to publish: a preference policy, or the best node by a utility metric."""

    policy: str | None = "min_absolute_distance"
    metric: str | None = None

    def __post_init__(self) -> None:
        from .engine.metrics import METRICS, POLICIES  # metrics imports criteria, not config: no cycle at import time
        if (self.policy is None) == (self.metric is None):
            raise ConfigError("select takes exactly one of policy: NAME or metric: NAME")
        if self.policy is not None:
            _choice(self.policy, tuple(POLICIES), "select.policy")
        if self.metric is not None:
            _choice(self.metric, tuple(METRICS), "select.metric")

    @classmethod
    def from_config(cls, raw: Any) -> "Selection":
        spec = _mapping(raw, "select", {"policy", "metric"})
        if len(spec) != 1:
            raise ConfigError("select takes exactly one of policy: NAME or metric: NAME")
        return cls(spec.get("policy"), spec.get("metric"))

    def describe(self) -> str:
        return f"policy {self.policy}" if self.policy else f"metric {self.metric}"


@dataclass
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
    releases: "ReleaseSeries | None" = None  # earlier releases, for inference across them
    inference: "InferenceSettings" = field(default_factory=lambda: InferenceSettings())
    #: what the criteria protect: None (persons, one row each: a direct identifier that repeats is refused) or
    #: "rows" (each row on its own, stated by the job)
    unit: str | None = None

    @property
    def qi_names(self) -> list[str]:
        return [qi.column for qi in self.quasi_identifiers]

    def column_roles(self) -> list[tuple[str, str]]:
        """(column, role) for every column the job classifies; every source column needs exactly one."""
        return ([(c, "quasi_identifiers") for c in self.qi_names] + [(c, "sensitive") for c in self.sensitive]
                + [(c, "insensitive") for c in self.insensitive]
                + [(i.column, "identifying") for i in self.identifying])

    def with_url(self, url: str | None) -> "Job":
        """The same job against another database (the CLI's --db)."""
        if not url:
            return self
        return replace(self, source=replace(self.source, url=normalize_url(url, Path.cwd())))

    def to_json(self) -> str:
        """A JSON record of the job, stored with each run."""
        data = {
            "name": self.name,
            "source": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self.source).items()},
            "quasi_identifiers": {qi.column: qi.describe() for qi in self.quasi_identifiers},
            "sensitive": self.sensitive,
            "criteria": {c.name: c.params() for c in self.criteria},
            "output": asdict(self.output) if self.output else None,
            "strategy": self.strategy,
            "base": self.base,
            "suppression": asdict(self.suppression),
            "select": asdict(self.select),
            "assume_monotone": self.assume_monotone,
            "insensitive": self.insensitive,
            "identifying": {i.column: i.describe() for i in self.identifying},  # where keys come from, not keys
            "population": list(self.population) if self.population else None,
            "unit": self.unit,
            "releases": asdict(self.releases) if self.releases else None,
            "inference": asdict(self.inference),
        }
        return json.dumps(data, sort_keys=True)


def normalize_url(url: str, base_dir: Path) -> str:
    """A SQLAlchemy URL; a bare file path means a DuckDB file (relative to base_dir)."""
    if "://" not in url:
        url = f"duckdb:///{url}"
    try:
        parsed = make_url(url)
    except Exception as exc:  # sqlalchemy raises ArgumentError with a terse message
        raise ConfigError(f"source.url {url!r} is not a database URL ({exc}); "
                          "use e.g. duckdb:///file.duckdb or postgresql+psycopg://user@host/db") from None
    if parsed.drivername in ("postgres", "postgresql"):  # libpq's own spellings: the psycopg 3 driver
        return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    if parsed.drivername.split("+")[0] not in SUPPORTED_SCHEMES:
        raise ConfigError(f"source.url {parsed.render_as_string()!r}: {parsed.drivername!r} is not supported; "
                          f"use one of {', '.join(SUPPORTED_SCHEMES.values())}")
    if parsed.drivername.startswith("duckdb"):
        db = parsed.database or ":memory:"
        if db != ":memory:" and not Path(db).is_absolute():
            parsed = parsed.set(database=str((base_dir / db).resolve()))
        return parsed.render_as_string(hide_password=False)
    if parsed.drivername in ("spark", "sc"):  # the metadata store and the warehouse folder relative to base_dir
        query = {}
        if "metadata" in parsed.query:
            query["metadata"] = normalize_url(str(parsed.query["metadata"]), base_dir)
        if "warehouse" in parsed.query:
            query["warehouse"] = str((base_dir / str(parsed.query["warehouse"])).resolve())
        return parsed.update_query_dict(query).render_as_string(hide_password=False)
    return url


# URL scheme -> an example of it, for error messages
SUPPORTED_SCHEMES = {"duckdb": "duckdb:///file.duckdb (or a bare file path)",
                     "postgresql": "postgresql://user@host/db (also postgres:// and postgresql+psycopg://)",
                     "spark": "spark://local[2] (or spark://HOST:7077; ?metadata=duckdb:///meta.duckdb)",
                     "sc": "sc://HOST:15002 (Spark Connect)"}


def load_job(path: str | Path) -> Job:
    """Read a YAML job file; relative paths in it resolve against its folder."""
    path = Path(path)
    return job_from_dict(read_config_file(path), path.resolve().parent, default_name=path.stem)


def read_config_file(path: Path) -> Any:
    """The parsed YAML of a job file (mapping order kept: the QI order is their priority)."""
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} not found")
    try:
        return yaml.load(path.read_text(), Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid YAML: {exc}".replace("\n", " ")) from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, but a key given twice in one mapping is an error (YAML keeps the last silently)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:  # an unhashable key: let the base class report it
                break
            if first != key_node.start_mark.line + 1:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice (lines {first} and {key_node.start_mark.line + 1}); "
                    "give it once", key_node.start_mark)
        return super().construct_mapping(node, deep)


def job_from_dict(data: Any, base_dir: Path | str = ".", default_name: str = "job") -> Job:
    """Build a Job from the parsed YAML structure (also usable from Python)."""
    base_dir = Path(base_dir)
    cfg = _mapping(data, "the config", {"source", "quasi_identifiers", "sensitive", "criteria",
                                        "output", "search", "name", "suppression",
                                        "select", "insensitive", "identifying", "population", "releases",
                                        "inference", "unit"})
    source = _source(_mapping(_required(cfg, "source", "the config"), "source",
                              {"url", "table", "schema", "csv", "csv_options", "memory_limit", "temp_directory",
                               "parquet"}),
                     base_dir)
    qis = _quasi_identifiers(_required(cfg, "quasi_identifiers", "the config"), base_dir)
    sensitive = _column_list(cfg, "sensitive")
    criteria = criteria_from_config(cfg["criteria"], base_dir) if cfg.get("criteria") is not None else []
    for criterion in criteria:  # an attribute a criterion protects is sensitive, listed or not
        sensitive += [a for a in criterion.sensitive_attributes() if a not in sensitive]
    insensitive = _column_list(cfg, "insensitive")
    identifying = _identifying(cfg.get("identifying"), base_dir)
    output = _output(cfg["output"]) if cfg.get("output") is not None else None
    search = _mapping(cfg.get("search") or {}, "search", {"strategy", "base", "assume_monotone"})
    strategy = _choice(search.get("strategy", "auto"), STRATEGIES, "search.strategy")
    base = _choice(search.get("base", "cube"), BASES, "search.base")
    assume_monotone = search.get("assume_monotone", False)
    if not isinstance(assume_monotone, bool):
        raise ConfigError(f"search.assume_monotone must be true or false, got {assume_monotone!r}")
    suppression = Suppression.from_config(cfg["suppression"]) if cfg.get("suppression") is not None \
        else Suppression()
    select = Selection.from_config(cfg["select"]) if cfg.get("select") is not None else Selection()
    name = cfg.get("name", default_name)
    population = None
    if cfg.get("population") is not None:
        pop = _mapping(cfg["population"], "population", {"table", "schema"})
        population = (_optional_identifier(pop.get("schema"), "population.schema"),
                      _identifier(_required(pop, "table", "population"), "population.table"))
    releases = ReleaseSeries.from_config(cfg["releases"]) if cfg.get("releases") is not None else None
    inference = InferenceSettings.from_config(cfg.get("inference") or {})
    unit = cfg.get("unit")
    if unit is not None and unit != "rows":
        raise ConfigError(f"unit must be rows (each row is protected on its own, whoever it belongs to), got "
                          f"{unit!r}; without it every row is one person's, and a direct identifier that repeats "
                          "stops the job")
    job = Job(source, qis, criteria, output, sensitive, strategy, str(name), base, suppression, select,
              assume_monotone, insensitive, identifying, population, releases, inference, unit=unit)
    check_roles(job)
    _check_method(job)
    return job


def _output(raw: Any) -> Output:
    out = _mapping(raw, "output", {"table", "schema", "grant_to", "method", "l", "sensitive_table", "seed",
                                   "relaxed", "numeric"})
    grant_to = out.get("grant_to") or []
    grant_to = [grant_to] if isinstance(grant_to, str) else grant_to
    if not isinstance(grant_to, list):
        raise ConfigError("output.grant_to must be a role name or a list of role names")
    method = _choice(out.get("method", "generalize"), OUTPUT_METHODS, "output.method")
    l_value = out.get("l")
    if method == "anatomy":
        if isinstance(l_value, bool) or not isinstance(l_value, int) or l_value < 2:
            raise ConfigError(f"output.l must be a whole number >= 2 with method anatomy (every bucket holds l "
                              f"different sensitive values), got {l_value!r}")
    elif any(out.get(key) is not None for key in ("l", "sensitive_table", "seed")):
        raise ConfigError("output.l, output.sensitive_table and output.seed belong to method: anatomy; remove "
                          "them, or add method: anatomy")
    if method != "mondrian" and any(out.get(key) is not None for key in ("relaxed", "numeric")):
        raise ConfigError("output.relaxed and output.numeric belong to method: mondrian; remove them, or add "
                          "method: mondrian")
    relaxed = out.get("relaxed", False)
    if not isinstance(relaxed, bool):
        raise ConfigError(f"output.relaxed must be true or false, got {relaxed!r}")
    numeric = _choice(out.get("numeric", "range"), NUMERIC_OUTPUTS, "output.numeric")
    seed = out.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, (int, str)):
        raise ConfigError(f"output.seed must be a whole number or a word, got {seed!r}")
    return Output(_identifier(_required(out, "table", "output"), "output.table"),
                  _optional_identifier(out.get("schema"), "output.schema"),
                  [_identifier(role, "output.grant_to") for role in grant_to], method, l_value,
                  _optional_identifier(out.get("sensitive_table"), "output.sensitive_table"), seed, relaxed, numeric)


def require_lattice(job: Job) -> None:
    """A search needs criteria and a hierarchy for every QI; say what is missing and what needs none."""
    if not job.criteria:
        raise ConfigError("the config has no criteria; add e.g. criteria: {k_anonymity: {k: 5}} (only output.method "
                          "anatomy and sqlanon inference work without criteria)")
    bare = [qi.column for qi in job.quasi_identifiers if not qi.has_hierarchy]
    if bare:
        raise ConfigError(f"quasi-identifier(s) {', '.join(bare)} have no hierarchy; generalization needs one for "
                          "each (hierarchy: FILE or generate: KIND); only output.method anatomy publishes QIs as "
                          "they are")


def _check_method(job: Job) -> None:
    """What each output method needs: generalization hierarchies and criteria; anatomy one sensitive column;
    Mondrian criteria (its QIs with a hierarchy are split along it, the others as numbers)."""
    if job.output is not None and job.output.partitioned:
        if not job.criteria:
            raise ConfigError("output.method mondrian needs criteria, e.g. criteria: {k_anonymity: {k: 5}}")
        if job.suppression.limit:
            raise ConfigError("output.method mondrian suppresses no tuples (every partition satisfies the criteria "
                              "as it is cut); remove suppression, or publish by generalization")
    if job.output is not None and job.output.bucketized:
        cut = [qi.column for qi in job.quasi_identifiers if qi.has_hierarchy]
        if cut:
            raise ConfigError(f"output.method anatomy publishes quasi-identifiers exact, so {', '.join(cut)} would "
                              "ignore the hierarchy given; list them without one (quasi_identifiers: [...]), or "
                              "publish by generalization")
        if job.suppression.limit:
            raise ConfigError("output.method anatomy suppresses no tuples; remove suppression")
        if job.criteria:
            raise ConfigError("output.method anatomy guarantees l different sensitive values per bucket (output.l) "
                              "and searches no lattice; remove criteria, or publish by generalization")
        if len(job.sensitive) != 1:
            raise ConfigError(f"output.method anatomy publishes one sensitive column; the job lists "
                              f"{len(job.sensitive)} ({', '.join(job.sensitive) or 'none'}): list exactly one under "
                              "sensitive")


@dataclass(frozen=True)
class Release:
    """One published release: a generalized table, or a bucketized pair (QI table, sensitive table)."""

    name: str
    table: str  # the generalized table, or the QI table of a bucketized pair
    schema: str | None = None
    sensitive_table: str | None = None  # bucketized: (bucket, value, count)

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

    @classmethod
    def from_config(cls, raw: Any) -> "ReleaseSeries":
        spec = _mapping(raw, "releases", {"pseudonym", "series", "bucket_column"})
        pseudonym = _identifier(_required(spec, "pseudonym", "releases"), "releases.pseudonym")
        series = _required(spec, "series", "releases")
        if not isinstance(series, list) or not series:
            raise ConfigError("releases.series must list the releases, e.g. [{name: january, table: jan_qi, "
                              "sensitive_table: jan_sensitive}, {name: february, table: feb_generalized}]")
        releases = []
        for index, item in enumerate(series):
            where = f"releases.series[{index}]"
            item = _mapping(item, where, {"name", "table", "schema", "sensitive_table"})
            table = _identifier(_required(item, "table", where), f"{where}.table")
            releases.append(Release(str(item.get("name") or table), table,
                                    _optional_identifier(item.get("schema"), f"{where}.schema"),
                                    _optional_identifier(item.get("sensitive_table"), f"{where}.sensitive_table")))
        names = [r.name for r in releases]
        if len(set(names)) != len(names):
            raise ConfigError(f"releases.series: names must differ, got {names}")
        return cls(pseudonym, tuple(releases), _identifier(spec.get("bucket_column", "bucket"),
                                                           "releases.bucket_column"))


@dataclass(frozen=True)
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
            raise ConfigError(f"inference.min_probability ({self.min_probability}) must be below max_probability "
                              f"({self.max_probability})")
        tol = self.tolerance
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not math.isfinite(tol) or not 0 < tol < 1:
            raise ConfigError(f"inference.tolerance must be a number between 0 and 1 (e.g. 1e-4), got {tol!r}")
        iterations = self.max_iterations
        if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
            raise ConfigError(f"inference.max_iterations must be a whole number >= 1, got {iterations!r}")

    @classmethod
    def from_config(cls, raw: Any) -> "InferenceSettings":
        spec = _mapping(raw, "inference", {"max_probability", "min_probability", "tolerance", "max_iterations",
                                           "table", "schema"})
        fields = {k: _yaml_number(v) for k, v in spec.items() if k not in ("table", "schema")}
        return cls(**fields, table=_optional_identifier(spec.get("table"), "inference.table"),
                   schema=_optional_identifier(spec.get("schema"), "inference.schema"))


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


def _column_list(cfg: dict, key: str) -> list[str]:
    names = cfg.get(key) or []
    names = [names] if isinstance(names, str) else names
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise ConfigError(f"{key} must be a list of column names")
    return list(names)


def _identifying(raw: Any, base_dir: Path) -> list[Identifier]:
    """`identifying: [id, ...]` (removed) or `{id: drop, ssn: {pseudonym: {key_env: VAR} | {key_file: F}}}`."""
    if raw is None:
        return []
    if isinstance(raw, (str, list)):
        return [Identifier(c) for c in _column_list({"identifying": raw}, "identifying")]
    found = []
    for column, action in _mapping(raw, "identifying", None).items():
        column = _identifier(column, "identifying")
        where = f"identifying.{column}"
        if action in (None, "drop"):
            found.append(Identifier(column))
            continue
        if not isinstance(action, dict):
            raise ConfigError(f"{where} must be drop, or {{pseudonym: {{key_env: VARIABLE}}}}; got {action!r}")
        spec = _mapping(_required(_mapping(action, where, {"pseudonym"}), "pseudonym", where),
                        f"{where}.pseudonym", {"key_env", "key_file"})
        if len(spec) != 1:
            raise ConfigError(f"{where}.pseudonym takes one of key_env: VARIABLE or key_file: FILE (the secret key "
                              "is never written in the job)")
        if "key_env" in spec:
            found.append(Identifier(column, "pseudonym", key_env=_identifier(spec["key_env"], f"{where}.key_env")))
        else:
            key_file = _identifier(spec["key_file"], f"{where}.key_file")
            found.append(Identifier(column, "pseudonym", key_file=(base_dir / key_file).resolve()))
    return found


def _choice(value: Any, choices: tuple[str, ...], where: str) -> str:
    if value not in choices:
        raise ConfigError(f"{where} {value!r} is unknown; choose one of {', '.join(choices)}")
    return value


def _source(src: dict, base_dir: Path) -> Source:
    url = normalize_url(str(_required(src, "url", "source")), base_dir)
    csv = src.get("csv")
    csv_path = (base_dir / csv).resolve() if csv else None
    options = _mapping(src.get("csv_options") or {}, "source.csv_options", None)
    memory = src.get("memory_limit")
    temp = src.get("temp_directory")
    parquet = src.get("parquet")
    if parquet and (csv or src.get("schema")):
        raise ConfigError("source.parquet names files read in place as a temporary view: it goes without "
                          "source.csv and source.schema; keep one source")
    return Source(url, _identifier(_required(src, "table", "source"), "source.table"),
                  _optional_identifier(src.get("schema"), "source.schema"), csv_path, options,
                  None if memory is None else check_memory_limit(memory, "source.memory_limit"),
                  None if temp is None else (base_dir / str(temp)).resolve(),
                  (base_dir / str(parquet)).resolve() if parquet else None)


MEMORY_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(KB|MB|GB|TB|KiB|MiB|GiB|TiB|%)\s*$", re.IGNORECASE)


def check_memory_limit(value: Any, where: str) -> str:
    """A DuckDB memory size such as 2GB or 512MiB, normalized (its text goes into a SET statement)."""
    found = MEMORY_SIZE.match(str(value))
    if not found or float(found.group(1)) <= 0:
        raise ConfigError(f"{where} {value!r} is not a memory size; write e.g. 2GB, 512MB, 1.5GiB or 50% (of the "
                          "machine's memory)")
    return f"{found.group(1)}{found.group(2).upper().replace('I', 'i')}"


def _quasi_identifiers(raw: Any, base_dir: Path) -> list[QuasiIdentifier]:
    if isinstance(raw, list) and raw:  # names only: QIs published as they are (anatomy), no hierarchy
        return [QuasiIdentifier(_identifier(column, "quasi_identifiers")) for column in raw]
    if not isinstance(raw, dict) or not raw:
        raise ConfigError("quasi_identifiers must map each QI column to {hierarchy: FILE} or {generate: KIND}")
    qis = []
    for column, spec in raw.items():
        column = _identifier(column, "quasi_identifiers")
        if spec is None or spec == {}:  # `age:` alone, no hierarchy: anatomy publishes it, Mondrian cuts it as a number
            qis.append(QuasiIdentifier(column))
            continue
        if isinstance(spec, str):  # shorthand: `age: hierarchies/age.csv`
            spec = {"hierarchy": spec}
        spec = _mapping(spec, f"quasi_identifiers.{column}", None)
        hierarchy, generate = spec.get("hierarchy"), spec.get("generate")
        if (hierarchy is None) == (generate is None):
            raise ConfigError(f"quasi_identifiers.{column} needs exactly one of hierarchy: FILE or "
                              f"generate: {'|'.join(GENERATORS)}")
        options = {k: v for k, v in spec.items() if k not in ("hierarchy", "generate")}
        if hierarchy is not None:
            if options:
                raise ConfigError(f"quasi_identifiers.{column}: unknown key(s) {sorted(options)} next to hierarchy")
            qis.append(QuasiIdentifier(column, hierarchy=(base_dir / str(hierarchy)).resolve()))
        else:
            if generate not in GENERATORS:
                raise ConfigError(f"quasi_identifiers.{column}: unknown generator {generate!r}; "
                                  f"choose one of {', '.join(GENERATORS)}")
            qis.append(QuasiIdentifier(column, generate=generate, options=options))
    return qis


def _yaml_number(value: Any) -> Any:
    """YAML 1.1 reads 1e-6 (no dot) as text: take it as the number it means."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _mapping(value: Any, where: str, allowed: set[str] | None) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a mapping (key: value), got {type(value).__name__}")
    if allowed is not None:
        unknown = sorted(set(map(str, value)) - allowed)
        if unknown:
            raise ConfigError(f"{where}: unknown key {unknown[0]!r}; allowed keys are {', '.join(sorted(allowed))}")
    return value


def _required(cfg: dict, key: str, where: str) -> Any:
    if cfg.get(key) is None:
        raise ConfigError(f"{where} is missing the required key {key!r}")
    return cfg[key]


def _identifier(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value or "\x00" in value:
        raise ConfigError(f"{where} must be a non-empty name, got {value!r}")
    return value


def _optional_identifier(value: Any, where: str) -> str | None:
    return None if value is None else _identifier(value, where)
