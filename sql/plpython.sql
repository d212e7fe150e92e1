-- Run sqlanon from SQL alone (PL/Python), where a superuser migrated a server with PL/Python.
--   CALL sqlanon.run_job(job => CAST('census' AS text));           -- as `sqlanon job run census`
--   CALL sqlanon.run_job(job => CAST('census' AS text), resume => true);
--   SELECT sqlanon.register_job(name => CAST('census' AS text), config => CAST('{...}' AS json),
--                               files => json_build_object('age.csv', '...'));
--   CALL sqlanon.publish(run => CAST(42 AS bigint), node => CAST('1,0,2' AS text),
--                        target_table => CAST('census_1_0_2' AS text), target_schema => CAST('published' AS text));
--   SELECT sqlanon.analyze_job(job => CAST('census' AS text));          -- every minimal node, as `sqlanon analyze`
--   SELECT sqlanon.analyze_job(job => CAST('census' AS text), node => CAST('1,0,2' AS text));
-- Each calls the sqlanon package (sqlanon.inserver) in the server's Python, which runs the CLI's code over a
-- loopback connection to this database as the job's registrant (see inserver.loopback_url).
-- The server's Python finds sqlanon in the folders written into load_sqlanon's body by the installing superuser
-- (sqlanon migrate --db URL --python-path FOLDERS); only the routine's owner can change them, and each folder (and
-- each .pth file in it) must be writable by no one but root or the server's own user.
CREATE FUNCTION {s}.load_sqlanon() RETURNS text LANGUAGE plpython3u
SET search_path = pg_catalog, pg_temp AS $load$
import os
import site
import stat

for folder in {python_folders}:
    try:
        paths = [folder] + [os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".pth")]
        infos = [(path, os.stat(path)) for path in paths]
    except OSError as exc:
        plpy.error(f"sqlanon: the server cannot read its Python folder {folder!r} ({exc.strerror}); a superuser sets "
                   "the folders with: sqlanon migrate --db URL --python-path FOLDERS")
    for path, info in infos:
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or info.st_uid not in (0, os.getuid()):
            plpy.error(f"sqlanon: {path!r} may be written by users other than root and the server's own, so the "
                       "server imports nothing from it; make it writable by its owner only")
    site.addsitedir(folder)  # a site folder: its .pth files (an editable install) count too
try:
    import sqlanon
except ImportError as exc:
    plpy.error(f"sqlanon is not importable by the server's Python ({exc}); install it there, or as a superuser: "
               "sqlanon migrate --db URL --python-path SITE_PACKAGES_FOLDER")
return sqlanon.__version__
$load$;

CREATE PROCEDURE {s}.run_job(job text, resume boolean DEFAULT false, INOUT result json DEFAULT NULL)
LANGUAGE plpython3u SET search_path = pg_catalog, pg_temp AS $run$
plpy.execute({load_sql})
from sqlanon import inserver
return {"result": inserver.run_job(plpy, {schema_literal}, job, resume)}
$run$;

CREATE FUNCTION {s}.register_job(name text, config json, files json DEFAULT NULL) RETURNS integer
LANGUAGE plpython3u SET search_path = pg_catalog, pg_temp AS $register$
plpy.execute({load_sql})
from sqlanon import inserver
return inserver.register_job(plpy, {schema_literal}, name, config, files)
$register$;

CREATE PROCEDURE {s}.publish(run bigint, node text, target_table text, target_schema text DEFAULT NULL,
                             INOUT result json DEFAULT NULL)
LANGUAGE plpython3u SET search_path = pg_catalog, pg_temp AS $publish$
plpy.execute({load_sql})
from sqlanon import inserver
return {"result": inserver.publish_node(plpy, {schema_literal}, run, node, target_table, target_schema)}
$publish$;

CREATE FUNCTION {s}.analyze_job(job text, node text DEFAULT NULL) RETURNS json
LANGUAGE plpython3u SET search_path = pg_catalog, pg_temp AS $analyze$
plpy.execute({load_sql})
from sqlanon import inserver
return inserver.analyze_job(plpy, {schema_literal}, job, node)
$analyze$;
