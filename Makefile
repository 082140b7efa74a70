# comem - the two commands a newcomer needs:
#   make demo    installs what is missing, builds the CLI, runs the demo scenario under every policy
#   make check   installs what is missing (and the tests' Python environment, .venv/), builds, runs every test
#   make install PREFIX=DIR   builds, then installs under DIR (default /usr/local; DESTDIR for staging)
# Other targets: make (build only), make asan, make tsan, make windows-check (docs/windows.md), make clean.

BUILD ?= build
SANITIZE ?=
CMAKE_FLAGS ?=
CTEST_ARGS ?=
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
PREFIX ?= /usr/local

.PHONY: all build deps venv demo check asan tsan windows-check clean install

all: build

deps:
	@bash scripts/deps.sh

# The Python environment the tests run in (.venv/, from PyPI: scripts/requirements-dev.txt).
venv:
	@bash scripts/venv.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCOMEM_SANITIZE="$(SANITIZE)" $(CMAKE_FLAGS)

build: $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# DESTDIR, when set, is honoured by cmake --install itself (staged package builds).
# The prefix is also given to the configuration: the Python package's place depends on it.
install: $(BUILD)/build.ninja
	cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX="$(PREFIX)" >/dev/null
	cmake --build $(BUILD) -j $(JOBS)
	cmake --install $(BUILD)

# The demo needs the CLI alone (comem_cli: bin/comem and the preload library it carries), not the tests and
# benchmarks `make` builds: about a minute from a fresh clone on two cores instead of several.
demo: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target comem_cli
	$(BUILD)/bin/comem simulate scenarios/demo.scn --svg $(BUILD)/demo.svg --json $(BUILD)/demo.json

# A build configured before the tests' environments existed (make demo first) is configured again
# once they are newer than its cache: CMake picks their Pythons up then (cmake/cache_default.cmake).
check: deps venv
	@for stamp in .venv/.comem-stamp .venv-aimdo-new/.comem-stamp .venv-a125cd84/.comem-stamp .venv-v039/.comem-stamp; do \
	  if [ -f $(BUILD)/CMakeCache.txt ] && [ $$stamp -nt $(BUILD)/CMakeCache.txt ]; then \
	    echo "make check: $${stamp%/*} is newer than $(BUILD)'s configuration: configuring it again"; \
	    cmake -S . -B $(BUILD) >/dev/null || exit 1; break; \
	  fi; \
	done
	$(MAKE) --no-print-directory build
	@rc=0; ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) --output-junit $(abspath $(BUILD))/ctest-junit.xml \
	    --test-output-size-passed 8000000 $(CTEST_ARGS) || rc=$$?; \
	  python3 scripts/skips.py $(BUILD)/ctest-junit.xml || true; exit $$rc

asan:
	$(MAKE) check BUILD=build-asan SANITIZE=address,undefined

tsan:
	$(MAKE) check BUILD=build-tsan SANITIZE=thread CTEST_ARGS="-L threads"

# Cross-builds the portable layers for Windows with MinGW-w64 and runs their tests under wine.
windows-check:
	@bash scripts/windows-check.sh

clean:
	rm -rf build build-asan build-tsan build-fuzz build-release build-win build-win-deps
