# dmuon — one build for everything.
#
#   make deps         install the Debian packages below when missing (and fetch the NCCL wheel)
#   make              libcore (static + shared) and bin/dmuon-{plan,probe,bench,verify,train}
#   make test         unit, CLI and MPI tests; then the same suite under ASan+UBSan
#   make test-fast    the suite once, no sanitizer build
#   make demo         plan the bundled models (measured costs on this machine)
#   make bench        side-by-side benchmarks (planner speed, NS, operators, the trainer's lines)
#   make cluster-test dmuon-verify across 2 and 4 namespace hosts (root; also in make test)
#   make cluster-bench the operator benchmarks across namespace hosts (root)
#   make cluster-train the trainer's lines A B C D across namespace hosts (root; CLUSTER_TRAIN_ARGS)
#   make install PREFIX=DIR   the five tools, libdmuon.{a,so}, headers, schema, dmuon.pc (no download)
#   make fuzz [FUZZ_SECONDS=60]   libFuzzer on each input parser (clang)
#   make train        train the example model, line D on 8 ranks, on the fortunes text
#   make equiv        the trainer's loss equivalence of the lines (D vs B, FSDP vs HSDP, 8 vs 1 rank)
#   make plots        SVG plots (gnuplot) of the trainer's logs from make equiv and make bench
#   make SANITIZER=address,undefined   a sanitizer build (goes to build/san)
#   make WERROR=1     strict warnings as errors (CI sets this)
#
#   make nccl-wheel   fetch NCCL's PyPI wheel (nvidia-nccl-cu13) into build/third_party
#   make CUDA_ARCH=100  GPU code for another architecture (default 90: H100/H200)
#   make NCCL_HOME=DIR  NCCL from DIR (DIR/include/nccl.h, DIR/lib/libnccl.so.2)
#
# Required: a C11 compiler, Open MPI (mpicc), libyaml, SQLite 3, OpenBLAS,
# LAPACKE, cmocka (tests).  Optional: CUDA toolkit + cuBLAS + NCCL.  NCCL's
# device API is pinned to one release, $(NCCL_PIN), from the nvidia-nccl-cu13
# wheel that the first build with CUDA unpacks into build/third_party (nothing
# committed); without network the build goes on with the toolkit's NCCL for the
# host API only and says so.  .ci/run installs the Debian packages.

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
CUDA_ARCH ?= 90

# NCCL: NCCL_HOME if given; else the pinned wheel, fetched once into the build
# tree (build/third_party/nccl-<pin>.mk records that the fetch ran, so a machine
# without network tries once and then builds without it); else the toolkit's.
# One libnccl.so.2 per process: host and device API use the same NCCL.
NCCL_PIN       := 2.32.3
NCCL_WHEEL_DIR := build/third_party/nccl-$(NCCL_PIN)
NCCL_WHEEL     := $(NCCL_WHEEL_DIR)/nvidia/nccl
NCCL_STAMP     := $(NCCL_WHEEL_DIR).mk
ifeq ($(HAVE_CUDA)$(NCCL_HOME),1)
ifeq ($(wildcard $(NCCL_WHEEL)/include/nccl_device.h),)
ifeq ($(filter clean nccl-wheel install,$(MAKECMDGOALS)),)
-include $(NCCL_STAMP)
endif
endif
NCCL_HOME := $(if $(wildcard $(NCCL_WHEEL)/include/nccl_device.h),$(abspath $(NCCL_WHEEL)),)
NCCL_WHY  := $(if $(wildcard $(NCCL_STAMP)),the wheel was not fetched: see $(NCCL_WHEEL_DIR).log; retry: make nccl-wheel,make nccl-wheel or NCCL_HOME=DIR)
else
NCCL_WHY  := NCCL_HOME=$(NCCL_HOME) holds an older NCCL
endif
NCCL_INC  := $(if $(NCCL_HOME),$(NCCL_HOME)/include,$(CUDA_HOME)/include)
NCCL_LIB  := $(patsubst %/,%,$(dir $(firstword $(wildcard $(addsuffix /libnccl.so.2,\
             $(if $(NCCL_HOME),$(NCCL_HOME)/lib $(NCCL_HOME)/lib64,$(CUDA_HOME)/lib64))))))
HAVE_NCCL := $(if $(HAVE_CUDA),$(if $(wildcard $(NCCL_INC)/nccl.h),$(if $(NCCL_LIB),1,),),)
ifeq ($(HAVE_NCCL),1)
NCCL_CODE := $(shell sed -n 's/^\#define NCCL_VERSION_CODE *\([0-9]*\).*/\1/p' $(NCCL_INC)/nccl.h)
NCCL_VER  := $(shell sed -n 's/^\#define NCCL_\(MAJOR\|MINOR\|PATCH\) *\([0-9]*\).*/\2/p' $(NCCL_INC)/nccl.h | paste -sd.)
# the device API as used here (requirements initializer, GIN) needs >= 2.30
HAVE_NCCL_DEV := $(if $(wildcard $(NCCL_INC)/nccl_device.h),$(shell [ "0$(NCCL_CODE)" -ge 23000 ] && echo 1),)
endif
NCCL_BANNER := $(if $(HAVE_NCCL),$(NCCL_VER) ($(NCCL_INC) and $(NCCL_LIB)/libnccl.so.2) for the host API; device API $(if $(HAVE_NCCL_DEV),built for sm_$(CUDA_ARCH),skipped (needs >= 2.30 - pinned $(NCCL_PIN) - $(NCCL_WHY))),not used)
MPI_VERSION := $(shell mpirun --version 2>/dev/null | head -n1)

OPT       ?= -O2 -g
WARN      := -Wall -Wextra -Wshadow -Wno-unused-parameter
NVWARN    := -Xcompiler -Wall,-Wextra
ifeq ($(WERROR),1)
WARN      += -Werror
NVWARN    += -Werror all-warnings -Xcompiler -Werror
endif
CPPFLAGS  := -Ilibcore/include -Ilibcore -I$(BUILD)/gen -D_GNU_SOURCE
# -ffile-prefix-map: debug info and __FILE__ name paths relative to the tree,
# so nothing installed carries the build tree's absolute path
CFLAGS    := -std=c11 $(OPT) $(WARN) -fPIC -pthread -ffile-prefix-map=$(CURDIR)=.
LDLIBS    := -lyaml -lsqlite3 -llapacke -lopenblas -lm -lpthread
ifneq ($(SANITIZER),)
CFLAGS    += -fsanitize=$(SANITIZER) -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS   += -fsanitize=$(SANITIZER)
endif
ifeq ($(HAVE_NCCL),1)
# NCCL's headers as system headers, ahead of the toolkit's own nccl.h
CPPFLAGS  += -DDMUON_HAVE_NCCL=1 -isystem $(NCCL_INC) -isystem $(CUDA_HOME)/include
NCCL_FLAGS := -isystem $(NCCL_INC)
NCCL_LINK := -L$(NCCL_LIB) -Wl,-rpath,$(NCCL_LIB) -l:libnccl.so.2
ifeq ($(HAVE_NCCL_DEV),1)
CPPFLAGS  += -DDMUON_HAVE_NCCL_DEV=1
endif
endif
ifeq ($(HAVE_CUDA),1)
CPPFLAGS  += -DDMUON_HAVE_CUDA=1
# The CUDA Newton-Schulz engine is referred to weakly (libcore/ns_engine.h):
# naming it here pulls it out of libdmuon.a into every program but
# dmuon-plan (whose link leaves NS_CUDA_PULL out, so it needs no cuBLAS).
NS_CUDA_PULL := -Wl,-u,dmuon_ns_cuda_engine
LDLIBS    += $(NS_CUDA_PULL) $(NCCL_LINK) -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart -lstdc++
NVFLAGS   := -O2 -std=c++17 -arch=sm_$(CUDA_ARCH) $(NVWARN) -Xcompiler -fPIC \
             -Xcompiler -ffile-prefix-map=$(CURDIR)=. -Ilibcore/include \
             -Ilibcore $(filter -D%,$(CPPFLAGS)) $(NCCL_FLAGS) -isystem $(CUDA_HOME)/include
endif

# The configuration this build was made with (which NCCL, CUDA arch, device
# API on or off, flags).  Every object depends on build/config.txt, which is
# rewritten only when the configuration changes: a change rebuilds what
# depends on it, so the banner always describes what was built.  Warning
# flags (WERROR=1) change no object and are left out.
CONFIG_TEXT  := cuda=$(or $(HAVE_CUDA),0) arch=sm_$(CUDA_ARCH) nccl=$(or $(NCCL_LIB),none) \
                nccl_inc=$(NCCL_INC) nccl_dev=$(or $(HAVE_NCCL_DEV),0) sanitizer=$(SANITIZER) \
                cppflags=$(CPPFLAGS) cflags=$(filter-out $(WARN),$(CFLAGS)) \
                nvflags=$(filter-out $(NVWARN),$(NVFLAGS)) ldlibs=$(LDLIBS)
CONFIG_STAMP := $(BUILD)/config.txt
# the rule below is the first in the file: plain `make` builds `all`
.DEFAULT_GOAL := all
# (refreshed at parse time whenever a goal builds something: no goal, or one
# besides clean, deps and nccl-wheel, as in "make deps demo")
ifneq ($(if $(MAKECMDGOALS),$(filter-out clean deps nccl-wheel,$(MAKECMDGOALS)),all),)
$(shell mkdir -p $(BUILD) && { [ "$$(cat $(CONFIG_STAMP) 2>/dev/null)" = "$(CONFIG_TEXT)" ] || \
    echo "$(CONFIG_TEXT)" > $(CONFIG_STAMP); })
endif
$(CONFIG_STAMP):
	@mkdir -p $(dir $@)
	@echo "$(CONFIG_TEXT)" > $@

# ---- sources --------------------------------------------------------------
LIB_SRC   := $(sort $(wildcard libcore/*.c libcore/*/*.c))
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o)
ifeq ($(HAVE_CUDA),1)
CU_SRC    := $(sort $(wildcard kernels/*.cu))
ifneq ($(HAVE_NCCL_DEV),1)
CU_SRC    := $(filter-out kernels/nccl_dev%,$(CU_SRC))   # device-API kernels
endif
LIB_OBJ   += $(CU_SRC:%.cu=$(BUILD)/%.o)
endif
TOOLS     := probe plan bench verify train
TOOL_BINS := $(TOOLS:%=$(BINDIR)/dmuon-%)
UNIT_SRC  := $(sort $(wildcard tests/unit/test_*.c))
UNIT_BINS := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
MPI_TSRC  := $(sort $(wildcard tests/mpi/*.c))
MPI_TBINS := $(MPI_TSRC:tests/mpi/%.c=$(BUILD)/tests/mpi/%)
FUZZ_SRC  := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_REPLAY := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/tests/%)
STATIC    := $(BUILD)/libdmuon.a
SHARED    := $(BUILD)/libdmuon.so
# The shared library's ABI name: the major and minor version while the major
# is 0 (a 0.x minor release may change the ABI), libdmuon.so.0.1 for 0.1.z.
DMUON_VERSION := $(shell sed -n 's/^\#define DMUON_VERSION "\(.*\)"/\1/p' libcore/include/dmuon/version.h)
SONAME    := libdmuon.so.$(word 1,$(subst ., ,$(DMUON_VERSION))).$(word 2,$(subst ., ,$(DMUON_VERSION)))

.PHONY: all lib tools tests test test-fast test-san demo bench clean config deps install fuzz nccl-wheel
.PHONY: cluster-test cluster-bench cluster-train
COMMA := ,
# keep object files (no 'rm' of intermediates after the test summary)
.SECONDARY:
all: config lib tools

config:
	@echo "dmuon build: $(BUILD)  sanitizer: $(or $(SANITIZER),none)"
	@echo "  MPI : $(or $(MPI_VERSION),NOT FOUND (install openmpi-bin libopenmpi-dev))"
	@echo "  CUDA: $(if $(HAVE_CUDA),found ($(CUDA_HOME)) - GPU code built,not used)"
	@echo "  NCCL: $(NCCL_BANNER)"
	@echo "  configuration: $(CONFIG_STAMP) (objects are rebuilt when it changes)"

# Fetched once when CUDA is found and NCCL_HOME is not set, by make deps or
# the first plain build (never by make install); make reads the stamp, so
# the build restarts with the wheel in place or, on failure, goes on without
# it (CI never fails for lack of network).
# Under "make deps ..." the Debian packages (pip among them) come first, so
# that the build of the same command already uses the wheel.
$(NCCL_STAMP):
	@mkdir -p $(dir $@)
	$(if $(filter deps,$(MAKECMDGOALS)),bash tools/install-deps.sh)
	@bash tools/nccl-wheel.sh $(NCCL_PIN) $(NCCL_WHEEL_DIR) || \
	    echo "nccl-wheel: building without NCCL's device API (GPU device-API part skipped)"
	@echo "# make: tools/nccl-wheel.sh $(NCCL_PIN) ran at $$(date -u +%FT%TZ)" > $@

nccl-wheel:
	@mkdir -p $(dir $(NCCL_STAMP))
	@echo "# make nccl-wheel ran at $$(date -u +%FT%TZ)" > $(NCCL_STAMP)
	bash tools/nccl-wheel.sh $(NCCL_PIN) $(NCCL_WHEEL_DIR)

lib: $(STATIC) $(SHARED)
tools: $(TOOL_BINS)
tests: $(UNIT_BINS) $(MPI_TBINS) $(FUZZ_REPLAY)

# db/schema.sql is compiled into libcore as a C string.
$(BUILD)/gen/schema_sql.h: db/schema.sql
	@mkdir -p $(dir $@)
	sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $< > $@
$(BUILD)/libcore/costdb.o: $(BUILD)/gen/schema_sql.h

# header dependencies: each object's .d file, written by the compiler (-MMD;
# -MP adds an empty rule per header so a deleted header does not stop make)
$(BUILD)/%.o: %.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/kernels/%.o: kernels/%.cu $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -MMD -MP -MF $(@:.o=.d) -c $< -o $@

ALL_OBJ   := $(LIB_OBJ) $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/*/*.c)) \
             $(UNIT_SRC:%.c=$(BUILD)/%.o) $(MPI_TSRC:%.c=$(BUILD)/%.o) \
             $(FUZZ_SRC:%.c=$(BUILD)/%.o) $(BUILD)/tests/fuzz/replay_main.o
-include $(ALL_OBJ:.o=.d)

$(STATIC): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $(filter %.o,$^)
	@echo '$(LDFLAGS) $(LDLIBS)' > $(BUILD)/link-flags

$(SHARED): $(LIB_OBJ) $(CONFIG_STAMP)
	$(CC) -shared $(LDFLAGS) -Wl,-soname,$(SONAME) -o $@ $(filter %.o,$^) $(LDLIBS)
	ln -sf libdmuon.so $(BUILD)/$(SONAME)

# tools/common/ (option and size parsing) goes into every tool; --as-needed
# keeps libraries a tool does not call out of it; dmuon-plan's link does not
# name the CUDA NS engine (NS_CUDA_PULL), so cuBLAS stays out of it.
$(BUILD)/tools/%.o: CPPFLAGS += -Itools
# tools/common/opdrv*.c (the operator driver and its lines) only into the two
# tools with operator checks and timings.
OPDRV_OBJ   := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/common/opdrv*.c))
TOOL_COMMON := $(filter-out $(OPDRV_OBJ),$(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/common/*.c)))
tool_objs    = $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/$(1)/*.c)) $(if $(filter bench verify,$(1)),$(OPDRV_OBJ))
define tool_rule
$(BINDIR)/dmuon-$(1): $(call tool_objs,$(1)) $(TOOL_COMMON) $(STATIC) $(CONFIG_STAMP)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(LDFLAGS) -Wl,--as-needed -o $$@ $$(filter %.o,$$^) $(STATIC) \
	    $(if $(filter plan,$(1)),$$(filter-out $$(NS_CUDA_PULL),$$(LDLIBS)),$$(LDLIBS))
endef
$(foreach t,$(TOOLS),$(eval $(call tool_rule,$(t))))

$(BUILD)/tests/test_%: $(BUILD)/tests/unit/test_%.o $(TOOL_COMMON) $(STATIC)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(TOOL_COMMON) $(STATIC) -lcmocka $(LDLIBS)
$(BUILD)/tests/unit/test_opt.o: CPPFLAGS += -Itools

# ---- install --------------------------------------------------------------
# make install PREFIX=DIR [DESTDIR=STAGE]: bin/dmuon-{probe,plan,bench,verify,train}, lib/libdmuon.{a,so},
# include/dmuon/*.h, share/dmuon/schema.sql, lib/pkgconfig/dmuon.pc.
# libdmuon.a needs what Libs.private lists (pkg-config --static --libs dmuon).
PREFIX    ?= /usr/local
MPI_CFLAGS := $(shell mpicc -showme:compile 2>/dev/null)
MPI_LIBS  := $(shell mpicc -showme:link 2>/dev/null)
# Nothing installed points into the build tree: a libnccl.so.2 from the
# build tree (the wheel) is copied into PREFIX/lib, and the library and the
# tools are linked again with their rpath there (other libraries keep their
# system locations); debug info names paths relative to the tree.
NCCL_IN_TREE := $(if $(NCCL_LIB),$(findstring $(CURDIR)/build/,$(NCCL_LIB)/),)
INSTALL_NCCL_LINK := $(if $(NCCL_IN_TREE),-L$(PREFIX)/lib -Wl$(COMMA)-rpath$(COMMA)$(PREFIX)/lib -l:libnccl.so.2,$(NCCL_LINK))
INSTALL_LDLIBS := $(if $(NCCL_LINK),$(subst $(NCCL_LINK),$(INSTALL_NCCL_LINK),$(LDLIBS)),$(LDLIBS))
INSTALL_LINK_PATH := $(if $(NCCL_IN_TREE),-L$(NCCL_LIB),)
install: lib tools
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig \
	    $(DESTDIR)$(PREFIX)/include/dmuon $(DESTDIR)$(PREFIX)/share/dmuon
	$(if $(NCCL_IN_TREE),install -m 755 $(NCCL_LIB)/libnccl.so.2 $(DESTDIR)$(PREFIX)/lib/)
	$(foreach t,$(TOOLS),$(CC) $(LDFLAGS) -Wl,--as-needed -o $(DESTDIR)$(PREFIX)/bin/dmuon-$(t) \
	    $(call tool_objs,$(t)) $(TOOL_COMMON) $(STATIC) \
	    $(INSTALL_LINK_PATH) $(if $(filter plan,$(t)),$(filter-out $(NS_CUDA_PULL),$(INSTALL_LDLIBS)),$(INSTALL_LDLIBS)) &&) true
	install -m 644 $(STATIC) $(DESTDIR)$(PREFIX)/lib/
	$(CC) -shared $(LDFLAGS) -Wl,-soname,$(SONAME) -o $(DESTDIR)$(PREFIX)/lib/libdmuon.so.$(DMUON_VERSION) \
	    $(LIB_OBJ) $(INSTALL_LINK_PATH) $(INSTALL_LDLIBS)
	ln -sf libdmuon.so.$(DMUON_VERSION) $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/libdmuon.so
	install -m 644 libcore/include/dmuon/*.h $(DESTDIR)$(PREFIX)/include/dmuon/
	install -m 644 db/schema.sql $(DESTDIR)$(PREFIX)/share/dmuon/
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$${prefix}/lib' 'includedir=$${prefix}/include' '' \
	    'Name: dmuon' 'Description: Muon owner plans and variable-length collectives (libdmuon)' \
	    'Version: $(DMUON_VERSION)' \
	    'Cflags: -I$${includedir} $(MPI_CFLAGS) -pthread' \
	    'Libs: -L$${libdir} -ldmuon $(MPI_LIBS)' \
	    'Libs.private: $(INSTALL_LDLIBS)' > $(DESTDIR)$(PREFIX)/lib/pkgconfig/dmuon.pc
	@echo "installed into $(DESTDIR)$(PREFIX)$(if $(NCCL_IN_TREE), (with NCCL $(NCCL_VER) from the build tree in lib/))"

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

# The trainer's model test also links the model sources of tools/train.
TRAIN_MODEL_OBJ := $(patsubst %,$(BUILD)/tools/train/%.o,model config data)
$(BUILD)/tests/unit/test_train_model.o: CPPFLAGS += -Itools/train
$(BUILD)/tests/unit/test_train_model.o: $(wildcard tools/train/*.h)
$(BUILD)/tests/test_train_model: $(BUILD)/tests/unit/test_train_model.o $(TRAIN_MODEL_OBJ) $(STATIC)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(STATIC) -lcmocka $(LDLIBS)

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

# dmuon-train on 4 hosts x 2 (default; see tests/cluster/train.sh --help for
# CLUSTER_TRAIN_ARGS such as --hosts 8 --ranks 1 --rate 2gbit)
cluster-train: all
	bash tests/cluster/train.sh --bin $(BINDIR) $(CLUSTER_TRAIN_ARGS)

demo: all
	bash tools/demo.sh $(BINDIR)

bench: all
	bash tools/bench.sh $(BINDIR)

# the trainer: line D on 8 ranks (4 virtual nodes x 2) on the fortunes text;
# equivalence of the lines (200 steps); plots of the logs
.PHONY: train equiv plots
train: all
	@mkdir -p build/train
	OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
	    mpirun -np 8 --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
	    $(BINDIR)/dmuon-train --ranks-per-node 2 --line D --log build/train/train.csv --min-val-drop 0.4

equiv: all
	bash tools/train-equiv.sh $(BINDIR)

plots:
	bash tools/train-plots.sh

deps:
	bash tools/install-deps.sh

clean:
	rm -rf build bin
