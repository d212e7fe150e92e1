"""Each database names its column types its own way; sqlanon asks each what a type holds (one table per backend)."""

from __future__ import annotations

import pytest

from sqlanon.backends import ColumnKind, DuckDB, PostgreSQL, Spark


@pytest.mark.parametrize(
    ("database", "type_name", "kind"),
    [
        (DuckDB, "INTEGER", ColumnKind.SMALL_INTEGER),
        (DuckDB, "UINTEGER", ColumnKind.INTEGER),
        (DuckDB, "DOUBLE", ColumnKind.FLOAT),
        (DuckDB, "DECIMAL(18,3)", ColumnKind.EXACT),
        (DuckDB, "VARCHAR", ColumnKind.OTHER),
        (PostgreSQL, "integer", ColumnKind.SMALL_INTEGER),
        (PostgreSQL, "bigint", ColumnKind.INTEGER),
        (PostgreSQL, "double precision", ColumnKind.FLOAT),
        (PostgreSQL, "numeric", ColumnKind.EXACT),
        (PostgreSQL, "text", ColumnKind.OTHER),
        (Spark, "int", ColumnKind.SMALL_INTEGER),
        (Spark, "bigint", ColumnKind.INTEGER),
        (Spark, "float", ColumnKind.FLOAT),
        (Spark, "decimal(10,2)", ColumnKind.EXACT),
        (Spark, "string", ColumnKind.OTHER),
    ],
)
def test_each_database_says_what_its_types_hold(database, type_name, kind):
    assert database.column_kind(type_name) is kind


def test_integers_are_numbers_and_text_is_neither():
    assert ColumnKind.SMALL_INTEGER.integer and ColumnKind.INTEGER.numeric and not ColumnKind.FLOAT.integer
    assert not ColumnKind.OTHER.numeric and not ColumnKind.OTHER.integer
