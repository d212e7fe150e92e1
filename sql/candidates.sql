-- Incognito candidate generation: C_{i+1} from the survivors S_i of iteration i.
-- Two surviving nodes join when they share their first i-1 (attribute, level)
-- pairs (prefix_key) and the first one's last attribute sorts before the
-- second's; the new node is the first plus the second's last pair. New nodes
-- are numbered after the run's highest node number.
-- Parameters: :run, :iteration (= i).
INSERT INTO {s}.lattice_nodes
    (run_id, node_id, iteration, node_key, prefix_key, last_attr, last_level, parent1, parent2, height, status)
SELECT p.run_id,
       (SELECT COALESCE(MAX(node_id), 0) FROM {s}.lattice_nodes WHERE run_id = :run)
           + ROW_NUMBER() OVER (ORDER BY p.node_id, q.node_id),
       p.iteration + 1,
       p.node_key || ',' || CAST(q.last_attr AS VARCHAR) || ':' || CAST(q.last_level AS VARCHAR),
       p.node_key,
       q.last_attr,
       q.last_level,
       p.node_id,
       q.node_id,
       p.height + q.last_level,
       'candidate'
FROM {s}.lattice_nodes p
JOIN {s}.lattice_nodes q
  ON q.run_id = p.run_id
 AND q.iteration = p.iteration
 AND q.prefix_key = p.prefix_key
 AND q.last_attr > p.last_attr
WHERE p.run_id = :run AND p.iteration = :iteration
  AND p.status <> 'fail' AND q.status <> 'fail';

-- The (attribute, level) pairs of each new node: its first parent's plus the new last pair.
INSERT INTO {s}.lattice_node_levels (run_id, node_id, attr, level)
SELECT n.run_id, n.node_id, l.attr, l.level
FROM {s}.lattice_nodes n
JOIN {s}.lattice_node_levels l ON l.run_id = n.run_id AND l.node_id = n.parent1
WHERE n.run_id = :run AND n.iteration = :iteration + 1
UNION ALL
SELECT n.run_id, n.node_id, n.last_attr, n.last_level
FROM {s}.lattice_nodes n
WHERE n.run_id = :run AND n.iteration = :iteration + 1
