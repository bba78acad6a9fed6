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
# (about 6 minutes; pip caches the built wheel for the next venv).
$(FULL): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test,llama,bench,demo]'
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

bench-overhead: $(FULL) system-deps
	$(BIN)/hybrid-gateway bench overhead --out out/bench

clean:
	rm -rf $(VENV) out var .pytest_cache .mypy_cache .ruff_cache
