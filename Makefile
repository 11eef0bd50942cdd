# pg_outbox: PGXS build.  `make && make install`, then `make installcheck`
# against a running server that preloads pg_outbox (test/run-tests.sh does all
# of it on a throwaway cluster).
MODULE_big = pg_outbox
SRCS := $(sort $(wildcard src/*.cpp src/*/*.cpp))
OBJS = $(SRCS:.cpp=.o)
HDRS := $(wildcard src/*.hpp src/*/*.hpp)

MODULEDIR = extension
DATA = extension/pg_outbox.control $(wildcard extension/pg_outbox--*.sql)

REGRESS = $(patsubst sql/%.sql,%,$(sort $(wildcard sql/*.sql)))
REGRESS_OPTS = --inputdir=. --load-extension=pg_outbox

PG_CONFIG ?= $(shell for d in /usr/lib/postgresql/15/bin; do [ -x $$d/pg_config ] && echo $$d/pg_config && exit; done; echo pg_config)
PG_CPPFLAGS = -Isrc
PG_CXXFLAGS = -std=c++17 -Wall -Wextra -Werror -Wno-register -Wno-missing-field-initializers -fno-omit-frame-pointer
SHLIB_LINK = -lhiredis -lstdc++

# clang-14 would compile bitcode as C++14 and fail; no JIT bitcode.
override with_llvm = no

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# The server headers are not ours: keep -Wextra quiet on them.
override CPPFLAGS := $(patsubst -I%server,-isystem %server,$(CPPFLAGS))

# PGXS tracks no header dependencies.
$(OBJS): $(HDRS)

.PHONY: format
format:
	clang-format -i $(SRCS) $(HDRS) test/unit/*.cpp

# clang-tidy over the sources, with the compile commands of the CMake build.
.PHONY: lint
lint:
	cmake -S . -B build >/dev/null
	clang-tidy -p build --quiet $(SRCS)
