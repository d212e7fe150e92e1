"""The running example of the re-publication paper (Wang, Zhu, Du, Teng: its Figure 1), as tables.

Reading of the OCR text (the figure's columns are scattered; the text's
statements pin them down):
- D1 has patients 1..13 (names Allen .. Milin), gender, zip code and disease,
  in this order of diseases: Flu, Pneumonia, Diabetes, Flu, Flu, Pneumonia,
  Diabetes, HIV, Flu, Lung Cancer, Pneumonia, HIV, Diabetes.
- D1' buckets {1,2,3,4} {Diabetes, Flu, Flu, Pneumonia}, {5,6,7} {Diabetes, Flu,
  Pneumonia}, {8,9,10} {Flu, HIV, Lung Cancer}, {11,12,13} {Pneumonia,
  Diabetes, HIV}: each multiset is the diseases of its patients above, and the
  text says two of {1,2,3,4} have Flu.
- D2 deletes 7, 10, 13 and adds 14 (Nikon, male, 13119) and 15 (Olice,
  female, 13244); its diseases, in the order 1,2,3,4,5,6,8,9,11,12,14,15, read
  Flu, Pneumonia, Diabetes, Flu, Flu, Pneumonia, HIV, Flu, Pneumonia, HIV,
  Diabetes, Pneumonia (so 14 has Diabetes and 15 Pneumonia).
- D2' buckets {1,2,14} {Diabetes, Flu, Pneumonia}, {3,4,15} {Diabetes, Flu,
  Pneumonia}, {5,8,11} {Flu, HIV, Pneumonia}, {6,9,12} {Flu, HIV, Pneumonia}.
The paper's conclusions: Patient 10 has Lung Cancer; Patient 14 cannot have
Flu; P(Flu | 11) = 0 and P(Pneumonia | 11) = 1/2 from both releases, 1/3 each
from D2' alone.
"""

from __future__ import annotations

import sqlalchemy as sa

PATIENTS = {  # pseudonym: (gender, zip, disease)
    1: ("male", "13115", "Flu"),
    2: ("male", "13120", "Pneumonia"),
    3: ("female", "13210", "Diabetes"),
    4: ("female", "13228", "Flu"),
    5: ("male", "13315", "Flu"),
    6: ("male", "13471", "Pneumonia"),
    7: ("female", "13520", "Diabetes"),
    8: ("female", "13347", "HIV"),
    9: ("male", "13428", "Flu"),
    10: ("male", "13451", "Lung Cancer"),
    11: ("female", "13359", "Pneumonia"),
    12: ("male", "13427", "HIV"),
    13: ("female", "13530", "Diabetes"),
    14: ("male", "13119", "Diabetes"),
    15: ("female", "13244", "Pneumonia"),
}
D1 = [[1, 2, 3, 4], [5, 6, 7], [8, 9, 10], [11, 12, 13]]  # D1' buckets
D2 = [[1, 2, 14], [3, 4, 15], [5, 8, 11], [6, 9, 12]]  # D2' buckets


def write_release(
    conn: sa.Connection,
    name: str,
    buckets: list[list[int]],
    schema: str | None = None,
    patients: dict[int, tuple[str, str, str]] = PATIENTS,
) -> None:
    """The bucketized pair `<name>_qi` (pid, gender, zip, bucket) and `<name>_sa` (bucket, disease, count) of
    `patients` (pid: gender, zip, disease)."""
    prefix = f'"{schema}".' if schema else ""
    conn.exec_driver_sql(f"CREATE TABLE {prefix}{name}_qi (pid INTEGER, gender VARCHAR, zip VARCHAR, bucket INTEGER)")
    conn.exec_driver_sql(f'CREATE TABLE {prefix}{name}_sa (bucket INTEGER, disease VARCHAR, "count" INTEGER)')
    for number, bucket in enumerate(buckets, start=1):
        counts: dict[str, int] = {}
        for pid in bucket:
            gender, zip_code, disease = patients[pid]
            conn.execute(
                sa.text(f"INSERT INTO {prefix}{name}_qi VALUES (:p, :g, :z, :b)"),
                {"p": pid, "g": gender, "z": zip_code, "b": number},
            )
            counts[disease] = counts.get(disease, 0) + 1
        for disease, count in counts.items():
            conn.execute(
                sa.text(f"INSERT INTO {prefix}{name}_sa VALUES (:b, :d, :c)"), {"b": number, "d": disease, "c": count}
            )


def write_example(url: str, schema: str | None = None) -> None:
    """Both releases and the current table D2 (`patients`: pid, gender, zip, disease)."""
    engine = sa.create_engine(url)
    prefix = f'"{schema}".' if schema else ""
    with engine.begin() as conn:
        write_release(conn, "d1", D1, schema)
        write_release(conn, "d2", D2, schema)
        conn.exec_driver_sql(
            f"CREATE TABLE {prefix}patients (pid INTEGER, gender VARCHAR, zip VARCHAR, disease VARCHAR)"
        )
        for pid in sorted({p for bucket in D2 for p in bucket}):
            gender, zip_code, disease = PATIENTS[pid]
            conn.execute(
                sa.text(f"INSERT INTO {prefix}patients VALUES (:p, :g, :z, :d)"),
                {"p": pid, "g": gender, "z": zip_code, "d": disease},
            )
    engine.dispose()


def example_config(url: str, releases: list[str], schema: str | None = None, **inference) -> dict:
    """A job over `patients` whose series is the named bucketized releases."""
    source = {"url": url, "table": "patients", **({"schema": schema} if schema else {})}
    series = [
        {"name": r, "table": f"{r}_qi", "sensitive_table": f"{r}_sa", **({"schema": schema} if schema else {})}
        for r in releases
    ]
    return {
        "source": source,
        "quasi_identifiers": ["gender", "zip"],
        "sensitive": ["disease"],
        "identifying": ["pid"],
        "releases": {"pseudonym": "pid", "series": series},
        **({"inference": inference} if inference else {}),
    }
