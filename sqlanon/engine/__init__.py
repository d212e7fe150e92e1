"""The SQL: every statement over the user's data, shared by the search, the metrics, publication and analysis.

- `star`: checks the source and builds the star schema (a dimension table per QI: its values, their integer keys
  and their generalizations);
- `persons`: where a unit column names each row's person, the table of persons the criteria count (a person whose
  rows disagree on a QI at the common ancestor of their values) and the rows a publication writes for them;
- `frequency`: a node's frequency set (the one GROUP BY builder) and the criteria's violators over it;
- `checker`: a whole wave of the search's nodes in a few statements over the packed cube, its roll-ups planned
  by `rollups`;
- `labels`: the exhaustive oracle's own path to frequency sets (labels, not codes);
- `node_releases`: many nodes' releases in batches over the packed cube, for the metrics and the analyses;
- `metrics`: utility figures of nodes;
- `attacks`: the attack analyses' SQL over the frequency sets of one release or many;
- `audit`: the independent re-check of a published table, grouping the table itself;
- `generalize`, `mondrian`, `anatomy`, `invariant`: each publication method's statements (the generalized rows;
  Mondrian's partitioning rounds; Anatomy's buckets; m-invariant buckets after an earlier release);
- `ledger`: the release ledger's reads of earlier releases and its m-invariance check;
- `profile`: profiling a table's columns and their combinations before any job;
- `maxent`: inference across releases (maximum entropy: propagation and IPF);
- `scratch`: short-lived tables of one session.

Contract: imports `model`, `backends`, `criteria` and `store` (for a run's records), never a package above it
(search, publish, analysis, the CLI). Every statement here is dialect-neutral or asks its `Database` for the
dialect's spelling.
"""
