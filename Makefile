# dmuon — one build for everything.
#
#   make deps         install the Debian packages below when missing
#   make              libcore (static + shared) and bin/dmuon-{plan,probe,bench,verify,train}
#   make test         unit, CLI and MPI tests; then the same suite under ASan+UBSan
#   make test-fast    the suite once, no sanitizer build
#   make demo         plan the bundled models (measured costs on this machine)
#   make bench        side-by-side benchmarks (planner speed, NS, operators, the trainer's lines)
#   make train        train the example model, line D on 8 ranks, on the fortunes text
#   make equiv        the trainer's loss equivalence of the lines (D vs B, FSDP vs HSDP, 8 vs 1 rank)
#   make plots        SVG plots (gnuplot) of the trainer's logs from make equiv and make bench
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
TOOLS     := probe plan bench verify train
TOOL_BINS := $(TOOLS:%=$(BINDIR)/dmuon-%)
UNIT_SRC  := $(sort $(wildcard tests/unit/test_*.c))
UNIT_BINS := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
MPI_TSRC  := $(sort $(wildcard tests/mpi/*.c))
MPI_TBINS := $(MPI_TSRC:tests/mpi/%.c=$(BUILD)/tests/mpi/%)
STATIC    := $(BUILD)/libdmuon.a
SHARED    := $(BUILD)/libdmuon.so

.PHONY: all lib tools tests test test-fast test-san demo bench clean config deps
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
tests: $(UNIT_BINS) $(MPI_TBINS)

# db/schema.sql is compiled into libcore as a C string.
$(BUILD)/gen/schema_sql.h: db/schema.sql
	@mkdir -p $(dir $@)
	sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $< > $@
$(BUILD)/libcore/costdb.o: $(BUILD)/gen/schema_sql.h

$(BUILD)/%.o: %.c $(wildcard libcore/include/dmuon/*.h libcore/*.h libcore/*/*.h)
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

define tool_rule
$(BINDIR)/dmuon-$(1): $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/$(1)/*.c)) $(STATIC)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(LDFLAGS) -o $$@ $$(filter %.o,$$^) $(STATIC) $$(LDLIBS)
endef
$(foreach t,$(TOOLS),$(eval $(call tool_rule,$(t))))

$(BUILD)/tests/test_%: $(BUILD)/tests/unit/test_%.o $(STATIC)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(STATIC) -lcmocka $(LDLIBS)

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
