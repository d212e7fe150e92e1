-- Analyses of a registered job from SQL (PL/Python). Installed by migration 0011 where PL/Python runs jobs.
--   SELECT sqlanon.analyze_job('census');                 -- every minimal node, as `sqlanon analyze`
--   SELECT sqlanon.analyze_job('census', '1,0,2');        -- one node
-- The same code as the CLI, in the server's Python, over a loopback connection as the job's registrant;
-- EXECUTE is granted to the role sqlanon_runner only.
CREATE OR REPLACE FUNCTION {s}.analyze_job(job text, node text DEFAULT NULL) RETURNS json
LANGUAGE plpython3u AS $analyze$
plpy.execute({load_sql})
from sqlanon import inserver
return inserver.analyze_job(plpy, {schema_literal}, job, node)
$analyze$;
