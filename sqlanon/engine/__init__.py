"""SQL over the star schema, shared by the search, the metrics, publication and analysis.

`star` checks the source and builds the star schema (a dimension table per QI: its values, their integer keys and
their generalizations), `frequency` evaluates criteria over frequency sets, `checker` answers a whole wave of the
search's nodes in a few statements over the packed cube (its roll-ups planned by `rollups`), `metrics` computes
utility figures of nodes, `scratch` owns short-lived tables, `mondrian` partitions a table (Mondrian's rounds)
and `maxent` solves inference across releases (maximum entropy).

Contract: imports `model`, `backends`, `criteria` and `store` (for a run's records), never a package above it
(search, publish, analysis, the CLI). Every statement here is dialect-neutral or asks its `Database` for the
dialect's spelling.
"""
