# dmuon — one build for everything.
#
#   make deps         install the Debian packages below when missing
#   make              libcore (static + shared) and bin/dmuon-{plan,probe,bench,verify}
#   make test         unit, CLI and MPI tests; then the same suite under ASan+UBSan
#   make test-fast    the suite once, no sanitizer build
#   make demo         plan the bundled models (measured costs on this machine)
#   make bench        side-by-side benchmarks (planner speed, NS, operators)
#   make cluster-test dmuon-verify across 2 and 4 namespace hosts (root; also in make test)
#   make cluster-bench the operator benchmarks across namespace hosts (root)
#   make SANITIZER=address,undefined   a sanitizer build (goes to build/san)
#   make WERROR=1     strict warnings as errors (CI sets this)
#
# Required: a C11 compiler, Open MPI (mpicc), libyaml, SQLite 3, OpenBLAS,
# LAPACKE, cmocka (tests).  Optional: CUDA toolkit + cuBLAS + NCCL >= 2.28.
# .ci/run installs the Debian packages for the required parts.

SANITIZER ?=
ifeq ($(SANITIZER),)
BUILD     ?= build
BINDIR    ?= bin
else
BUILD     ?= build/san
BINDIR    ?= $(BUILD)/bin
CUDA      := 0
endif

CC        := mpicc
NVCC      ?= $(shell command -v nvcc 2>/dev/null)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))

# ---- optional parts -------------------------------------------------------
ifeq ($(CUDA),0)
HAVE_CUDA :=
else
HAVE_CUDA := $(if $(NVCC),$(if $(wildcard $(CUDA_HOME)/include/cublas_v2.h),1,),)
endif
HAVE_NCCL := $(if $(HAVE_CUDA),$(if $(wildcard $(CUDA_HOME)/include/nccl_device.h),1,),)
MPI_VERSION := $(shell mpirun --version 2>/dev/null | head -n1)

OPT       ?= -O2 -g
WARN      := -Wall -Wextra -Wshadow -Wno-unused-parameter
ifeq ($(WERROR),1)
WARN      += -Werror
endif
CPPFLAGS  := -Ilibcore/include -Ilibcore -I$(BUILD)/gen -D_GNU_SOURCE
CFLAGS    := -std=c11 $(OPT) $(WARN) -fPIC -pthread
LDLIBS    := -lyaml -lsqlite3 -llapacke -lopenblas -lm -lpthread
ifneq ($(SANITIZER),)
CFLAGS    += -fsanitize=$(SANITIZER) -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS   += -fsanitize=$(SANITIZER)
endif
ifeq ($(HAVE_CUDA),1)
CPPFLAGS  += -DDMUON_HAVE_CUDA=1
LDLIBS    += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart -lstdc++
NVFLAGS   := -O2 -std=c++17 -arch=sm_90 -Xcompiler -fPIC -Ilibcore/include -Ilibcore \
             -isystem $(CUDA_HOME)/include
endif
ifeq ($(HAVE_NCCL),1)
CPPFLAGS  += -DDMUON_HAVE_NCCL=1
LDLIBS    += -lnccl
endif

# ---- sources --------------------------------------------------------------
LIB_SRC   := $(sort $(wildcard libcore/*.c libcore/*/*.c))
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o)
ifeq ($(HAVE_CUDA),1)
CU_SRC    := $(sort $(wildcard kernels/*.cu))
LIB_OBJ   += $(CU_SRC:%.cu=$(BUILD)/%.o)
endif
TOOLS     := probe plan bench verify
TOOL_BINS := $(TOOLS:%=$(BINDIR)/dmuon-%)
UNIT_SRC  := $(sort $(wildcard tests/unit/test_*.c))
UNIT_BINS := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
MPI_TSRC  := $(sort $(wildcard tests/mpi/*.c))
MPI_TBINS := $(MPI_TSRC:tests/mpi/%.c=$(BUILD)/tests/mpi/%)
FUZZ_SRC  := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_REPLAY := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/tests/%)
STATIC    := $(BUILD)/libdmuon.a
SHARED    := $(BUILD)/libdmuon.so

.PHONY: all lib tools tests test test-fast test-san demo bench clean config deps install fuzz
.PHONY: cluster-test cluster-bench
# keep object files (no 'rm' of intermediates after the test summary)
.SECONDARY:
all: config lib tools

config:
	@echo "dmuon build: $(BUILD)  sanitizer: $(or $(SANITIZER),none)"
	@echo "  MPI : $(or $(MPI_VERSION),NOT FOUND (install openmpi-bin libopenmpi-dev))"
	@echo "  CUDA: $(if $(HAVE_CUDA),found ($(CUDA_HOME)) - GPU code built,not used)"
	@echo "  NCCL: $(if $(HAVE_NCCL),found,not used)"

lib: $(STATIC) $(SHARED)
tools: $(TOOL_BINS)
tests: $(UNIT_BINS) $(MPI_TBINS) $(FUZZ_REPLAY)

# db/schema.sql is compiled into libcore as a C string.
$(BUILD)/gen/schema_sql.h: db/schema.sql
	@mkdir -p $(dir $@)
	sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $< > $@
$(BUILD)/libcore/costdb.o: $(BUILD)/gen/schema_sql.h

$(BUILD)/%.o: %.c $(wildcard libcore/include/dmuon/*.h libcore/*.h libcore/*/*.h tools/common/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/kernels/%.o: kernels/%.cu $(wildcard libcore/include/dmuon/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(STATIC): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
	@echo '$(LDFLAGS) $(LDLIBS)' > $(BUILD)/link-flags

$(SHARED): $(LIB_OBJ)
	$(CC) -shared $(LDFLAGS) -o $@ $^ $(LDLIBS)

# tools/common/ (option and size parsing) goes into every tool; --as-needed
# keeps libraries a tool does not call (cuBLAS in dmuon-plan) out of it.
$(BUILD)/tools/%.o: CPPFLAGS += -Itools
TOOL_COMMON := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/common/*.c))
define tool_rule
$(BINDIR)/dmuon-$(1): $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/$(1)/*.c)) $(TOOL_COMMON) $(STATIC)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(LDFLAGS) -Wl,--as-needed -o $$@ $$(filter %.o,$$^) $(STATIC) $$(LDLIBS)
endef
$(foreach t,$(TOOLS),$(eval $(call tool_rule,$(t))))

$(BUILD)/tests/test_%: $(BUILD)/tests/unit/test_%.o $(TOOL_COMMON) $(STATIC)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(TOOL_COMMON) $(STATIC) -lcmocka $(LDLIBS)
$(BUILD)/tests/unit/test_opt.o: CPPFLAGS += -Itools

# ---- install --------------------------------------------------------------
# make install PREFIX=DIR [DESTDIR=STAGE]: bin/dmuon-*, lib/libdmuon.{a,so},
# include/dmuon/*.h, share/dmuon/schema.sql, lib/pkgconfig/dmuon.pc.
# libdmuon.a needs what Libs.private lists (pkg-config --static --libs dmuon).
PREFIX    ?= /usr/local
MPI_CFLAGS := $(shell mpicc -showme:compile 2>/dev/null)
MPI_LIBS  := $(shell mpicc -showme:link 2>/dev/null)
install: lib tools
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig \
	    $(DESTDIR)$(PREFIX)/include/dmuon $(DESTDIR)$(PREFIX)/share/dmuon
	install -m 755 $(TOOL_BINS) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(STATIC) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(SHARED) $(DESTDIR)$(PREFIX)/lib/
	install -m 644 libcore/include/dmuon/*.h $(DESTDIR)$(PREFIX)/include/dmuon/
	install -m 644 db/schema.sql $(DESTDIR)$(PREFIX)/share/dmuon/
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$${prefix}/lib' 'includedir=$${prefix}/include' '' \
	    'Name: dmuon' 'Description: Muon owner plans and variable-length collectives (libdmuon)' \
	    'Version: $(shell sed -n 's/^#define DMUON_VERSION "\(.*\)"/\1/p' libcore/include/dmuon/version.h)' \
	    'Cflags: -I$${includedir} $(MPI_CFLAGS) -pthread' \
	    'Libs: -L$${libdir} -ldmuon $(MPI_LIBS)' \
	    'Libs.private: $(LDLIBS)' > $(DESTDIR)$(PREFIX)/lib/pkgconfig/dmuon.pc
	@echo "installed into $(DESTDIR)$(PREFIX)"

# ---- fuzzing --------------------------------------------------------------
# make fuzz [FUZZ_SECONDS=60]: each tests/fuzz/fuzz_*.c under libFuzzer
# (clang, ASan+UBSan) for FUZZ_SECONDS; crashes land in build/fuzz/crashes/.
# The same harnesses are built as plain replay programs (build/tests/fuzz_*)
# that make test runs over tests/fuzz/regress/<harness>/ and the seeds.
FUZZ_SECONDS ?= 60
FUZZ_DIR  := build/fuzz
FUZZ_CFLAGS := -g -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined \
             -Ilibcore/include -Ilibcore -I$(FUZZ_DIR)/gen -D_GNU_SOURCE $(MPI_CFLAGS) -pthread
FUZZ_LIBOBJ := $(patsubst %.c,$(FUZZ_DIR)/%.o,$(sort $(wildcard libcore/*.c libcore/*/*.c)))
$(FUZZ_DIR)/%.o: %.c $(FUZZ_DIR)/gen/schema_sql.h $(wildcard libcore/include/dmuon/*.h libcore/*.h)
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@
$(FUZZ_DIR)/fuzz_%: $(FUZZ_DIR)/tests/fuzz/fuzz_%.o $(FUZZ_LIBOBJ)
	clang -fsanitize=fuzzer,address,undefined -o $@ $^ $(MPI_LIBS) -lyaml -lsqlite3 -llapacke \
	    -lopenblas -lm -lpthread
$(FUZZ_DIR)/gen/schema_sql.h: db/schema.sql
	@mkdir -p $(dir $@)
	sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $< > $@
fuzz: $(FUZZ_SRC:tests/fuzz/%.c=$(FUZZ_DIR)/%)
	@bash tests/fuzz/run.sh $(FUZZ_SECONDS) $^

$(BUILD)/tests/fuzz_%: $(BUILD)/tests/fuzz/fuzz_%.o $(BUILD)/tests/fuzz/replay_main.o $(STATIC)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(STATIC) $(LDLIBS)

# MPI test programs, run by the scripts in tests/mpi/
$(BUILD)/tests/mpi/%: $(BUILD)/tests/mpi/%.o $(STATIC)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(STATIC) $(LDLIBS)

# ---- tests ----------------------------------------------------------------
COUNTS := $(CURDIR)/build/test-counts
test: all tests
	@mkdir -p build && rm -f $(COUNTS)
	@DMUON_COUNTS=$(COUNTS) DMUON_BIN=$(BINDIR) DMUON_BUILD=$(BUILD) bash tests/run.sh --label plain || true
	@$(MAKE) --no-print-directory SANITIZER=address,undefined DMUON_COUNTS=$(COUNTS) test-san || \
	    grep -q '^sanitized ' $(COUNTS) || { echo "sanitized build failed"; echo "sanitized-build 0 1" >> $(COUNTS); }
	@bash tests/run.sh --total $(COUNTS)

test-fast: all tests
	@DMUON_BIN=$(BINDIR) DMUON_BUILD=$(BUILD) bash tests/run.sh --label plain

test-san: all tests
	@DMUON_BIN=$(BINDIR) DMUON_BUILD=$(BUILD) DMUON_SANITIZED=1 bash tests/run.sh --label sanitized

# Multi-host runs on one machine (network namespaces; root only).  make test
# runs the same scripts through tests/run.sh and skips them without root.
cluster-test: all tests
	@bash tests/cluster/cluster.sh --check
	@DMUON_BIN=$(BINDIR) DMUON_BUILD=$(BUILD) DMUON_TEST_FILTER=cluster/ bash tests/run.sh --label cluster

cluster-bench: all
	bash tests/cluster/bench.sh $(BINDIR)

demo: all
	bash tools/demo.sh $(BINDIR)

bench: all
	bash tools/bench.sh $(BINDIR)

deps:
	bash tools/install-deps.sh

clean:
	rm -rf build bin
