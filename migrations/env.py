"""Alembic environment: always run programmatically by sqlanon.metadata.migrate().

The caller passes an open connection and the metadata schema name in
config.attributes; the version table lives inside that schema.
"""
from alembic import context

config = context.config
connection = config.attributes["connection"]
schema = config.attributes["schema"]
quoted = connection.dialect.identifier_preparer.quote_identifier(schema)
connection.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {quoted}")
context.configure(connection=connection, version_table_schema=schema, transactional_ddl=True)
with context.begin_transaction():
    context.run_migrations(schema=schema, quoted_schema=quoted)
