-- Housekeeping (mutex.c, gc.c; docs/design.md, "Housekeeping"). The
-- portable edition starts no collector of its own (a background worker
-- needs the C library): the owner schedules simba_mutex_gc (pg_cron, or
-- any job runner) as docs/portable.md shows.

-- Rows of mutexes idle for idle_for or longer (released, or their lease or
-- session ended), with no live fair queue entry and no transaction holding
-- them locked (skipped, never waited for), at most max_rows. Fences come
-- from a sequence, so a name used again still gets a fence above every
-- earlier one.
CREATE FUNCTION simba_mutex_gc(idle_for interval DEFAULT '0 seconds', max_rows bigint DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, :"schema", pg_temp
AS $$
DECLARE
    t timestamptz;
    cutoff timestamptz;
    deleted bigint;
BEGIN
    PERFORM simba_portable_enter('simba_mutex_gc', true);
    IF simba_portable_bad_duration($1, true) THEN
        PERFORM simba_portable_duration($1, 'idle_for', true);
    END IF;
    IF $2 <= 0 THEN
        RAISE EXCEPTION 'max_rows must be positive' USING ERRCODE = '22023',
            HINT = 'Pass NULL to remove every idle row.';
    END IF;
    t := pg_catalog.clock_timestamp();
    BEGIN
        cutoff := t - $1;
    EXCEPTION WHEN datetime_field_overflow THEN
        cutoff := '-infinity';
    END;
    DELETE FROM simba_mutex AS d WHERE d.mutex IN
        (SELECT m.mutex FROM simba_mutex AS m
          WHERE CASE WHEN m.owner_id IS NULL THEN m.released_at IS NULL OR m.released_at <= cutoff
                     ELSE COALESCE(simba_session_time(m.session_id, 'transition_at', NULL), m.transition_at) <= cutoff END
            AND NOT simba_portable_live(m, t, true)
            AND NOT EXISTS (SELECT 1 FROM simba_mutex_queue AS q WHERE q.mutex = m.mutex AND q.transition_at > t)
          LIMIT $2 FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS deleted = ROW_COUNT;
    RETURN deleted;
END
$$;
