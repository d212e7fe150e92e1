"""Alembic environment: always run programmatically by sqlanon.metadata.migrate().

The caller passes an open connection and the metadata schema name in
config.attributes; the version table lives inside that schema.
"""

from alembic import context
from sqlalchemy import text

config = context.config
connection = config.attributes["connection"]
schema = config.attributes["schema"]
quoted = connection.dialect.identifier_preparer.quote_identifier(schema)
# Only when missing: PostgreSQL checks CREATE on the database even for IF NOT EXISTS, and a runner
# without it may own a schema a DBA created for it.
exists = connection.execute(
    text("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = :s"), {"s": schema}
).scalar()
if not exists:
    connection.exec_driver_sql(f"CREATE SCHEMA {quoted}")
context.configure(connection=connection, version_table_schema=schema, transactional_ddl=True)
with context.begin_transaction():
    context.run_migrations(schema=schema, quoted_schema=quoted)
