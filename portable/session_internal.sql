-- The owner-only helpers the lock statements share (docs/design.md,
-- "Sessions"): whether a session has ended, and its times.

-- A session missing from the statement's snapshot counts as live: a row
-- referring to it was written after that snapshot, while it lived. An
-- ended session's row is locked FOR SHARE when lock, so a keepalive in
-- flight either committed first (then it is live again) or finds it ended.
CREATE FUNCTION simba_session_ended(session_id uuid, t timestamptz, origin timestamptz, lock boolean)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
BEGIN
    IF NOT EXISTS (SELECT 1 FROM simba_session_lease s WHERE s.session_id = $1 AND s.transition_at <= $2) THEN
        RETURN false;
    END IF;
    IF NOT lock THEN
        RETURN true;
    END IF;
    PERFORM 1 FROM simba_session_lease s WHERE s.session_id = $1 AND s.transition_at <= $2 FOR SHARE;
    RETURN FOUND;
END
$$;

CREATE FUNCTION simba_session_time(session_id uuid, col text, origin timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
BEGIN
    IF col = 'ttl_at' THEN
        RETURN (SELECT s.ttl_at FROM simba_session_lease s WHERE s.session_id = $1);
    ELSIF col = 'transition_at' THEN
        RETURN (SELECT s.transition_at FROM simba_session_lease s WHERE s.session_id = $1);
    END IF;
    RAISE EXCEPTION 'simba: col must be ttl_at or transition_at' USING ERRCODE = '22023';
END
$$;
