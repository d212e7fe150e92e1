"""Which columns of a table identify people, before anyone writes a job (`sqlanon profile TABLE`).

Every column's distinct values, NULLs and the share of rows (or persons, with a `unit` column) it singles out on
its own; then every combination of up to `max_size` of the candidate columns (those that are neither identifiers
nor constants nor unique measurements, the `candidates` with the most values) and the share it singles out, many
groupings per statement (engine.profile); then, from the combination of `max_size` columns that singles out the
most, a greedy search adds up to `greedy` more columns one at a time, each the one of all such columns (not only
the candidates: a two-valued column such as sex among them) that singles out the most with those chosen before, as
long as one adds anything (one statement per step of as many groupings as columns). From those, suggested roles and
a job file to start from:

- identifying: a column that alone singles out most rows (an id, a name, an e-mail), neither a continuous
  number nor a date;
- a unique measurement (a float or decimal that singles out most rows on its own: a cost, a weight): its role is
  the owner's call (sensitive or insensitive), and it is left out of the combinations;
- constant: one value at most, insensitive;
- quasi-identifiers: the columns of the smallest combination that singles out at least half of the rows (or of
  the most singling one found), each with the generator its type suggests;
- the others insensitive, with a reminder that a column whose values must not be inferred is sensitive.

These are suggestions from the data's shape, which cannot tell what an attacker knows: the job file says so.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ..backends import ColumnKind, Database, normalize_url, open_database
from ..engine import profile as profile_sql
from ..errors import ConfigError
from ..model.progress import Progress, silent

if TYPE_CHECKING:
    import pandas as pd
    from sqlalchemy.engine import Connection

IDENTIFYING_SHARE = 0.9  # a column that alone singles out this share of the rows names people
QI_SHARE = 0.5  # the quasi-identifiers suggested: the smallest combination singling out this share
SUPPRESS_VALUES = 20  # a text column of at most this many values is generalized to '*'; more: masked


@dataclass(kw_only=True)
class ColumnProfile:
    name: str
    type: str
    distinct: int
    nulls: int
    singled_out: float  # share of rows (or persons) alone in their value
    role: str  # identifying | measurement | constant | quasi-identifier | insensitive
    generate: dict[str, Any] | None = None  # the generator suggested where the role is quasi-identifier


@dataclass(kw_only=True)
class Combination:
    columns: tuple[str, ...]
    distinct: int
    singled_out: float
    greedy: bool = False  # found by the greedy search beyond max_size (else by trying every combination)


@dataclass(kw_only=True)
class Profile:
    """A table's profile: its columns, the combinations tried, and the job it suggests."""

    table: str
    schema: str | None
    url: str
    rows: int
    persons: int | None  # with a unit column: the distinct persons (the shares count persons)
    unit: str | None
    columns: list[ColumnProfile] = field(default_factory=list)
    combinations: list[Combination] = field(default_factory=list)
    suggested: Combination | None = None  # the combination whose columns are the suggested quasi-identifiers

    @property
    def quasi_identifiers(self) -> list[str]:
        return [c.name for c in self.columns if c.role == "quasi-identifier"]

    def best(self, per_size: int = 3) -> list[Combination]:
        """The `per_size` combinations of each size that single out the most."""
        by_size: dict[int, list[Combination]] = {}
        for c in self.combinations:
            by_size.setdefault(len(c.columns), []).append(c)
        return [c for size in sorted(by_size) for c in sorted(by_size[size], key=lambda c: -c.singled_out)[:per_size]]

    def job(self) -> dict[str, Any]:
        """The job a data owner starts from (`job_from_dict` reads it): identifiers dropped (the unit, if any, as
        a pseudonym), the suggested quasi-identifiers with their generators, the rest insensitive."""
        identifying: dict[str, Any] = {c.name: "drop" for c in self.columns if c.role == "identifying"}
        if self.unit:
            identifying[self.unit] = {"pseudonym": {"key_env": "SQLANON_KEY"}}
        source: dict[str, Any] = {"url": self.url, "table": self.table}
        if self.schema:
            source["schema"] = self.schema
        job: dict[str, Any] = {"name": self.table, "source": source}
        if identifying:
            job["identifying"] = identifying
        if self.unit:
            job["unit"] = {"column": self.unit}
        job["quasi_identifiers"] = {c.name: c.generate for c in self.columns if c.role == "quasi-identifier"}
        rest = [
            c.name for c in self.columns if c.role not in ("identifying", "quasi-identifier") and c.name != self.unit
        ]
        if rest:
            job["insensitive"] = rest
        job["criteria"] = {"k_anonymity": {"k": 5}}
        job["suppression"] = {"limit": 0.02}
        job["output"] = {"table": f"{self.table}_anon"}
        return job

    def job_yaml(self) -> str:
        """`job()` as a YAML file, with what the profile cannot know said at its top."""
        head = (
            f"# suggested by `sqlanon profile` from the shape of {self.table} ({self.rows:,} rows): review every\n"
            "# role. A column whose values must not be inferred (a diagnosis, a salary) belongs under sensitive:\n"
            "# with a criterion on it (e.g. distinct_l_diversity); what an attacker may know decides the\n"
            "# quasi-identifiers.\n"
        )
        return head + str(yaml.safe_dump(self.job(), sort_keys=False))

    def frames(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The columns, and the best combinations of each size, as DataFrames."""
        import pandas as pd

        columns = pd.DataFrame([{k: v for k, v in vars(c).items() if k != "generate"} for c in self.columns])
        best = pd.DataFrame([{**vars(c), "columns": ", ".join(c.columns)} for c in self.best()])
        return columns, best


def profile_table(
    db_url: str,
    table: str,
    schema: str | None = None,
    *,
    unit: str | None = None,
    max_size: int = 3,
    candidates: int = 12,
    greedy: int = 3,
    progress: Progress = silent,
) -> Profile:
    """Profile `table` (nothing is written): see the module docstring."""
    if not 1 <= max_size <= 4:
        raise ConfigError(f"--max-size must be between 1 and 4, got {max_size}")
    if candidates < 1:
        raise ConfigError(f"--candidates must be at least 1, got {candidates}")
    if greedy < 0:
        raise ConfigError(f"--greedy must be 0 or more, got {greedy}")
    db = open_database(normalize_url(db_url, Path.cwd()))
    try:
        with db.connect() as conn:
            types = db.column_types(conn, schema, table, fix="name a table of this database")
            named = next((c for c in types if db.same_name(unit, c)), None)
            if unit is not None and named is None:
                raise ConfigError(f"--unit {unit!r} is not a column of {table!r} (its columns: {', '.join(types)})")
            unit = named
            columns = [c for c in types if c != unit]
            kinds = {c: db.column_kind(types[c]) for c in columns}
            numeric = [c for c in columns if kinds[c] is not ColumnKind.OTHER]
            ref = db.q(schema, table)
            steps = 2 + greedy
            progress("profile: the columns", 0, steps)
            rows, persons, figures = profile_sql.column_figures(db, conn, ref, columns, numeric, unit)
            counted = (persons if unit else rows) or 1
            alone = profile_sql.singled_out(db, conn, ref, [[c] for c in columns], unit)
            found = Profile(table=table, schema=schema, url=db_url, rows=rows, persons=persons, unit=unit)
            for c, (distinct, single) in zip(columns, alone):
                share = single / counted
                found.columns.append(
                    ColumnProfile(
                        name=c,
                        type=types[c],
                        distinct=distinct,
                        nulls=figures[c][0],
                        singled_out=share,
                        role=_role(kinds[c], types[c], distinct, share),
                    )
                )
            progress("profile: combinations of columns", 1, steps)
            every = sorted((c for c in found.columns if c.role == "insensitive"), key=lambda c: -c.distinct)
            pool = [c.name for c in every[:candidates]]
            groupings = [g for size in range(1, max_size + 1) for g in itertools.combinations(pool, size)]
            found.combinations += _tried(db, conn, ref, groupings, unit, counted)
            largest = [c for c in found.combinations if len(c.columns) == max_size]
            if largest:
                start = max(largest, key=lambda c: c.singled_out)
                extend = _Greedy(db, conn, ref, unit, counted, progress)
                found.combinations += extend(start, [c.name for c in every], greedy)
            progress("profile: combinations of columns", steps, steps)
    finally:
        db.dispose()
    _suggest_quasi_identifiers(found, {c: figures[c][1:] for c in columns}, kinds)
    return found


def _tried(
    db: Database, conn: Connection, ref: str, groupings: list[tuple[str, ...]], unit: str | None, counted: int
) -> list[Combination]:
    """The combinations `groupings`, each with what it singles out (engine.profile, many per statement)."""
    figures = profile_sql.singled_out(db, conn, ref, groupings, unit)
    return [Combination(columns=g, distinct=d, singled_out=n / counted) for g, (d, n) in zip(groupings, figures)]


@dataclass
class _Greedy:
    """The greedy search beyond the combinations tried (see the module docstring) over `ref`'s rows, counted by
    `unit` (`counted` of them in all)."""

    db: Database
    conn: Connection
    ref: str
    unit: str | None
    counted: int
    progress: Progress

    def __call__(self, start: Combination, columns: list[str], steps: int) -> list[Combination]:
        """Up to `steps` combinations, each `start`'s (then the previous one's) with one more of `columns`: the one
        that singles out the most with it, as long as one singles out more than it does."""
        found, chosen = [], start
        for step in range(steps):
            rest = [c for c in columns if c not in chosen.columns]
            if not rest or chosen.singled_out >= 1:
                break
            self.progress(f"profile: {len(chosen.columns) + 1} columns, greedily", 2 + step, 2 + steps)
            tried = _tried(self.db, self.conn, self.ref, [(*chosen.columns, c) for c in rest], self.unit, self.counted)
            best = max(tried, key=_singling)
            if best.singled_out <= chosen.singled_out:
                break
            chosen = dataclasses.replace(best, greedy=True)
            found.append(chosen)
        return found


def _singling(combination: Combination) -> tuple[float, int]:
    return combination.singled_out, combination.distinct


def _role(kind: ColumnKind, type_name: str, distinct: int, share: float) -> str:
    """The column's role by its shape alone (quasi-identifiers are chosen later, among the `insensitive`): a date
    is never an identifier (a birth date singles people out, as quasi-identifiers do)."""
    if distinct <= 1:
        return "constant"
    if share >= IDENTIFYING_SHARE and not _is_date(type_name):
        return "measurement" if kind in (ColumnKind.FLOAT, ColumnKind.EXACT) else "identifying"
    return "insensitive"


def _is_date(type_name: str) -> bool:
    return "date" in type_name.lower() or "time" in type_name.lower()


def _suggest_quasi_identifiers(found: Profile, spans: dict[str, tuple[Any, Any]], kinds: dict[str, ColumnKind]) -> None:
    """Mark the columns of the smallest combination singling out QI_SHARE (else the most singling one) as
    quasi-identifiers, each with a generator for its type."""
    if not found.combinations:
        return
    reaching = [c for c in found.combinations if c.singled_out >= QI_SHARE]
    chosen = found.suggested = (
        min(reaching, key=lambda c: (len(c.columns), -c.singled_out))
        if reaching
        else max(found.combinations, key=lambda c: (c.singled_out, -len(c.columns)))
    )
    by_name = {c.name: c for c in found.columns}
    for name in chosen.columns:
        column = by_name[name]
        column.role, column.generate = "quasi-identifier", _generator(column, kinds[name], spans[name])


def _generator(column: ColumnProfile, kind: ColumnKind, span: tuple[Any, Any]) -> dict[str, Any]:
    """A generator for the column's type: numbers in intervals of a round whole width about a twentieth of their span,
    dates in year bands, few texts to '*', the others masked from the right."""
    low, high = span
    if kind is not ColumnKind.OTHER and low is not None and high is not None and high > low:
        step = (float(high) - float(low)) / 20
        magnitude = 10 ** math.floor(math.log10(step))
        width = max(1, int(next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= step)))  # whole numbers
        return {"generate": "intervals", "widths": [width, width * 2, width * 4], "start": 0}
    if _is_date(column.type):
        return {"generate": "date", "bands": [5, 10]}
    return {"generate": "suppress"} if column.distinct <= SUPPRESS_VALUES else {"generate": "mask"}
