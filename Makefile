# The two commands of the README: `make demo` (the main job) and `make test` (the whole suite).
# Both build .venv on first use, taking torch from constraints.txt (the local CPU wheel).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint bench clean

$(STAMP): pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/msprobe demo --out msprobe_demo

test: $(STAMP)
	$(BIN)/python -m pytest -n auto -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -n auto -q -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check msprobe tests benchmarks
	$(BIN)/ruff format --check msprobe tests benchmarks
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python benchmarks/dump_overhead.py
	$(BIN)/python benchmarks/replay_speed.py
	$(BIN)/python benchmarks/compare_speed.py

clean:
	rm -rf $(VENV) msprobe_demo
