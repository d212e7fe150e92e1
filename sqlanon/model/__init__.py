"""What sqlanon reasons about, without a connection: hierarchies, the lattice's level vectors, the metrics'
catalog and preference policies (`selection`), the job's data classes (`job`), how long work reports progress
(`progress`), the names of a run's scratch tables (`names`).

Contract: nothing here opens a connection or imports a package of sqlanon's but `errors` (annotations aside);
everything above may import it. A module per concept.
"""
