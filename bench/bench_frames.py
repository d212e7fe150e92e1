"""DataFrames in and out (hospital, default 1M rows): what a pandas user's frame costs against the same job on the
table in a DuckDB file, and against one plain GROUP BY of that table, measured in the same run.

    python bench/bench_frames.py [--rows 1000000] [--k 5] [--repeat 3]

Rows: the frame's fingerprint alone (pandas' vectorized row hashes: what a reused table is recognized by), the
search of the frame (in memory: the frame copied into DuckDB, then searched) and of the file's table, the
publication of each, and the release read back as one DataFrame. Reading the CSV into pandas is set-up, not timed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_hospital import QIS, dataset, load_hospital, plain_group_by
from common import databases, print_table, timed

from sqlanon import anonymize, search
from sqlanon.config import job_from_dict
from sqlanon.model.frames import SourceFrame


def hospital_job(folder: Path, k: int, url: str | None) -> object:
    """The hospital job on the file's table (`url`), or without a source (for the frame)."""
    config = {
        "quasi_identifiers": {q: {"hierarchy": f"hierarchies/{q}.csv"} for q in QIS},
        "sensitive": ["diagnosis", "cost"],
        "criteria": {"k_anonymity": {"k": k}},
        "suppression": {"limit": 0.02},
        "output": {"table": "hospital_anon"},
    }
    if url:
        config["source"] = {"url": url, "table": "hospital"}
    return job_from_dict(config, folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    import pandas as pd

    folder = dataset(args.rows)
    frame = pd.read_csv(folder / "hospital.csv", dtype={"zip": str, "birth_date": str})
    (_, url), *_ = databases(f"hospital_{args.rows}.duckdb", postgres=False)
    load_hospital(folder, url)
    on_file, no_source = hospital_job(folder, args.k, url), hospital_job(folder, args.k, None)
    group_by, _ = timed(lambda: plain_group_by(url), repeat=args.repeat)
    published_file: list = []
    published_frame: list = []
    figures = [
        ("the frame's fingerprint", lambda: SourceFrame.of(frame).digest()),
        ("search of the file's table", lambda: search(on_file)),
        ("search of the frame (in memory)", lambda: search(no_source, source=frame)),
        ("publication of the file's table", lambda: published_file.append(anonymize(on_file, replace=True))),
        ("publication of the frame (in memory)", lambda: published_frame.append(anonymize(no_source, source=frame))),
        ("its release as one DataFrame", lambda: published_frame[-1].frame()),
        ("the file's release as one DataFrame", lambda: published_file[-1].frame()),
    ]
    rows = []
    for name, action in figures:
        seconds, _ = timed(action, repeat=args.repeat)
        rows.append([name, seconds, seconds / group_by])
    assert published_file[-1].node == published_frame[-1].node, "the frame and its table publish one node"
    print_table(
        f"Hospital, {args.rows} rows, k={args.k}, 2% suppression, DuckDB; one GROUP BY of the file's table: "
        f"{group_by:.3f} s (median of {args.repeat})",
        ["step", "seconds", "x GROUP BY"],
        rows,
    )


if __name__ == "__main__":
    main()
