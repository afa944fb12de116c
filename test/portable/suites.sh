#!/usr/bin/env bash
# The pg_regress (test/sql/) and isolation (test/specs/) suites against the
# portable edition (portable/, `make portable`), on the server in libpq's
# environment as a superuser, as test/pg-suites.sh runs them against the C
# extension: a database per run, SIMBA_SUITE_JOBS (default 2) runs at once.
#
# The test databases belong to a role without superuser, which installs the
# script into their schema public (where CREATE EXTENSION puts the C
# extension, so the outputs name the same schema) and runs the suites, as a
# managed service's admin role would. It has CREATEROLE because the tests
# create and drop their own roles (regress_simba_*, renamed regress_porta_*
# here, below), as that admin role
# may; each CREATE ROLE of a test is followed by a GRANT of the role to its
# creator, so that it may SET ROLE to it as the tests do (a superuser needs
# no membership; PostgreSQL 16 grants it with createrole_self_grant).
#
# Each test runs as an edition-specific copy, made with line-for-line
# substitutions applied alike to the test and to its expected output (whose
# echo of the input they match): a reinstall (DROP EXTENSION simba; CREATE
# EXTENSION simba;) drops simba's objects from public and runs the script
# again (build/portable/suites/reinstall.sql), SET/RESET simba.history,
# max_lease, notify and drop_live_leases update simba_settings, and CREATE
# ROLE is followed by its GRANT to the creator (above). Nothing else
# of the expected outputs changes, but the database's name in them; where
# the edition answers otherwise by design, test/portable/expected/NAME.out
# replaces the expected output, listed here:
#   bad_input, rwlock: max_lease's HINT names simba_settings, not a superuser's GUC; rwlock: no
#     drop guard without an event trigger, which only a superuser may create (DROP EXTENSION: 42704)
#   session: the same drop guard
#   gc, history, roles, wait: SHOW simba.* (no GUCs); a non-owner's UPDATE of simba_settings
#     is refused by the table's privileges, not as a superuser-only GUC
#   status: an error raised in PL/pgSQL carries a CONTEXT line
#   security: the lock functions are SECURITY DEFINER with search_path pinned (pg_proc listing)
#   caller: in a SECURITY DEFINER wrapper the caller is the session's role (current_user is
#     not visible to simba's own SECURITY DEFINER functions), not the wrapper's owner
#   snapshot_isolation, session_keepalive_race, session_close: under REPEATABLE READ and
#     SERIALIZABLE PL/pgSQL decides on the transaction's snapshot, not the latest committed
#     data: a stale loss or 40001 where the C extension wins or loses on fresh data (never a
#     second holder)
#
# Left out, each for a reason of the edition (docs/portable.md, "What differs, and why"):
skip_reasons=(
  "clock_file: simba's clock file and origin are the C extension's; the portable clock is clock_timestamp(), no origin"
  "clock_origin_file: the same (the cluster's clock origin file)"
  "gc_worker: the background worker is the C library's; the portable edition has none"
  "row_update: tests the C extension's in-place row update (row_update.c) with amcheck"
  "upgrade: the C extension's upgrade path 1.0 -> 1.4 (ALTER EXTENSION UPDATE)"
  "settings: tests superuser GUCs refused in startup options; simba_settings is a table only its owner writes"
  "hijack: simba's functions find their objects by the schema's name (SET search_path), not its OID: renaming it breaks them"
  "lifecycle: DROP EXTENSION/DROP OWNED guards, PREPARE TRANSACTION refusal and CREATE EXTENSION SCHEMA are the C extension's"
)
#
#   test/portable/suites.sh [--skip "NAME ..."]
#
# Prints each run's "test NAME ... ok" lines (the whole output of a run that
# failed) and every diff; exits non-zero if anything failed.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
skip=" "
for r in "${skip_reasons[@]}"; do skip+="${r%%:*} "; done
[ "${1:-}" = --skip ] && skip+="$2 "
jobs=${SIMBA_SUITE_JOBS:-2}
# As long as postgres, the role the C extension's expected outputs name as
# the caller: the same outputs, columns as wide.
owner=portable
regress_db=simba_portable_regression

make -s portable
script=$root/build/portable/simba_portable.sql
work=$root/build/portable/suites
rm -rf "$work"
mkdir -p "$work/input/sql" "$work/input/specs" "$work/input/expected" "$work/out"

# --- the edition-specific copies -------------------------------------------

# A reinstall: simba's objects (all named simba_*) dropped from public, the
# script run again in one transaction; quiet (ECHO none is set by the line
# that replaces the test's two, which both the test and its expected output
# echo), and psql's settings as pg_regress had them.
cat > "$work/reinstall.sql" <<SQL
BEGIN;
SET LOCAL client_min_messages = warning;
DO \$\$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT pg_catalog.format('DROP ROUTINE IF EXISTS public.%I(%s) CASCADE', p.proname,
                                      pg_catalog.pg_get_function_identity_arguments(p.oid)) AS stmt
               FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'simba\_%'
    LOOP
        EXECUTE r.stmt;
    END LOOP;
    FOR r IN SELECT pg_catalog.format('DROP %s IF EXISTS public.%I CASCADE',
                                      CASE c.relkind WHEN 'v' THEN 'VIEW' WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END,
                                      c.relname) AS stmt
               FROM pg_catalog.pg_class c
              WHERE c.relnamespace = 'public'::regnamespace AND c.relname LIKE 'simba\_%'
                AND c.relkind IN ('r', 'p', 'v', 'S')
              ORDER BY c.relkind = 'S'  -- a table first, with its identity sequence
    LOOP
        EXECUTE r.stmt;
    END LOOP;
    FOR r IN SELECT pg_catalog.format('DROP TYPE IF EXISTS public.%I CASCADE', t.typname) AS stmt
               FROM pg_catalog.pg_type t
              WHERE t.typnamespace = 'public'::regnamespace AND t.typname LIKE 'simba\_%'
                AND t.typtype IN ('c', 'e', 'd') AND (t.typrelid = 0 OR
                    (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = t.typrelid) = 'c')
    LOOP
        EXECUTE r.stmt;
    END LOOP;
END
\$\$;
\set simba_in_transaction 1
\set schema public
\i $script
\unset simba_in_transaction
COMMIT;
\set ON_ERROR_STOP off
\set ECHO all
SQL

# Line-for-line substitutions, the same for a test and its expected output.
settings_sed='
  s/^SET simba\.(history|drop_live_leases) = on;$/UPDATE simba_settings SET \1 = true;/
  s/^SET simba\.(history|drop_live_leases) = off;$/UPDATE simba_settings SET \1 = false;/
  s/^SET simba\.max_lease = ([0-9]+);$/UPDATE simba_settings SET max_lease = interval '"'"'\1 s'"'"';/
  s/^SET simba\.max_lease = ('"'"'[^'"'"']*'"'"');$/UPDATE simba_settings SET max_lease = \1;/
  s/^SET simba\.notify = '"'"'?([a-z]+)'"'"'?;$/UPDATE simba_settings SET notify = '"'"'\1'"'"';/
  s/^RESET simba\.(history|max_lease|notify|drop_live_leases);$/UPDATE simba_settings SET \1 = DEFAULT;/
  s/^CREATE ROLE (regress_[a-z_]+);$/CREATE ROLE \1; GRANT \1 TO SESSION_USER;/
  s/^(step [a-z_0-9]+: )SET simba\.notify = ([a-z]+);$/\1UPDATE simba_settings SET notify = '"'"'\2'"'"';/'
# The tests' roles are the cluster's, and the extension's suites run beside
# these: a name of their own, as long (the outputs' columns stay as wide).
roles_sed='s/regress_simba_/regress_porta_/g'
# The reinstall: two lines of the test, one of its output.
to_portable() { # kind (sql|out) < file > file
  sed -E "$settings_sed; $roles_sed" | awk -v kind="$1" '
    pending { pending = 0
              if ($0 == "CREATE EXTENSION simba;") { print "\\set ECHO none"; if (kind == "sql") print "\\i ../reinstall.sql"; next }
              print "DROP EXTENSION simba;" }
    $0 == "DROP EXTENSION simba;" { pending = 1; next }
    { print }
    END { if (pending) print "DROP EXTENSION simba;" }'
}
for f in test/sql/*.sql; do
  to_portable sql < "$f" > "$work/input/sql/$(basename "$f")"
done
# The expected outputs name the database, the caller (postgres) and, in a
# fair waiter's channel, a hash of the caller's name.
# (fair_race.spec's mutex q and its waiters, lapse.spec's lf and w)
channels=$(psql -XAtq -d postgres -c "
  SELECT string_agg(format('s/simba_fair_%s/simba_fair_%s/g',
                           left(md5(m || chr(1) || c || chr(1) || 'postgres'), 16),
                           left(md5(m || chr(1) || c || chr(1) || '$owner'), 16)), ';')
    FROM (VALUES ('q', 'a'), ('q', 'b'), ('q', 'c'), ('lf', 'w')) AS w(m, c)")
for f in test/expected/*.out; do
  to_portable out < "$f" | sed -E "s/contrib_regression/$regress_db/g; s/\bpostgres\b/$owner/g; $channels" \
    > "$work/input/expected/$(basename "$f")"
done
# In a spec, a setting is a statement of a step: the same substitution
# within the braces.
for f in test/specs/*.spec; do
  sed -E -e "$roles_sed" -e 's/\{ *SET simba\.notify = ([a-z]+); *\}/{ UPDATE simba_settings SET notify = '"'"'\1'"'"'; }/' \
         -e 's/^( *)CREATE ROLE (regress_[a-z_]+);$/\1CREATE ROLE \2; GRANT \2 TO SESSION_USER;/' "$f" \
    > "$work/input/specs/$(basename "$f")"
done
for f in test/portable/expected/*.out; do
  [ -e "$f" ] && sed -E "$roles_sed" "$f" > "$work/input/expected/$(basename "$f")"
done

# --- the owner, its databases ----------------------------------------------

psql -XAtqv ON_ERROR_STOP=1 -d postgres <<SQL
SET client_min_messages = warning;
DO \$\$ BEGIN CREATE ROLE $owner LOGIN CREATEROLE; EXCEPTION WHEN duplicate_object THEN NULL; END \$\$;
SQL
# A database of the owner with the portable edition in public, on which
# nothing else than the owner's script ran; no C function in it.
make_db() {
  local db=$1
  psql -XAtqv ON_ERROR_STOP=1 -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" \
       -c "CREATE DATABASE $db OWNER $owner" >/dev/null
  psql -XAtqv ON_ERROR_STOP=1 -U "$owner" -d "$db" -v schema=public -f "$script" >/dev/null 2>"$work/out/$db.install.log" ||
    { cat "$work/out/$db.install.log"; return 1; }
  local c
  c=$(psql -XAtqv ON_ERROR_STOP=1 -U "$owner" -d "$db" -c "
    SELECT count(*) FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_language l ON l.oid = p.prolang
     WHERE p.pronamespace = 'public'::regnamespace AND l.lanname = 'c'")
  [ "$c" = 0 ] || { echo "portable: $c C functions in $db" >&2; return 1; }
  [ "$(psql -XAtq -U "$owner" -d "$db" -c "SELECT count(*) FROM pg_catalog.pg_extension WHERE extname = 'simba'")" = 0 ] ||
    { echo "portable: extension simba in $db" >&2; return 1; }
}
export -f make_db
export owner script work

# --- the runs --------------------------------------------------------------

regress=() specs=() alone=()
for f in test/sql/*.sql; do
  t=$(basename "$f" .sql)
  [[ $skip == *" $t "* ]] || regress+=("$t")
done
for f in test/specs/*.spec; do
  t=$(basename "$f" .spec)
  [[ $skip == *" $t "* ]] && continue
  # simba_settings is the database's: a spec that changes it runs alone
  if grep -q 'simba_settings' "$work/input/specs/$t.spec"; then alone+=("$t"); continue; fi
  specs+=("$(grep -c pg_sleep "$f" || true) $t")
done
mapfile -t specs < <(printf '%s\n' "${specs[@]}" | sort -k1,1nr -k2 | cut -d' ' -f2)
groups=$((jobs - (${#regress[@]} > 0 ? 1 : 0)))
[ "$groups" -ge 1 ] || groups=1
spec_runs=()
for i in "${!specs[@]}"; do
  spec_runs[i % groups]+="${spec_runs[i % groups]:+ }${specs[i]}"
done
for t in "${alone[@]}"; do spec_runs+=("$t"); done

pgbin=$(pg_config --pkglibdir)/pgxs/src/test
run() {
  local kind=${1%%:*} tests=${1#*:} dir db log rc=0
  dir=$work/out/${kind}_${tests%% *}
  mkdir -p "$dir"
  log=$dir/run.log
  if [ "$kind" = regress ]; then db=simba_portable_regression; else db=simba_portable_iso_${tests%% *}; fi
  make_db "$db" >"$log" 2>&1 || { cat "$log"; return 1; }
  # from the input dir: the tests' \i ../reinstall.sql is relative to it
  if [ "$kind" = regress ]; then
    (cd "$work/input" && PGUSER=$owner "$pgbin/regress/pg_regress" --use-existing --dbname="$db" \
       --user="$owner" --inputdir=. --outputdir="$dir" $tests) >>"$log" 2>&1 || rc=$?
  else
    (cd "$work/input" && PGUSER=$owner "$pgbin/isolation/pg_isolation_regress" --use-existing --dbname="$db" \
       --user="$owner" --inputdir=. --outputdir="$dir" $tests) >>"$log" 2>&1 || rc=$?
  fi
  if [ "$rc" -eq 0 ]; then
    grep -E '^(test|ok|not ok) ' "$log" || true
    psql -XAtq -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null
  else
    cat "$log"
  fi
  return "$rc"
}
export -f run
export pgbin

rc=0
{
  [ ${#regress[@]} -eq 0 ] || echo "regress:${regress[*]}"
  [ ${#spec_runs[@]} -eq 0 ] || printf 'isolation:%s\n' "${spec_runs[@]}"
} | xargs -d '\n' -P "$jobs" -I{} bash -c 'run "$1"' _ {} || rc=1

for diffs in "$work"/out/*/regression.diffs; do
  if [ -s "$diffs" ]; then echo "=== $diffs"; cat "$diffs"; fi
done
echo "portable suites: skipped: ${skip# }"
exit "$rc"
