# Thin front door over CMake. `make` builds, `make test` runs every test (CTest),
# `make demo` runs the pipeline on the shipped model, `make bench` runs the benchmarks.
# On a fresh Debian/Ubuntu machine it installs the packages it needs first.

BUILD      ?= build
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=
PKGS := cmake g++ make pkg-config zlib1g-dev libhdf5-dev hdf5-tools libaec-dev libeigen3-dev \
        libcli11-dev doctest-dev nlohmann-json3-dev
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps configure build test demo bench device clean

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

demo: build
	bash scripts/demo.sh $(BUILD)

bench: build
	bash scripts/bench.sh $(BUILD)

# sm_90-only build with static HDF5, for carrying to the GPU machine (scripts/device_run.sh).
device: deps
	cmake -S . -B build-sm90 -DCMAKE_BUILD_TYPE=Release -DTL_CUDA_ARCHS=90 -DTL_STATIC_HDF5=ON $(CMAKE_ARGS)
	cmake --build build-sm90 -j $(JOBS)

clean:
	rm -rf $(BUILD) build-sm90
