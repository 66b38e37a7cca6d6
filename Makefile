# Thin front door over CMake. `make` builds, `make test` runs every test (CTest) and the fuzz
# smoke run (tests/fuzz, when clang is present),
# `make demo` runs the pipeline on the shipped model, `make bench` runs the benchmarks.
# On a fresh Debian/Ubuntu machine it installs the packages it needs first.

BUILD      ?= build
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=
PKGS := cmake g++ make pkg-config zlib1g-dev libhdf5-dev hdf5-tools libaec-dev libeigen3-dev \
        libcli11-dev doctest-dev nlohmann-json3-dev clang libclang-rt-dev libsentencepiece-dev \
        libpcre2-dev libutf8proc-dev
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 5400
FUZZ_RUNS    ?= 1000000
SMOKE_SECONDS ?= 5

.PHONY: all deps configure build test demo bench device clean fuzz fuzz-build fuzz-smoke

all: build

deps:
	@missing=""; for p in $(PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	@# the CLI tests cross-check files with numpy + h5py (python3 as found on PATH)
	@python3 -c 'import numpy, h5py' 2>/dev/null || python3 -m pip install -q numpy h5py 2>&1 | grep -v "^WARNING: Running pip as" || true

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

configure: deps $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@$(MAKE) --no-print-directory fuzz-smoke

# libFuzzer targets of tests/fuzz in their own clang tree (ASan + UBSan); see docs/fuzzing.md.
# Skipped with a note where clang or its libFuzzer runtime is missing.
fuzz-build: deps
	@if ! command -v clang++ > /dev/null || ! echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' | \
	    clang++ -x c++ -fsanitize=fuzzer - -o /dev/null 2> /dev/null; then \
	  echo "fuzz: clang++ with libFuzzer not found (Debian: clang, libclang-rt-dev): fuzz targets not built"; \
	else \
	  cmake -S . -B $(FUZZ_BUILD) -DTL_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	        -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ > /dev/null && \
	  cmake --build $(FUZZ_BUILD) -j $(JOBS); \
	fi

fuzz: fuzz-build
	@[ ! -x $(FUZZ_BUILD)/tests/fuzz/tl_fuzz_seeds ] || FUZZ_RUNS=$(FUZZ_RUNS) bash scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# The CI run: a few seconds per target, the seeds and the reproducers replayed; any finding fails.
fuzz-smoke: fuzz-build
	@[ ! -x $(FUZZ_BUILD)/tests/fuzz/tl_fuzz_seeds ] || bash scripts/fuzz.sh $(FUZZ_BUILD) $(SMOKE_SECONDS) --smoke

demo: build
	bash scripts/demo.sh $(BUILD)

bench: build
	bash scripts/bench.sh $(BUILD)

# sm_90-only build with static HDF5, for carrying to the GPU machine (scripts/device_run.sh).
device: deps
	cmake -S . -B build-sm90 -DCMAKE_BUILD_TYPE=Release -DTL_CUDA_ARCHS=90 -DTL_STATIC_HDF5=ON $(CMAKE_ARGS)
	cmake --build build-sm90 -j $(JOBS)

clean:
	rm -rf $(BUILD) build-sm90 $(FUZZ_BUILD)
