-- grant_runner(role) / revoke_runner(role): what `sqlanon grant-runner ROLE [--revoke]` runs. A DBA (the store's
-- owner, a superuser) calls them with its own rights: they grant the database's runner role (EXECUTE on the
-- routines a runner calls; see `installation()`) and create the role's work schema, owned by the role.
--   CALL sqlanon.grant_runner(runner => CAST('alice' AS name));
CREATE PROCEDURE {s}.grant_runner(runner name) LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $grant_runner$
DECLARE
    group_role text := (SELECT i.runner_role FROM {s}.installation() i);
    work text := {s}.work_schema_of(runner);
    work_owner name;
BEGIN
    IF work IS NULL THEN
        RAISE EXCEPTION 'role % does not exist; create it first (CREATE ROLE % LOGIN)', runner, quote_ident(runner);
    END IF;
    IF group_role IS NULL OR NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = group_role) THEN
        RAISE EXCEPTION 'schema % has no runner role yet: a superuser (or a role that may create roles) migrates '
                        'it once: sqlanon migrate --db URL --metadata-schema %', {schema_literal_sql},
                        {schema_literal_sql};
    END IF;
    EXECUTE format('GRANT %I TO %I', group_role, runner);
    SELECT pg_get_userbyid(n.nspowner) INTO work_owner FROM pg_namespace n WHERE n.nspname = work;
    IF work_owner IS NULL THEN
        EXECUTE format('CREATE SCHEMA %I AUTHORIZATION %I', work, runner);
    ELSIF work_owner <> runner THEN
        RAISE EXCEPTION 'schema % exists and belongs to role %, not %: a runner''s scratch tables go to a schema '
                        'of its own; drop or rename that schema, then grant again', work, work_owner, runner;
    END IF;
END
$grant_runner$;

CREATE PROCEDURE {s}.revoke_runner(runner name) LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $revoke_runner$
DECLARE
    group_role text := (SELECT i.runner_role FROM {s}.installation() i);
    work text := {s}.work_schema_of(runner);
BEGIN
    IF work IS NULL THEN
        RAISE EXCEPTION 'role % does not exist', runner;
    END IF;
    IF group_role IS NOT NULL AND pg_has_role(runner, group_role, 'MEMBER') THEN
        EXECUTE format('REVOKE %I FROM %I', group_role, runner);
    END IF;
    IF EXISTS (SELECT 1 FROM pg_namespace n JOIN pg_roles r ON r.oid = n.nspowner
               WHERE n.nspname = work AND r.rolname = runner) THEN
        EXECUTE format('DROP SCHEMA %I CASCADE', work);  -- the role's scratch tables only
    END IF;
END
$revoke_runner$;
