-- simba chaos suite: the test's own tables and triggers, after CREATE EXTENSION
-- simba (test/chaos/run.sh, and test/ha/run.sh on the leader). Test-only: the
-- extension is never changed for the test.

-- The ledgers: every row is written by a fenced transaction of a worker.
CREATE TABLE ledger (id bigserial PRIMARY KEY, mutex text NOT NULL, writer text NOT NULL,
    fence bigint NOT NULL, worker int NOT NULL, seq bigint NOT NULL,
    written_at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE rw_ledger (id bigserial PRIMARY KEY, rwlock text NOT NULL, writer text NOT NULL,
    mode text NOT NULL, fence bigint NOT NULL, worker int NOT NULL, seq bigint NOT NULL,
    written_at timestamptz NOT NULL DEFAULT clock_timestamp());

-- The server's record of read-write holds and fair queue entries. simba keeps
-- only their present (simba_rwlock_holder, simba_mutex_queue), not a history,
-- so a trigger logs every change of their rows, old and new (and the grants of
-- simba_mutex rows, below); the checker orders the changes by
-- pg_xact_commit_timestamp(xmin), as it orders the ledger and
-- simba_mutex_history. `at` is the server's clock at the change.
CREATE TABLE chaos_audit (id bigserial PRIMARY KEY, tbl name NOT NULL, op text NOT NULL,
    old jsonb, new jsonb, at timestamptz NOT NULL DEFAULT clock_timestamp());
-- Named in full: simba's statements run under a search path of their own.
CREATE FUNCTION chaos_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.chaos_audit (tbl, op, old, new)
    VALUES (TG_TABLE_NAME, TG_OP,
            CASE WHEN TG_OP <> 'INSERT' THEN pg_catalog.to_jsonb(OLD) END,
            CASE WHEN TG_OP <> 'DELETE' THEN pg_catalog.to_jsonb(NEW) END);
    RETURN NULL;
END $$;
CREATE TRIGGER chaos_audit AFTER INSERT OR UPDATE OR DELETE ON simba_rwlock_holder
    FOR EACH ROW EXECUTE FUNCTION chaos_audit();
CREATE TRIGGER chaos_audit AFTER INSERT OR UPDATE OR DELETE ON simba_mutex_queue
    FOR EACH ROW EXECUTE FUNCTION chaos_audit();
-- Every grant of a mutex (a new fence), for the clock origin it was decided
-- under: after a failover a queue entry of the old clock counts again in
-- full from the new one, so a fair grant judges the queue by its own origin.
CREATE TRIGGER chaos_audit AFTER UPDATE ON simba_mutex
    FOR EACH ROW WHEN (OLD.fence IS DISTINCT FROM NEW.fence) EXECUTE FUNCTION chaos_audit();
