-- Apriori pruning: a candidate of C_{i+1} survives only if every one of its
-- i-attribute subsets is in S_i (not failed). A subset's key is the node's
-- pairs without one attribute, in attribute order. The others are marked,
-- then deleted with their levels.
-- Parameters: :run, :iteration (= i).
UPDATE {s}.lattice_nodes SET status = 'pruned'
WHERE run_id = :run AND iteration = :iteration + 1 AND node_id IN (
    SELECT sub.node_id
    FROM (
        SELECT l.node_id,
               STRING_AGG(CAST(l.attr AS VARCHAR) || ':' || CAST(l.level AS VARCHAR), ',' ORDER BY l.attr)
                   AS subset_key
        FROM {s}.lattice_nodes n
        JOIN {s}.lattice_node_levels d ON d.run_id = n.run_id AND d.node_id = n.node_id
        JOIN {s}.lattice_node_levels l ON l.run_id = n.run_id AND l.node_id = n.node_id AND l.attr <> d.attr
        WHERE n.run_id = :run AND n.iteration = :iteration + 1
        GROUP BY l.node_id, d.attr
    ) sub
    LEFT JOIN {s}.lattice_nodes survivor
      ON survivor.run_id = :run
     AND survivor.iteration = :iteration
     AND survivor.status <> 'fail'
     AND survivor.node_key = sub.subset_key
    WHERE survivor.node_id IS NULL);

DELETE FROM {s}.lattice_node_levels
WHERE run_id = :run AND node_id IN (SELECT node_id FROM {s}.lattice_nodes WHERE run_id = :run AND status = 'pruned');

DELETE FROM {s}.lattice_nodes WHERE run_id = :run AND status = 'pruned'
