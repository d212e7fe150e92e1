"""Publication methods and what every publication shares.

Methods (`methods.METHODS`, one module each): `generalize` (full-domain generalization of the chosen node, with
suppression), `anatomy` (the quasi identifier table and the sensitive table of l-diverse buckets), `mondrian`
(multidimensional partitioning), `randomize` (additive noise, its distribution published beside it), `condense`
(synthetic records drawn from groups of at least k) and `differential_privacy` (a random sample generalized, classes
below k suppressed: SafePub). Shared:
`staging` (the one path by which an output table appears: staged, audited, owned, granted), `identifiers`
(pseudonyms of identifying columns), `ownership` (which tables sqlanon created and may replace), `ledger` (a job's
releases recorded, and each new one checked against them). Every output is re-checked before it is committed by
`engine.audit`, which groups the written table itself (independent of frequency sets and dimension tables).

Contract: imports `engine`, `search`, `store`, `criteria`, `model` and `backends`; analysis, the API and the CLI
sit above it. A method's statements are built in `engine` (engine.generalize, engine.anatomy, engine.invariant,
engine.mondrian; the ledger's in engine.ledger) and its writes go through `staging`; this package composes no SQL
itself.
"""

# each module registers its method in methods.METHODS, the default first (the order the config lists them in)
from . import generalize  # noqa: I001, F401
from . import anatomy, condense, differential_privacy, mondrian, randomize  # noqa: F401
