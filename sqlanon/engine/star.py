"""The star schema: the source table plus one dimension table per quasi-identifier.

A dimension table holds the hierarchy with one row per original value:
`v` (the value as text, the join key), `c0..ch` (integer code per level),
`l0..lh` (label per level) and `p0..` (its path code, see PathCodes). Before
any search, the data is checked against the hierarchies in SQL: no NULLs
unless mapped, no value missing.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import sqlalchemy as sa
from sqlalchemy import case, func, select
from sqlalchemy.engine import Connection

from ..backends import ColumnKind, Database
from ..criteria import Criterion
from ..errors import ConfigError, DataError, HierarchyError
from ..model.hierarchies import (
    NULL_VALUE,
    CodeLayout,
    Hierarchy,
    HierarchyFile,
    HierarchyShape,
    generate_hierarchy,
)
from ..model.job import ROLE_NAMES, ROLES, Job, QuasiIdentifier, Sample, check_roles
from ..model.names import KEPT_DIMENSION_PREFIX, dimension_table, kept_dimension_table, sample_table, subset_table
from ..store import Store, runs
from .persons import LCA_PREFIX, Persons, ancestor_areas, counted_persons, hierarchy_key, persons_select
from .randomization import noise_key_table, sampled_select

MISSING_SHOWN = 10
#: the layout of a dimension table (its columns, codes and labels): a table kept across runs serves the runs of its
#: layout only, so this changes with `_create_dimension_table` and `Hierarchy.dimension_rows`
DIMENSION_LAYOUT = 1
#: dimension tables kept across runs at most (KeptDimensions), the oldest kept going first
KEPT_DIMENSIONS = 32
#: from this many source rows on, the search's cube gets planner statistics where the database wants them, and a
#: source never analyzed plans its joins without nested loops (Database.plan_source_joins). The dimension tables get
#: them whatever the rows: without them PostgreSQL took a 1M-row join with the dimensions for 1.2 billion rows (2.2 s
#: instead of 1.4 s), and Adult's cube for 150 million rows, grouped in 256 partitions (71 ms instead of 50 ms;
#: its search 0.14 -> 0.12 s with the eight ANALYZEs). Analyzing Adult's cube as well slowed its waves.
STATISTICS_ROWS = 100_000
#: a dimension of at most LOOKUP_VALUES values is looked up, not joined, in a table of at most LOOKUP_ROWS rows (see
#: StarSchema.coded): per column, a lookup cost DuckDB 0.6-1.5 ms on Adult, a join 1.0-2.0 ms (age's 72 values: 3.0
#: against 1.9 ms)
LOOKUP_VALUES = 48
LOOKUP_ROWS = 100_000
#: an integer column is coded by indexing an array (Database.index_lookup) when its hierarchy's integer leaves span
#: at most this many values (the array binds one entry per value of the span)
INDEX_SPAN = 65_536
#: a sensitive column's values are read with their counts (one grouping, which the checks before the search and the
#: criteria that bind the table's shares read) when it has at most this many; a larger domain is checked in SQL
DOMAIN_VALUES = 10_000


@dataclass(kw_only=True)
class Dimension:
    """A QI's dimension table and what a run reads of its hierarchy: its shape always, the hierarchy itself
    (`hierarchy`, parsed on first use) where the run needs its paths. `kept_as`: the name the table is kept under
    across runs (see `KeptDimensions`); `reused`: the table is a kept one this run did not build (never dropped)."""

    attr: int
    column: str
    shape: HierarchyShape
    origin: str  # where the hierarchy comes from, for messages
    load: Callable[[], Hierarchy] = field(repr=False)
    table: str  # quoted reference
    integer: bool = False  # the source column holds integers (so its text is a canonical integer)
    #: the values the hierarchy holds for the common ancestors of persons whose rows disagree (engine.persons): its
    #: `l0` is then each value's published label at level 0, the persons' table holds the column as text, and the
    #: table's `w` and `a` say what a value stands for in areas (`leaves`)
    ancestors: int = 0
    kept_as: str | None = None
    reused: bool = False

    @staticmethod
    def of(hierarchy: Hierarchy, **fields: Any) -> Dimension:
        return Dimension(shape=hierarchy.shape, origin=hierarchy.origin, load=lambda: hierarchy, **fields)

    @cached_property
    def hierarchy(self) -> Hierarchy:
        return self.load()

    @property
    def height(self) -> int:
        return self.shape.height

    @property
    def layout(self) -> CodeLayout:
        return self.shape.layout

    @property
    def leaves(self) -> int:
        """The hierarchy's own values (not the persons' common ancestors)."""
        return self.shape.leaves - self.ancestors

    def integer_span(self) -> tuple[int, int] | None:
        """The first and last integer among the hierarchy's leaves, where the column's values can index an array
        of their codes: an integer column (NULL not mapped) whose leaves written as integers span at most
        INDEX_SPAN values. A leaf not written as its integer's text (`07`, `7.0`) is never an integer's text."""
        if not self.integer or self.shape.maps_null:
            return None
        numbers = [int(v) for v in self.hierarchy.path_codes.code if _canonical_integer(v)]
        if not numbers or max(numbers) - min(numbers) >= INDEX_SPAN:
            return None
        return min(numbers), max(numbers)

    def key(self, db: Database, alias: str) -> str:
        """The source column as text, the join key into `v` (NULL -> '' where the hierarchy maps NULL)."""
        return hierarchy_key(f"CAST({alias}.{db.q(self.column)} AS VARCHAR)", self.shape.maps_null)


@dataclass(kw_only=True)
class StarSchema:
    db: Database
    source: str  # quoted reference to the source table
    source_columns: list[str]
    rows: int
    dimensions: list[Dimension]
    sensitive: list[str] = field(default_factory=list)  # sensitive columns the criteria read
    #: per sensitive column of at most DOMAIN_VALUES values: the table's count of each value, as text (NULL: None)
    domain_counts: dict[str, dict[str | None, int]] = field(default_factory=dict)
    #: the source columns whose values are equal exactly when their texts are (not floating point)
    exact_text: set[str] = field(default_factory=set)
    work_schema: str = ""  # where the run's dimension tables are (and those kept across runs)
    #: where the job names each row's person (`unit`): its persons, whose table (one row each) is `source`, which
    #: every frequency set counts, while a publication writes the source's rows (`published_rows`)
    persons: Persons | None = None
    #: where the job names a research subset (`subset:`): the source table, its population, whose rows of the subset
    #: are `source` (a scratch table the run made)
    population: str | None = None
    population_rows: int = 0  # its rows, where a criterion reads it (counted as its values are checked)
    #: `source` is a scratch table of the run's (a research subset's or a random sample's rows), dropped with the star
    own_source: bool = False
    #: `population` is a scratch table of the run's (the population's persons, where a unit names them), dropped too
    own_population: bool = False

    @property
    def over_population(self) -> StarSchema:
        """This star over the population (the source table of a job with a research subset)."""
        assert self.population is not None, "a star with a research subset"
        return dataclasses.replace(self, source=self.population, persons=None)

    def population_joins(self, alias: str = "t") -> str:
        """`joins` over the population."""
        return self.over_population.joins(alias)

    @property
    def published_rows(self) -> str:
        """The table whose rows a publication writes: the source's (its persons' table is only counted)."""
        return self.persons.rows if self.persons else self.source

    def sensitive_select(
        self, alias: str, codes: dict[str, dict[str | None, int]] | None = None, params: dict[str, Any] | None = None
    ) -> list[str]:
        """`alias.column AS s<j>` for each sensitive column frequency sets carry; a column of `codes` (see
        `sensitive_codes`) as its value's code instead, looked up in lists bound in `params`."""
        selected = []
        for j, col in enumerate(self.sensitive):
            column = f"{alias}.{self.db.q(col)}"
            if codes is not None and col in codes:
                assert params is not None
                params[f"svalues_{j}"], params[f"scodes_{j}"] = list(codes[col]), list(codes[col].values())
                column = self.db.lookup(f"CAST({column} AS VARCHAR)", f"svalues_{j}", f"scodes_{j}")
            selected.append(f"{column} AS s{j}")
        return selected

    def sensitive_codes(self, read_by_value: set[str]) -> dict[str, dict[str | None, int]]:
        """The sensitive columns that the sets may carry as integer codes, each value's code (1, 2, ...; NULL
        stays NULL): where the database has lookups, a domain of at most LOOKUP_VALUES values read before the
        search, values equal exactly when their texts are, and no criterion that names or orders them
        (`read_by_value`). Codes group and join faster than text: Adult's waves with occupation as codes ~2 ms
        less a search of 28-30 ms (see bench/RESULTS.md, session 27). Unlike the QIs' lookups (LOOKUP_ROWS), a
        large table gains as well: its cube is coded once and grouped with the values by every wave (hospital 1M,
        k=5 and entropy l=2 on the 30 diagnoses: the search 1.36-1.42 -> 0.86-0.95 s)."""
        if not self.db.value_lookups:
            return {}
        return {
            col: {value: code for code, value in enumerate((v for v in counts if v is not None), start=1)}
            for col, counts in self.domain_counts.items()
            if col in self.exact_text and col not in read_by_value | set(self.held) and len(counts) <= LOOKUP_VALUES
        }

    def with_domain(self, conn: Connection, column: str) -> StarSchema:
        """This star with the value counts of `column` (see `domain_counts`) where it could code it and lacks them:
        one grouping of the table by the column, which codes then repay in every grouping that carries it."""
        known = column in self.domain_counts or column in self.held  # a held column's values are its sets' members
        if known or not self.db.value_lookups or column not in self.exact_text:
            return self
        counts = _domain_counts(self.db, conn, self.source, column)
        if counts is None or len(counts) > LOOKUP_VALUES:
            return self
        return dataclasses.replace(self, domain_counts={**self.domain_counts, column: counts})

    def sensitive_columns(self) -> dict[str, str]:
        return {col: f"s{j}" for j, col in enumerate(self.sensitive)}

    @property
    def held(self) -> dict[str, str]:
        """The sensitive columns whose values a person may hold several of, each with the table of its sets'
        members (engine.persons.HeldValues; see FrequencySetView.held)."""
        return {c: h.members for c, h in self.persons.held.items() if c in self.sensitive} if self.persons else {}

    @property
    def size_bound_counts(self) -> dict[str, dict[str | None, int]]:
        """The `domain_counts` that bound a class's size (criteria.least_size_first): not those of held columns,
        whose n persons may hold more than n values."""
        return {c: counts for c, counts in self.domain_counts.items() if c not in self.held}

    @property
    def heights(self) -> list[int]:
        return [d.height for d in self.dimensions]

    def joins(self, alias: str = "t", attrs: set[int] | None = None, rows: bool = False) -> str:
        """FROM clause joining the source with every dimension table (d0, d1, ...), or those of `attrs`. Each join
        keeps every row once (build_star_schema proves it), so leaving one out changes no row. With `rows`, the
        table whose rows are published (`published_rows`) instead of the persons' one."""
        parts = [f"{self.published_rows if rows else self.source} {alias}"]
        parts += [
            f"JOIN {d.table} d{d.attr} ON {d.key(self.db, alias)} = d{d.attr}.v"
            for d in self.dimensions
            if attrs is None or d.attr in attrs
        ]
        return " ".join(parts)

    def coded(self, params: dict[str, Any], alias: str = "t") -> tuple[str, dict[tuple[int, int], str]]:
        """The FROM clause of the source with the dimensions it joins, and the SQL of each (attr, piece) path code
        that is looked up instead (the lists bound in `params`): a small table's small dimensions, where the
        database has lookups. Each join costs its planning and its hash table however few rows the table has,
        and a lookup costs every row more: on DuckDB, Adult's 8-QI search 56 -> 49 ms (seven of eight looked up),
        but the 1M-row hospital search 0.18-0.22 -> 0.29-0.31 s (three of five)."""
        codes: dict[tuple[int, int], str] = {}
        small = self.db.value_lookups and self.rows <= LOOKUP_ROWS
        for d in self.dimensions:
            span = d.integer_span() if self.db.index_lookups else None
            if span is not None:
                codes.update(self._indexed(d, span, params, alias))
                continue
            if not small or d.shape.leaves > LOOKUP_VALUES:
                continue
            paths = d.hierarchy.path_codes
            keys = params[f"lookup_{d.attr}"] = list(paths.code)
            for piece, levels in enumerate(paths.pieces()):
                params[f"lookup_{d.attr}_{piece}"] = [paths.piece_codes(value, [levels])[0] for value in keys]
                codes[(d.attr, piece)] = self.db.lookup(
                    d.key(self.db, alias), f"lookup_{d.attr}", f"lookup_{d.attr}_{piece}"
                )
        return self.joins(alias, {d.attr for d in self.dimensions} - {attr for attr, _ in codes}), codes

    def _indexed(
        self, d: Dimension, span: tuple[int, int], params: dict[str, Any], alias: str
    ) -> dict[tuple[int, int], str]:
        """Each piece of an integer column's path codes, read from an array over its span (no join, no search:
        the value is the index)."""
        paths, (first, last) = d.hierarchy.path_codes, span
        column = f"{alias}.{self.db.q(d.column)}"
        codes = {}
        for piece, levels in enumerate(paths.pieces()):
            name = f"index_{d.attr}_{piece}"
            params[name] = [
                paths.piece_codes(str(v), [levels])[0] if str(v) in paths.code else None for v in range(first, last + 1)
            ]
            codes[(d.attr, piece)] = self.db.index_lookup(column, first, name)
        return codes

    def drop(self, conn: Connection, keep: bool = False) -> None:
        """Drop the dimension tables the run built, or with `keep` (a run that succeeded) keep those that may serve
        later runs (see `KeptDimensions`); a kept table the run reused stays as it is."""
        if self.persons is not None:
            self.persons.drop(self.db, conn)
        if self.own_source:  # the research subset's or the sample's rows (the persons' source, where they count)
            self.db.drop_table(conn, self.persons.source if self.persons is not None else self.source)
        if self.own_population and self.population is not None:
            self.db.drop_table(conn, self.population)
        built = [d for d in self.dimensions if not d.reused]
        kept = [(d.table, d.kept_as, d.shape) for d in built if keep and d.kept_as is not None]
        for d in built:
            if not keep or d.kept_as is None:
                self.db.drop_table(conn, d.table)
        if kept:
            in_use = {d.kept_as for d in self.dimensions if d.kept_as}
            KeptDimensions(self.db, self.work_schema).keep(conn, kept, in_use)

    def record(self, conn: Connection, schema: str, run_id: int) -> None:
        """List the run's attributes (QI order, heights, hierarchy, dimension table) in run_attributes."""
        rows = [(d.attr, d.column, d.height, d.origin, d.table) for d in self.dimensions]
        Store(self.db, schema).insert(self.db.metadata_connection(conn), runs.ATTRIBUTES, run_id, rows)


@dataclass(frozen=True)
class KeptDimension:
    table: str  # quoted reference
    shape: HierarchyShape


class KeptDimensions:
    """Dimension tables kept across runs, where the database keeps them (`Database.keeps_dimensions`: DuckDB, one
    user per file; on PostgreSQL one role would read another's hierarchies): one per hierarchy file, named by the
    digest of its text and DIMENSION_LAYOUT, its shape and when it was kept in the table's comment (the caller
    asks only where `Database.keeps_dimensions`). A run that finds its file's table reads it instead of parsing
    the file and building the table (hospital 1M, 35k birth dates: half of `analyze` of one node); a run that
    succeeds keeps the tables it built (a failing one leaves none); at most KEPT_DIMENSIONS stay, the oldest kept
    going first."""

    def __init__(self, db: Database, schema: str):
        self.db, self.schema = db, schema

    @staticmethod
    def name(file: HierarchyFile) -> str:
        return kept_dimension_table(hashlib.sha256(f"{DIMENSION_LAYOUT}:{file.digest}".encode()).hexdigest()[:32])

    def find(self, conn: Connection, files: dict[str, HierarchyFile]) -> dict[str, KeptDimension]:
        """The kept table of each file that has one, by column."""
        kept = self._read(self.db.kept_tables(conn, self.schema, KEPT_DIMENSION_PREFIX))
        names = {column: self.name(file) for column, file in files.items()}
        return {
            column: KeptDimension(self.db.run_table(self.schema, name), kept[name][0])
            for column, name in names.items()
            if name in kept
        }

    def keep(self, conn: Connection, built: list[tuple[str, str, HierarchyShape]], in_use: set[str]) -> None:
        """Keep each of the run's dimension tables (table, name, shape) as `name`, or drop it where a kept table has
        that name (another QI's with the same hierarchy; one whose comment does not read as kept is replaced); then
        drop the oldest kept tables beyond KEPT_DIMENSIONS (never one of `in_use`). One read of the catalog."""
        listed = self.db.kept_tables(conn, self.schema, KEPT_DIMENSION_PREFIX)
        kept = self._read(listed)
        for table, name, shape in built:
            if name in kept:
                self.db.drop_table(conn, table)
                continue
            if name in listed:
                self.db.drop_table(conn, self.db.run_table(self.schema, name))
            kept[name] = (shape, time.time())
            note = json.dumps({"shape": shape.to_dict(), "kept": kept[name][1]})
            self.db.keep_table(conn, table, self.schema, name, base64.b64encode(note.encode()).decode())
        oldest_first = sorted(kept, key=lambda name: kept[name][1])
        for old in oldest_first[: max(len(kept) - KEPT_DIMENSIONS, 0)]:
            if old not in in_use:
                self.db.drop_table(conn, self.db.run_table(self.schema, old))

    @staticmethod
    def _read(listed: dict[str, str | None]) -> dict[str, tuple[HierarchyShape, float]]:
        """The kept tables among `listed` (name -> comment), each with its shape and when it was kept (a comment that
        does not read as one: not kept)."""
        found = {}
        for name, comment in listed.items():
            try:
                note = json.loads(base64.b64decode(comment or "", validate=True))
                found[name] = (HierarchyShape.from_dict(note["shape"]), float(note["kept"]))
            except (ValueError, KeyError, TypeError):
                continue
        return found


def _canonical_integer(text: str) -> bool:
    """Whether `text` is how a database writes an integer (`-7`, `42`; not `07`, `+7` or ` 7`)."""
    try:
        return str(int(text)) == text
    except ValueError:
        return False


def read_hierarchy_files(job: Job) -> dict[str, Hierarchy]:
    """Hierarchies that come from files, read before touching the database (errors come early)."""
    return {column: file.load() for column, file in hierarchy_files(job).items()}


def hierarchy_files(job: Job) -> dict[str, HierarchyFile]:
    """The QIs' hierarchy files as read, not parsed yet (a file that cannot be read fails here)."""
    return {qi.column: HierarchyFile.read(qi.column, qi.hierarchy) for qi in job.quasi_identifiers if qi.hierarchy}


def check_columns(db: Database, conn: Connection, job: Job) -> dict[str, str]:
    """The source's columns and their types, after checking that each has exactly one role in the job.

    Names are compared as the database resolves them (DuckDB ignores case), so
    `Age` and `age` are one column, listed twice. A column without a role is
    refused, or, with `others: drop`, left out of the columns returned: every
    output is made of those.
    """
    src = job.source
    columns = db.column_types(conn, src.schema, src.table)
    check_roles(job, db.name_key)
    present = {db.name_key(c) for c in columns}
    for name, role in job.column_roles():
        db.check_name(name, f"{role} column")
        if db.name_key(name) not in present:
            raise DataError(
                f"{ROLE_NAMES[role]} column {name!r} is not in table {src.table!r} "
                f"(its columns: {', '.join(columns)}); fix the name in the config"
            )
    classified = {db.name_key(name) for name, _ in job.column_roles()}
    flag = subset_flag_column(db, job, columns) if job.subset is not None else None
    if flag is not None and db.name_key(flag) not in classified:  # the subset's flag: read, never published
        columns = {c: kind for c, kind in columns.items() if db.name_key(c) != db.name_key(flag)}
    unclassified = [c for c in columns if db.name_key(c) not in classified]
    if unclassified and job.others == "drop":  # what the run reads from here on: the columns with a role
        warnings.warn(
            f"others: drop leaves {len(unclassified)} column(s) of table {src.table!r} out of every output: "
            f"{', '.join(unclassified)}",
            UserWarning,
            stacklevel=2,
        )
        return {c: kind for c, kind in columns.items() if db.name_key(c) in classified}
    if unclassified:
        choices = "; ".join(f"{role} ({what})" for role, what in ROLES.items())
        raise ConfigError(
            f"table {src.table!r} has {len(unclassified)} column(s) the job does not classify: "
            f"{', '.join(unclassified)}; nothing is published without a role: list each under one of "
            f"{choices}, or leave them all out with others: drop"
        )
    return columns


def check_one_row_per_person(db: Database, conn: Connection, job: Job) -> None:
    """Refuse a table where a direct identifier repeats a value, unless the job protects rows (`unit: rows`).

    Every criterion counts rows: if a person has several, a class of k rows may be one person, its k protects
    no one, and a sensitive value repeated by one person looks diverse. A direct identifier (dropped or
    pseudonymized) that repeats says the table has such persons. One statement, a grouping per identifier
    (NULLs name no one and are not counted).
    """
    if job.unit == "rows" or job.unit_column or not job.identifying:
        return
    table = db.ref_table(db.q(job.source.schema, job.source.table), [i.column for i in job.identifying])

    def repeats(k: int, column: sa.ColumnElement[Any]) -> Any:  # (k, persons, their rows, most for one)
        n = (
            sa.select(sa.func.count().label("n"))
            .where(column.is_not(None))
            .group_by(column)
            .having(sa.func.count() > 1)
            .subquery(f"r{k}")
        ).c.n
        return sa.select(sa.literal_column(str(k)).label("k"), sa.func.count(), sa.func.sum(n), sa.func.max(n))

    branches = [repeats(k, table.c[i.column]) for k, i in enumerate(job.identifying)]
    query = db.as_text(conn, sa.union_all(*branches).order_by(sa.literal_column("k")))  # names with % or :
    for k, persons, rows, most in db.execute(conn, query).all():
        if persons:
            column = job.identifying[k].column
            raise DataError(
                f"identifying column {column!r} repeats: {persons} person(s) have several rows ({rows} "
                f"rows, up to {most} for one), so a class of k rows may be fewer than k persons and the "
                f"criteria would protect rows, not persons: name the column that says whose each row is with "
                f"unit: {{column: {column}}} (the criteria then count persons), keep one row per person, or state "
                "that rows are what the job protects with unit: rows"
            )


def kinds_by_key(db: Database, columns: dict[str, str]) -> dict[str, ColumnKind]:
    """What each of `columns` holds (their types as `check_columns` returns them), by `db.name_key` of the
    column."""
    return {db.name_key(c): db.column_kind(kind) for c, kind in columns.items()}


def build_star_schema(
    db: Database,
    conn: Connection,
    job: Job,
    *,
    files: dict[str, HierarchyFile],
    schema: str,
    run_id: int,
    columns: dict[str, str],
    extra_criteria: Sequence[Criterion] = (),
    kept: dict[str, KeptDimension] | None = None,
) -> StarSchema:
    """Create the dimension tables for a run and validate the data against them.

    `columns`: the source's columns and types, as `check_columns` returned them. Frequency sets carry the
    sensitive columns that the job's criteria (and any extra criteria evaluated in the same run) read. `kept`:
    the kept dimension tables of the job's files (`KeptDimensions.find`), read instead of built.
    """
    src = job.source
    kinds = kinds_by_key(db, columns)
    source = table = db.q(src.schema, src.table)
    criteria = list(job.criteria) + list(extra_criteria)
    sensitive = needed_sensitive(criteria)
    persons = None
    rows_of, population = _anonymized_rows(db, conn, job, table, list(columns), criteria, run_id)
    source = rows_of
    own_source, own_population = rows_of != table, population not in (None, table)

    def drop_own() -> None:  # after an error: the run's scratch tables of the rows and of the population
        if own_source:
            db.drop_table(conn, rows_of)
        if own_population and population is not None:
            db.drop_table(conn, population)

    if job.unit_column:

        def hierarchy_of(qi: QuasiIdentifier) -> Hierarchy:  # a QI's hierarchy, where a person's rows disagree on it
            file = files.get(qi.column)
            return file.load() if file is not None else generated_hierarchy(db, conn, table, qi)

        try:  # the persons of the rows anonymized (a research subset's: the study's persons)
            persons = counted_persons(db, conn, job, rows_of, run_id, sensitive, hierarchy_of, several_values=True)
        except Exception:
            drop_own()
            raise
        source = persons.table
    try:  # the persons' (or subset's or sample's) table goes with an error, as the dimension tables do below
        rows = db.count_rows(conn, source)
        if rows == 0:
            where = f"the research subset ({job.subset.describe()}) of " if job.subset else ""
            raise DataError(f"{where}table {src.table!r} is empty; there is nothing to anonymize")
        # below, the search's badly planned joins still take a moment; the verbs that join a whole source with its
        # dimensions at any size (publication, inference) plan them with hash joins themselves (Database.hash_joins)
        if rows >= STATISTICS_ROWS and not job.unit_column and not own_source:  # scratch tables are analyzed as made
            db.plan_source_joins(conn, src.schema, src.table)
        for criterion in criteria:
            criterion.fit_table(rows)
            criterion.check_table_size(rows)
        held = {c: h.holdings for c, h in persons.held.items()} if persons is not None else {}
        counts = _check_sensitive_domains(db, conn, criteria, source, sensitive, kinds, held)
    except Exception:
        if persons is not None:
            persons.drop(db, conn)
        drop_own()
        raise
    star = StarSchema(
        db=db,
        source=source,
        source_columns=list(columns),
        rows=rows,
        dimensions=[],
        sensitive=sensitive,
        domain_counts=counts,
        exact_text={c for c in columns if kinds[db.name_key(c)] is not ColumnKind.FLOAT},
        work_schema=schema,
        persons=persons,
        population=population,
        own_source=own_source,
        own_population=own_population,
    )
    try:
        for attr, qi in enumerate(job.quasi_identifiers):
            table = db.run_table(schema, dimension_table(run_id, attr))
            with_persons = persons.hierarchies.get(qi.column) if persons else None
            if with_persons is not None:  # the persons' common ancestors: a run's own table, never kept
                ancestors = sum(v.startswith(LCA_PREFIX) for v in with_persons.values)
                dim = Dimension.of(with_persons, attr=attr, column=qi.column, table=table, ancestors=ancestors)
            else:
                dim = _dimension(db, conn, qi, attr, table, files.get(qi.column), (kept or {}).get(qi.column), source)
                dim.integer = kinds[db.name_key(qi.column)].integer
            if job.suppression.mode == "mask" and job.suppression.limit:
                dim.hierarchy.check_masking()
            if not dim.reused:
                _create_dimension_table(db, conn, dim)
            star.dimensions.append(dim)
        _check_one_row_per_tuple(db, conn, star)
        if any(c.reads_population for c in criteria):
            star.population_rows = _population_rows(db, conn, star)
        for dim in star.dimensions:  # every join of the source with its dimensions is planned with them
            if not dim.reused:  # analyzed as it was built
                db.analyze(conn, dim.table)
    except Exception:
        star.drop(conn)
        raise
    return star


def _anonymized_rows(
    db: Database, conn: Connection, job: Job, table: str, columns: list[str], criteria: list[Criterion], run_id: int
) -> tuple[str, str | None]:
    """The rows a run anonymizes (`table`, or a scratch table of its research subset's or random sample's rows) and
    the population a subset is drawn from (`table`; with a unit and criteria that count the population, a scratch
    table of its persons, `_population_persons`; None without a subset)."""
    if job.sample is not None:
        return sample_rows(db, conn, job.sample, table, columns, run_id), None
    if job.subset is None:
        return table, None
    rows = subset_rows(db, conn, job, table, run_id)
    if job.unit_column is None or not any(c.reads_population for c in criteria):
        return rows, table
    try:
        return rows, _population_persons(db, conn, job, table, run_id)
    except Exception:
        db.drop_table(conn, rows)
        raise


def _population_persons(db: Database, conn: Connection, job: Job, table: str, run_id: int) -> str:
    """A scratch table of the persons of `table` (the population a research subset of persons is drawn from), one
    row each: the unit and the QIs, which the criteria that compare a class with the population count. Refused
    (nothing left behind): a person whose rows disagree on a QI there (their class in the population would be
    their values' common ancestor, which sqlanon does not count in a population yet)."""
    assert job.unit_column is not None
    select = persons_select(db, table, job.unit_column, job.qi_names)
    ref = db.create_scratch(conn, f"population_{run_id}", select)
    unit = db.ref_table(ref, [job.unit_column]).c[job.unit_column]
    rows, persons = db.execute(conn, db.as_text(conn, sa.select(sa.func.count(), sa.func.count(unit.distinct())))).one()
    if rows != persons:
        db.drop_table(conn, ref)
        raise DataError(
            f"{int(rows) - int(persons)} person(s) of unit column {job.unit_column!r} have rows with different "
            "quasi-identifier values in the population (the whole table), whose classes the criteria that compare "
            "with it count by person; give each person one value there, or count rows (unit: rows)"
        )
    db.analyze(conn, ref)
    return ref


def subset_rows(db: Database, conn: Connection, job: Job, table: str, run_id: int) -> str:
    """A scratch table of the rows of the job's research subset of `table` (the source), analyzed: the rows the run
    anonymizes and publishes. Session-scoped, as the persons' table is: it holds the rows themselves."""
    ref = db.create_scratch(conn, subset_table(run_id), db.as_text(conn, subset_select(db, conn, job, table)))
    db.analyze(conn, ref)
    return ref


def sample_rows(db: Database, conn: Connection, sample: Sample, table: str, columns: list[str], run_id: int) -> str:
    """A scratch table of a random sample of the rows of `table` (the source), analyzed: the rows the run
    anonymizes and publishes, each drawn with the sample's probability from its key (engine.randomization)."""
    with noise_key_table(db, conn, sample.key) as keys:
        select = sampled_select(db, table, keys, columns, sample.probability)
        ref = db.create_scratch(conn, sample_table(run_id), db.as_text(conn, select))
    db.analyze(conn, ref)
    return ref


def subset_select(db: Database, conn: Connection, job: Job, table: str) -> sa.Select[Any]:
    """SELECT the rows of the job's research subset of `table` (the source), after checking what names them."""
    subset, src = job.subset, job.source
    assert subset is not None, "a job with a research subset"
    types = db.column_types(conn, src.schema, src.table)
    rows = db.ref_table(table, list(types)).alias("t")
    by_key = {db.name_key(c): c for c in types}
    column = subset_flag_column(db, job, types)
    if column is not None:
        flag = _subset_flag(db, conn, rows, column, types[column], src.table)
        where: sa.ColumnElement[bool] = flag == 1
    else:
        assert subset.table is not None and subset.key is not None
        found = db.column_types(conn, subset.schema, subset.table, "check subset.table (and its schema)")
        key = {db.name_key(c): c for c in found}.get(db.name_key(subset.key))
        column = by_key.get(db.name_key(subset.key))
        if key is None or column is None:
            where_missing = f"table {subset.table!r}" if key is None else f"table {src.table!r}"
            raise DataError(f"subset.key {subset.key!r} is not a column of {where_missing}; both tables need it")
        keys = db.ref_table(db.q(subset.schema, subset.table), [key]).alias("s")
        where = sa.exists(sa.select(sa.literal(1)).select_from(keys).where(keys.c[key] == rows.c[column]))
    return sa.select(*rows.c).select_from(rows).where(where)


def subset_flag_column(db: Database, job: Job, columns: Iterable[str]) -> str | None:
    """The source's column (as the database spells it) that flags the job's research subset, None for a subset
    given by a table of keys; a flag the source lacks is refused."""
    assert job.subset is not None, "a job with a research subset"
    name = job.subset.column
    if name is None:
        return None
    column = {db.name_key(c): c for c in columns}.get(db.name_key(name))
    if column is None:
        raise DataError(f"subset.column {name!r} is not in table {job.source.table!r}; fix the name")
    return column


def _subset_flag(
    db: Database, conn: Connection, rows: sa.FromClause, column: str, type_name: str, table: str
) -> sa.ColumnElement[Any]:
    """The subset's flag column as an integer (1: in the subset), after checking it is a BOOLEAN or holds 0 and 1
    only (NULL: not in the subset)."""
    flag = sa.cast(rows.c[column], sa.Integer)
    boolean = type_name.lower().startswith("bool")
    if not boolean and not db.column_kind(type_name).integer:
        raise DataError(
            f"subset.column {column!r} is {type_name}; it must be a BOOLEAN or an integer column of 0 and 1 "
            "(1: the row is in the research subset)"
        )
    if not boolean:
        others = db.execute(conn, sa.select(sa.func.count()).select_from(rows).where(flag.not_in([0, 1]))).scalar_one()
        if others:
            raise DataError(
                f"subset.column {column!r} of table {table!r} holds {others} value(s) other than 0 and 1; flag the "
                "research subset's rows with 1 and the others with 0"
            )
    return flag


def uncovered_rows(db: Database, conn: Connection, star: StarSchema) -> tuple[int, int]:
    """The rows of `star`'s source and how many of them miss a dimension (a QI value its hierarchy lacks): a
    criterion or analysis reading a table the hierarchies were not built from would otherwise miss those rows."""
    total = db.count_rows(conn, star.source)
    return total, total - db.count_rows(conn, star.joins())


def _population_rows(db: Database, conn: Connection, star: StarSchema) -> int:
    """The rows of the population (the table a research subset was drawn from), after checking that every one
    joins the dimensions."""
    total, missing = uncovered_rows(db, conn, star.over_population)
    if missing:
        raise HierarchyError(
            f"{missing} of the {total} rows of the population (the table the research subset is drawn "
            "from) have quasi-identifier values missing from the hierarchies, which must cover the whole table; "
            "add them to the hierarchy files"
        )
    return total


def _dimension(
    db: Database,
    conn: Connection,
    qi: QuasiIdentifier,
    attr: int,
    table: str,
    file: HierarchyFile | None,
    kept: KeptDimension | None,
    source: str,
) -> Dimension:
    """The QI's dimension: its kept table where there is one (the file is then parsed only if the run needs its
    paths), else one to build as `table`, from the file or a generator."""
    if file is not None and kept is not None:
        return Dimension(
            attr=attr,
            column=qi.column,
            shape=kept.shape,
            origin=str(file.path),
            load=file.load,
            table=kept.table,
            kept_as=KeptDimensions.name(file),
            reused=True,
        )
    hierarchy = file.load() if file is not None else generated_hierarchy(db, conn, source, qi)
    kept_as = KeptDimensions.name(file) if file is not None and db.keeps_dimensions else None
    return Dimension.of(hierarchy, attr=attr, column=qi.column, table=table, kept_as=kept_as)


def needed_sensitive(criteria: list[Criterion]) -> list[str]:
    """Sensitive attributes the criteria read, in order of first mention."""
    found: list[str] = []
    for criterion in criteria:
        found += [a for a in criterion.sensitive_attributes() if a not in found]
    return found


def _check_sensitive_domains(
    db: Database,
    conn: Connection,
    criteria: list[Criterion],
    source: str,
    sensitive: list[str],
    kinds: dict[str, ColumnKind],
    held: dict[str, str],
) -> dict[str, dict[str | None, int]]:
    """Criteria that cannot hold for a sensitive attribute's values fail here, before any search. `kinds`: what
    each source column holds, by `db.name_key`; `held`: the columns whose values persons may hold several of, each
    with the table of each person's distinct values (engine.persons.HeldValues), which is read instead. Returns,
    per column with at most DOMAIN_VALUES values, the table's count of each value (as text; NULL: None; for a held
    column, its holders), read by one grouping that also serves the checks (StarSchema.domain_counts)."""
    found = {}
    for column in sensitive:
        read = held.get(column, source)  # a held column: its holdings
        counts = _domain_counts(db, conn, read, column)
        if counts is not None:
            found[column] = counts
            distinct, values = len(counts), sum(n for value, n in counts.items() if value is not None)
        else:
            col = db.ref_table(read, [column]).c[column]
            # NULL is one more value: the criteria group and count it like any other
            with_null = func.count(col.distinct()) + func.max(case((col.is_(None), 1), else_=0))
            distinct, values = conn.execute(select(with_null, func.count(col))).one()
        if values == 0:
            raise DataError(
                f"sensitive column {column!r} holds only NULLs, so no criterion can protect anything "
                "in it; check the column name in the config"
            )
        numeric = kinds[db.name_key(column)].numeric
        for criterion in criteria:
            criterion.check_domain(column, int(distinct), numeric)
            _warn_absent_values(db, conn, read, column, criterion, counts)
            hierarchy = criterion.covered_values().get(column)
            if hierarchy is not None:
                _check_sensitive_hierarchy(db, conn, read, column, hierarchy, counts)
    return found


def _domain_counts(db: Database, conn: Connection, source: str, column: str) -> dict[str | None, int] | None:
    """The table's count of each value of `column` (as text; NULL: None), or None beyond DOMAIN_VALUES values."""
    value = _text_of(db, source, column)
    rows = conn.execute(select(value, func.count()).group_by(value).limit(DOMAIN_VALUES + 1)).all()
    return {value: int(count) for value, count in rows} if len(rows) <= DOMAIN_VALUES else None


def _check_sensitive_hierarchy(
    db: Database, conn: Connection, source: str, column: str, hierarchy: Hierarchy, counts: dict[str | None, int] | None
) -> None:
    """Every value of a sensitive column must be a leaf of its hierarchy (the distinct values are the
    attribute's domain: a small aggregate, or the keys of `counts`)."""
    values = (
        counts.keys()
        if counts is not None
        else conn.execute(select(_text_of(db, source, column)).distinct()).scalars().all()
    )
    missing = sorted(v if v is not None else "NULL" for v in set(values) - hierarchy.values)
    if missing:
        shown = ", ".join(map(repr, missing[:MISSING_SHOWN]))
        raise HierarchyError(
            f"sensitive column {column!r}: {len(missing)} value(s) missing from its hierarchy "
            f"({hierarchy.origin}): {shown}; add a line for each"
        )


def _warn_absent_values(
    db: Database, conn: Connection, source: str, column: str, criterion: Criterion, counts: dict[str | None, int] | None
) -> None:
    """Values a criterion names (don't-care sets) that the column never holds: a likely typo, not an error.
    `counts`: the column's values, where `_domain_counts` read them."""
    named = criterion.named_values().get(column)
    if not named:
        return
    if counts is not None:
        present = set(counts)
    else:
        value = _text_of(db, source, column)
        present = set(conn.execute(select(value).distinct().where(value.in_(named))).scalars())
    absent = [v for v in named if v not in present]
    if absent:
        warnings.warn(
            f"{criterion.name}: value(s) {', '.join(map(repr, absent))} of {column!r} named in the "
            "config do not occur in the data (check the spelling)",
            UserWarning,
            stacklevel=2,
        )


def _text_of(db: Database, source: str, column: str) -> sa.ColumnElement[Any]:
    """Column `column` of the table `source` (a reference) as text, as hierarchies hold values."""
    return sa.cast(db.ref_table(source, [column]).c[column], sa.String)


def generated_hierarchy(db: Database, conn: Connection, source: str, qi: QuasiIdentifier) -> Hierarchy:
    """The hierarchy a generator builds for the distinct values of the QI's column in `source`."""
    value = _text_of(db, source, qi.column)
    values = conn.execute(select(value).distinct().where(value.is_not(None))).scalars().all()
    assert qi.generate is not None, "a QI without a hierarchy file names a generator"
    return generate_hierarchy(qi.column, qi.generate, qi.options, values)


def _create_dimension_table(db: Database, conn: Connection, dim: Dimension) -> None:
    levels = range(dim.height + 1)
    columns = [("v", "VARCHAR")] + [(f"c{i}", "INTEGER") for i in levels] + [(f"l{i}", "VARCHAR") for i in levels]
    columns += [(f"p{i}", "BIGINT") for i in range(len(dim.hierarchy.path_codes.pieces()))]
    rows = dim.hierarchy.dimension_rows()
    if dim.ancestors:  # l0 is what level 0 publishes: an ancestor's key its label (l1), a NULL NULL
        columns += [("w", "BIGINT"), ("a", "BIGINT")]
        area = ancestor_areas(dim.hierarchy)
        rows = [(*_published_at_level_0(row, dim.height + 2), *area(row[0])) for row in rows]
    db.drop_table(conn, dim.table)
    db.create_table_from_rows(conn, dim.table, columns, rows)


def _published_at_level_0(row: tuple[Any, ...], first: int) -> tuple[Any, ...]:
    """A dimension row (value, codes, labels from index `first`, path code) with its level-0 label as published:
    a common ancestor's key (engine.persons) as the ancestor's label, the NULL line as NULL."""
    value = row[0]
    label = row[first + 1] if value.startswith(LCA_PREFIX) else None if value == NULL_VALUE else value
    return (*row[:first], label, *row[first + 1 :])


def _check_one_row_per_tuple(db: Database, conn: Connection, star: StarSchema) -> None:
    """Prove that joining the source with the dimensions keeps every tuple exactly once.

    At most once: the join key `v` is unique in each dimension table (checked
    there, small tables). At least once: every row's key is in it (no NULL
    unless mapped, no value missing). Together the join keeps the table's row
    count, so frequency sets count the table's own tuples. Each check covers
    every QI in one statement (on Spark each statement is a job over the whole
    table): the duplicated keys of every dimension, the NULLs and empty strings
    of every QI in one pass, then each QI's distinct keys looked up in its own
    dimension (a UNION ALL of one grouping per QI).
    """
    dims = star.dimensions
    built = [d for d in dims if not d.reused]  # a kept table was checked when its run built it
    twice = _first_values_per_dimension(db, conn, [_repeated_values(db.ref_table(d.table, ["v"]).c.v) for d in built])
    for dim, values in zip(built, twice):
        if values:
            raise HierarchyError(
                f"column {dim.column!r}: value(s) {', '.join(repr(v) for v, _ in values)} appear "
                f"more than once in its hierarchy ({dim.origin}); each original value needs "
                "exactly one line"
            )
    table = db.ref_table(star.source, [dim.column for dim in dims])
    figures = []
    for dim in dims:  # per QI: its NULLs, its empty strings
        column = table.c[dim.column]
        figures += [
            sa.func.count() - sa.func.count(column),
            sa.func.count(sa.case((sa.cast(column, sa.String) == "", 1))),
        ]
    counts = db.execute(conn, db.as_text(conn, sa.select(*figures))).one()
    for dim, nulls, empty in zip(dims, counts[::2], counts[1::2]):
        check_null_mapping(dim.column, dim.shape.maps_null, dim.origin, nulls, empty)
    missing = _first_values_per_dimension(db, conn, [_missing_keys(db, star.source, dim) for dim in dims])
    for dim, values in zip(dims, missing):
        _check_covered(dim, values)


def _repeated_values(value: sa.ColumnElement[Any]) -> Any:
    """SELECT value, found: the values a dimension table holds twice, and how many there are."""
    return (
        sa.select(value.label("value"), sa.func.count().over().label("found"))
        .group_by(value)
        .having(sa.func.count() > 1)
    )


def _first_values_per_dimension(
    db: Database, conn: Connection, queries: list[sa.Select[Any]]
) -> list[list[tuple[str | None, int]]]:
    """The first MISSING_SHOWN rows (value, found) of each query, by value: one statement for every QI (a UNION
    ALL) instead of one per QI, each query still its own grouping."""
    if not queries:
        return []
    branches = []
    for i, query in enumerate(queries):
        rows = query.subquery(f"q{i}")
        ordered = sa.select(sa.literal(i).label("dim"), rows.c.value, rows.c.found).order_by(rows.c.value)
        first = ordered.limit(MISSING_SHOWN).subquery(f"b{i}")
        branches.append(sa.select(first.c.dim, first.c.value, first.c.found))
    union = sa.union_all(*branches).subquery("u")
    by_dimension = sa.select(union.c.dim, union.c.value, union.c.found).order_by(union.c.dim, union.c.value)
    found: list[list[tuple[str | None, int]]] = [[] for _ in queries]
    for dim, value, count in db.execute(conn, db.as_text(conn, by_dimension)):
        found[dim].append((value, count))
    return found


def check_null_mapping(column: str, maps_null: bool, origin: str, nulls: int, empty: int) -> None:
    """A column with `nulls` NULLs and `empty` empty strings can be read through its hierarchy (from `origin`): its
    NULLs mapped by the hierarchy's empty line (`maps_null`), and no empty string beside them (that line maps
    both)."""
    if nulls and not maps_null:
        how = (
            "add `null: LABEL` to its generate options (e.g. null: unknown): NULLs then show LABEL up to the top level"
            if origin.startswith("generated")
            else "map them in its hierarchy file with a line whose value is empty (;level1;...;top)"
        )
        raise DataError(f"column {column!r} has {nulls} NULL value(s); {how}, or remove them from the table")
    if nulls and empty:
        raise DataError(
            f"column {column!r} holds both NULL ({nulls} rows) and empty strings ({empty} rows), and "
            "its hierarchy's empty line maps both, so sqlanon would see one value where the output "
            "shows two: make them one value in the table (e.g. NULL), or give empty strings a "
            "non-empty value"
        )


def _missing_keys(db: Database, source: str, dim: Dimension) -> sa.Select[Any]:
    """The QI's distinct keys with no line in its dimension, and how many there are (one grouping of one column:
    on PostgreSQL 0.44 s for the five hospital QIs at 1M rows, one LEFT JOIN of the rows with all five dimensions
    0.85 s)."""
    rows = db.ref_table(source, []).alias("t")
    keys = sa.select(sa.literal_column(dim.key(db, "t")).label("value")).select_from(rows).distinct().subquery("k")
    lines = db.ref_table(dim.table, ["v"]).alias("d")
    return (
        sa.select(keys.c.value, sa.func.count().over().label("found"))
        .select_from(keys.outerjoin(lines, lines.c.v == keys.c.value))
        .where(lines.c.v.is_(None))
    )


def _check_covered(dim: Dimension, missing: list[tuple[str | None, int]]) -> None:
    """Every distinct key of the QI's column has a line in its hierarchy."""
    if missing:
        shown = ", ".join(repr(v) if v != NULL_VALUE else "NULL" for v, _ in missing)
        more = f" (and {missing[0][1] - len(missing)} more)" if missing[0][1] > len(missing) else ""
        raise HierarchyError(
            f"column {dim.column!r}: {missing[0][1]} value(s) missing from its hierarchy "
            f"({dim.origin}): {shown}{more}; add a line for each"
        )
