-- Wake-ups (wake.c; docs/design.md, "Protocol", "Wake-ups"): a waiter
-- registers on the connection it LISTENs on with a session-level shared
-- advisory lock per bucket of names (first key 0x53494d42, "SIMB"); a
-- release under notify = 'registered' try-locks its name's bucket
-- (simba_portable_wake) and sends NOTIFY simba only when that fails.

CREATE FUNCTION simba_wait(names text[], waiting boolean DEFAULT true)
RETURNS text[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
DECLARE
    refused text[] := '{}';
    busy integer[] := '{}';   -- buckets given up on in this call
    tries integer := 0;
    n text;
    bucket integer;
BEGIN
    PERFORM simba_portable_enter('simba_wait', false);
    IF names IS NULL OR waiting IS NULL THEN
        RAISE EXCEPTION '% must not be null', CASE WHEN names IS NULL THEN 'names' ELSE 'waiting' END
            USING ERRCODE = '22004';
    ELSIF pg_catalog.array_ndims(names) > 1 THEN
        RAISE EXCEPTION 'names must be a one-dimensional array' USING ERRCODE = '2202E';
    ELSIF pg_catalog.array_position(names, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'names must not contain null' USING ERRCODE = '22004';
    ELSIF '' = ANY (names) THEN
        RAISE EXCEPTION 'names must not contain an empty name' USING ERRCODE = '22023';
    END IF;
    -- All checked first: bad input registers nothing.
    PERFORM simba_portable_name(x, 'a name') FROM pg_catalog.unnest(names) AS x;
    FOREACH n IN ARRAY names LOOP
        bucket := simba_portable_bucket(n);
        IF NOT waiting THEN
            -- Only what this connection registered (an unlock of another's would warn).
            IF EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
                        WHERE l.locktype = 'advisory' AND l.pid = pg_catalog.pg_backend_pid()
                          AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d
                                             WHERE d.datname = pg_catalog.current_database())
                          AND l.classid = 1397312834 AND l.objid = bucket AND l.objsubid = 2
                          AND l.mode = 'ShareLock' AND l.granted) THEN
                PERFORM pg_catalog.pg_advisory_unlock_shared(1397312834, bucket);
            END IF;
            CONTINUE;
        END IF;
        LOOP
            EXIT WHEN NOT bucket = ANY (busy) AND pg_catalog.pg_try_advisory_lock_shared(1397312834, bucket);
            tries := tries + 1;
            IF bucket = ANY (busy) OR tries >= 20 THEN
                busy := busy || bucket;
                refused := refused || n;
                EXIT;
            END IF;
            PERFORM pg_catalog.pg_sleep(0.001);
        END LOOP;
    END LOOP;
    RETURN refused;
END
$$;

-- The lapse waker is a background worker of the C extension: none here, so
-- waiters poll at each lease's end.
CREATE FUNCTION simba_waker()
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
BEGIN
    PERFORM simba_portable_enter('simba_waker', false);
    RETURN false;
END
$$;
