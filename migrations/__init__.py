"""Alembic migrations of sqlanon's metadata schema (shipped as sqlanon.migrations)."""
