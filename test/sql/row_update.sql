-- The acquire and the release change their row through the table AM, not
-- an UPDATE (extension/row_update.c): what an UPDATE would have done must
-- still happen: index entries of updates that are not HOT, errors that
-- leave the row as it was, the triggers a user adds.
SET client_min_messages = warning;
SET simba.drop_live_leases = on;
DROP EXTENSION simba;
CREATE EXTENSION simba;
CREATE EXTENSION IF NOT EXISTS amcheck;
RESET client_min_messages;
\set VERBOSITY default
\set SHOW_CONTEXT never

-- A tenure under a session sets session_id, which the partial index
-- simba_mutex_session covers, and its release clears it: neither update is
-- HOT. Every row version must keep its entries in both indexes.
SELECT session_id AS sid FROM simba_session_open('1h', '0s') \gset
SELECT count(*) FILTER (WHERE a.owner_id = 'a') AS taken, count(*) FILTER (WHERE r) AS released
  FROM generate_series(1, 10) AS round, generate_series(1, 30) AS i,
       LATERAL simba_acquire('ru' || i, 'a', '10s', '5s', :'sid') AS a,
       LATERAL simba_release('ru' || i, 'a') AS r;
SELECT count(*) AS held FROM generate_series(1, 30) AS i,
       LATERAL simba_acquire('ru' || i, 'a', '10s', '5s', :'sid') AS a WHERE a.owner_id = 'a';
-- found through each index, as every session close and lookup by name finds them
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT count(*) AS by_session FROM simba_mutex WHERE session_id = :'sid';
SELECT count(*) AS by_name FROM generate_series(1, 30) AS i, simba_mutex AS m WHERE m.mutex = 'ru' || i;
RESET enable_seqscan;
RESET enable_bitmapscan;
-- every heap tuple has its index entries (heapallindexed)
SELECT bt_index_check('simba_mutex_pkey', true) AS pkey_ok, bt_index_check('simba_mutex_session', true) AS session_ok;
SELECT simba_session_close(:'sid') AS closed;
SELECT count(*) AS left_in_session_index FROM simba_mutex WHERE session_id IS NOT NULL;

-- A version at the top of bigint: the holder's acquire and its release
-- raise 22003, as the UPDATE's version + 1 did, and the row is unchanged.
SELECT owner_id, fence FROM simba_acquire('top', 'a', '10s', '5s');
UPDATE simba_mutex SET version = 9223372036854775807 WHERE mutex = 'top';
\set VERBOSITY sqlstate
SELECT owner_id FROM simba_acquire('top', 'a', '10s', '5s');
SELECT simba_release('top', 'a');
\set VERBOSITY default
SELECT owner_id, version, fence FROM simba_owner('top');

-- A trigger a user adds to simba_mutex (an audit trail) sees every change
-- of the acquire and the release, as it saw their UPDATEs; the history is
-- logged once per change, by its trigger on that path.
CREATE TABLE seen (mutex text, owner_id text, fence bigint);
CREATE FUNCTION note_change() RETURNS trigger LANGUAGE plpgsql AS
  $$BEGIN INSERT INTO seen VALUES (NEW.mutex, NEW.owner_id, NEW.fence); RETURN NEW; END$$;
CREATE TRIGGER note AFTER UPDATE ON simba_mutex FOR EACH ROW EXECUTE FUNCTION note_change();
SELECT owner_id FROM simba_acquire('t', 'a');
SET simba.history = on;
SELECT owner_id, fence FROM simba_acquire('t', 'a');
SELECT simba_release('t', 'a');
SELECT owner_id, fence FROM simba_acquire('t', 'b');
SELECT simba_release('t', 'a') AS not_the_holder;
RESET simba.history;
SELECT owner_id, fence FROM seen ORDER BY fence, owner_id NULLS FIRST;
SELECT event, owner_id, fence FROM simba_mutex_history WHERE mutex = 't' ORDER BY id;
-- a BEFORE trigger that refuses the change refuses the release, which changes nothing
CREATE FUNCTION refuse_change() RETURNS trigger LANGUAGE plpgsql AS
  $$BEGIN RAISE EXCEPTION 'refused by the audit' USING ERRCODE = 'P0001'; END$$;
CREATE TRIGGER refuse BEFORE UPDATE ON simba_mutex FOR EACH ROW EXECUTE FUNCTION refuse_change();
SELECT owner_id FROM simba_acquire('t', 'c', '1s', '0s');
SELECT simba_release('t', 'b');
DROP TRIGGER refuse ON simba_mutex;
SELECT owner_id, fence FROM simba_owner('t');
DROP TRIGGER note ON simba_mutex;
DROP TABLE seen;
DROP FUNCTION note_change();
DROP FUNCTION refuse_change();

-- What only an executor does makes the acquire and the release write their
-- row by an UPDATE (row_way): a DBA's CHECK constraint, added NOT VALID, is
-- enforced on every later change as it is on a first use's INSERT, and an
-- error leaves the row as it was.
SELECT owner_id FROM simba_acquire('ck', 'a', '10s', '5s');
ALTER TABLE simba_mutex ADD CONSTRAINT regress_no_z CHECK (owner_id IS DISTINCT FROM 'z') NOT VALID;
SELECT simba_release('ck', 'a');
\set VERBOSITY sqlstate
SELECT owner_id FROM simba_acquire('ck', 'z', '10s', '5s');
\set VERBOSITY default
SELECT owner_id, version FROM simba_mutex WHERE mutex = 'ck';
ALTER TABLE simba_mutex DROP CONSTRAINT regress_no_z;
-- a NOT NULL column a DBA set gets no NULL: the release raises 23502, the holder keeps it
SELECT owner_id FROM simba_acquire('nn', 'a', '10s', '5s');
DELETE FROM simba_mutex WHERE owner_id IS NULL;
ALTER TABLE simba_mutex ALTER owner_id SET NOT NULL;
\set VERBOSITY sqlstate
SELECT simba_release('nn', 'a');
\set VERBOSITY default
SELECT owner_id FROM simba_mutex WHERE mutex = 'nn';
ALTER TABLE simba_mutex ALTER owner_id DROP NOT NULL;
-- a stored generated column stays current
ALTER TABLE simba_mutex ADD COLUMN regress_held boolean GENERATED ALWAYS AS (owner_id IS NOT NULL) STORED;
SELECT owner_id FROM simba_acquire('gen', 'a', '10s', '5s');
SELECT simba_release('gen', 'a');
SELECT regress_held FROM simba_mutex WHERE mutex = 'gen';
SELECT owner_id FROM simba_acquire('gen', 'a', '10s', '5s');
SELECT regress_held FROM simba_mutex WHERE mutex = 'gen';
ALTER TABLE simba_mutex DROP COLUMN regress_held;
-- an AFTER ROW trigger with a transition table sees each change
CREATE TABLE seen_batch (mutex text, owner_id text);
CREATE FUNCTION note_batch() RETURNS trigger LANGUAGE plpgsql AS
  $$BEGIN INSERT INTO seen_batch SELECT mutex, owner_id FROM changed; RETURN NULL; END$$;
CREATE TRIGGER note_batch AFTER UPDATE ON simba_mutex REFERENCING NEW TABLE AS changed
  FOR EACH ROW EXECUTE FUNCTION note_batch();
SELECT simba_release('gen', 'a');
SELECT owner_id FROM simba_acquire('gen', 'b', '10s', '5s');
SELECT mutex, owner_id FROM seen_batch;
DROP TRIGGER note_batch ON simba_mutex;
DROP FUNCTION note_batch();
DROP TABLE seen_batch;

-- A DBA's expression index is maintained as the extension's owner under
-- simba's path, not as the caller: a granted role whose own upper()
-- comes first in its path does not change the entries, and a function
-- the caller may not run does not stop its release. (PL/pgSQL: run, not
-- inlined into the index's expression once for all.)
CREATE FUNCTION regress_norm(t text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS 'BEGIN RETURN upper(t); END';
CREATE INDEX regress_simba_mutex_norm ON simba_mutex (regress_norm(owner_id));
CREATE ROLE regress_simba_rowupd;
SELECT simba_grant('regress_simba_rowupd');
CREATE SCHEMA regress_shadow;
CREATE FUNCTION regress_shadow.upper(text) RETURNS text LANGUAGE sql IMMUTABLE AS $$SELECT 'shadowed'$$;
GRANT USAGE ON SCHEMA regress_shadow TO regress_simba_rowupd;
SET ROLE regress_simba_rowupd;
SET search_path = regress_shadow, pg_catalog, public;
SELECT owner_id FROM simba_acquire('ex', 'c', '10s', '5s');
SELECT simba_release('ex', 'c');
SELECT owner_id FROM simba_acquire('ex', 'c', '10s', '5s');
RESET search_path;
RESET ROLE;
\set VERBOSITY sqlstate
SELECT bt_index_check('regress_simba_mutex_norm', true) AS norm_ok;
\set VERBOSITY default
REVOKE EXECUTE ON FUNCTION regress_norm(text) FROM PUBLIC;
SET ROLE regress_simba_rowupd;
\set VERBOSITY sqlstate
SELECT simba_release('ex', 'c') AS released;
\set VERBOSITY default
RESET ROLE;
SELECT owner_id FROM simba_mutex WHERE mutex = 'ex';
DROP INDEX regress_simba_mutex_norm;
DROP FUNCTION regress_norm(text);
DROP SCHEMA regress_shadow CASCADE;
DROP OWNED BY regress_simba_rowupd;
DROP ROLE regress_simba_rowupd;
-- a fresh install for the tests after this one (the dropped column stays in the table)
SET client_min_messages = warning;
DROP EXTENSION simba;
CREATE EXTENSION simba;
RESET client_min_messages;
RESET simba.drop_live_leases;
