-- sqlanon.audit(table, quasi-identifiers, sensitive attributes): the audit's figures from SQL alone.
-- One row for the table (sensitive_attribute NULL: rows, classes, smallest class = k), then one row per
-- sensitive attribute: the fewest distinct values in a class (distinct l), exp of the smallest class
-- entropy (entropy l), and the largest equal-distance EMD between a class and the table (t).
-- Identifiers are quoted with format('%I'); the table is a regclass. It runs with the caller's rights, on a plain
-- table whose audited columns have built-in types: a view, a foreign table, row-level security policies or a type's
-- own operators would run their owner's code with the caller's rights (a DBA auditing a runner's table).
--   SELECT * FROM sqlanon.audit(CAST('published.t' AS regclass), CAST(ARRAY['age'] AS text[]),
--                               CAST(ARRAY['occupation'] AS text[]));
CREATE FUNCTION {s}.audit(source regclass, quasi_identifiers text[], sensitive text[] DEFAULT '{}')
RETURNS TABLE (sensitive_attribute text, row_count bigint, classes bigint, min_class_size bigint,
               distinct_l bigint, entropy_l double precision, max_t double precision)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $audit$
DECLARE
    qis text := (SELECT string_agg(format('%I', q), ', ') FROM unnest(quasi_identifiers) AS q);
    qis_v text := (SELECT string_agg(format('v.%I', q), ', ') FROM unnest(quasi_identifiers) AS q);
    same_class text := (SELECT string_agg(format('v.%1$I IS NOT DISTINCT FROM k.%1$I', q), ' AND ')
                        FROM unnest(quasi_identifiers) AS q);
    attribute text;
BEGIN
    IF qis IS NULL THEN
        RAISE EXCEPTION 'sqlanon.audit: name at least one quasi-identifier column';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = source AND c.relkind IN ('r', 'p')
                   AND NOT c.relrowsecurity) THEN
        RAISE EXCEPTION 'sqlanon.audit: % is not a plain table (a view, a foreign table or row-level security '
                        'could run its owner''s code with your rights); audit the table itself', source;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
               WHERE a.attrelid = source AND a.attname = ANY (quasi_identifiers || sensitive)
                 AND t.typnamespace <> CAST('pg_catalog' AS regnamespace)) THEN
        RAISE EXCEPTION 'sqlanon.audit: a column of % has a type defined outside pg_catalog, whose operators could '
                        'run its owner''s code with your rights; audit a copy with built-in types', source;
    END IF;
    RETURN QUERY EXECUTE format(
        'SELECT NULL::text, SUM(n)::bigint, COUNT(*)::bigint, MIN(n)::bigint, NULL::bigint, NULL::float8, '
        'NULL::float8 FROM (SELECT COUNT(*) AS n FROM %s GROUP BY %s) AS c', source, qis);
    FOREACH attribute IN ARRAY sensitive LOOP
        RETURN QUERY EXECUTE format($q$
            WITH v AS (SELECT %2$s, %3$I AS s, COUNT(*)::float8 AS c FROM %1$s GROUP BY %2$s, %3$I),
                 q AS (SELECT s, SUM(c) / (SELECT SUM(c) FROM v) AS q FROM v GROUP BY s),
                 k AS (SELECT %4$s, SUM(v.c) AS n, COUNT(*) AS d, SUM(v.c * LN(v.c)) AS clc
                       FROM v GROUP BY %4$s),
                 t AS (SELECT 0.5 * (SUM(ABS(v.c / k.n - q.q)) + 1 - SUM(q.q)) AS t
                       FROM v JOIN k ON %5$s JOIN q ON v.s IS NOT DISTINCT FROM q.s GROUP BY %4$s)
            SELECT %6$L::text, SUM(n)::bigint, COUNT(*)::bigint, MIN(n)::bigint, MIN(d)::bigint,
                   EXP(MIN(LN(n) - clc / n)), (SELECT MAX(t.t) FROM t) FROM k
            $q$, source, qis, attribute, qis_v, same_class, attribute);
    END LOOP;
END
$audit$;
