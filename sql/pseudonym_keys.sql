-- pseudonym(key, value): HMAC-SHA256 of the value's text with a key the database holds (pseudonym_keys), as 64
-- hex digits; NULL stays NULL. Computed as the definer: no caller reads the key or its pads. A key not created
-- for one of the caller's roles (or one that does not exist) is an error, never a NULL pseudonym.
CREATE FUNCTION {s}.pseudonym_key_refused(key_name text) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $refused$
BEGIN
    RAISE EXCEPTION 'pseudonym key % is not one of this role''s: the database''s owner creates it with sqlanon key create % --for ROLE', key_name, key_name;
END
$refused$;

CREATE FUNCTION {s}.pseudonym(key_name text, value text) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $pseudonym$
    SELECT CASE WHEN value IS NULL THEN NULL ELSE COALESCE(
        (SELECT encode(sha256(k.outer_pad || sha256(k.inner_pad || convert_to(value, 'UTF8'))), 'hex')
         FROM {s}.pseudonym_keys k
         WHERE k.name = key_name
           -- a role's name, not is_mine's lookup in pg_roles: 13 s a million rows against 105 s (a key from the
           -- environment, inline: 2.9 s; the rest is the definer's switch of role and search_path on every
           -- call); `sqlanon key create` checks that the roles exist
           AND EXISTS (SELECT 1 FROM unnest(string_to_array(k.users, ',')) AS u(role)
                       WHERE pg_has_role(session_user, u.role, 'MEMBER'))),
        {s}.pseudonym_key_refused(key_name)) END
$pseudonym$;
