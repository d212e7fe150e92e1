-- Run once by the image's entrypoint when the data directory is created: the server's Python finds
-- sqlanon in the image's venv (PL/Python procedures import it). The Dockerfile fills in the path.
DO $$
BEGIN
    EXECUTE format('ALTER DATABASE %I SET sqlanon.python_path = %L', current_database(), '@SITE_PACKAGES@');
END
$$;
