# simba — PGXS build of the extension, plus the project's entry points:
#   make / make install   build and install the extension, the C++ client library (headers,
#                         CMake package, pkg-config file) and the simba CLI (install needs root)
#   make demo             a walkthrough on a throwaway cluster (make psql: try it by hand)
#   make check            the inner loop: regress, isolation and the client's unit tests (about 2 minutes)
#   make test             everything CI runs: deps, build, throwaway cluster, all suites
#   make bench            benchmarks with their baselines (bench/README.md); not part of CI
#   make bench-scale      benchmark 7: locks ramped to a million, sessions and per-lock, against etcd (about 20 minutes)
#   make bench-peers      benchmark 10: simba against etcd, ZooKeeper with Curator and Redis, all durable (about 15 minutes)
#   make valgrind         pg_regress + isolation with every backend under valgrind memcheck
#   make tsan             the client's unit and PostgreSQL tests built with ThreadSanitizer
#   make ha               failover faults on three-node Patroni (30 min) and pg_auto_failover (10 min) clusters (test/ha)
#   make installcheck     pg_regress + isolation suites against the server in PG* env
#   make deb              the Debian packages (debian/), into build/deb/
#   make portable         the portable edition's install script (portable/), into build/portable/
PG_CONFIG ?= pg_config
PGXS := $(wildcard $(shell $(PG_CONFIG) --pgxs 2>/dev/null))
# PGXS has a check rule of its own (it says "not supported"): make check
# leaves PGXS out, and test/check.sh runs make for what it needs.
ifeq ($(MAKECMDGOALS),check)
PGXS :=
check:
	@test/check.sh
endif

.DEFAULT_GOAL := all
.PHONY: check test deps demo psql bench bench-scale bench-peers chaos valgrind tsan deb ha portable
test:
	@test/run-tests.sh
demo:
	@test/demo.sh
bench:
	@bench/run.sh

bench-scale:
	@bench/sessions.sh
bench-peers:
	@bench/peers.sh
chaos:
	@test/chaos/long.sh
valgrind:
	@test/valgrind/run.sh
tsan:
	@test/tsan/run.sh
ha:
	@test/ha/long.sh
psql:
	@SIMBA_DEMO_SHELL=1 test/demo.sh
deps:
	@test/install-deps.sh
portable:
	portable/build.sh -o build/portable/simba_portable.sql
# dpkg-buildpackage in a copy of the tree (it writes the .debs beside the
# source): the files git tracks or would track, or without git everything
# but the build trees (debian/rules clean removes the PGXS outputs).
deb:
	rm -rf build/deb && mkdir -p build/deb/simba
	if git rev-parse --git-dir >/dev/null 2>&1; then \
	  git ls-files -z --cached --others --exclude-standard | tar --null -T - -c; \
	else \
	  tar -c --exclude-vcs --exclude=./build --exclude='./build-*' --exclude='./obj-*' .; \
	fi | tar -x -C build/deb/simba
	cd build/deb/simba && dpkg-buildpackage -us -uc -b -j2
	@ls build/deb/*.deb

ifneq ($(PGXS),)

EXTENSION_DIR = extension
# One source of truth for the version: the control file.
EXTVERSION := $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" $(EXTENSION_DIR)/simba.control)

MODULE_big = simba
OBJS = $(patsubst %.c,%.o,$(wildcard $(EXTENSION_DIR)/*.c))
MODULEDIR = extension
# simba--1.4.sql installs the current version in one script; simba--1.0.sql
# and each simba--A--B.sql (A to B, as shipped) are the older versions and
# the path users update along. test/sql/upgrade.sql installs 1.0, updates in
# place, and checks that the result is exactly what a fresh install makes.
DATA = $(EXTENSION_DIR)/simba.control $(wildcard $(EXTENSION_DIR)/simba--*.sql)

# The tests under test/, as pgvector keeps them: test/sql (pg_regress),
# test/specs (isolation), one folder of expected outputs for both.
REGRESS = $(patsubst test/sql/%.sql,%,$(sort $(wildcard test/sql/*.sql)))
ISOLATION = $(patsubst test/specs/%.spec,%,$(sort $(wildcard test/specs/*.spec)))
ISOLATION_OPTS = --inputdir=test --load-extension=simba
REGRESS_OPTS = --inputdir=test --load-extension=simba
EXTRA_CLEAN = META.json

PG_CFLAGS = -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers
# Warnings as errors only where someone reads them: CI and the developer
# scripts pass SIMBA_WERROR=yes (and -DSIMBA_WERROR=ON to cmake); a user's
# newer compiler with a new warning still installs.
SIMBA_WERROR ?= no
ifeq ($(SIMBA_WERROR),yes)
PG_CFLAGS += -Werror
endif
PG_CPPFLAGS = -DSIMBA_VERSION='"$(EXTVERSION)"'

# The regress tests' names (test/valgrind/run.sh may leave some out).
.PHONY: print-regress
print-regress:
	@echo $(REGRESS)

META.json: META.json.in $(EXTENSION_DIR)/simba.control
	sed 's/@EXTVERSION@/$(EXTVERSION)/g' $< > $@

include $(PGXS)

all: META.json

# The C++ client library (client/: libsimba-client, its headers, the CMake
# package simba-client and simba-client.pc) and the simba command-line tool
# are built and installed with the extension when cmake is there; the tool
# only when CLI11 and nlohmann-json are there too (else cmake says which
# packages to install, and the library is built without it). SIMBA_CLI=no
# leaves all of it out (a database server that only needs the extension).
# They install under PREFIX (/usr/local; prefix=DIR on the command line
# works too), below DESTDIR if set; an install into /usr or /usr/local
# without DESTDIR ends with ldconfig (cmake/SimbaLdconfig.cmake). A build dir
# configured before keeps its options (make test's has the tests on).
ifeq ($(origin SIMBA_CLI),undefined)
SIMBA_CLI := $(if $(shell command -v cmake 2>/dev/null),yes,no)
SIMBA_CLI_NOTE := $(if $(filter no,$(SIMBA_CLI)),simba: cmake not found: building the extension alone; for the C++ client library and the simba command install cmake libpqxx-dev libcli11-dev nlohmann-json3-dev libcpp-httplib-dev (Debian/Ubuntu))
endif
SIMBA_BUILD ?= build
PREFIX ?= /usr/local
SIMBA_PREFIX := $(if $(filter command line,$(origin prefix)),$(prefix),$(PREFIX))
.PHONY: client install-client client-note cli install-cli
client:
	cmake -S . -B $(SIMBA_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(if $(filter yes,$(SIMBA_WERROR)),-DSIMBA_WERROR=ON) >/dev/null
	cmake --build $(SIMBA_BUILD) -j2 --target simba_installables
install-client: client
	DESTDIR='$(DESTDIR)' cmake --install $(SIMBA_BUILD) --prefix '$(SIMBA_PREFIX)'
client-note:
	@$(if $(SIMBA_CLI_NOTE),echo '$(SIMBA_CLI_NOTE)' >&2,:)
# The names of before 1.4.
cli: client
install-cli: install-client
ifeq ($(SIMBA_CLI),yes)
all: client
install: install-client
else
all install: client-note
endif

else

all install installcheck:
	@echo "simba: PostgreSQL server development files not found (run 'make deps' or set PG_CONFIG)" >&2
	@exit 1

endif
