-- whose lease a call takes: the role whose privileges it runs with, by OID
-- (security review 2, findings 2 and 8)
SET client_min_messages = warning;
CREATE ROLE regress_simba_app;
CREATE ROLE regress_simba_stranger;
SELECT simba_grant('regress_simba_app');
CREATE SCHEMA regress_caller AUTHORIZATION regress_simba_app;
RESET client_min_messages;
\set VERBOSITY terse

-- a granted role's code run by the DBA's maintenance (an index expression
-- during ANALYZE) is a security-restricted operation: simba refuses there,
-- so it can neither release the DBA's lease nor take one as the superuser
SELECT owner_id, owner_role FROM simba_acquire('dba-lock', 'dba', '1h', '0s');
SET ROLE regress_simba_app;
CREATE TABLE regress_caller.trap (x int);
CREATE FUNCTION regress_caller.trap_f(int) RETURNS int IMMUTABLE LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('regress.armed', true) = 'on' THEN
    PERFORM public.simba_release('dba-lock', 'dba');
    PERFORM public.simba_acquire('trap-lock', 'dba', '1h', '0s');
  END IF;
  RETURN $1;
END $$;
INSERT INTO regress_caller.trap SELECT generate_series(1, 10);
CREATE INDEX trap_i ON regress_caller.trap (regress_caller.trap_f(x));
RESET ROLE;
SET regress.armed = on;
ANALYZE regress_caller.trap;
\echo :LAST_ERROR_SQLSTATE
RESET regress.armed;
SELECT mutex, owner_id, owner_role, state FROM simba_mutex_status
 WHERE mutex IN ('dba-lock', 'trap-lock') ORDER BY mutex;

-- a SECURITY DEFINER wrapper runs as its owner: the lease is the owner's,
-- never the ungranted caller's
SET ROLE regress_simba_app;
CREATE FUNCTION regress_caller.take(m text) RETURNS name SECURITY DEFINER LANGUAGE sql
  SET search_path = public, pg_catalog AS $$ SELECT owner_role FROM simba_acquire(m, 'wrapped', '1h', '0s') $$;
GRANT USAGE ON SCHEMA regress_caller TO regress_simba_stranger;
GRANT EXECUTE ON FUNCTION regress_caller.take(text) TO regress_simba_stranger;
RESET ROLE;
SET ROLE regress_simba_stranger;
SELECT regress_caller.take('wrapped') AS lease_role;
SELECT simba_acquire('wrapped', 'wrapped', '1h', '0s');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- a dropped role's lease belongs to nobody, even to a new role of the same
-- name; a renamed role keeps its lease
CREATE ROLE regress_simba_temp;
SELECT simba_grant('regress_simba_temp');
SET ROLE regress_simba_temp;
SELECT fence AS temp_fence FROM simba_acquire('by-oid', 'w', '1h', '0s') \gset
RESET ROLE;
DROP OWNED BY regress_simba_temp;
DROP ROLE regress_simba_temp;
CREATE ROLE regress_simba_temp;
SELECT simba_grant('regress_simba_temp');
SET ROLE regress_simba_temp;
SELECT simba_fence_check('by-oid', 'w', :temp_fence);
\echo :LAST_ERROR_SQLSTATE
SELECT simba_release('by-oid', 'w') AS new_role_released;
SELECT fence = :temp_fence AS old_tenure_stays FROM simba_acquire('by-oid', 'w', '1h', '0s');
RESET ROLE;
ALTER ROLE regress_simba_app RENAME TO regress_simba_renamed;
SET ROLE regress_simba_renamed;
SELECT owner_id, owner_role FROM simba_acquire('wrapped', 'wrapped', '1h', '0s');
SELECT simba_release('wrapped', 'wrapped') AS renamed_released;
RESET ROLE;
ALTER ROLE regress_simba_renamed RENAME TO regress_simba_app;

DROP SCHEMA regress_caller CASCADE;
DROP OWNED BY regress_simba_app, regress_simba_stranger, regress_simba_temp;
DROP ROLE regress_simba_app, regress_simba_stranger, regress_simba_temp;
