#!/usr/bin/env bash
# Writes the portable edition's install script to stdout: prelude.sql and the
# helpers' types, then
# the C extension's install script (extension/simba--1.4.sql) with each
# LANGUAGE C function replaced in place by the portable/*.sql function of
# the same name (so tables, types, views and comments are written once),
# then the portable helpers (simba_portable_*) and epilogue.sql. Fails when
# a C function has no portable counterpart.
#
#   portable/build.sh > build/portable/simba_portable.sql
#   portable/build.sh -o build/portable/simba_portable.sql
#
# -o writes FILE whole or not at all, through a temporary file of its own:
# make portable and the CMake build may write it at the same time (make
# test's suites run beside the build).
set -euo pipefail
if [[ ${1:-} == -o ]]; then
  mkdir -p "$(dirname "$2")"
  tmp=$(mktemp "$2.XXXXXX")
  if "$0" > "$tmp" && chmod 644 "$tmp" && mv -f "$tmp" "$2"; then exit 0; fi
  rm -f "$tmp"; exit 1
fi
cd "$(dirname "$0")"
sources=(clock.sql session_internal.sql session.sql mutex.sql history.sql fair.sql rwlock.sql semaphore.sql
         wake.sql gc.sql drop_guard.sql privileges.sql)

# Blocks of the sources: the comment lines right before a CREATE FUNCTION
# or CREATE TYPE, through the line that ends it ("$$;", or ");" for a type).
types=$(mktemp) helpers=$(mktemp) api=$(mktemp)
trap 'rm -f "$types" "$helpers" "$api"' EXIT
awk -v types="$types" -v helpers="$helpers" '
  !inblock && /^--/ { comment = comment $0 "\n"; next }
  !inblock && /^CREATE (FUNCTION|TYPE) / {
    name = $3; sub(/\(.*/, "", name); kind = $2; inblock = 1; block = comment; comment = ""
  }
  !inblock { comment = ""; next }
  {
    block = block $0 "\n"
    if ((kind == "TYPE" && /;$/) || /^\$\$;$/ || /\$\$;$/ && /^AS /) {
      inblock = 0
      if (kind == "TYPE") printf "%s\n", block > types
      else if (name ~ /^simba_portable_/) printf "%s\n", block > helpers
      else printf "%s\036\n%s\035\n", name, block
    }
  }
' "${sources[@]}" > "$api"
cat prelude.sql "$types"
# The install script, its C functions replaced; the portable edition is no
# extension (pg_extension_config_dump), and attaches its event trigger only
# where it may (epilogue.sql).
awk -v api="$api" '
  BEGIN {
    RS = "\035\n"; FS = "\036\n"
    while ((getline rec < api) > 0) { split(rec, f, "\036\n"); def[f[1]] = f[2] }
    RS = "\n"; FS = " "
  }
  /^\\echo Use "CREATE EXTENSION/ { next }
  /^SELECT pg_catalog.pg_extension_config_dump/ { next }
  /^CREATE EVENT TRIGGER / { skip_event = 1 }
  skip_event { if (/;$/) skip_event = 0; next }
  /^COMMENT ON EVENT TRIGGER / { skip_comment = 1 }
  skip_comment { if (/;$/) skip_comment = 0; next }
  /^SELECT @extschema@.simba_strip_privileges/ { next }
  # The history is logged by the functions themselves (history.sql): no trigger call on every write.
  /^CREATE TRIGGER simba_mutex_history_/ { skip_trigger = 1 }
  skip_trigger { if (/;$/) skip_trigger = 0; next }
  /^CREATE FUNCTION @extschema@\./ { cf = 1; header = $0; name = $3; sub(/^@extschema@\./, "", name); sub(/\(.*/, "", name); body = ""; }
  cf {
    body = body $0 "\n"
    if ($0 ~ /;$/) {
      cf = 0
      if (body ~ /LANGUAGE C/) {
        if (!(name in def)) { print "portable/build.sh: no portable " name > "/dev/stderr"; missing = 1; next }
        printf "%s", def[name]; used[name] = 1
      } else {
        gsub(/@extschema@\./, "", body); printf "%s", body
      }
    }
    next
  }
  { gsub(/@extschema@\./, ""); print }
  END {
    for (n in def) if (!(n in used)) { print "portable/build.sh: " n " is no function of the extension" > "/dev/stderr"; missing = 1 }
    exit missing
  }
' ../extension/simba--1.4.sql
cat "$helpers" epilogue.sql
