-- The clock origin file removed, replaced or corrupted while this backend
-- counts from it (security review, finding 4; clock.c). A write that
-- counted from the old origin does not commit (40001), the next call counts
-- from the file's origin, and a lease taken under the old one counts again
-- in full from it. Reads that meet only this origin's rows go on.
-- COPY TO PROGRAM runs in the data directory, as the superuser; cat drains
-- the row COPY writes (the command alone may exit first: a broken pipe).
CREATE FUNCTION pg_temp.clock_file(cmd text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format('COPY (SELECT 1) TO PROGRAM %L',
                 replace(cmd, 'FILE', format('simba_clock.%s.*', 'simba_mutex'::regclass::oid)) || '; cat >/dev/null');
END $$;
\set VERBOSITY sqlstate

SELECT owner_id FROM simba_acquire('clock_file', 'a', '1h', '1s');
SELECT origin AS before FROM simba_clock() \gset

-- Removed.
SELECT pg_temp.clock_file('rm -f FILE');
SELECT origin = :'before' AS same_origin FROM simba_clock();
SELECT owner_id FROM simba_acquire('clock_file', 'b', '1h', '1s');
SELECT owner_id FROM simba_acquire('clock_file_2', 'a', '1h', '1s');
SELECT origin > :'before' AS new_origin FROM simba_clock();
SELECT owner_id FROM simba_acquire('clock_file', 'b', '1h', '1s');
SELECT owner_id FROM simba_acquire('clock_file_2', 'a', '1h', '1s');
SELECT origin AS second FROM simba_clock() \gset

-- Replaced by a newer origin (what another backend writes after a removal).
SELECT pg_temp.clock_file('for f in FILE; do
  echo "simba clock 1 $(( $(date +%s%6N) - 946684800000000 )) $(awk ''{printf "%.0f", $1 * 1000000}'' /proc/uptime)" >$f.new &&
  mv $f.new $f; done');
SELECT owner_id FROM simba_acquire('clock_file_3', 'a', '1h', '1s');
SELECT origin > :'second' AS newer_origin FROM simba_clock();
SELECT owner_id FROM simba_acquire('clock_file', 'b', '1h', '1s');
SELECT owner_id FROM simba_acquire('clock_file_2', 'b', '1h', '1s');
SELECT owner_id FROM simba_acquire('clock_file_3', 'a', '1h', '1s');

-- Corrupt: a write refuses (XX001) until the file is removed; then once
-- more (40001, the old origin), then the next call counts from a new one.
SELECT pg_temp.clock_file('for f in FILE; do echo garbage >$f.new && mv $f.new $f; done');
SELECT owner_id FROM simba_acquire('clock_file_4', 'a', '1h', '1s');
SELECT owner_id FROM simba_acquire('clock_file_4', 'a', '1h', '1s');
SELECT pg_temp.clock_file('rm -f FILE');
SELECT owner_id FROM simba_acquire('clock_file_4', 'a', '1h', '1s');
SELECT owner_id FROM simba_acquire('clock_file_4', 'a', '1h', '1s');
SELECT owner_id FROM simba_acquire('clock_file', 'b', '1h', '1s');

SELECT simba_force_release(m) FROM unnest(ARRAY['clock_file', 'clock_file_2', 'clock_file_3', 'clock_file_4']) m;
