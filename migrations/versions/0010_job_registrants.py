"""Who wrote each registered job: a run of it has that role's rights, never more.

A role that may write the job tables could otherwise decide what a DBA's later
`run_job` drops, replaces and grants, with the DBA's rights. On PostgreSQL,
triggers stamp `jobs.registered_by` with the role that inserts or updates the
job, or writes any of its files (a trigger cannot be skipped by a role that
does not own the table); a run then works as that role (SET ROLE), which the
caller may do only as a member of it. Jobs stored before this revision have
no registrant and must be registered again.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-22
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade(schema: str, quoted_schema: str) -> None:
    s = quoted_schema
    op.execute(f"ALTER TABLE {s}.jobs ADD COLUMN registered_by TEXT")
    if op.get_bind().dialect.name != "postgresql":
        return  # DuckDB has no roles: whoever opens the file has all of it
    op.execute(f"""CREATE FUNCTION {s}.stamp_job_registrant() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN NEW.registered_by := current_user; RETURN NEW; END $$""")
    op.execute(f"""CREATE FUNCTION {s}.stamp_job_files_writer() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE {s}.jobs SET registered_by = current_user
             WHERE name = CASE WHEN TG_OP = 'DELETE' THEN OLD.job_name ELSE NEW.job_name END;
            IF TG_OP = 'UPDATE' AND OLD.job_name <> NEW.job_name THEN
                UPDATE {s}.jobs SET registered_by = current_user WHERE name = OLD.job_name;
            END IF;
            RETURN NULL;
        END $$""")
    op.execute(
        f"CREATE TRIGGER stamp_registrant BEFORE INSERT OR UPDATE ON {s}.jobs "
        f"FOR EACH ROW EXECUTE FUNCTION {s}.stamp_job_registrant()"
    )
    op.execute(
        f"CREATE TRIGGER stamp_writer AFTER INSERT OR UPDATE OR DELETE ON {s}.job_files "
        f"FOR EACH ROW EXECUTE FUNCTION {s}.stamp_job_files_writer()"
    )


def downgrade(schema: str, quoted_schema: str) -> None:
    s = quoted_schema  # revision 0013 dropped the triggers: they may be gone
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP TRIGGER IF EXISTS stamp_writer ON {s}.job_files")
        op.execute(f"DROP TRIGGER IF EXISTS stamp_registrant ON {s}.jobs")
        op.execute(f"DROP FUNCTION IF EXISTS {s}.stamp_job_files_writer()")
        op.execute(f"DROP FUNCTION IF EXISTS {s}.stamp_job_registrant()")
    op.execute(f"ALTER TABLE {s}.jobs DROP COLUMN registered_by")
