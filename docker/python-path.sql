-- Run once by the image's entrypoint when the data directory is created: the server's Python finds
-- sqlanon in /opt/sqlanon (PL/Python procedures import it).
DO $$
BEGIN
    EXECUTE format('ALTER DATABASE %I SET sqlanon.python_path = %L', current_database(),
                   '/opt/sqlanon/lib/python3.11/site-packages');
END
$$;
