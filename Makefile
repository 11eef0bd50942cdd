# pg_outbox: PGXS build.  `make && make install`, then `make installcheck`
# against a running server that preloads pg_outbox (test/run-tests.sh does all
# of it on a throwaway cluster).
MODULE_big = pg_outbox
SRCS := $(sort $(wildcard src/*.cpp src/*/*.cpp))
OBJS = $(SRCS:.cpp=.o)
HDRS := $(wildcard src/*.hpp src/*/*.hpp)

MODULEDIR = extension
# Full install scripts of the released versions, as released: each is the
# one before it plus its upgrade script, so CREATE EXTENSION ... VERSION
# installs a version from a script of its own (test/integration/upgrade.sh
# upgrades each to the newest and compares it with a fresh install of
# pg_outbox--<newest>.sql, which is written in full by hand).
RELEASED_SCRIPTS = extension/pg_outbox--0.2.0.sql extension/pg_outbox--0.3.0.sql \
                   extension/pg_outbox--0.4.0.sql extension/pg_outbox--0.5.0.sql
DATA = extension/pg_outbox.control \
       $(sort $(wildcard extension/pg_outbox--*.sql) $(RELEASED_SCRIPTS))

REGRESS = $(patsubst sql/%.sql,%,$(sort $(wildcard sql/*.sql)))
REGRESS_OPTS = --inputdir=. --load-extension=pg_outbox

PG_CONFIG ?= $(shell for d in /usr/lib/postgresql/15/bin; do [ -x $$d/pg_config ] && echo $$d/pg_config && exit; done; echo pg_config)
PG_CPPFLAGS = -Isrc
PG_CXXFLAGS = -std=c++17 -Wall -Wextra -Wshadow -Werror -Wno-register -Wno-missing-field-initializers -fno-omit-frame-pointer
SHLIB_LINK = -lhiredis -lstdc++

# make SANITIZE=1: AddressSanitizer and UndefinedBehaviorSanitizer in the
# library (test/sanitize.sh runs every test against a server that preloads
# libasan).  Objects built with and without it do not mix: make clean first.
ifdef SANITIZE
PG_CXXFLAGS += -fsanitize=address,undefined -fno-sanitize=vptr
SHLIB_LINK += -fsanitize=address,undefined
endif

# clang-14 would compile bitcode as C++14 and fail; no JIT bitcode.
override with_llvm = no

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# The server headers are not ours: keep -Wextra quiet on them.
override CPPFLAGS := $(patsubst -I%server,-isystem %server,$(CPPFLAGS))

# PGXS tracks no header dependencies.
$(OBJS): $(HDRS)

all: $(RELEASED_SCRIPTS)
extension/pg_outbox--0.2.0.sql: extension/pg_outbox--0.1.0.sql extension/pg_outbox--0.1.0--0.2.0.sql
extension/pg_outbox--0.3.0.sql: extension/pg_outbox--0.2.0.sql extension/pg_outbox--0.2.0--0.3.0.sql
extension/pg_outbox--0.4.0.sql: extension/pg_outbox--0.3.0.sql extension/pg_outbox--0.3.0--0.4.0.sql
extension/pg_outbox--0.5.0.sql: extension/pg_outbox--0.4.0.sql extension/pg_outbox--0.4.0--0.5.0.sql
$(RELEASED_SCRIPTS):
	cat $^ >$@

# The one list of sources: CMakeLists.txt checks that its glob finds these.
.PHONY: print-sources
print-sources:
	@echo $(SRCS)

.PHONY: format
format:
	clang-format -i $(SRCS) $(HDRS) test/unit/*.cpp

# clang-tidy over the sources, with the compile commands of the CMake build.
.PHONY: lint
lint:
	cmake -S . -B build >/dev/null
	clang-tidy -p build --quiet $(SRCS)
