"""What an adversary learns from published tables: `attacks` (homogeneity, background knowledge, Bayes-optimal
disclosure over one release), `inference` (what intersecting several releases reveals), `report` (the HTML
page of a job's releases), and `profile` (which columns of a table single people out, before any job).

Contract: reads published tables and search results through the statements of `engine` (engine.attacks,
engine.maxent, engine.profile), composing none itself; imports `engine`, `search`, `model`, `criteria` and
`backends`, never the API or the CLI.
"""
