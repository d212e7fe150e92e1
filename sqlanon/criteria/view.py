"""What a criterion may read of a frequency set (`FrequencySetView`), and the SQL fragments criteria build with
(`SqlFragment`: SQL with its bound parameters; `count_sum`, `share`: arithmetic that stays BIGINT and DOUBLE)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any


def count_sum(column: str) -> str:
    """SQL: the SUM of a column of counts, kept BIGINT. A SUM of BIGINT is NUMERIC on PostgreSQL (HUGEINT on
    DuckDB), and the criteria's c * LN(c) over NUMERIC took 12 ms where it takes 2 ms over BIGINT (the window of
    a don't-care entropy wave)."""
    return f"CAST(SUM({column}) AS BIGINT)"


def share(part: str, whole: str) -> str:
    """SQL: part / whole in floating point. `part * 1.0 / whole` is NUMERIC on PostgreSQL, and so were class sizes
    summed without `count_sum`: Adult's 8-QI searches with 2% suppression, three alternated runs, took t equal
    8.6-9.2 s and entropy 6.3-7.3 s with NUMERIC arithmetic, 7.9-8.5 s and 5.6-5.8 s without (DuckDB divides its
    DECIMAL as DOUBLE)."""
    return f"CAST({part} AS DOUBLE PRECISION) / {whole}"


def sum_c_ln_c(count: str) -> str:
    """SQL: the sum of c ln c over a column of counts (0 for no rows), the entropy term KL divergence needs."""
    return f"COALESCE(SUM({count} * LN(CAST({count} AS DOUBLE PRECISION))), 0)"


@dataclass(kw_only=True, frozen=True)
class FrequencySetView:
    """What a criterion needs to know about a frequency set (names already quoted).

    `table` is a table, or the name of a CTE whose SELECT is `definition`.
    `reference`, when set, is a FROM item with the same sensitive and count
    columns whose distribution t-closeness compares classes with (by default,
    the set's own: the whole table at that node). `grouped`: the set has one
    row per class and sensitive values (it is a GROUP BY of them), so a single
    sensitive attribute's counts need no grouping again. `table_counts`, when the
    caller read them (only where the database binds lists): per sensitive attribute,
    how many rows of the whole table hold each value, the value as the database
    casts it to text (a criterion may then bind the table's shares as lists).
    `sizes_by_join`: the class columns are integer keys, never NULL, so a class can be
    found by an equi-join (the wave checker's sets), and the database joins the class
    sizes faster than it adds them up in a window (see `sized_counts`). `codes`: per
    sensitive attribute whose column holds integer codes instead of its values (the
    wave checker's, see WaveChecker.codes), each value's code, the value as text; the
    codes tell values apart, and criteria that compare values with others bind them
    through `value_keys` (no criterion that names or orders values reads such a set).

    Where rows are persons' (a job's `unit`) and a person may hold several values of a sensitive attribute, a count
    of a value is the class's persons who hold it (`counts`), while a class's size stays its persons
    (`class_sizes`; the criteria read both through `Criterion.violating_classes`): `held`, per attribute whose
    column holds the number of each person's set of values (engine.persons), the FROM item of the sets' members
    (`held`, `value`);
    or `persons`, a FROM item of each person's distinct class and values (`person`, the class and sensitive
    columns), whose counts count distinct persons (the audit's own way to them).
    """

    table: str
    class_columns: list[str]
    count_column: str
    sensitive_columns: dict[str, str]  # sensitive attribute -> its column in the set
    definition: str | None = None
    reference: str | None = None
    grouped: bool = False
    table_counts: dict[str, dict[str | None, int]] | None = None
    sizes_by_join: bool = False
    codes: dict[str, dict[str | None, int]] | None = None
    held: dict[str, str] = field(default_factory=dict)
    persons: str | None = None
    #: the class columns that name a node, where the set holds several nodes' classes (a wave's `node`): criteria
    #: on a whole release (risk.ReleaseCriterion) take each node's classes apart
    node_columns: tuple[str, ...] = ()
    #: only each node's count of violating classes and their tuples are read (a search's wave), which the choice
    #: among classes of equal size does not change
    counts_only: bool = False
    #: per attribute whose counts are holders, the name of a common table expression of its `counts` that the
    #: statement defines (`with_stored_holders`), and with `persons`, the one of `class_sizes`
    stored: dict[str, str] = field(default_factory=dict)
    stored_sizes: str | None = None
    #: where the set counts a research subset's rows (a job's `subset:`): a FROM item (a name, or a parenthesized
    #: SELECT and its alias) of the class columns and cnt, the class's rows in the population (the table the subset
    #: was drawn from), a row per class of the population; with `population_withheld`, also withheld: the class's
    #: rows of the subset before a release suppressed any (the audit's: a class of the population whose subset rows
    #: were all suppressed is not one of the release's)
    population: str | None = None
    population_withheld: bool = False
    #: with `persons`, per sensitive attribute, the column of `persons` holding the set of values of it each person
    #: holds, as text (multi-attribute diversity's subclasses: `with_classes`)
    person_sets: dict[str, str] = field(default_factory=dict)

    @property
    def one_row_per_class(self) -> bool:
        return not self.sensitive_columns and self.persons is None

    def counts_holders(self, attribute: str) -> bool:
        """A count of a value of `attribute` is its holders, which may add up to more than the class's size."""
        return attribute in self.held or self.persons is not None

    @property
    def classes(self) -> str:
        return ", ".join(self.class_columns)

    def class_sizes(self) -> str:
        """Per class: n (its size)."""
        if self.persons is not None and self.stored_sizes is None:
            return self._distinct_persons(self.classes, self.classes, "n")
        if self.one_row_per_class or self.stored_sizes is not None:  # one row per class
            table, count = (self.table, self.count_column) if self.stored_sizes is None else (self.stored_sizes, "n")
            return f"SELECT {self.classes}, {count} AS n FROM {table}"
        return f"SELECT {self.classes}, {count_sum(self.count_column)} AS n FROM {self.table} GROUP BY {self.classes}"

    def with_stored_holders(self) -> tuple[FrequencySetView, list[tuple[str, str]]]:
        """This view reading each held attribute's counts (with `persons`, every attribute's, and the class sizes)
        from a common table expression, and those expressions (name, SELECT), which the caller's statement defines:
        a criterion's statistic and its bound on the holders of one value (Criterion.violating_classes) then read
        the holders once (PostgreSQL's wave over 1M patients' sets of diagnoses joined them with their members
        twice; the audit of their publication counted its persons eight times, 21 s)."""
        held = list(self.sensitive_columns) if self.persons is not None else list(self.held)
        ctes = [(f"holders_{i}", self.counts(a)) for i, a in enumerate(held)]
        stored = dataclasses.replace(self, stored={a: name for a, (name, _) in zip(held, ctes)})
        if self.persons is not None:
            ctes.append(("person_sizes", self.class_sizes()))
            stored = dataclasses.replace(stored, stored_sizes="person_sizes")
        return stored, ctes

    def counts(self, attribute: str) -> str:
        """Per class and sensitive value s of `attribute`: c (its count)."""
        s, cnt, table = self.sensitive_columns[attribute], self.count_column, self.table
        if attribute in self.stored:  # one row per class and value, as below
            s, cnt, table = "s", "c", self.stored[attribute]
        elif self.persons is not None:
            return self._distinct_persons(f"{self.classes}, {s} AS s", f"{self.classes}, {s}", "c")
        elif attribute in self.held:  # each set of values, counted by its persons, adds them to each of its values
            classes = ", ".join(f"t.{c}" for c in self.class_columns)
            return (
                f"SELECT {classes}, m.value AS s, {count_sum('t.' + cnt)} AS c FROM {self.table} t "
                f"JOIN {self.held[attribute]} m ON t.{s} = m.held GROUP BY {classes}, m.value"
            )
        if attribute in self.stored or (self.grouped and len(self.sensitive_columns) == 1):  # one row per class, value
            return f"SELECT {self.classes}, {s} AS s, {cnt} AS c FROM {table}"
        return f"SELECT {self.classes}, {s} AS s, {count_sum(cnt)} AS c FROM {self.table} GROUP BY {self.classes}, {s}"

    def _distinct_persons(self, selected: str, grouped: str, name: str) -> str:
        """SELECT `selected`, and as `name` the distinct persons of each group of `grouped` (`persons`): a DISTINCT,
        then a count, which PostgreSQL hashes, where its COUNT(DISTINCT) sorts each group (the audit of 1M patients
        holding several diagnoses took 37 s)."""
        return (
            f"SELECT {selected}, COUNT(*) AS {name} FROM (SELECT DISTINCT person, {grouped} FROM {self.persons}) AS d "
            f"GROUP BY {grouped}"
        )

    def value_counts(self, attribute: str) -> str:
        """Per class and sensitive value s of `attribute`: c (its count), n (class size), r (rank by count).

        Ranks are by count descending, ties by value, so results are deterministic. Each window is a pass
        (and, on small sets, costs more than the data): read `counts` where a GROUP BY of it will do.
        """
        return (
            f"SELECT {self.classes}, s, c, {self._size_window()}, "
            f"ROW_NUMBER() OVER (PARTITION BY {self.classes} ORDER BY c DESC, s) AS r FROM "
            f"({self.counts(attribute)}) AS value_counts"
        )

    def _size_window(self) -> str:
        """n, the class size, added up by a window over `counts`."""
        return f"CAST(SUM(c) OVER (PARTITION BY {self.classes}) AS BIGINT) AS n"

    def sized_counts(self, attribute: str) -> str:
        """Per class and sensitive value s of `attribute`: c (its count) and n (class size).

        By a join with the class sizes where `sizes_by_join`: DuckDB's window operator costs more than a grouping
        and a join on a wave's small sets (Adult's t-closeness waves 1 ms less each). A join on NULL-able class
        columns would lose their classes, so other sets take the window, and so does PostgreSQL, whose join reads
        the wave twice (so stores it first) and hashes it twice: Adult's 8-QI t-closeness searches with 2%
        suppression, three alternated runs, equal 8.5-9.2 -> 7.9-8.3 s, KL 8.6-8.9 -> 8.2-8.6 s, hierarchical
        13.1-13.4 -> 12.4-13.5 s; hospital 1M rows, t equal 0.3, unchanged (10.1-10.3 against 10.0-10.5 s)."""
        if not self.sizes_by_join or self.counts_holders(attribute):  # n: the holders, as the window adds them
            return f"SELECT {self.classes}, s, c, {self._size_window()} FROM ({self.counts(attribute)}) AS value_counts"
        on = " AND ".join(f"z.{c} = v.{c}" for c in self.class_columns)
        return (
            f"SELECT {', '.join(f'v.{c}' for c in self.class_columns)}, v.s, v.c, z.n FROM "
            f"({self.counts(attribute)}) v JOIN ({self.class_sizes()}) z ON {on}"
        )

    def with_classes(self, extra: list[str], attribute: str) -> FrequencySetView:
        """The same set with the other sensitive columns `extra` as class columns and only `attribute` sensitive
        (multi-attribute diversity). Its sizes not by a join: the extra class columns are sensitive values, which
        may be NULL. Where persons may hold several values, a person's value of another attribute is the set of
        values they hold (a set's number in `held`'s sets; with `persons`, its text, their `person_sets` column),
        and the counts of `attribute`'s values stay its holders."""
        others = {c for a, c in self.sensitive_columns.items() if a != attribute}
        if self.persons is not None:  # every figure reads `persons`: its subclasses are of sets
            attribute_of = {column: a for a, column in self.sensitive_columns.items()}
            extra = [self.person_sets[attribute_of[column]] for column in extra]
        return FrequencySetView(
            table=self.table,
            class_columns=self.class_columns + extra,
            node_columns=self.node_columns,
            counts_only=self.counts_only,
            count_column=self.count_column,
            sensitive_columns={attribute: self.sensitive_columns[attribute]},
            reference=self.reference,
            grouped=self.grouped and others <= set(extra),
            table_counts=self.table_counts,
            codes=self.codes,
            held={a: members for a, members in self.held.items() if a == attribute},
            persons=self.persons,
            person_sets=self.person_sets,
        )

    def value_keys(self, attribute: str, values: list[str | None]) -> tuple[str, list[Any], str]:
        """How `values` of `attribute` (as text) meet a set's rows `v`: the SQL type to bind them as, the list to
        bind (their codes where the column holds codes, 0 for a value the table does not hold) and the expression
        of `v.s` that equals them."""
        codes = (self.codes or {}).get(attribute)
        if codes is None:
            return "VARCHAR", values, "CAST(v.s AS VARCHAR)"
        return "BIGINT", [None if value is None else codes.get(value, 0) for value in values], "v.s"

    def against_table(self, attribute: str, aggregates: str, prefix: str) -> SqlFragment:
        """SELECT the class columns, n (the class size) and `aggregates` for every class: aggregates over the values
        it holds, each with v.c (its count), v.n (the class size) and q.q (its share of the table). The table's
        shares bound as lists (parameters named `prefix`...) where the caller read the table's counts (a wave over
        Adult's cube: 1 ms less than grouping the cube), else from the distribution, in SQL."""
        counts, known = self.sized_counts(attribute), (self.table_counts or {}).get(attribute)
        if known is None:
            table, params, match = self.distribution(attribute), dict[str, Any](), "v.s IS NOT DISTINCT FROM q.s"
        else:
            sql_type, keys, value = self.value_keys(attribute, list(known))
            total = sum(known.values()) or 1
            shares = [count / total for count in known.values()]
            table, params = unnested({"s": (sql_type, keys), "q": ("DOUBLE PRECISION", shares)}, prefix)
            # without a NULL value, an equality: PostgreSQL joins IS NOT DISTINCT FROM by a nested loop
            match = f"{value} {'IS NOT DISTINCT FROM' if None in known else '='} q.s"
        cls_v = ", ".join(f"v.{c}" for c in self.class_columns)
        return SqlFragment(
            f"SELECT {cls_v}, MAX(v.n) AS n, {aggregates} FROM ({counts}) v JOIN ({table}) q ON {match} "
            f"GROUP BY {cls_v}",
            params,
        )

    def distribution(self, attribute: str) -> str:
        """Per sensitive value s of `attribute`: q, its share of the whole table (or of the reference)."""
        s, cnt = self.sensitive_columns[attribute], self.count_column
        source = self.reference or self.table
        if attribute in self.held:  # each value's holders, over every holding
            return (
                f"SELECT m.value AS s, {share(f'SUM(t.{cnt})', f'SUM(SUM(t.{cnt})) OVER ()')} AS q "
                f"FROM {source} t JOIN {self.held[attribute]} m ON t.{s} = m.held GROUP BY m.value"
            )
        return (
            f"SELECT {s} AS s, {share(f'SUM({cnt})', f'(SELECT SUM({cnt}) FROM {source})')} AS q "
            f"FROM {source} GROUP BY {s}"
        )


@dataclass(frozen=True)
class SqlFragment:
    sql: str
    params: dict[str, Any]

    def bound(self, suffix: str, params: dict[str, Any]) -> str:
        """The SQL with its parameters renamed with `suffix` (so that fragments sharing parameter names share a
        statement) and added to `params`."""
        params.update((f"{name}_{suffix}", value) for name, value in self.params.items())
        if not self.params:
            return self.sql
        # one pass over the SQL, whatever the number of parameters (hierarchical t-closeness binds dozens)
        return re.sub(r":(\w+)\b", lambda m: f":{m[1]}_{suffix}" if m[1] in self.params else m[0], self.sql)


def unnested(columns: dict[str, tuple[str, list[Any]]], prefix: str = "") -> tuple[str, dict[str, Any]]:
    """A SELECT of rows from lists bound as parameters (column name -> SQL type and values; the parameters are
    named prefix + column), and the parameters. For databases that bind a list as one parameter."""
    select = ", ".join(
        f"UNNEST(CAST(:{prefix}{name} AS {sql_type}[])) AS {name}" for name, (sql_type, _) in columns.items()
    )
    return f"SELECT {select}", {f"{prefix}{name}": values for name, (_, values) in columns.items()}
