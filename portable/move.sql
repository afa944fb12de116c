-- Moves simba in one schema between its editions, in one transaction,
-- keeping every row, and every fence sequence above the values it issued
-- (a fence is never issued twice). docs/portable.md, "Moving between editions".
--
--   portable edition to the C extension (a superuser; live leases are kept:
--   rows of the portable edition carry no clock origin, so the extension
--   counts their leases again in full from its own, never shorter):
--     psql -v schema=simba -v to=extension -f move.sql
--   the C extension to the portable edition (a superuser; refused while
--   anything is held: the extension's clock may differ from the wall clock
--   the portable edition counts by, by the steps the extension rode out):
--     psql -v schema=simba -v to=portable -v portable_script=PATH/simba_portable.sql -f move.sql
--
-- Calls wait for the move (its tables are locked). Roles that could call
-- simba_acquire are granted again with simba_grant; the portable edition's
-- objects belong to the schema's owner.

\set ON_ERROR_STOP on
\if :{?schema}
\else
\set schema simba
\endif
BEGIN;
SET LOCAL client_min_messages = warning;
SELECT :'to' = 'extension' AS simba_to_extension, :'to' = 'portable' AS simba_to_portable,
       n.nspowner::regrole AS simba_schema_owner
  FROM pg_catalog.pg_namespace n WHERE n.nspname = :'schema' \gset
\if :simba_to_portable
\elif :simba_to_extension
\else
DO $$ BEGIN RAISE EXCEPTION 'to must be extension or portable' USING ERRCODE = '22023'; END $$;
\endif
LOCK TABLE :"schema".simba_mutex, :"schema".simba_session_lease, :"schema".simba_mutex_queue,
           :"schema".simba_rwlock, :"schema".simba_rwlock_holder, :"schema".simba_semaphore,
           :"schema".simba_semaphore_permit, :"schema".simba_mutex_history IN ACCESS EXCLUSIVE MODE;
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension e WHERE e.extname = 'simba'
                  AND e.extnamespace = :'schema'::regnamespace) AS simba_is_extension \gset
\if :simba_to_extension
\if :simba_is_extension
DO $$ BEGIN RAISE EXCEPTION 'schema already holds the C extension' USING ERRCODE = '42710'; END $$;
\endif
\else
\if :simba_is_extension
\else
DO $$ BEGIN RAISE EXCEPTION 'schema holds no C extension to move from' USING ERRCODE = '42704'; END $$;
\endif
SELECT (SELECT pg_catalog.count(*) FROM :"schema".simba_mutex_status WHERE state <> 'free')
     + (SELECT pg_catalog.count(*) FROM :"schema".simba_semaphore_status)
     + (SELECT pg_catalog.count(*) FROM :"schema".simba_rwlock_status WHERE holders IS NOT NULL)
     + (SELECT pg_catalog.count(*) FROM :"schema".simba_session_status WHERE state <> 'ended') > 0 AS simba_live \gset
\if :simba_live
DO $$
BEGIN
    RAISE EXCEPTION 'simba holds live leases, permits, read-write holds or sessions' USING ERRCODE = '55006',
        HINT = 'Stop the holders (or force-release their mutexes and let permits and sessions end), then move.';
END
$$;
\endif
\endif

ALTER SCHEMA :"schema" RENAME TO simba_moving;
CREATE SCHEMA :"schema" AUTHORIZATION :"simba_schema_owner";
\if :simba_to_extension
-- The portable drop guard (where attached) goes first: the extension's has its name.
DROP EVENT TRIGGER IF EXISTS simba_drop_guard;
CREATE EXTENSION simba SCHEMA :"schema";
\else
SET LOCAL ROLE :"simba_schema_owner";
\set simba_in_transaction 1
\i :portable_script
RESET ROLE;
\endif

-- Every row, by column name (the two editions' tables have the same columns).
SELECT pg_catalog.set_config('simba_move.to', :'schema', true) AS simba_move_to \gset
DO $$
DECLARE
    target text := pg_catalog.current_setting('simba_move.to');
    t text;
    cols text;
BEGIN
    FOREACH t IN ARRAY ARRAY['simba_session_lease', 'simba_mutex', 'simba_mutex_queue', 'simba_rwlock',
                             'simba_rwlock_holder', 'simba_semaphore', 'simba_semaphore_permit',
                             'simba_mutex_history'] LOOP
        SELECT pg_catalog.string_agg(pg_catalog.quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO cols
          FROM pg_catalog.pg_attribute a
         WHERE a.attrelid = pg_catalog.format('%I.%I', target, t)::regclass AND a.attnum > 0 AND NOT a.attisdropped;
        EXECUTE pg_catalog.format('INSERT INTO %I.%I (%s) OVERRIDING SYSTEM VALUE SELECT %s FROM simba_moving.%I',
                                  target, t, cols, cols, t);
    END LOOP;
    -- Each sequence goes on above every value the old one issued.
    FOREACH t IN ARRAY ARRAY['simba_mutex_fence', 'simba_rwlock_fence', 'simba_permit_fence',
                             'simba_mutex_history_id_seq'] LOOP
        EXECUTE pg_catalog.format('SELECT pg_catalog.setval(%L, s.last_value, s.is_called) FROM simba_moving.%I s',
                                  pg_catalog.format('%I.%I', target, t), t);
    END LOOP;
    -- Whoever could take locks before can take them now.
    FOR t IN SELECT a.grantee::regrole::text
               FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
              WHERE p.oid = 'simba_moving.simba_acquire(text, text, interval, interval, uuid)'::regprocedure
                AND a.privilege_type = 'EXECUTE' AND a.grantee NOT IN (0, p.proowner) LOOP
        EXECUTE pg_catalog.format('SELECT %I.simba_grant(%L)', target, t);
    END LOOP;
END
$$;
DROP SCHEMA simba_moving CASCADE;
COMMIT;
