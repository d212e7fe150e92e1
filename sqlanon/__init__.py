"""sqlanon: privacy-preserving data publishing pushed into the database."""
from .api import (AnonymizeResult, RunOptions, SearchResult, analyze, analyze_table, anonymize, apply, audit, bucketize,
                  hierarchies, inference, partition, load_csv, node_metrics, report, search)
from .config import Job, Output, QuasiIdentifier, Selection, Source, Suppression, job_from_dict, load_job
from .criteria import Criterion, KAnonymity
from .errors import SqlanonError

__all__ = ["AnonymizeResult", "Criterion", "Job", "KAnonymity", "Output", "QuasiIdentifier", "RunOptions",
           "SearchResult", "Selection", "Source", "SqlanonError", "Suppression", "analyze", "analyze_table",
           "anonymize", "apply", "audit", "bucketize", "hierarchies", "inference", "job_from_dict", "load_csv",
           "load_job", "node_metrics", "partition", "report", "search"]
__version__ = "0.1.0"
