# Quick start on a fresh machine:  make demo   |   make test
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
BASE   := $(VENV)/.installed-base
FULL   := $(VENV)/.installed-test

.PHONY: demo test pytest lint bench-overhead system-deps browser-deps clean

$(BIN)/python:
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 is required"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(BASE): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[demo]'
	touch $@

# The test extras include llama-cpp-python[server], which compiles llama.cpp the first time
# (about 6 minutes; pip caches the built wheel for the next venv).  Built for AVX2, not
# -march=native: on a host whose CPU reports AMX, a native build runs AMX instructions, and in
# a VM that does not enable their state the first completion dies (general protection fault at
# ldtilecfg in libggml-cpu, seen on this project's 2-core VMs).  A wheel cached from a native
# build is reused as it is: `pip cache remove llama_cpp_python` first.
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
$(FULL): pyproject.toml | $(BIN)/python
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python -m pip install -q -e '.[test,llama,bench,demo]'
	touch $@ $(BASE)

# wrk is the out-of-process load generator of the overhead benchmark (Debian package).
system-deps:
	@command -v wrk >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq wrk >/dev/null; \
	  else echo "wrk is missing: sudo apt-get install -y wrk" >&2; exit 1; fi; }

# chromium renders the built-in /dashboard in its test (Debian package; headless, no sandbox).
browser-deps:
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium is missing (sudo apt-get install -y chromium): the dashboard test will be skipped" >&2; fi; }

demo: $(BASE)
	$(BIN)/hybrid-gateway demo --config examples/gateway.yaml

test: lint pytest

pytest: $(FULL) system-deps browser-deps
	$(BIN)/python -m pytest

lint: $(FULL)
	$(BIN)/ruff check src tests
	$(BIN)/mypy src tests
	$(BIN)/hadolint Dockerfile

bench-overhead: $(FULL) system-deps
	$(BIN)/hybrid-gateway bench overhead --out out/bench

clean:
	rm -rf $(VENV) out var .pytest_cache .mypy_cache .ruff_cache
