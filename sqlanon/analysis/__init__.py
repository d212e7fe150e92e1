"""What an adversary learns from published tables: `attacks` (homogeneity, background knowledge, Bayes-optimal
disclosure over one release), `inference` (what intersecting several releases reveals), and `report` (the HTML
page of a job's releases).

Contract: reads published tables and search results through the statements of `engine` (engine.attacks,
engine.maxent), composing none itself; imports `engine`, `search`, `model`, `criteria` and `backends`, never the
API or the CLI.
"""
