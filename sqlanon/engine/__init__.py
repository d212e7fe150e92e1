"""The SQL: every statement over the user's data, shared by the search, the metrics, publication and analysis.

- `star`: checks the source and builds the star schema (a dimension table per QI: its values, their integer keys
  and their generalizations);
- `frequency`: a node's frequency set (the one GROUP BY builder) and the criteria's violators over it;
- `checker`: a whole wave of the search's nodes in a few statements over the packed cube, its roll-ups planned
  by `rollups`;
- `labels`: the exhaustive oracle's own path to frequency sets (labels, not codes);
- `node_releases`: many nodes' releases in batches over the packed cube, for the metrics and the analyses;
- `metrics`: utility figures of nodes;
- `attacks`: the attack analyses' SQL over the frequency sets of one release or many;
- `audit`: the independent re-check of a published table, grouping the table itself;
- `mondrian`: Mondrian's partitioning rounds;
- `maxent`: inference across releases (maximum entropy: propagation and IPF);
- `scratch`: short-lived tables of one session.

Contract: imports `model`, `backends`, `criteria` and `store` (for a run's records), never a package above it
(search, publish, analysis, the CLI). Every statement here is dialect-neutral or asks its `Database` for the
dialect's spelling.
"""
