# Build options and the release version, shared by the top-level project and
# client/ (which also configures on its own: test/tsan/run.sh, client/README.md).
include_guard(GLOBAL)

# A user's build needs PostgreSQL's dev files, cmake, libpqxx and, for the
# simba command, the CLI11 and nlohmann-json headers, nothing more:
# tests, the TCK, the fuzzer, chaos and ha suites (GoogleTest) and the
# benchmarks (hiredis) are built only when asked. `make test` asks.
option(SIMBA_BUILD_TESTS "Build the tests, TCK, fuzzer, chaos and ha suites (needs GoogleTest)" OFF)
option(SIMBA_BUILD_BENCH "Build the benchmarks (bench/README.md)" OFF)
# A newer compiler's new warning must not break a user's install: -Werror
# only where someone reads the warnings (CI and the developer scripts).
option(SIMBA_WERROR "Treat compiler warnings as errors" OFF)
set(SIMBA_WARNINGS -Wall -Wextra)
if(SIMBA_WERROR)
  list(APPEND SIMBA_WARNINGS -Werror)
endif()

# One version for the release, the extension's: extension/simba.control's
# default_version (the PGXS Makefile reads it too; test/check-version.sh
# checks NEWS.md and debian/changelog against it).
file(STRINGS ${CMAKE_CURRENT_LIST_DIR}/../extension/simba.control SIMBA_VERSION_LINE
  REGEX "^default_version = '[0-9.]+'")
string(REGEX REPLACE ".*'([0-9.]+)'.*" "\\1" SIMBA_VERSION "${SIMBA_VERSION_LINE}")
if(NOT SIMBA_VERSION)
  message(FATAL_ERROR "no default_version in extension/simba.control")
endif()
