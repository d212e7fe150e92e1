"""Least privilege for the PL/Python routines (PostgreSQL, where migration 0006 installed them).

PL/Python is an untrusted language: its functions run as the server's OS user.
So no role gets them by default: EXECUTE is revoked from PUBLIC and granted to
the role `sqlanon_runner` (created here, NOLOGIN; a DBA grants it to the roles
that may run jobs from SQL). The folders the server's Python imports sqlanon
from come from the table `server_settings`, which only its owner (the
installing superuser) can write, never from a setting any session may SET. On
upgrade, the database's own `sqlanon.python_path` setting (ALTER DATABASE, as
the Docker image sets it at first start) is copied there once.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-22
"""
from alembic import op
from sqlalchemy import text

from sqlanon.metadata import RUNNER_ROLE, stored_sql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

ROUTINES = ("FUNCTION {s}.load_sqlanon()", "FUNCTION {s}.register_job(text, json, json)",
            "PROCEDURE {s}.run_job(text, boolean, json)", "PROCEDURE {s}.publish(bigint, text, text, text, json)")


def _installed(schema: str) -> bool:
    return bool(op.get_bind().execute(text(
        "SELECT to_regprocedure(:f) IS NOT NULL AND (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)"),
        {"f": f'"{schema}".load_sqlanon()'}).scalar())


def upgrade(schema: str, quoted_schema: str) -> None:
    conn = op.get_bind()
    if conn.dialect.name != "postgresql" or not _installed(schema):
        return
    s, runner = quoted_schema, f'"{RUNNER_ROLE}"'
    conn.exec_driver_sql(f"CREATE TABLE {s}.server_settings (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.exec_driver_sql(f"REVOKE ALL ON {s}.server_settings FROM PUBLIC")
    conn.execute(text(
        f"INSERT INTO {s}.server_settings (name, value) "
        "SELECT 'python_path', substr(c, length('sqlanon.python_path=') + 1) "
        "FROM pg_db_role_setting r, unnest(r.setconfig) AS c WHERE r.setdatabase = (SELECT oid FROM pg_database "
        "WHERE datname = current_database()) AND r.setrole = 0 AND c LIKE 'sqlanon.python\\_path=%' LIMIT 1"))
    # the loopback connection's socket: unix_socket_directories is readable only by superusers (and
    # pg_read_all_settings), so the installing superuser records it for the runner roles
    conn.exec_driver_sql(f"INSERT INTO {s}.server_settings (name, value) SELECT 'socket_directory', "
                         "trim(split_part(current_setting('unix_socket_directories'), ',', 1))")
    conn.exec_driver_sql(f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{RUNNER_ROLE}') THEN "
                         f"CREATE ROLE {runner} NOLOGIN; END IF; END $$")
    conn.exec_driver_sql(f"GRANT USAGE ON SCHEMA {s} TO {runner}")
    conn.exec_driver_sql(f"GRANT SELECT ON {s}.server_settings TO {runner}")
    conn.exec_driver_sql(stored_sql("plpython.sql", schema, quoted_schema))  # load_sqlanon reads the table
    for routine in ROUTINES:
        kind, signature = routine.split(" ", 1)
        conn.exec_driver_sql(f"REVOKE EXECUTE ON {kind} {signature.format(s=s)} FROM PUBLIC")
        conn.exec_driver_sql(f"GRANT EXECUTE ON {kind} {signature.format(s=s)} TO {runner}")


def downgrade(schema: str, quoted_schema: str) -> None:
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return
    conn.exec_driver_sql(f"DROP TABLE IF EXISTS {quoted_schema}.server_settings")
