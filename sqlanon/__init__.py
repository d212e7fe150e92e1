"""sqlanon: privacy-preserving data publishing pushed into the database.

The packages are layers, bottom to top; a module imports its own package and lower layers only (tests/
test_architecture.py checks it from the import graph, with no import cycles):

    errors, data          what every layer may raise; the packaged example dataset
    model, backends       the job and lattice as plain data; every database's SQL dialect and catalog
    criteria              privacy criteria as SQL over a frequency set (a class each, registered as defined)
    store                 sqlanon's own tables, through operations (routines on PostgreSQL)
    engine                SQL over the star schema shared by everything above: frequency sets, metrics
    search                the strategies (registered as defined) and the wave checker
    publish               publication methods, pseudonyms, ownership of tables, the audit
    analysis              attacks, inference across releases, the report
    config                job files read into model.job, names checked against the registries
    registry              jobs registered in the database, run by name
    session               sequencing a run: checks, run record, star schema, cleanup
    steps                 a run's steps (search, choice of node, metrics, publication) and their results
    api, this module      one function per verb (testing: the exhaustive oracle, for tests only)
    cli, inserver         the command line; the entry points of runs inside PostgreSQL
"""

from .api import (
    AnonymizeResult,
    RunOptions,
    SearchResult,
    analyze,
    analyze_table,
    anonymize,
    apply,
    audit,
    bucketize,
    condense,
    condense_add,
    differentially_private,
    hierarchies,
    inference,
    load_csv,
    node_metrics,
    partition,
    profile,
    randomize,
    reconstruct,
    releases,
    report,
    search,
)
from .config import job_from_dict, load_job
from .criteria import Criterion, KAnonymity
from .errors import SqlanonError
from .model.job import Job, Output, QuasiIdentifier, Selection, Source, Suppression

__all__ = [
    "AnonymizeResult",
    "Criterion",
    "Job",
    "KAnonymity",
    "Output",
    "QuasiIdentifier",
    "RunOptions",
    "SearchResult",
    "Selection",
    "Source",
    "SqlanonError",
    "Suppression",
    "analyze",
    "analyze_table",
    "anonymize",
    "apply",
    "audit",
    "bucketize",
    "condense",
    "condense_add",
    "differentially_private",
    "hierarchies",
    "inference",
    "job_from_dict",
    "load_csv",
    "load_job",
    "node_metrics",
    "partition",
    "profile",
    "randomize",
    "reconstruct",
    "releases",
    "report",
    "search",
]
__version__ = "0.1.0"
