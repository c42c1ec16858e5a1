# The README's two commands: `make train` and `make test`. Both install deps, configure and build.
BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?=
# Extra axle-train arguments for `make train` (e.g. "--max-steps 50"), extra ctest
# arguments for `make test` (e.g. "-R 'Core|Cli'").
TRAIN_ARGS ?=
CTEST_ARGS ?=
# The Python package's virtual environment (make python), outside the tree.
AXLE_VENV ?= $(HOME)/.cache/axle/venv-torch-2.15.0

.PHONY: deps configure build python train test test-repeat test-asan bench fuzz fresh-check clean

deps:
	@bash scripts/install-deps.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

configure: deps $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The Python package (python/, axle as PyTorch's xla device): a venv outside the tree with the
# pinned torch==2.15.0 (created on first use, ~5.4 GB), the extension built in place against
# $(BUILD)'s libaxle.so, the package installed editable (scripts/python-env.sh says how and why),
# and $(BUILD)/python-venv linked to the venv: the Python tests' ctest entries run its python.
python: build
	@AXLE_VENV="$(AXLE_VENV)" AXLE_BUILD_DIR="$(BUILD)" JOBS=$(JOBS) bash scripts/python-env.sh

train: build
	$(BUILD)/bin/axle-train --model cnn --epochs 1 $(TRAIN_ARGS)

# Every test: the C++ programs, the examples, the layering and the Python tests (python/tests,
# one ctest entry per file, python.test_*), all under one ctest -j.
test: build python
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# Every GoogleTest program run whole in one process, in a shuffled order, $(2) times, from
# build dir $(1): a test that counts on what ran before it (a warm graph cache, zeroed
# metrics) fails here. JOBS programs at a time (as ctest -j runs them), each under a
# 30-minute limit; each one's output is kept in $(1)/repeat/ and printed when it fails.
run_gtest_programs = mkdir -p $(1)/repeat && ls $(1)/bin/test_* | xargs -P $(JOBS) -I{} sh -c \
	  'log=$(1)/repeat/$$(basename {}).log; \
	  if timeout 1800 {} --gtest_shuffle --gtest_repeat=$(2) --gtest_brief=1 >$$log 2>&1; then echo "ok     {}"; \
	  else echo "FAILED {} (exit $$?)"; cat $$log; exit 1; fi'

# Every GoogleTest program twice in one process, shuffled.
test-repeat: build
	@$(call run_gtest_programs,$(BUILD),2)

# The unit tests under AddressSanitizer + UndefinedBehaviorSanitizer, in build-asan/. Not the
# Python tests: the interpreter and torch are not sanitized (an ASan libaxle.so would need
# libasan preloaded into python, and its reports would be CPython's and torch's), and the axle
# code they reach is the code the C++ tests run here.
# -O1 -g1 (line tables: reports still name file:line): the sanitized build compiles in half
# the time of -O2 -g (measured: 70 s vs 140 s of CPU for tests/nn/test_nn.cpp), and CI builds it
# from scratch on 2 cores.
# Each GoogleTest program runs whole, once, shuffled (as test-repeat), not one process per
# test case as ctest runs them: a sanitized process's start-up (the shadow memory, the
# library's initialisers) cost more than most of the ~3300 cases it would run, and a leak is
# still reported when the program exits. Then the ctest entries that are not GoogleTest
# cases and run axle code: the examples, the safetensors fuzzer and the installed package.
ASAN_ENV = ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
test-asan: deps
	cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
	  -DAXLE_SANITIZE=ON -DAXLE_BUILD_BENCH=OFF $(CMAKE_FLAGS)
	cmake --build build-asan -j $(JOBS)
	@export $(ASAN_ENV); $(call run_gtest_programs,build-asan,1)
	cd build-asan && $(ASAN_ENV) ctest --output-on-failure -j $(JOBS) -R '^(example_.*|fuzz_safetensors|install_package)$$'

bench: build
	bash bench/run

# Longer differential fuzzing than `make test` runs: random op programs on cpu, lazy xla
# and xla eager mode must agree. FUZZ_PROGRAMS and FUZZ_SEED choose the range.
FUZZ_PROGRAMS ?= 20000
FUZZ_SEED ?= 1000
fuzz: build
	AXLE_FUZZ_PROGRAMS=$(FUZZ_PROGRAMS) AXLE_FUZZ_SEED=$(FUZZ_SEED) $(BUILD)/bin/test_fuzz_ops

# The README's two commands on a fresh Debian 12 root made with debootstrap, as root (see
# scripts/fresh-check.sh). The minimal root is cached in /var/cache/axle-fresh-check.
fresh-check:
	bash scripts/fresh-check.sh $(BUILD)/fresh-root

clean:
	rm -rf $(BUILD)
