
-- The drop guard where this role may create an event trigger (a superuser,
-- or a managed service's admin role); elsewhere docs/portable.md's way
-- applies ("What differs, and why": dropping).
DO $$
BEGIN
    CREATE EVENT TRIGGER simba_drop_guard ON ddl_command_start
      WHEN TAG IN ('DROP SCHEMA', 'DROP OWNED')
      EXECUTE FUNCTION simba_drop_guard();
EXCEPTION WHEN insufficient_privilege OR duplicate_object THEN
    RAISE NOTICE 'simba: no drop guard (%): do not drop the schema while leases are live', SQLERRM;
END
$$;

-- Nothing for PUBLIC or anyone but the owner, whatever the default
-- privileges of the installing role: the owner grants with simba_grant.
SELECT simba_strip_privileges(false) AS simba_revoked \gset
\if :{?simba_in_transaction}
\else
COMMIT;
\endif
