"""Finding the minimal generalizations that satisfy a job's criteria.

`strategies` holds the search strategies by name (Incognito, top-down, bottom-up, border, Samarati, exhaustive,
auto; a `SearchStrategy` subclass with a `name` registers itself in `STRATEGIES`, which is what `search.strategy`
accepts), `lattice` keeps an Incognito run's lattice tables. A strategy asks `engine.checker` (through its
`SearchContext`) "which of these nodes pass?" for a whole wave of nodes in a few statements; the SQL is there.

Contract: imports `engine`, `store`, `criteria`, `model` and `backends`; nothing above it (publish, analysis, the
CLI) imports into a strategy's internals, only its results.
"""
