-- Who may use simba (privileges.c): simba_grant, simba_revoke and
-- simba_strip_privileges, over simba's objects of the schema (the objects
-- named simba_*; a schema such as public may hold others). They run as
-- their caller (the owner, or a role it granted them to) and compose SQL
-- from the schema's current name at the call.

-- What simba_grant gives, the one statement of it: EXECUTE on the
-- functions of a granted role, SELECT on the views and the history.
CREATE FUNCTION simba_portable_granted(OUT functions text[], OUT relations text[])
LANGUAGE sql IMMUTABLE
AS $$
SELECT ARRAY['simba_acquire(text, text, interval, interval, uuid)',
             'simba_renew(text, text, bigint, interval, interval)',
             'simba_release(text, text)',
             'simba_owner(text)',
             'simba_fence_check(text, text, bigint)',
             'simba_acquire_all(text[], text, interval, interval, uuid)',
             'simba_release_all(text[], text)',
             'simba_rwlock_acquire(text, text, text, interval, interval, uuid)',
             'simba_rwlock_release(text, text)',
             'simba_rwlock_fence_check(text, text, bigint)',
             'simba_fair_acquire(text, text, interval, interval, uuid)',
             'simba_fair_release(text, text)',
             'simba_semaphore_acquire(text, text, integer, interval, text, uuid)',
             'simba_semaphore_refresh(text, uuid, interval)',
             'simba_semaphore_release(text, uuid)',
             'simba_semaphore_fence_check(text, uuid, bigint)',
             'simba_session_open(interval, interval)',
             'simba_session_keepalive(uuid)',
             'simba_session_close(uuid)',
             'simba_wait(text[], boolean)',
             'simba_waker()',
             'simba_clock()',
             'simba_epoch_us(timestamptz)'],
       ARRAY['simba_mutex_status', 'simba_semaphore_status', 'simba_session_status', 'simba_rwlock_status',
             'simba_mutex_stats', 'simba_mutex_history']
$$;

CREATE FUNCTION simba_portable_set_privileges(role regrole, allow boolean, schema oid)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    ns text := pg_catalog.quote_ident((SELECT n.nspname FROM pg_catalog.pg_namespace n WHERE n.oid = schema));
    g record := simba_portable_granted();
BEGIN
    IF role IS NULL THEN
        RAISE EXCEPTION 'role must not be null' USING ERRCODE = '22004';
    END IF;
    -- regrole 0 prints as '-' and an unknown OID as a number: both would
    -- reach the GRANT below as a syntax error (privileges.c, role_arg)
    IF role::oid = 0 THEN
        RAISE EXCEPTION 'role must name a role' USING ERRCODE = '22023',
            HINT = 'simba grants to one role at a time, never to PUBLIC.';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = role) THEN
        RAISE EXCEPTION 'role with OID % does not exist', role::oid USING ERRCODE = '42704';
    END IF;
    -- Every grant updates the same catalog rows: one at a time per schema,
    -- or a second beside an uncommitted first fails with "tuple concurrently updated".
    PERFORM pg_catalog.pg_advisory_xact_lock(1397312834, schema::integer);
    EXECUTE pg_catalog.format('%s EXECUTE ON FUNCTION %s %s %s; %s SELECT ON %s %s %s',
        CASE WHEN allow THEN 'GRANT' ELSE 'REVOKE' END,
        (SELECT pg_catalog.string_agg(ns || '.' || f, ', ') FROM pg_catalog.unnest(g.functions) f),
        CASE WHEN allow THEN 'TO' ELSE 'FROM' END, role,
        CASE WHEN allow THEN 'GRANT' ELSE 'REVOKE' END,
        (SELECT pg_catalog.string_agg(ns || '.' || r, ', ') FROM pg_catalog.unnest(g.relations) r),
        CASE WHEN allow THEN 'TO' ELSE 'FROM' END, role);
    -- simba_revoke leaves USAGE: the role may use other objects of the schema.
    IF allow THEN
        EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA %s TO %s', ns, role);
    END IF;
END
$$;

CREATE FUNCTION simba_grant(role regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
BEGIN
    PERFORM simba_portable_set_privileges($1, true,
        (SELECT p.pronamespace FROM pg_catalog.pg_proc p WHERE p.oid = 'simba_grant(regrole)'::regprocedure));
END
$$;

CREATE FUNCTION simba_revoke(role regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
BEGIN
    PERFORM simba_portable_set_privileges($1, false,
        (SELECT p.pronamespace FROM pg_catalog.pg_proc p WHERE p.oid = 'simba_grant(regrole)'::regprocedure));
END
$$;

-- One REVOKE per privilege a role other than the owner holds on simba's
-- functions, tables, views and sequences (a NULL ACL is the default one:
-- EXECUTE for PUBLIC on a function), except, with keep_grants, what
-- simba_grant gives to a role that holds nothing else. PUBLIC keeps nothing.
CREATE FUNCTION simba_strip_privileges(keep_grants boolean DEFAULT true)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
DECLARE
    schema oid := (SELECT p.pronamespace FROM pg_catalog.pg_proc p
                    WHERE p.oid = 'simba_strip_privileges(boolean)'::regprocedure);
    g record := simba_portable_granted();
    revoke text;
    n bigint := 0;
BEGIN
    FOR revoke IN
        WITH acl AS (
            SELECT o.kind, o.object, a.grantee, a.privilege_type,
                   (o.kind = 'FUNCTION' AND a.privilege_type = 'EXECUTE'
                    AND o.object = ANY (ARRAY(SELECT pg_catalog.format('%I.%s', s.nspname, f)
                                                FROM pg_catalog.unnest(g.functions) f,
                                                     pg_catalog.pg_namespace s WHERE s.oid = schema)::regprocedure[]::text[]))
                    OR (o.kind = 'TABLE' AND a.privilege_type = 'SELECT' AND o.name = ANY (g.relations)) AS granted_kind
              FROM (SELECT 'FUNCTION', p.oid::regprocedure::text, p.proname::text,
                           COALESCE(p.proacl, pg_catalog.acldefault('f', p.proowner)), p.proowner
                      FROM pg_catalog.pg_proc p
                     WHERE p.pronamespace = schema AND p.proname LIKE 'simba\_%'
                    UNION ALL
                    SELECT CASE c.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END,
                           c.oid::regclass::text, c.relname::text,
                           COALESCE(c.relacl, pg_catalog.acldefault(CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END::"char",
                                                                    c.relowner)), c.relowner
                      FROM pg_catalog.pg_class c
                     WHERE c.relnamespace = schema AND c.relname LIKE 'simba\_%' AND c.relkind IN ('r', 'v', 'S', 'p')
                   ) AS o(kind, object, name, acl, owner),
                   LATERAL pg_catalog.aclexplode(o.acl) AS a
             WHERE a.grantee <> o.owner)
        SELECT pg_catalog.format('REVOKE %s ON %s %s FROM %s CASCADE', acl.privilege_type, acl.kind, acl.object,
                                 CASE WHEN acl.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(r.rolname) END)
          FROM acl LEFT JOIN pg_catalog.pg_roles r ON r.oid = acl.grantee
         WHERE NOT (COALESCE(keep_grants, false) AND acl.granted_kind AND acl.grantee <> 0
                    AND NOT EXISTS (SELECT 1 FROM acl AS other
                                     WHERE other.grantee = acl.grantee AND NOT other.granted_kind))
         ORDER BY 1
    LOOP
        EXECUTE revoke;
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;
