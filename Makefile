# Two commands on a fresh machine (Python 3.11+ with venv):
#   make demo   set up .venv and run the demo on the embedded defaults (SQLite)
#   make test   set up .venv and run the checks and the whole test suite
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The demo needs milepost and what it runs on; the checks and tests also the dev tools.
DEMO_STAMP := $(VENV)/.installed-demo
STAMP := $(VENV)/.installed-dev

.PHONY: demo test test-fast test-loaded lint bench screenshots clean

$(VENV)/bin/python:
	$(PY) -m venv $(VENV)

$(DEMO_STAMP): pyproject.toml | $(VENV)/bin/python
	$(BIN)/pip install -q -e .
	touch $(DEMO_STAMP)

$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP) $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	PATH="$(abspath $(BIN)):$$PATH" bash examples/demo.sh

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy -p milepost
	$(BIN)/lint-imports

test: lint
	$(BIN)/pytest -n 2 --dist loadgroup

# The pure tests, under a minute: no Prefect, no PostgreSQL, no browser, nothing marked slow (pyproject.toml's markers).
test-fast: $(STAMP)
	$(BIN)/pytest -q -n 2 -p no:cacheprovider -m 'not prefect and not postgres and not browser and not slow'

# `make test` on a busy machine: two CPU-bound processes run beside it (started here, stopped when it ends,
# whatever its outcome). The suite must hold there too: tests wait on conditions with deadlines.
test-loaded: $(STAMP)
	$(BIN)/python -c 'while 1: pass' & a=$$!; $(BIN)/python -c 'while 1: pass' & b=$$!; \
	trap 'kill $$a $$b 2>/dev/null' EXIT INT TERM; \
	$(MAKE) test

bench: $(STAMP)
	$(BIN)/pip install -q -e '.[dev,bench]'
	$(BIN)/python benchmarks/bench_graph.py
	$(BIN)/python benchmarks/bench_drive.py
	$(BIN)/python benchmarks/bench_mcp.py
	$(BIN)/python benchmarks/bench_next.py
	$(BIN)/python benchmarks/bench_proofs.py
	$(BIN)/python benchmarks/bench_env.py
	$(BIN)/python benchmarks/bench_scaffold.py
	$(BIN)/python benchmarks/bench_store.py
	$(BIN)/python benchmarks/bench_plan.py
	$(BIN)/python benchmarks/bench_exact.py
	$(BIN)/python benchmarks/bench_startup.py
	$(BIN)/python benchmarks/bench_vs_doit.py
	$(BIN)/python benchmarks/bench_judge.py --rounds 3
	$(BIN)/pip install -q pytest-testmon
	$(BIN)/python benchmarks/bench_blocks.py
	$(BIN)/python benchmarks/bench_blocks.py --package click

# Regenerate the pictures of the Prefect UI in docs/ui.md (needs Chromium).
screenshots: $(STAMP)
	MILEPOST_SCREENSHOTS=$(abspath docs/img) MILEPOST_REQUIRE_BROWSER=1 $(BIN)/pytest -q \
		tests/flows/test_ui.py -k "page or artifact or redrive"

clean:
	-[ -d demo-workspace/.milepost ] && [ -x $(BIN)/milepost ] && (cd demo-workspace && $(abspath $(BIN))/milepost server stop)
	rm -rf $(VENV) demo-workspace build dist *.egg-info
