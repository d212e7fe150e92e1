"""Publication methods and what every publication shares.

Methods: `generalize` (full-domain generalization of the chosen node, with suppression), `anatomy` (the quasi
identifier table and the sensitive table of l-diverse buckets) and `mondrian` (multidimensional partitioning).
Shared: `identifiers` (pseudonyms of identifying columns), `ownership` (which tables sqlanon created and may
replace), `audit` (the independent re-check of every output before it is committed).

Contract: imports `engine`, `search`, `store`, `criteria`, `model` and `backends`; analysis, the API and the CLI
sit above it.
"""
