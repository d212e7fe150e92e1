"""Job files: a YAML file (or a parsed mapping) read into the dataclasses of `sqlanon.model.job`.

Relative paths resolve against the file's folder. Validation here covers the shape of the configuration and
the names it may use (strategies, generators, output methods, criteria: each from its registry); checks that
need the data (columns exist, values covered by hierarchies) happen against the database in
`sqlanon.engine.star`.
"""

from __future__ import annotations

import dataclasses
import re
from itertools import chain
from pathlib import Path
from typing import Any

import yaml

from .backends import normalize_url
from .criteria import Profitability, criteria_from_config
from .errors import ConfigError
from .model.hierarchies import GENERATORS, read_groups_file
from .model.job import (
    Identifier,
    InferenceSettings,
    Job,
    Ledger,
    Output,
    QuasiIdentifier,
    Release,
    ReleaseSeries,
    Selection,
    Source,
    Subset,
    Suppression,
    _choice,
    check_roles,
)
from .model.quality import CostBenefit
from .publish.methods import METHODS
from .search.strategies import STRATEGIES

BASES = ("cube", "table")


def load_job(path: str | Path) -> Job:
    """Read a YAML job file; relative paths in it resolve against its folder."""
    path = Path(path)
    return job_from_dict(read_config_file(path), path.resolve().parent, default_name=path.stem)


def read_config_file(path: Path) -> Any:
    """The parsed YAML of a job file (mapping order kept: the QI order is their priority)."""
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} not found")
    try:
        return yaml.load(path.read_text(), Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid YAML: {exc}".replace("\n", " ")) from None


class _UniqueKeyLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no types
    """YAML's safe loader, but a key given twice in one mapping is an error (YAML keeps the last silently)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:  # an unhashable key: let the base class report it
                break
            if first != key_node.start_mark.line + 1:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"key {key!r} is given twice (lines {first} and {key_node.start_mark.line + 1}); give it once",
                    key_node.start_mark,
                )
        mapping: dict[Any, Any] = super().construct_mapping(node, deep)
        return mapping


def job_from_dict(data: Any, base_dir: Path | str = ".", default_name: str = "job") -> Job:
    """Build a Job from the parsed YAML structure (also usable from Python)."""
    base_dir = Path(base_dir)
    cfg = _mapping(
        data,
        "the config",
        {
            "source",
            "quasi_identifiers",
            "sensitive",
            "criteria",
            "output",
            "search",
            "name",
            "suppression",
            "select",
            "insensitive",
            "identifying",
            "population",
            "releases",
            "inference",
            "unit",
            "others",
            "ledger",
            "subset",
            "cost_benefit",
        },
    )
    source = _source(
        _mapping(
            cfg.get("source") or {},  # none: a job for DataFrames (the verbs' source=frame), or an error when run
            "source",
            {"url", "table", "schema", "csv", "csv_options", "memory_limit", "temp_directory", "parquet"},
        ),
        base_dir,
    )
    qis = _quasi_identifiers(_required(cfg, "quasi_identifiers", "the config"), base_dir)
    sensitive = _column_list(cfg, "sensitive")
    cost_benefit = _cost_benefit(cfg["cost_benefit"]) if cfg.get("cost_benefit") is not None else CostBenefit()
    criteria = criteria_from_config(cfg["criteria"], base_dir, cost_benefit) if cfg.get("criteria") is not None else []
    for criterion in criteria:  # an attribute a criterion protects is sensitive, listed or not
        sensitive += [a for a in criterion.sensitive_attributes() if a not in sensitive]
    insensitive = _column_list(cfg, "insensitive")
    identifying = _identifying(cfg.get("identifying"), base_dir)
    output = _output(cfg["output"], base_dir) if cfg.get("output") is not None else None
    search = _mapping(cfg.get("search") or {}, "search", {"strategy", "base", "assume_monotone"})
    strategy = _choice(search.get("strategy", "auto"), tuple(STRATEGIES), "search.strategy")
    base = _choice(search.get("base", "cube"), BASES, "search.base")
    assume_monotone = search.get("assume_monotone", False)
    if not isinstance(assume_monotone, bool):
        raise ConfigError(f"search.assume_monotone must be true or false, got {assume_monotone!r}")
    suppression = _suppression(cfg["suppression"]) if cfg.get("suppression") is not None else Suppression()
    select = _selection(cfg["select"]) if cfg.get("select") is not None else Selection()
    select = dataclasses.replace(select, cost_benefit=cost_benefit)
    qi_names = {q.column.lower() for q in qis}
    outside = [t for t in select.targets if t not in sensitive and t.lower() not in qi_names]
    if outside:
        raise ConfigError(
            f"select.targets: {outside[0]!r} is neither a sensitive attribute nor a quasi-identifier of the job; "
            "list it under sensitive: or quasi_identifiers:"
        )
    read_by = select.metric == "publisher_payout" or any(isinstance(c, Profitability) for c in criteria)
    if cfg.get("cost_benefit") is not None and not read_by:
        raise ConfigError(
            "cost_benefit is read by the profitability criterion and the publisher_payout metric only; this job "
            "has neither: remove it, or name one of them"
        )
    name = cfg.get("name", default_name)
    population = None
    if cfg.get("population") is not None:
        pop = _mapping(cfg["population"], "population", {"table", "schema"})
        population = (
            _optional_identifier(pop.get("schema"), "population.schema"),
            _identifier(_required(pop, "table", "population"), "population.table"),
        )
    releases = _release_series(cfg["releases"]) if cfg.get("releases") is not None else None
    inference = _inference(cfg.get("inference") or {})
    unit, unit_column = _unit(cfg.get("unit"), identifying, qis, sensitive + insensitive)
    ledger = _ledger(cfg["ledger"], identifying, unit_column, sensitive) if cfg.get("ledger") is not None else None
    others = cfg.get("others")
    if others is not None and others != "drop":
        raise ConfigError(
            f"others must be drop (the columns the job gives no role are left out of every output), got {others!r}; "
            "a column is published only under a role the job names: list it as insensitive to publish it as it is"
        )
    subset = _subset(cfg["subset"]) if cfg.get("subset") is not None else None
    job = Job(
        source=source,
        subset=subset,
        quasi_identifiers=qis,
        criteria=criteria,
        output=output,
        sensitive=sensitive,
        strategy=strategy,
        name=str(name),
        base=base,
        suppression=suppression,
        select=select,
        assume_monotone=assume_monotone,
        insensitive=insensitive,
        identifying=identifying,
        population=population,
        releases=releases,
        inference=inference,
        unit=unit,
        unit_column=unit_column,
        others=others,
        ledger=ledger,
    )
    check_roles(job)
    _check_method(job)
    _check_subset(job)
    return job


def _subset(raw: Any) -> Subset:
    """`subset: {column: FLAG}` (the rows where a BOOLEAN or 0/1 column is true) or `subset: {table: T, schema: S,
    key: K}` (the rows whose column K appears in column K of table T): the research subset, of the source table as
    its population."""
    spec = _mapping(raw, "subset", {"column", "table", "schema", "key"})
    if ("column" in spec) == ("table" in spec) or ("column" in spec and {"key", "schema"} & set(spec)):
        raise ConfigError(
            "subset takes either {column: FLAG} (the rows where a BOOLEAN or 0/1 column is true) or {table: T, key: "
            "K} (the rows whose column K appears in table T's column K), e.g. subset: {column: in_study}"
        )
    if "column" in spec:
        return Subset(column=_identifier(spec["column"], "subset.column"))
    return Subset(
        table=_identifier(spec["table"], "subset.table"),
        schema=_optional_identifier(spec.get("schema"), "subset.schema"),
        key=_identifier(_required(spec, "key", "subset"), "subset.key"),
    )


def _unit(
    raw: Any, identifying: list[Identifier], qis: list[QuasiIdentifier], others: list[str]
) -> tuple[str | None, str | None]:
    """`unit: rows` (every row protected on its own) or `unit: {column: ID}` (`unit: ID` for short): the column
    that names each row's person, so that the criteria count persons. (unit, unit_column); a person's column is
    a direct identifier published as a pseudonym, which the audit counts persons by."""
    if raw is None or raw == "rows":
        return raw, None
    if isinstance(raw, dict):
        raw = _required(_mapping(raw, "unit", {"column"}), "column", "unit")
    if not isinstance(raw, str) or not raw:
        raise ConfigError(
            f"unit must be rows (each row protected on its own) or {{column: ID}} (the column naming each row's "
            f"person, so that the criteria count persons), got {raw!r}"
        )
    column = _identifier(raw, "unit.column")
    role = (
        "a quasi-identifier"
        if column in {qi.column for qi in qis}
        else "sensitive or insensitive"
        if column in others
        else None
    )
    identifier = next((i for i in identifying if i.column == column), None)
    if role is not None or identifier is None:
        raise ConfigError(
            f"unit: column {column!r} is {role or 'not listed under identifying'}; the column naming persons is a "
            f"direct identifier: list it under identifying as {{{column}: {{pseudonym: {{key_env: VARIABLE}}}}}}"
        )
    if identifier.action != "pseudonym":
        raise ConfigError(
            f"unit: column {column!r} is dropped; publish it as a pseudonym (identifying: {{{column}: {{pseudonym: "
            "{key_env: VARIABLE}}}): the audit counts the persons of each published class by it, and the rows "
            "of one person stay linked"
        )
    return None, column


def _ledger(raw: Any, identifying: list[Identifier], unit_column: str | None, sensitive: list[str]) -> Ledger:
    """`ledger: {person: ID, check: inference | m-invariance | false, m: M, suppress: SHARE}`: the identifying
    column (published as a pseudonym) that names a person in every release of the job (the unit column by
    default), how a release is checked against the earlier ones before it commits (`ledger: true`: the defaults,
    persons by the unit), and how many persons the inference check may remove to repair a release."""
    if raw is True:
        raw = {}
    spec = _mapping(raw, "ledger", {"person", "check", "m", "suppress"})
    person = spec.get("person", unit_column)
    if person is None:
        raise ConfigError(
            "ledger.person is missing: name the identifying column, published as a pseudonym, that names each "
            "person in every release (e.g. ledger: {person: patient_id})"
        )
    person = _identifier(person, "ledger.person")
    identifier = next((i for i in identifying if i.column == person), None)
    if identifier is None or identifier.action != "pseudonym":
        how = "not listed under identifying" if identifier is None else "dropped"
        raise ConfigError(
            f"ledger.person: column {person!r} is {how}; the ledger follows persons across releases by a keyed "
            f"pseudonym: list it under identifying as {{{person}: {{pseudonym: {{key_env: VARIABLE}}}}}}"
        )
    check = spec.get("check", "inference")
    if isinstance(check, bool):  # true: the default check; false: none
        check = "inference" if check else None
    ledger = Ledger(person=person, check=check, m=spec.get("m"), suppress=spec.get("suppress", 0.0))  # checked there
    if check is not None and not sensitive:
        raise ConfigError(
            f"ledger.check {check} follows sensitive values across releases, and the job lists no sensitive column: "
            "list one under sensitive, or set ledger: {check: false} to record the releases only"
        )
    return ledger


def _output(raw: Any, base_dir: Path) -> Output:
    settings = {name: method.settings for name, method in METHODS.items()}
    out = _mapping(raw, "output", {"table", "schema", "grant_to", "method", *chain(*settings.values())})
    grant_to = out.get("grant_to") or []
    grant_to = [grant_to] if isinstance(grant_to, str) else grant_to
    if not isinstance(grant_to, list):
        raise ConfigError("output.grant_to must be a role name or a list of role names")
    method = _choice(out.get("method", "generalize"), tuple(METHODS), "output.method")
    for other, keys in settings.items():
        keys = tuple(key for key in keys if key not in settings[method])  # a name both methods take is this one's
        if other != method and any(out.get(key) is not None for key in keys):
            names = [f"output.{key}" for key in keys]
            listed = f"{', '.join(names[:-1])} and {names[-1]}" if len(names) > 1 else names[0]
            raise ConfigError(f"{listed} belong to method: {other}; remove them, or add method: {other}")
    return Output(
        table=_identifier(_required(out, "table", "output"), "output.table"),
        schema=_optional_identifier(out.get("schema"), "output.schema"),
        grant_to=[_identifier(role, "output.grant_to") for role in grant_to],
        method=method,
        settings=METHODS[method].parse(out, base_dir),
    )


def _check_subset(job: Job) -> None:
    """A research subset and what reads it: the criteria that compare classes with the population need one; it is
    published by generalize, anatomy or (without those criteria) Mondrian; with a unit, the subset and the
    population count persons (the journalist attacker's risk too: 1 / the class's persons in the population)."""
    needs = [c for c in job.criteria if c.reads_population]
    subset = job.subset
    if subset is None and job.select.attacker == "journalist":
        raise ConfigError(
            "select.attacker journalist counts each class's rows in the population the published rows were drawn "
            "from: declare them as a research subset of the table, e.g. subset: {column: in_study}; or take the "
            "prosecutor (attacker: prosecutor)"
        )
    if subset is None:
        if needs:
            hint = f"; {needs[0].population_hint}" if needs[0].population_hint else ""
            raise ConfigError(
                f"{needs[0].name} compares each class with the population the published rows were drawn from: "
                "declare them as a research subset of the table, e.g. subset: {column: in_study} (a BOOLEAN or 0/1 "
                f"column) or subset: {{table: study, key: patient_id}}{hint}"
            )
        return
    method = job.output.method if job.output is not None else "generalize"
    if method == "mondrian" and needs:  # Mondrian's parts count the subset's rows alone
        raise ConfigError(
            f"{needs[0].name} compares each class with the population, which Mondrian's partitions of the subset "
            "do not count; publish by generalization (remove the method), or leave the criterion out"
        )
    if method not in ("generalize", "mondrian", "anatomy"):
        raise ConfigError(
            f"subset is published by method: generalize, mondrian or anatomy only (not {method} yet); remove the method"
        )
    if subset.column is not None:
        role = next((role for column, role in job.column_roles() if column == subset.column), None)
        if role in ("quasi_identifiers", "sensitive"):
            raise ConfigError(
                f"subset.column {subset.column!r} is listed under {role}; the column that flags the research subset "
                "has no other role (it is not published, unless listed as insensitive)"
            )


def _check_method(job: Job) -> None:
    """What the job's output method needs of it (see publish.methods)."""
    if job.output is None:
        return
    method = METHODS[job.output.method]
    if job.unit_column and not method.counts_persons:
        raise ConfigError(
            f"output.method {method.name} counts rows, not persons: unit {job.unit_column!r} is not supported by it "
            "yet; publish with method: generalize, or keep one row per person"
        )
    method.check(job)


def _column_list(cfg: dict[str, Any], key: str) -> list[str]:
    names = cfg.get(key) or []
    names = [names] if isinstance(names, str) else names
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise ConfigError(f"{key} must be a list of column names")
    return list(names)


def _identifying(raw: Any, base_dir: Path) -> list[Identifier]:
    """`identifying: [id, ...]` (removed) or `{id: drop, ssn: {pseudonym: {key_env: VAR} | {key_file: F} |
    {key_name: NAME}}}`."""
    if raw is None:
        return []
    if isinstance(raw, (str, list)):
        return [Identifier(column=c) for c in _column_list({"identifying": raw}, "identifying")]
    found = []
    for column, action in _mapping(raw, "identifying", None).items():
        column = _identifier(column, "identifying")
        where = f"identifying.{column}"
        if action in (None, "drop"):
            found.append(Identifier(column=column))
            continue
        if not isinstance(action, dict):
            raise ConfigError(f"{where} must be drop, or {{pseudonym: {{key_env: VARIABLE}}}}; got {action!r}")
        spec = _mapping(
            _required(_mapping(action, where, {"pseudonym"}), "pseudonym", where),
            f"{where}.pseudonym",
            {"key_env", "key_file", "key_name"},
        )
        if len(spec) != 1:
            raise ConfigError(
                f"{where}.pseudonym takes one of key_env: VARIABLE, key_file: FILE or key_name: NAME (a key the "
                "database holds; the secret key is never written in the job)"
            )
        if "key_name" in spec:
            name = check_key_name(spec["key_name"], f"{where}.key_name")
            found.append(Identifier(column=column, action="pseudonym", key_name=name))
        elif "key_env" in spec:
            found.append(
                Identifier(column=column, action="pseudonym", key_env=_identifier(spec["key_env"], f"{where}.key_env"))
            )
        else:
            key_file = _identifier(spec["key_file"], f"{where}.key_file")
            found.append(Identifier(column=column, action="pseudonym", key_file=(base_dir / key_file).resolve()))
    return found


KEY_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def check_key_name(name: Any, where: str) -> str:
    """The name of a key the database holds: a plain name (it is written into the statements that use it)."""
    if not isinstance(name, str) or not KEY_NAME.match(name):
        raise ConfigError(f"{where} must be a plain name (letters, digits, _; at most 63), got {name!r}")
    return name


def _source(src: dict[str, Any], base_dir: Path) -> Source:
    if not src:
        return Source(url="", table="")  # the job has no source of its own (see session.on_db)
    url = normalize_url(str(_required(src, "url", "source")), base_dir)
    csv = src.get("csv")
    csv_path = (base_dir / csv).resolve() if csv else None
    options = _mapping(src.get("csv_options") or {}, "source.csv_options", None)
    memory = src.get("memory_limit")
    temp = src.get("temp_directory")
    parquet = src.get("parquet")
    if parquet and (csv or src.get("schema")):
        raise ConfigError(
            "source.parquet names files read in place as a temporary view: it goes without "
            "source.csv and source.schema; keep one source"
        )
    return Source(
        url=url,
        table=_identifier(_required(src, "table", "source"), "source.table"),
        schema=_optional_identifier(src.get("schema"), "source.schema"),
        csv=csv_path,
        csv_options=options,
        memory_limit=None if memory is None else check_memory_limit(memory, "source.memory_limit"),
        temp_directory=None if temp is None else (base_dir / str(temp)).resolve(),
        parquet=(base_dir / str(parquet)).resolve() if parquet else None,
    )


MEMORY_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(KB|MB|GB|TB|KiB|MiB|GiB|TiB|%)\s*$", re.IGNORECASE)


def check_memory_limit(value: Any, where: str) -> str:
    """A DuckDB memory size such as 2GB or 512MiB, normalized (its text goes into a SET statement)."""
    found = MEMORY_SIZE.match(str(value))
    if not found or float(found.group(1)) <= 0:
        raise ConfigError(
            f"{where} {value!r} is not a memory size; write e.g. 2GB, 512MB, 1.5GiB or 50% (of the machine's memory)"
        )
    return f"{found.group(1)}{found.group(2).upper().replace('I', 'i')}"


def _quasi_identifiers(raw: Any, base_dir: Path) -> list[QuasiIdentifier]:
    if isinstance(raw, list) and raw:  # names only: QIs published as they are (anatomy), no hierarchy
        return [QuasiIdentifier(column=_identifier(column, "quasi_identifiers")) for column in raw]
    if not isinstance(raw, dict) or not raw:
        raise ConfigError("quasi_identifiers must map each QI column to {hierarchy: FILE} or {generate: KIND}")
    qis = []
    for column, spec in raw.items():
        column = _identifier(column, "quasi_identifiers")
        if spec is None or spec == {}:  # `age:` alone, no hierarchy: anatomy publishes it, Mondrian cuts it as a number
            qis.append(QuasiIdentifier(column=column))
            continue
        if isinstance(spec, str):  # shorthand: `age: hierarchies/age.csv`
            spec = {"hierarchy": spec}
        spec = _mapping(spec, f"quasi_identifiers.{column}", None)
        hierarchy, generate = spec.get("hierarchy"), spec.get("generate")
        if (hierarchy is None) == (generate is None):
            raise ConfigError(
                f"quasi_identifiers.{column} needs exactly one of hierarchy: FILE or generate: {'|'.join(GENERATORS)}"
            )
        # YAML reads the bare key of `null: unknown` as a null, not as the word: it can only mean the option
        options = {"null" if k is None else k: v for k, v in spec.items() if k not in ("hierarchy", "generate")}
        if hierarchy is not None:
            if options:
                raise ConfigError(f"quasi_identifiers.{column}: unknown key(s) {sorted(options)} next to hierarchy")
            qis.append(QuasiIdentifier(column=column, hierarchy=(base_dir / str(hierarchy)).resolve()))
        else:
            if generate not in GENERATORS:
                raise ConfigError(
                    f"quasi_identifiers.{column}: unknown generator {generate!r}; choose one of {', '.join(GENERATORS)}"
                )
            if generate == "groups" and isinstance(options.get("groups"), str):  # a mapping file, read now: its
                # levels join the job as if written inline (recorded with each run, errors before any connection)
                options["groups"] = read_groups_file(column, (base_dir / options["groups"]).resolve())
            qis.append(QuasiIdentifier(column=column, generate=generate, options=options))
    return qis


def _yaml_number(value: Any) -> Any:
    """YAML 1.1 reads 1e-6 (no dot) as text: take it as the number it means."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _mapping(value: Any, where: str, allowed: set[str] | None) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a mapping (key: value), got {type(value).__name__}")
    if allowed is not None:
        unknown = sorted(set(map(str, value)) - allowed)
        if unknown:
            raise ConfigError(f"{where}: unknown key {unknown[0]!r}; allowed keys are {', '.join(sorted(allowed))}")
    return value


def _required(cfg: dict[str, Any], key: str, where: str) -> Any:
    if cfg.get(key) is None:
        raise ConfigError(f"{where} is missing the required key {key!r}")
    return cfg[key]


def _identifier(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value or "\x00" in value:
        raise ConfigError(f"{where} must be a non-empty name, got {value!r}")
    return value


def _optional_identifier(value: Any, where: str) -> str | None:
    return None if value is None else _identifier(value, where)


def _suppression(raw: Any) -> Suppression:
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):  # shorthand: `suppression: 0.02`
        return Suppression(raw)
    spec = _mapping(raw, "suppression", {"limit", "mode"})
    return Suppression(_required(spec, "limit", "suppression"), spec.get("mode", "remove"))


def _cost_benefit(raw: Any) -> CostBenefit:
    spec = _mapping(raw, "cost_benefit", {f.name for f in dataclasses.fields(CostBenefit)})
    return CostBenefit(**spec)


def _selection(raw: Any) -> Selection:
    spec = _mapping(raw, "select", {"policy", "metric", "gs_factor", "aggregate", "targets", "attacker"})
    if ("policy" in spec) == ("metric" in spec):
        raise ConfigError("select takes exactly one of policy: NAME or metric: NAME")
    targets = tuple(_column_list({"select.targets": spec.get("targets")}, "select.targets"))
    return Selection(
        spec.get("policy"),
        spec.get("metric"),
        spec.get("gs_factor", 0.5),
        spec.get("aggregate"),
        targets=targets,
        attacker=spec.get("attacker", "prosecutor"),
    )


def _release_series(raw: Any) -> ReleaseSeries:
    spec = _mapping(raw, "releases", {"pseudonym", "series", "bucket_column"})
    pseudonym = _identifier(_required(spec, "pseudonym", "releases"), "releases.pseudonym")
    series = _required(spec, "series", "releases")
    if not isinstance(series, list) or not series:
        raise ConfigError(
            "releases.series must list the releases, e.g. [{name: january, table: jan_qi, "
            "sensitive_table: jan_sensitive}, {name: february, table: feb_generalized}]"
        )
    releases = []
    for index, item in enumerate(series):
        where = f"releases.series[{index}]"
        item = _mapping(item, where, {"name", "table", "schema", "sensitive_table", "counterfeit_table"})
        table = _identifier(_required(item, "table", where), f"{where}.table")
        releases.append(
            Release(
                name=str(item.get("name") or table),
                table=table,
                schema=_optional_identifier(item.get("schema"), f"{where}.schema"),
                sensitive_table=_optional_identifier(item.get("sensitive_table"), f"{where}.sensitive_table"),
                counterfeit_table=_optional_identifier(item.get("counterfeit_table"), f"{where}.counterfeit_table"),
            )
        )
    for release in releases:
        if release.counterfeit_table is not None and release.sensitive_table is None:
            raise ConfigError(
                f"release {release.name!r}: counterfeit_table belongs to a bucketized release; give its sensitive_table"
            )
    names = [r.name for r in releases]
    if len(set(names)) != len(names):
        raise ConfigError(f"releases.series: names must differ, got {names}")
    return ReleaseSeries(
        pseudonym, tuple(releases), _identifier(spec.get("bucket_column", "bucket"), "releases.bucket_column")
    )


def _inference(raw: Any) -> InferenceSettings:
    spec = _mapping(
        raw, "inference", {"max_probability", "min_probability", "tolerance", "max_iterations", "table", "schema"}
    )
    fields = {k: _yaml_number(v) for k, v in spec.items() if k not in ("table", "schema")}
    return InferenceSettings(
        **fields,
        table=_optional_identifier(spec.get("table"), "inference.table"),
        schema=_optional_identifier(spec.get("schema"), "inference.schema"),
    )
