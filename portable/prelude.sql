-- simba, portable edition: the same SQL API as the C extension, written in
-- SQL and PL/pgSQL only, installed by a database's owner with psql where no
-- C library may be loaded (managed PostgreSQL). `make portable` writes the
-- script build/portable/simba_portable.sql from the extension's install
-- script: its tables, types, views and comments as they are, each C
-- function replaced by the PL/pgSQL of the same name in portable/*.sql
-- (portable/build.sh). docs/portable.md, "What differs, and why", lists what it
-- cannot do as the C extension does, and why.
--
--   psql -v schema=simba -f simba_portable.sql "dbname=app user=app_owner"
--
-- Every lock function is SECURITY DEFINER, owned by the installing role
-- (the tables are its, written only through the functions), with its
-- search_path pinned to pg_catalog, the schema, pg_temp last. Inside it
-- current_user is the owner, so the caller's role is read from the
-- session: its SET ROLE, else its login role (simba_portable_caller).

\set ON_ERROR_STOP on
\if :{?schema}
\else
\set schema simba
\endif

-- One transaction, unless the caller runs the script inside its own
-- (-v simba_in_transaction=1: portable/from_extension.sql does).
\if :{?simba_in_transaction}
\else
BEGIN;
\endif
SET LOCAL client_min_messages = warning;
SELECT pg_catalog.to_regclass(pg_catalog.format('%I.simba_mutex', :'schema')) IS NOT NULL AS simba_present,
       EXISTS (SELECT 1 FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
                WHERE e.extname = 'simba' AND n.nspname = :'schema') AS simba_extension \gset
\if :simba_extension
DO $$
BEGIN
    RAISE EXCEPTION 'the C extension simba is installed in this schema' USING ERRCODE = '42710',
        HINT = 'To move to the portable edition, see docs/portable.md, "Moving between editions".';
END
$$;
\elif :simba_present
\echo The portable edition of simba is already installed in schema :schema, nothing to do.
ROLLBACK;
\quit
\endif
CREATE SCHEMA IF NOT EXISTS :"schema";
-- pg_temp last: the installing session's temporary tables never stand in for simba's.
SET LOCAL search_path = :"schema", pg_catalog, pg_temp;

-- What the C extension takes from superuser settings (simba.history,
-- simba.max_lease, simba.notify): one row the owner edits, which no
-- connection can override.
CREATE TABLE simba_settings (
    id        boolean  PRIMARY KEY DEFAULT true CHECK (id),
    history   boolean  NOT NULL DEFAULT false,
    max_lease interval NOT NULL DEFAULT '7 days' CHECK (max_lease > interval '0'),
    notify    text     NOT NULL DEFAULT 'registered' CHECK (notify IN ('always', 'registered')),
    drop_live_leases boolean NOT NULL DEFAULT false,
    edition   text     NOT NULL DEFAULT 'portable 1.4' CHECK (edition = 'portable 1.4')
);
COMMENT ON TABLE simba_settings IS
  'simba (portable edition): its settings, one row the owner edits: history (log changes of hands to simba_mutex_history), max_lease (the longest ttl + transition or permit ttl), notify (always, or registered: a release sends NOTIFY simba only while a waiter registered with simba_wait); drop_live_leases (let DROP SCHEMA and DROP OWNED run while leases are live); edition: the installed version';
INSERT INTO simba_settings DEFAULT VALUES;

CREATE TYPE simba_portable_caller AS (role name, roleid oid, sysid bigint);

-- The caller, as the C extension's simba_enter has it: the role the call
-- runs for (by name and OID, with the cluster's system identifier, so a
-- restore elsewhere matches roles by name), and the functions that write
-- refuse a read-only transaction or a standby as it does.
--
-- Cost: the lock functions' time goes to starting their statements' plans.
-- The helpers here and the checks the functions make are therefore simple
-- expressions (assignments and IF conditions, which PL/pgSQL evaluates
-- without an executor), and never PERFORM or SELECT; the SQL ones are
-- inlined where they are called.
CREATE FUNCTION simba_portable_enter(fn text, writes boolean)
RETURNS simba_portable_caller
LANGUAGE plpgsql VOLATILE -- its UNLISTEN is no statement of a STABLE function
AS $$
DECLARE
    c simba_portable_caller;
BEGIN
    -- A maintenance command (ANALYZE, VACUUM, CREATE INDEX, REFRESH
    -- MATERIALIZED VIEW) runs index expressions as the table's owner, but the
    -- role read below stays the session's: the lease would be the DBA's.
    -- SQL cannot ask whether it runs in a security-restricted operation,
    -- but UNLISTEN is refused there (and is a no-op for a channel nobody
    -- listens on).
    BEGIN
        UNLISTEN simba_portable_restricted_probe;
    EXCEPTION WHEN insufficient_privilege THEN
        RAISE EXCEPTION 'cannot call %() inside a security-restricted operation', fn
            USING ERRCODE = '42501',
                  DETAIL = 'Maintenance commands (VACUUM, ANALYZE, CREATE INDEX, REFRESH MATERIALIZED VIEW) and index expressions run other roles'' code: a lease taken there would not be the caller''s.';
    END;
    IF writes AND pg_catalog.current_setting('transaction_read_only')::boolean THEN
        -- PreventCommandIfReadOnly's message, with the bare function name
        RAISE EXCEPTION 'cannot execute % in a read-only transaction', fn
            USING ERRCODE = '25006',
                  HINT = 'Connect to the primary (target_session_attrs=read-write).';
    END IF;
    c.role := CASE pg_catalog.current_setting('role') WHEN 'none' THEN session_user
                   ELSE pg_catalog.current_setting('role') END;
    c.roleid := pg_catalog.to_regrole(pg_catalog.quote_ident(c.role))::oid;
    c.sysid := (pg_catalog.pg_control_system()).system_identifier;
    RETURN c;
END
$$;

-- SIMBA_SAME_ROLE (simba.h): a row's role is the caller's, by OID in this
-- cluster, by name in another (a restore elsewhere). Inlined where called.
CREATE FUNCTION simba_portable_same_role(role name, roleid oid, sysid bigint, c simba_portable_caller)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$ SELECT CASE WHEN sysid = c.sysid THEN roleid = c.roleid ELSE role = c.role END $$;

-- Argument checks, with the C extension's SQLSTATEs and messages: the
-- test (inlined), then the error.
CREATE FUNCTION simba_portable_bad_name(v text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$ SELECT v IS NULL OR v = '' OR pg_catalog.length(v) > 256 $$;

CREATE FUNCTION simba_portable_name(v text, what text)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF v IS NULL THEN
        RAISE EXCEPTION '% must not be null', what USING ERRCODE = '22004';
    ELSIF v = '' THEN
        RAISE EXCEPTION '% must not be empty', what USING ERRCODE = '22023';
    ELSIF pg_catalog.length(v) > 256 THEN
        RAISE EXCEPTION '% must be at most 256 characters', what USING ERRCODE = '22023',
            DETAIL = pg_catalog.format('It has %s characters.', pg_catalog.length(v));
    END IF;
    RETURN true;
END
$$;

-- A day or a month has no fixed length (DST, calendars): refused.
CREATE FUNCTION simba_portable_bad_duration(v interval, allow_zero boolean)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
SELECT v IS NULL OR pg_catalog.date_part('year', v) <> 0 OR pg_catalog.date_part('month', v) <> 0
       OR pg_catalog.date_part('day', v) <> 0 OR v < interval '0' OR (NOT allow_zero AND v = interval '0')
$$;

CREATE FUNCTION simba_portable_duration(v interval, what text, allow_zero boolean)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF v IS NULL THEN
        RAISE EXCEPTION '% must not be null', what USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.date_part('year', v) <> 0 OR pg_catalog.date_part('month', v) <> 0
       OR pg_catalog.date_part('day', v) <> 0 THEN
        RAISE EXCEPTION '% must be a fixed duration', what USING ERRCODE = '22023',
            DETAIL = 'Days and months have no fixed length.',
            HINT = 'Write it in hours, minutes or seconds, for example ''48 hours''.';
    END IF;
    IF v < interval '0' OR (NOT allow_zero AND v = interval '0') THEN
        RAISE EXCEPTION '% must %', what, CASE WHEN allow_zero THEN 'not be negative' ELSE 'be positive' END
            USING ERRCODE = '22023';
    END IF;
    RETURN true;
END
$$;

-- A lease of ttl and transition from t, checked against max_lease (of
-- simba_settings): its ttl_at and transition_at.
CREATE FUNCTION simba_portable_lease(t timestamptz, ttl interval, transition interval, max_lease interval,
                                     OUT ttl_at timestamptz, OUT transition_at timestamptz)
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF simba_portable_bad_duration(ttl, false) OR simba_portable_bad_duration(transition, true) THEN
        PERFORM simba_portable_duration(ttl, 'ttl', false), simba_portable_duration(transition, 'transition', true);
    END IF;
    -- ttl first: two huge durations would overflow their sum (22008)
    IF ttl > max_lease OR transition > max_lease - ttl THEN
        RAISE EXCEPTION 'lease must be at most simba.max_lease (% s)', pg_catalog.date_part('epoch', max_lease)
            USING ERRCODE = '22023',
                  HINT = 'Ask for a shorter ttl or transition, or have the owner raise max_lease in simba_settings.';
    END IF;
    -- Past the timestamp range PostgreSQL raises 22008 itself (unreachable
    -- while max_lease holds).
    ttl_at := t + ttl;
    transition_at := ttl_at + transition;
END
$$;

CREATE FUNCTION simba_portable_bucket(name text)
RETURNS integer
LANGUAGE sql IMMUTABLE
AS $$ SELECT (pg_catalog.hashtext(name) & 31) $$;

-- A NOTIFY simba for a released name, as simba_wake (wake.c) sends it:
-- always, or under notify = 'registered' (of simba_settings) only when a
-- waiter registered on the name's bucket (simba_wait holds it shared, so
-- the try-lock fails). The try-lock here is exclusive (SQL has no
-- RowExclusiveLock on advisory locks): two releases of one bucket at once
-- both notify, never neither. True when it notified.
CREATE FUNCTION simba_portable_wake(name text, notify text)
RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
SELECT CASE WHEN notify = 'always' THEN pg_catalog.pg_notify('simba', name) IS NOT NULL
            WHEN pg_catalog.pg_try_advisory_xact_lock(1397312834, simba_portable_bucket(name)) THEN false
            ELSE pg_catalog.pg_notify('simba', name) IS NOT NULL END
$$;
