# Two commands on a fresh machine (Python 3.11+ with venv):
#   make demo   set up .venv and run the demo on the embedded defaults (SQLite)
#   make test   set up .venv and run the checks and the whole test suite
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench screenshots clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" bash examples/demo.sh

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy -p milepost

test: lint
	$(BIN)/pytest -n 2 --dist loadgroup

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_graph.py
	$(BIN)/python benchmarks/bench_drive.py
	$(BIN)/python benchmarks/bench_mcp.py
	$(BIN)/python benchmarks/bench_next.py
	$(BIN)/python benchmarks/bench_proofs.py
	$(BIN)/python benchmarks/bench_scaffold.py
	$(BIN)/python benchmarks/bench_store.py
	$(BIN)/python benchmarks/bench_plan.py

# Regenerate the README's pictures of the Prefect UI (needs Chromium).
screenshots: $(STAMP)
	MILEPOST_SCREENSHOTS=$(abspath docs/img) MILEPOST_REQUIRE_BROWSER=1 $(BIN)/pytest -q \
		tests/flows/test_ui.py -k "page or artifact or redrive"

clean:
	rm -rf $(VENV) demo-workspace build dist *.egg-info
