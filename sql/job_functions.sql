-- Listing a role's registered jobs, their runs and a run's nodes from SQL (PostgreSQL). Each lists the runs of the
-- caller's roles only (see is_mine); they read sqlanon's tables and nothing else.
--   SELECT * FROM sqlanon.job_runs(job => CAST('census' AS text));  -- newest first; 'interrupted': no live session
--   SELECT * FROM sqlanon.run_nodes(run => CAST(42 AS bigint));     -- nodes with metrics (minimal ones, the chosen)
--   SELECT * FROM sqlanon.passing_nodes(run => CAST(42 AS bigint)); -- every passing node (Incognito, walks, auto)
CREATE FUNCTION {s}.job_runs(job text)
RETURNS TABLE (run_id bigint, command text, status text, iteration integer, nodes_checked integer,
               started_at timestamp, finished_at timestamp, error text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $job_runs$
#variable_conflict use_column
DECLARE
    live boolean;
BEGIN
    -- the job's advisory lock (as sqlanon.jobs takes it): free means no session runs the job
    live := NOT pg_try_advisory_lock(hashtext('sqlanon:' || {schema_literal_sql}), hashtext(job));
    IF NOT live THEN
        PERFORM pg_advisory_unlock(hashtext('sqlanon:' || {schema_literal_sql}), hashtext(job));
    END IF;
    RETURN QUERY
        SELECT r.run_id, r.command,
               CASE WHEN r.status = 'running' AND NOT live THEN 'interrupted' ELSE r.status END,
               r.iteration, r.nodes_checked, r.started_at, r.finished_at, r.error
        FROM {s}.runs r WHERE r.job_name = job AND {s}.is_mine(r.owner_role) ORDER BY r.run_id DESC;
END
$job_runs$;

CREATE FUNCTION {s}.run_nodes(run bigint)
RETURNS SETOF {s}.node_metrics
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $run_nodes$
    SELECT m.* FROM {s}.node_metrics m
    WHERE m.run_id = run AND EXISTS (SELECT 1 FROM {s}.runs r WHERE r.run_id = run AND {s}.is_mine(r.owner_role))
    ORDER BY m.selected DESC, m.minimal DESC, m.height, m.node
$run_nodes$;

-- Every passing node of a run over all its QIs (Incognito, or a walk of the full lattice), levels in QI
-- order as in the JSON output: checked passes, and nodes marked or implied by a passing specialization.
CREATE FUNCTION {s}.passing_nodes(run bigint)
RETURNS TABLE (node text, height integer, status text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $passing_nodes$
    SELECT regexp_replace(n.node_key, '[0-9]+:', '', 'g'), n.height, n.status
    FROM {s}.lattice_nodes n
    WHERE n.run_id = run AND n.status <> 'fail'
      AND n.iteration = (SELECT COUNT(*) FROM {s}.run_attributes a WHERE a.run_id = run)
      AND EXISTS (SELECT 1 FROM {s}.runs r WHERE r.run_id = run AND {s}.is_mine(r.owner_role))
    ORDER BY n.height, n.node_key
$passing_nodes$;
