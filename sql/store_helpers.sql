-- Helpers of the store's routines (installed with them, see sqlanon/store/postgres.py).
--
-- is_mine(role): whether `role` is the session's login role or one that role is a member of (a DBA who was
-- granted it; a superuser): what the routines let a caller see and change.
CREATE FUNCTION {s}.is_mine(role text) RETURNS boolean LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp AS $is_mine$
    SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                   WHERE r.rolname = role AND pg_catalog.pg_has_role(session_user, r.oid, 'MEMBER'))
$is_mine$;

-- work_schema_of(role): where a role's runs keep their scratch tables (dimension tables, the search's cube):
-- <store>_work_<role>, or <store>_work_<the role's oid> for a role whose name is not plain lower case or would make
-- a name longer than PostgreSQL's 63 bytes. It holds no routine anyone calls.
CREATE FUNCTION {s}.work_schema_of(role name) RETURNS text LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp AS $work_schema_of$
    SELECT CASE WHEN r.rolname ~ '^[a-z_][a-z0-9_]*$'
                     AND octet_length({schema_literal_sql} || '_work_' || r.rolname) <= 63
                THEN {schema_literal_sql} || '_work_' || r.rolname
                ELSE {schema_literal_sql} || '_work_' || CAST(r.oid AS text) END
    FROM pg_catalog.pg_roles r WHERE r.rolname = role
$work_schema_of$;

-- work_schema(): the caller's: the store's own schema for its owner's members (the owner, superusers), else the
-- caller's work schema (made by grant_runner).
CREATE FUNCTION {s}.work_schema() RETURNS text LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $work_schema$
    SELECT CASE WHEN pg_catalog.pg_has_role(session_user, n.nspowner, 'MEMBER') THEN CAST(n.nspname AS text)
                ELSE {s}.work_schema_of(session_user) END
    FROM pg_catalog.pg_namespace n WHERE n.nspname = {schema_literal_sql}
$work_schema$;
