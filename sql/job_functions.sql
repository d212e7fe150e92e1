-- Listing registered jobs, their runs and a run's nodes from SQL (PostgreSQL). Installed by migration 0006.
--   SELECT * FROM sqlanon.job_runs('census');      -- newest first; 'interrupted': no live session holds it
--   SELECT * FROM sqlanon.run_nodes(42);           -- nodes with metrics (minimal ones, the chosen one)
--   SELECT * FROM sqlanon.passing_nodes(42);       -- every passing node (Incognito, topdown, bottomup, border, auto)
CREATE OR REPLACE FUNCTION {s}.job_runs(job text)
RETURNS TABLE (run_id bigint, command text, status text, iteration integer, nodes_checked integer,
               started_at timestamp, finished_at timestamp, error text)
LANGUAGE plpgsql AS $job_runs$
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
        FROM {s}.runs r WHERE r.job_name = job ORDER BY r.run_id DESC;
END
$job_runs$;

CREATE OR REPLACE FUNCTION {s}.run_nodes(run bigint)
RETURNS SETOF {s}.node_metrics
LANGUAGE sql STABLE AS $run_nodes$
    SELECT * FROM {s}.node_metrics WHERE run_id = run ORDER BY selected DESC, minimal DESC, height, node
$run_nodes$;

-- Every passing node of a run over all its QIs (Incognito, or a walk of the full lattice), levels in QI
-- order as in the JSON output: checked passes, and nodes marked or implied by a passing specialization.
CREATE OR REPLACE FUNCTION {s}.passing_nodes(run bigint)
RETURNS TABLE (node text, height integer, status text)
LANGUAGE sql STABLE AS $passing_nodes$
    SELECT regexp_replace(n.node_key, '[0-9]+:', '', 'g'), n.height, n.status
    FROM {s}.lattice_nodes n
    WHERE n.run_id = run AND n.status <> 'fail'
      AND n.iteration = (SELECT COUNT(*) FROM {s}.run_attributes a WHERE a.run_id = run)
    ORDER BY n.height, n.node_key
$passing_nodes$;
