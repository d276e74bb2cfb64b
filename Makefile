# stoker: GNU make, no configure step. `make` builds the library, the CLI and the Python
# extension; `make test` installs missing Debian packages, builds and runs every test.
# Variants: `make asan|ubsan|tsan` rebuild into build/<variant>/ and run the unit tests.

BUILD    ?= build
CC       ?= gcc
PYTHON   ?= /usr/bin/python3
OPT      ?= -O2
WERROR   ?= $(if $(CI),-Werror,)
SANITIZE ?=

PKGS     := libturbojpeg spng libxxhash libwebp libtiff-4
PKGS     += hdf5 lmdb
PKGS     += libcurl libcrypto
PKGS     += zlib
# Audio (issue 27), optional at build time: each library pkg-config finds joins the build with
# STK_HAVE_<NAME>; without it the audio formats or ops it serves fail with "stoker was built
# without <library>" and their tests skip (the GPU bench machine builds from fewer packages).
# libsndfile: WAV, FLAC, Ogg Vorbis, Opus; libmpg123: MP3; libfftw3f: the spectrograms.
AUDIO_LIBS := sndfile:SNDFILE libmpg123:MPG123 fftw3f:FFTW
AUDIO_HAVE := $(foreach l,$(AUDIO_LIBS),$(if $(shell pkg-config --exists $(word 1,$(subst :, ,$(l))) \
                2>/dev/null && echo y),$(l)))
PKGS     += $(foreach l,$(AUDIO_HAVE),$(word 1,$(subst :, ,$(l))))
AUDIO_DEFS := $(foreach l,$(AUDIO_HAVE),-DSTK_HAVE_$(word 2,$(subst :, ,$(l))))
# Video (issue 28), optional at build time: with libavformat, libavcodec, libavutil and libswscale
# all found by pkg-config the build defines STK_HAVE_AVCODEC; without them the video transform
# fails with "stoker was built without libavcodec" and its tests skip (the GPU bench machine
# builds from a small carried set of packages, and libavcodec's closure is too large to carry).
VIDEO_PKGS := libavformat libavcodec libavutil libswscale
VIDEO_HAVE := $(shell pkg-config --exists $(VIDEO_PKGS) 2>/dev/null && echo yes)
PKGS     += $(if $(VIDEO_HAVE),$(VIDEO_PKGS),)
VIDEO_DEFS := $(if $(VIDEO_HAVE),-DSTK_HAVE_AVCODEC,)
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

WARN     := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla -Wformat=2
CFLAGS_ALL := -std=c11 $(OPT) -g -fPIC -pthread -D_GNU_SOURCE $(WARN) $(WERROR) \
              -Iinclude -Isrc $(PKG_CFLAGS) $(AUDIO_DEFS) $(VIDEO_DEFS) $(SANITIZE) $(EXTRA_CFLAGS)
LIB_CFLAGS := $(CFLAGS_ALL) -fvisibility=hidden -DSTK_BUILDING_LIBRARY
CLI_CFLAGS := $(filter-out -Isrc,$(CFLAGS_ALL))
# The tests, fuzzers and generators exercise the building blocks too (include/stoker.h's fence).
TEST_CFLAGS := $(CFLAGS_ALL) -DSTK_BUILDING_BLOCKS
LDLIBS_ALL := $(PKG_LIBS) -ljpeg -lpthread -ldl -lm
LDFLAGS_ALL := $(SANITIZE) $(EXTRA_LDFLAGS)

# Library sources: one folder per layer, formats one folder deeper (src/source/<format>/).
LIB_SRCS := $(sort $(wildcard src/*/*.c src/*/*/*.c))
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
CLI_SRCS := $(sort $(wildcard cli/*.c))
CLI_OBJS := $(CLI_SRCS:%.c=$(BUILD)/obj/%.o)
# The CLI but its main(): also linked into the Python extension (`python -m stoker`).
CLI_CORE_OBJS := $(filter-out $(BUILD)/obj/cli/main.o,$(CLI_OBJS))
# Unit tests mirror the source tree (tests/unit/<folder>/test_<file>.c); binaries are
# build/tests/test_<file> (test names are unique across the tree).
UNIT_SRCS := $(sort $(wildcard tests/unit/*/test_*.c tests/unit/*/*/test_*.c))
UNIT_BINS := $(addprefix $(BUILD)/tests/,$(basename $(notdir $(UNIT_SRCS))))
# The unit tests that inject allocation failures (STK_FAULT_ALLOC; needs -DSTK_DEBUG): `make oom`.
OOM_SRCS := $(shell grep -l STK_DEBUG $(UNIT_SRCS))
OOM_BINS := $(addprefix $(BUILD)/tests/,$(basename $(notdir $(OOM_SRCS))))
FUZZ_SRCS := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_REPLAY := $(FUZZ_SRCS:tests/fuzz/%.c=$(BUILD)/tests/replay_%)
GEN_SRCS := $(sort $(wildcard tests/data/gen_*.c))
GEN_BINS := $(GEN_SRCS:tests/data/%.c=$(BUILD)/tests/%)
GPU_SRCS := $(sort $(wildcard tests/gpu/test_*.c))
GPU_BINS := $(GPU_SRCS:tests/gpu/%.c=$(BUILD)/tests/gpu_%)
FAKE_CUDA := $(BUILD)/tests/libfakecuda.so
# nvcc is optional: `make check-ptx` compiles the finishing kernel's NVRTC source with it.
NVCC     ?= $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard /usr/local/cuda/bin/nvcc))

SO_NAME  := libstoker.so.0.3

.PHONY: all lib cli python test unit oom oom-bins oom-cases fuzz-replay cli-test pytest asan ubsan \
        tsan fuzz examples deps demo bench format check-format check-exports check-layers \
        check-self-format clean test-gpu check-ptx fuzz-ci test-under-load test-pip

all: lib cli python

lib: $(BUILD)/libstoker.a $(BUILD)/libstoker.so
cli: $(BUILD)/stoker

$(BUILD)/obj/%.o: %.c include/stoker.h src/stk_internal.h
	@mkdir -p $(dir $@)
	$(CC) $(LIB_CFLAGS) -MMD -MP -c $< -o $@

# The CLI is a user of the public header like any other (no -DSTK_BUILDING_LIBRARY, no -Isrc).
$(BUILD)/obj/cli/%.o: cli/%.c include/stoker.h
	@mkdir -p $(dir $@)
	$(CC) $(CLI_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libstoker.a: $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libstoker.so: $(LIB_OBJS) src/libstoker.map
	$(CC) -shared -Wl,-soname,$(SO_NAME) -Wl,--version-script=src/libstoker.map \
	    $(LDFLAGS_ALL) -o $@ $(LIB_OBJS) $(LDLIBS_ALL)

$(BUILD)/stoker: $(CLI_OBJS) $(BUILD)/libstoker.a
	$(CC) $(LDFLAGS_ALL) -o $@ $(CLI_OBJS) $(BUILD)/libstoker.a $(LDLIBS_ALL)

# One rule per unit test source (they live in folders; the binary takes the file's name).
define UNIT_RULE
$(BUILD)/tests/$(basename $(notdir $(1))): $(1) tests/t.h $(BUILD)/libstoker.a
	@mkdir -p $$(dir $$@)
	$$(CC) $$(TEST_CFLAGS) -Itests -o $$@ $$< $$(BUILD)/libstoker.a $$(LDFLAGS_ALL) $$(LDLIBS_ALL)
endef
$(foreach s,$(UNIT_SRCS),$(eval $(call UNIT_RULE,$(s))))

$(BUILD)/tests/replay_%: tests/fuzz/%.c tests/fuzz/replay.c $(BUILD)/libstoker.a
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -Itests -o $@ $< tests/fuzz/replay.c $(BUILD)/libstoker.a \
	    $(LDFLAGS_ALL) $(LDLIBS_ALL)

$(BUILD)/tests/gen_%: tests/data/gen_%.c $(BUILD)/libstoker.a
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -Itests -o $@ $< $(BUILD)/libstoker.a $(LDFLAGS_ALL) $(LDLIBS_ALL)

# The fake CUDA driver the unit tests load through STOKER_LIBCUDA (tests/data/fake_cuda.c).
$(FAKE_CUDA): tests/data/fake_cuda.c src/cuda/stk_cuda_min.h src/cuda/stk_finish.h \
              src/cuda/stk_finish_body.h
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -shared -o $@ $< $(LDFLAGS_ALL) -lpthread

$(BUILD)/tests/test_cuda: tests/data/cuda_fixtures.h tests/data/fixtures.h
$(BUILD)/tests/test_loader: tests/data/fixtures.h
$(BUILD)/tests/test_recfile: tests/data/fixtures.h
$(BUILD)/tests/test_source: tests/data/fixtures.h
$(BUILD)/tests/test_hdf5: tests/data/fixtures.h
$(BUILD)/tests/test_lmdb: tests/data/fixtures.h

# GPU tests (tests/gpu): against the real driver; each exits 77 without a device.
$(BUILD)/tests/gpu_test_%: tests/gpu/test_%.c tests/t.h tests/data/cuda_fixtures.h \
                           tests/data/fixtures.h $(BUILD)/libstoker.a
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -Itests -o $@ $< $(BUILD)/libstoker.a $(LDFLAGS_ALL) $(LDLIBS_ALL)

-include $(LIB_OBJS:.o=.d) $(CLI_OBJS:.o=.d)

# ---- Python extension, built in place under build/python/stoker ----
PY_INC  := $(shell $(PYTHON) -c 'import sysconfig;print(sysconfig.get_paths()["include"])' 2>/dev/null)
PY_EXT  := $(shell $(PYTHON) -c 'import sysconfig;print(sysconfig.get_config_var("EXT_SUFFIX"))' 2>/dev/null)
PY_NP   := $(shell $(PYTHON) -c 'import numpy;print(numpy.get_include())' 2>/dev/null)
# The extension's C files (python/stoker/_ext/) apart from the Python modules (python/stoker/).
PY_SRCS := $(sort $(wildcard python/stoker/_ext/*.c))
PY_FILES := $(sort $(wildcard python/stoker/*.py python/stoker/*/*.py))
# Modules that left the source tree (moved into a sub-package) must leave the build too.
PY_STALE = $(filter-out $(PY_FILES:python/%=$(BUILD)/python/%),\
             $(wildcard $(BUILD)/python/stoker/*.py $(BUILD)/python/stoker/*/*.py))

python: $(if $(PY_SRCS),$(BUILD)/python/stoker/_core$(PY_EXT) $(PY_FILES:python/%=$(BUILD)/python/%),)
	@rm -f $(PY_STALE)

$(BUILD)/python/stoker/_core$(PY_EXT): $(PY_SRCS) $(wildcard python/stoker/_ext/*.h) \
                                      $(CLI_CORE_OBJS) $(BUILD)/libstoker.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -fvisibility=hidden -Wno-missing-prototypes -I$(PY_INC) -Icli -shared \
	    -o $@ $(PY_SRCS) $(CLI_CORE_OBJS) $(BUILD)/libstoker.a $(LDFLAGS_ALL) $(LDLIBS_ALL)

$(BUILD)/python/stoker/%.py: python/stoker/%.py
	@mkdir -p $(dir $@)
	cp $< $@

# ---- tests ----
deps:
	@bash scripts/deps.sh

# Everything a test needs is built first, on every CPU (unless -j was given); the tests then run
# one after another, each under its own time limit.
JOBS := $(if $(findstring j,$(MAKEFLAGS)),,-j$(shell getconf _NPROCESSORS_ONLN))
test: deps
	$(MAKE) $(JOBS) all $(UNIT_BINS) $(FAKE_CUDA) $(FUZZ_REPLAY) $(GEN_BINS) $(EXAMPLE_BINS)
	$(MAKE) $(JOBS) BUILD=build/debug EXTRA_CFLAGS=-DSTK_DEBUG oom-bins
	$(MAKE) check-exports check-layers check-self-format
	$(MAKE) unit oom fuzz-replay cli-test pytest check-ptx

unit: $(UNIT_BINS) $(FAKE_CUDA)
	@bash scripts/run_tests.sh $(UNIT_BINS)

# OOM injection in every `make test`: a debug build (build/debug, -DSTK_DEBUG) of the unit tests
# that fail each allocation in turn (curl torture, sqlite OOM tests), running only those cases.
oom:
	$(MAKE) BUILD=build/debug EXTRA_CFLAGS=-DSTK_DEBUG oom-cases
oom-bins: $(OOM_BINS) $(FAKE_CUDA)
oom-cases: oom-bins
	@STK_TEST_ONLY=alloc_failures,fault_injection bash scripts/run_tests.sh $(OOM_BINS)

fuzz-replay: $(FUZZ_REPLAY)
	@set -e; . scripts/fuzz_opts.sh; for r in $(FUZZ_REPLAY); do \
	    name=$${r##*/replay_fuzz_}; echo "replay $$name"; \
	    ASAN_OPTIONS=$$(fuzz_asan_options $$name) $$r tests/fuzz/corpus/$$name; done

# C examples (examples/*.c), linked as a trainer links libstoker; the CLI tests run them.
EXAMPLE_BINS := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))
examples: $(EXAMPLE_BINS)
$(BUILD)/examples/%: examples/%.c $(BUILD)/libstoker.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(BUILD)/libstoker.a $(LDFLAGS_ALL) $(LDLIBS_ALL)

cli-test: $(BUILD)/stoker $(GEN_BINS) $(EXAMPLE_BINS)
	@bash scripts/run_cli_tests.sh $(BUILD)

pytest: python $(GEN_BINS)
	@if [ -n "$(PY_SRCS)" ]; then bash scripts/run_pytest.sh $(BUILD) $(PYTHON); \
	 else echo "pytest: no Python extension yet"; fi

# The tests whose verdict involves threads, processes, signals or timing, beside a CPU load of 2
# busy processes per CPU (scripts/under_load.sh starts and stops it): the C tests of the loader,
# its stats, the autotuner and the fake GPU, `stoker bench`'s script, and the pytest cases
# marked `timing` (python/tests/conftest.py's TIMING_TESTS), REPEAT times in a row (default 1;
# scripts/repeat_runs.sh prints each run's verdict and the pass count). A timing assumption
# fails here, not at random in CI. The hang limits are tripled (everything takes about 3 times
# as long): they catch hangs, not slowness. UNDER_LOAD_PYTEST=python/tests runs all of pytest,
# UNDER_LOAD_CLI="tests/cli/test_bench.sh tests/cli/test_doctor.sh" the doctor's script too
# (5 minutes under the load; its verdicts are checked against the report's own figures).
LOAD_UNIT := $(filter %/test_loader %/test_stats %/test_autotune %/test_cuda,$(UNIT_BINS))
UNDER_LOAD_CLI ?= tests/cli/test_bench.sh
REPEAT ?= 1
UNDER_LOAD_PYTEST ?= --durations=10 -m timing python/tests
test-under-load: all $(LOAD_UNIT) $(FAKE_CUDA) $(GEN_BINS)
	@STK_TEST_TIMEOUT=180 STK_CLI_TIMEOUT=900 STK_PYTEST_TIMEOUT=900 STK_PYTEST_TOTAL_TIMEOUT=7200 \
	bash scripts/under_load.sh bash scripts/repeat_runs.sh $(REPEAT) $(BUILD)/under_load \
	    sh -c 'rc=0; bash scripts/run_tests.sh $(LOAD_UNIT) || rc=1; \
	    bash scripts/run_cli_tests.sh $(BUILD) $(UNDER_LOAD_CLI) || rc=1; \
	    bash scripts/run_pytest.sh $(BUILD) $(PYTHON) $(UNDER_LOAD_PYTEST) || rc=1; exit $$rc'

# `pip install` into a temporary prefix, offline, and the `stoker` command it installs
# (python/tests/test_cli_module.py; it compiles the extension again, so not in `make test`).
test-pip: python
	@STK_TEST_PIP=1 bash scripts/run_pytest.sh $(BUILD) $(PYTHON) python/tests/test_cli_module.py

check-exports: $(BUILD)/libstoker.so
	@bash scripts/check_exports.sh $(BUILD)/libstoker.so
	@printf '#define STK_BUILDING_BLOCKS\n#include "stoker.h"\n' | \
	    $(CXX) -std=c++11 -Wall -Wextra $(WERROR) -Iinclude -fsyntax-only -x c++ - && \
	    echo "check-exports: include/stoker.h compiles as C++ too"

# Calls only go down: includes, calls (nm of the objects) and Python imports against the floors
# of docs/design.md (scripts/check_layers.py), then the checker's own test (planted violations).
check-layers: $(LIB_OBJS) $(CLI_OBJS)
	@$(PYTHON) scripts/check_layers.py --build $(BUILD)
	@PYTHON=$(PYTHON) bash scripts/check_layers_test.sh $(BUILD)

# No error message formatted into itself (issue 30): the check, and the check that it can fail.
check-self-format:
	@$(PYTHON) scripts/check_self_format.py --self-test
	@$(PYTHON) scripts/check_self_format.py src cli python tests

# Sanitizer variants of the unit tests and fuzz replays (TSan runs the threaded tests).
asan:
	$(MAKE) BUILD=build/asan OPT=-O1 SANITIZE="-fsanitize=address -fno-omit-frame-pointer" \
	    EXTRA_CFLAGS=-DSTK_DEBUG unit fuzz-replay
ubsan:
	$(MAKE) BUILD=build/ubsan OPT=-O1 \
	    SANITIZE="-fsanitize=undefined -fno-sanitize-recover=undefined" unit fuzz-replay
# TSan also runs the Python extension's concurrency tests: the extension built with
# -fsanitize=thread, Debian's interpreter (not instrumented) with libtsan preloaded. The GIL and
# the interpreter's locks go through the intercepted pthread calls, so TSan sees that
# synchronisation; the torchrun and profile tests stay out (races reported inside torch's gloo,
# timing that TSan's slowdown changes: docs/reliability.md).
TSAN_PY_TESTS := python/tests/test_loader.py python/tests/test_core.py python/tests/test_transforms.py
TSAN_PY_TESTS += python/tests/test_batchmap.py
# tests/tsan.supp: races inside uninstrumented libraries (FFmpeg's frame threads), with reasons.
TSAN_SUPP := suppressions=$(CURDIR)/tests/tsan.supp
tsan:
	TSAN_OPTIONS="$(TSAN_SUPP)" $(MAKE) BUILD=build/tsan OPT=-O1 SANITIZE=-fsanitize=thread \
	    unit cli python
	@echo "== tsan: the Python extension's concurrency tests"
	@STK_PYTEST_PRELOAD=$$($(CC) -print-file-name=libtsan.so) \
	    TSAN_OPTIONS="halt_on_error=1 $(TSAN_SUPP)" \
	    bash scripts/run_pytest.sh build/tsan $(PYTHON) $(TSAN_PY_TESTS)

# libFuzzer builds (clang 14, ASan + UBSan): build/fuzz/fuzz_<entry>, over one instrumented copy
# of the library (build/fuzz/obj); run e.g. build/fuzz/fuzz_recfile -max_total_time=60 DIR
# `make fuzz-ci` runs every target FUZZ_SECONDS (default 60) from its corpus (scripts/fuzz_ci.sh),
# but fuzz_hdf5_bytes: byte-mutated HDF5 files crash Debian's libhdf5 1.10.8 inside itself within
# seconds (docs/reliability.md), so that target is replayed over its corpus (`make fuzz-replay`)
# and run by hand; fuzz_hdf5 fuzzes what stoker decides on files libhdf5 writes.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_CFLAGS  := -std=c11 -O1 -g -D_GNU_SOURCE -DSTK_BUILDING_LIBRARY -Iinclude -Isrc -Itests \
                $(PKG_CFLAGS) $(AUDIO_DEFS) $(VIDEO_DEFS) -fno-omit-frame-pointer \
                -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_OBJS    := $(LIB_SRCS:%.c=build/fuzz/obj/%.o)
FUZZ_BINS    := $(FUZZ_SRCS:tests/fuzz/%.c=build/fuzz/%)
fuzz: $(FUZZ_BINS)
FUZZ_CI_BINS := $(filter-out build/fuzz/fuzz_hdf5_bytes,$(FUZZ_BINS))
fuzz-ci: $(FUZZ_CI_BINS)
	@FUZZ_SECONDS=$(FUZZ_SECONDS) bash scripts/fuzz_ci.sh $(FUZZ_CI_BINS)
build/fuzz/obj/%.o: %.c include/stoker.h src/stk_internal.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@
build/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_OBJS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_OBJS) $(LDLIBS_ALL)
.SECONDARY: $(FUZZ_OBJS)
-include $(FUZZ_OBJS:.o=.d)

# The GPU tests on the real driver (exit 77 when there is no device), then again under
# compute-sanitizer when it is installed. See docs/gpu.md.
test-gpu: $(GPU_BINS)
	@bash tests/gpu/run.sh $(GPU_BINS)

# The finishing kernel's NVRTC source must also compile with the toolkit's nvcc (when present):
# the same text the library hands NVRTC at run time (tests/data/gen_finish_src prints it).
check-ptx: $(BUILD)/tests/gen_finish_src
	@if [ -z "$(NVCC)" ]; then echo "check-ptx: no nvcc, skipped"; exit 0; fi; \
	 set -e; $(BUILD)/tests/gen_finish_src > $(BUILD)/stk_finish.cu; \
	 $(NVCC) -ptx -arch=compute_75 -fmad=false -prec-div=true -ftz=false \
	     -o $(BUILD)/stk_finish.ptx $(BUILD)/stk_finish.cu; \
	 grep -q '\.entry stk_finish' $(BUILD)/stk_finish.ptx; \
	 echo "check-ptx: $(NVCC) compiled the finishing kernel ($(BUILD)/stk_finish.ptx)"

# The README's first command: on a fresh machine it installs what it needs first, as `make test`.
demo: deps
	$(MAKE) all
	@bash scripts/demo.sh $(BUILD)

# Every C file of the tree is formatted (clang-format 14, .clang-format).
FORMAT_FILES = $(sort $(wildcard include/*.h src/*.h src/*/*.[ch] src/*/*/*.[ch] src/*/*.def \
                 cli/*.[ch] python/stoker/_ext/*.[ch] tests/*.h tests/*/*.[ch] tests/*/*/*.[ch] \
                 tests/*/*/*/*.[ch] bench/*.[ch] examples/*.c))
format:
	@clang-format -i $(filter-out %.def,$(FORMAT_FILES))
check-format:
	@clang-format --dry-run --Werror $(filter-out %.def,$(FORMAT_FILES))

clean:
	rm -rf build
