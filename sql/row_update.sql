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
