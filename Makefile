# pg_outbox: PGXS build.  `make && make install`, then `make installcheck`
# against a running server that preloads pg_outbox (test/run-tests.sh does all
# of it on a throwaway cluster).
MODULE_big = pg_outbox
SRCS := $(sort $(wildcard src/*.cpp src/*/*.cpp src/*/*/*.cpp))
OBJS = $(SRCS:.cpp=.o)
HDRS := $(wildcard src/*.hpp src/*/*.hpp src/*/*/*.hpp)

MODULEDIR = extension
# The SQL (README, "Layout"): extension/released/ keeps the scripts of the
# released versions as they shipped; the full script of each released version
# is the one before it plus its upgrade script.  The current version is
# extension/tables/*.sql (run once, by CREATE EXTENSION) followed by
# extension/functions/*.sql and */*.sql, by path (CREATE OR REPLACE, run
# again by every upgrade);
# its upgrade script is extension/upgrade/<released>--<current>.sql followed
# by the same extension/functions/*.sql.  All of them are written into
# extension/ by make; test/integration/upgrade.sh checks that each released
# version, upgraded, equals a fresh install.
RELEASED = 0.1.0 0.2.0 0.3.0 0.4.0 0.5.0 0.6.0 0.7.0 0.8.0
EXT_VERSION := $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" extension/pg_outbox.control)
LAST_RELEASED := $(lastword $(RELEASED))
TABLES_SQL := $(sort $(wildcard extension/tables/*.sql))
FUNCTIONS_SQL := $(sort $(wildcard extension/functions/*.sql extension/functions/*/*.sql))
RELEASED_UPGRADES := $(sort $(wildcard extension/released/pg_outbox--*--*.sql))
GENERATED_SQL = $(foreach v,$(RELEASED) $(EXT_VERSION),extension/pg_outbox--$(v).sql) \
                extension/pg_outbox--$(LAST_RELEASED)--$(EXT_VERSION).sql
DATA = extension/pg_outbox.control $(RELEASED_UPGRADES) $(GENERATED_SQL)
EXTRA_CLEAN = $(GENERATED_SQL)

# pg_regress: sql/ and expected/, as in PostgreSQL's contrib.  make
# installcheck needs a server that preloads pg_outbox and a Redis:
# test/run-tests.sh starts both and calls it (test/regress.sh: some tests).
REGRESS = $(patsubst sql/%.sql,%,$(sort $(wildcard sql/*.sql)))
REGRESS_OPTS = --load-extension=pg_outbox

# PG_MAJOR=17 make: against PostgreSQL 17 (15 and 17 are built and tested).
PG_MAJOR ?= 15
PG_CONFIG ?= $(shell for d in /usr/lib/postgresql/$(PG_MAJOR)/bin; do [ -x $$d/pg_config ] && echo $$d/pg_config && exit; done; echo pg_config)
PG_CPPFLAGS = -Isrc -I$(shell $(PG_CONFIG) --includedir)
PG_CXXFLAGS = -std=c++17 -Wall -Wextra -Wshadow -Werror -Wno-register -Wno-missing-field-initializers -fno-omit-frame-pointer
SHLIB_LINK = -lhiredis -lpq -lstdc++

# make SANITIZE=1: AddressSanitizer and UndefinedBehaviorSanitizer in the
# library (test/sanitize.sh runs every test against a server that preloads
# libasan), and OUTBOX_CHECK_SCOPES: every owner-run scope checks that it
# leaves every setting as it found it (pg/run_as.cpp).  Objects built with
# and without it do not mix: make clean first.
ifdef SANITIZE
PG_CXXFLAGS += -fsanitize=address,undefined -fno-sanitize=vptr -DOUTBOX_CHECK_SCOPES
SHLIB_LINK += -fsanitize=address,undefined
endif

# clang-14 would compile bitcode as C++14 and fail; no JIT bitcode.
override with_llvm = no

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# The tests name their database (security_settings.sql: ALTER DATABASE).
CONTRIB_TESTDB = regression

# The server headers are not ours: keep -Wextra quiet on them.
override CPPFLAGS := $(patsubst -I%server,-isystem %server,$(CPPFLAGS))

# PGXS tracks no header dependencies.
$(OBJS): $(HDRS)

all: $(GENERATED_SQL)
extension/pg_outbox--0.1.0.sql: extension/released/pg_outbox--0.1.0.sql
	cp $< $@
# extension/pg_outbox--<v>.sql: the full script of v before it, then the
# released upgrade script to v.
define released_full
extension/pg_outbox--$(2).sql: extension/pg_outbox--$(1).sql extension/released/pg_outbox--$(1)--$(2).sql
	cat $$^ >$$@
endef
RELEASED_STEPS := $(join $(addsuffix :,$(wordlist 2,$(words $(RELEASED)),x $(RELEASED))),$(wordlist 2,99,$(RELEASED)))
$(foreach step,$(RELEASED_STEPS),$(eval $(call released_full,$(word 1,$(subst :, ,$(step))),$(word 2,$(subst :, ,$(step))))))
extension/pg_outbox--$(EXT_VERSION).sql: $(TABLES_SQL) $(FUNCTIONS_SQL)
	cat $^ >$@
# A line "-- @include tables/<file>.sql" in the upgrade script stands for
# that file: a version's new tables are written once.
extension/pg_outbox--$(LAST_RELEASED)--$(EXT_VERSION).sql: extension/upgrade/$(LAST_RELEASED)--$(EXT_VERSION).sql $(TABLES_SQL) $(FUNCTIONS_SQL)
	awk '/^-- @include /{ while ((getline line < ("extension/" $$3)) > 0) print line; next } { print }' $< >$@
	cat $(FUNCTIONS_SQL) >>$@

# The one list of sources: CMakeLists.txt checks that its glob finds these.
.PHONY: print-sources
print-sources:
	@echo $(SRCS)

.PHONY: format
format:
	clang-format -i $(SRCS) $(HDRS) test/unit/*.cpp

# clang-format and clang-tidy over the sources (the compile commands of the
# CMake build) and the layers of src/: what CI checks (test/lint.sh).
.PHONY: lint
lint:
	bash test/lint.sh
