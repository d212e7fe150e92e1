-- Run sqlanon from SQL alone (PL/Python). Installed by migration 0006 when PL/Python is available.
--   CALL sqlanon.run_job('census');                       -- the same search as `sqlanon job run census`
--   CALL sqlanon.run_job('census', resume => true);
--   SELECT sqlanon.register_job('census', '{...}'::json, json_build_object('age.csv', '...'));
--   CALL sqlanon.publish(run_id, '1,0,2', 'census_1_0_2', 'published');   -- a node of a finished run
-- Each calls the sqlanon package (sqlanon.inserver) in the server's Python, which runs the CLI's code
-- over a loopback connection to this database as the calling role (local trust or peer access needed).
-- Migration 0008 revokes EXECUTE from PUBLIC and grants it to the role sqlanon_runner.
-- The server's Python must find sqlanon: install it there, or name its site-packages folder(s) in the table
-- server_settings, which only its owner (the installing superuser) may write:
--   sqlanon migrate --db URL --python-path /opt/sqlanon/lib/python3.11/site-packages
-- Never a session setting: any role could SET one and make the server import its own code.
CREATE OR REPLACE FUNCTION {s}.load_sqlanon() RETURNS text LANGUAGE plpython3u AS $load$
import site
try:
    rows = plpy.execute("SELECT value FROM " + {settings_table} + " WHERE name = 'python_path'")
except plpy.SPIError as exc:
    plpy.error(f"sqlanon cannot read its server settings ({exc}); upgrade the schema: sqlanon migrate --db URL")
for folder in (f for f in (rows[0]["value"] if rows else "").split(":") if f):
    site.addsitedir(folder)  # a site folder: its .pth files (an editable install) count too
try:
    import sqlanon
except ImportError as exc:
    plpy.error(f"sqlanon is not importable by the server's Python ({exc}); install it there, or as a superuser: "
               "sqlanon migrate --db URL --python-path SITE_PACKAGES_FOLDER")
return sqlanon.__version__
$load$;

CREATE OR REPLACE PROCEDURE {s}.run_job(job text, resume boolean DEFAULT false, INOUT result json DEFAULT NULL)
LANGUAGE plpython3u AS $run$
plpy.execute({load_sql})
from sqlanon import inserver
return {"result": inserver.run_job(plpy, {schema_literal}, job, resume)}
$run$;

CREATE OR REPLACE FUNCTION {s}.register_job(name text, config json, files json DEFAULT NULL) RETURNS integer
LANGUAGE plpython3u AS $register$
plpy.execute({load_sql})
from sqlanon import inserver
return inserver.register_job(plpy, {schema_literal}, name, config, files)
$register$;

CREATE OR REPLACE PROCEDURE {s}.publish(run bigint, node text, target_table text, target_schema text DEFAULT NULL,
                                        INOUT result json DEFAULT NULL)
LANGUAGE plpython3u AS $publish$
plpy.execute({load_sql})
from sqlanon import inserver
return {"result": inserver.publish_node(plpy, {schema_literal}, run, node, target_table, target_schema)}
$publish$;
