-- simba.max_lease and simba.history take the DBA's value whatever a
-- connection asks: a connection whose startup options set them (PGOPTIONS)
-- without the right to is refused, instead of running with the compiled
-- defaults (security review 2, finding 1)
SET client_min_messages = warning;
CREATE ROLE regress_simba_conn LOGIN;
SELECT simba_grant('regress_simba_conn');
RESET client_min_messages;
\set VERBOSITY terse
\set su :USER
SELECT format('ALTER DATABASE %I SET simba.max_lease = 60', current_database()) \gexec
SELECT format('ALTER DATABASE %I SET simba.history = on', current_database()) \gexec

-- the DBA's values, with no startup options: 60 s
\c -reuse-previous=on "user=regress_simba_conn options=''"
SHOW simba.max_lease;
SELECT simba_acquire('settings', 'a', '100 hours', '0s');
\echo :LAST_ERROR_SQLSTATE
SELECT owner_id FROM simba_acquire('settings', 'a', '30s', '0s');

-- a granted role's startup options cannot switch them: refused at every call
\c -reuse-previous=on "user=regress_simba_conn options='-c simba.max_lease=1000000 -c simba.history=off'"
SELECT simba_acquire('settings', 'b', '100 hours', '0s');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_release('settings', 'a');
\echo :LAST_ERROR_SQLSTATE
SELECT simba_semaphore_acquire('settings-k', 'b', 1, '100 hours');
\echo :LAST_ERROR_SQLSTATE
-- reading the state is still refused: simba does not run at all here
SELECT simba_owner('settings');
\echo :LAST_ERROR_SQLSTATE

-- simba.notify too: a connection cannot make releases skip their NOTIFY
\c -reuse-previous=on "user=regress_simba_conn options='-c simba.notify=registered'"
SELECT simba_release('settings', 'a');
\echo :LAST_ERROR_SQLSTATE

-- a superuser may set them for its own connection
\c -reuse-previous=on "user=":su" options='-c simba.max_lease=2'"
SHOW simba.max_lease;
SELECT simba_acquire('settings-su', 'a', '10s', '0s');
\echo :LAST_ERROR_SQLSTATE

-- nothing above changed the lease a took, and its release is logged
\c -reuse-previous=on "user=regress_simba_conn options=''"
SELECT simba_release('settings', 'a');
\c -reuse-previous=on "user=":su" options=''"
SELECT event, owner_id, owner_role FROM simba_mutex_history WHERE mutex = 'settings' ORDER BY id;

SELECT format('ALTER DATABASE %I RESET simba.max_lease', current_database()) \gexec
SELECT format('ALTER DATABASE %I RESET simba.history', current_database()) \gexec
DROP OWNED BY regress_simba_conn;
DROP ROLE regress_simba_conn;
