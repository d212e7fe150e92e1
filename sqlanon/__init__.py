"""sqlanon: privacy-preserving data publishing pushed into the database."""
from .api import AnonymizeResult, RunOptions, SearchResult, anonymize, audit, search
from .config import Job, Output, QuasiIdentifier, Source, job_from_dict, load_job
from .criteria import Criterion, KAnonymity
from .errors import SqlanonError

__all__ = ["AnonymizeResult", "Criterion", "Job", "KAnonymity", "Output", "QuasiIdentifier", "RunOptions",
           "SearchResult", "Source", "SqlanonError", "anonymize", "audit", "job_from_dict", "load_job", "search"]
__version__ = "0.1.0"
