"""Inference across releases by maximum entropy (Wang, Zhu, Du, Teng), solved in the database.

Every published release splits the persons it holds into groups (buckets of
a bucketized pair, or classes of equal generalized QIs) and says how often each
sensitive value occurs in each group. With P(s | i) a variable for every
person i and value s, the releases give:
- zero constraints: P(s | i) = 0 unless s occurs in i's group of every release
  that holds i (s outside the intersection, the "maximum common subset");
- one constraints: sum over s of P(s | i) = 1;
- relation constraints: for each group b of each release and value s,
  sum over i in b of P(s | i) = count of s in b.
The least biased solution is the one of maximum entropy. It is found in
two steps, both in the database:
1. Propagation removes the pairs no solution allows: the counting rules
   (a value already held by `count` persons fixed to it is no one else's in
   that group; a value just `count` persons may hold is theirs) and, for
   groups of up to MATCHED_GROUP persons, the pairs no complete assignment of
   the group's values uses (each group is a global cardinality constraint;
   a forward and a backward pass over its partial assignments, in one
   recursive statement for all groups; groups of up to COUNTED_GROUP persons
   with distinct values need none: the counting rules leave nothing more),
   repeated until nothing changes, since what one release rules out can rule
   out more in another. Each costlier rule runs alone, and only once the
   cheaper ones remove nothing more.
2. Iterative proportional fitting on the pairs left: start uniform over each
   person's possible values, then repeatedly scale every (group, value) of
   each release to its count and every person to one, several passes per
   statement (fewer in the first statements, after which most parts have
   settled). The persons fall into connected parts (linked by the groups they
   share); a part within the tolerance is set aside, since scaling the others
   never moves it, so the late passes read only the parts still converging.
Propagation matters: IPF approaches a probability the releases force to 0
only like 1 / passes (chains of them slower still), and two independently
bucketized releases force most of them; on Adult (7,200 records, l = 5) plain
IPF was still far off after 131,072 passes, while after propagation the pairs
left are exactly the support a linear program finds (checked once with
HiGHS) and IPF converges in one statement. Where propagation is incomplete
(groups above MATCHED_GROUP persons, or forcing only a linear combination of
groups reveals), the iteration removes probabilities that keep halving while
the passes double (SNAP_BELOW, SNAP_RATIO), and the report gives the passes
and the largest constraint violation left.

Modules: `releases` reads the releases into integer-keyed scratch tables
(and checks them), `propagation` removes the pairs no solution allows,
`parts` labels a graph's connected parts (for propagation and IPF), `ipf`
iterates, `solve` sequences one solve, `report` solves every release
together (and each pair) and writes the figures and the probability table.
Every statement is SQLAlchemy Core over scratch tables that `Scratch.make`
returns as Core tables (dialect-neutral: DuckDB and PostgreSQL); the verb
around it (the job's checks, its output table, ownership) is analysis.inference.
"""

from .releases import ReleaseTables
from .report import InferenceReport, ReleaseEntropy, analyze_releases, release_pairs
from .solve import solve

__all__ = ["InferenceReport", "ReleaseEntropy", "ReleaseTables", "analyze_releases", "release_pairs", "solve"]
