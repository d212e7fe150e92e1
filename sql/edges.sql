-- Edges of C_{i+1}: node -> each direct generalization (one attribute one
-- level up) that is itself a candidate. The generalization's key is the
-- node's pairs with one level raised by one.
-- Parameters: :run, :iteration (= i; the edges are those of iteration i + 1).
INSERT INTO {s}.lattice_edges (run_id, iteration, start_id, end_id)
SELECT :run, :iteration + 1, up.node_id, target.node_id
FROM (
    SELECT l.node_id,
           STRING_AGG(CAST(l.attr AS VARCHAR) || ':'
                      || CAST(l.level + CASE WHEN l.attr = raised.attr THEN 1 ELSE 0 END AS VARCHAR),
                      ',' ORDER BY l.attr) AS up_key
    FROM {s}.lattice_nodes n
    JOIN {s}.lattice_node_levels raised ON raised.run_id = n.run_id AND raised.node_id = n.node_id
    JOIN {s}.lattice_node_levels l ON l.run_id = n.run_id AND l.node_id = n.node_id
    WHERE n.run_id = :run AND n.iteration = :iteration + 1
    GROUP BY l.node_id, raised.attr
) up
JOIN {s}.lattice_nodes target
  ON target.run_id = :run AND target.iteration = :iteration + 1 AND target.node_key = up.up_key
