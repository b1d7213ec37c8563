# The two commands of the README: `make demo` (the main job) and `make test` (the whole suite).
# Both build .venv on first use, taking torch from constraints.txt (the local CPU wheel).
# CI (.ci/run) runs `make lint test test-portable`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-torch test-fast test-mindspore test-portable lint bench clean

# pytest exits 5 when it collected nothing: a suite that silently ran no test is a failure.
define PYTEST
	$(1) -m pytest $(2) || { rc=$$?; [ $$rc -ne 5 ] || echo "pytest collected no tests (exit 5)" >&2; exit $$rc; }
endef

$(STAMP): pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'   # every stage + test and lint tools
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/msprobe demo --out msprobe_demo

# The whole suite: the PyTorch venv, then the MindSpore venv (MindSpore, no torch). PyTorch-only
# contributors can run `make test-torch`, which never builds the MindSpore venv (2.8 GB).
test: test-torch test-mindspore

test-torch: $(STAMP)
	$(call PYTEST,$(BIN)/python,-n auto -q)

test-fast: $(STAMP)
	$(call PYTEST,$(BIN)/python,-n auto -q -m "not slow")

# MindSpore tests run in their own venv with MindSpore and without torch: that is how we know
# `import msprobe.mindspore` never needs torch.
MS_VENV := .venv-ms
MS_STAMP := $(MS_VENV)/.installed

$(MS_STAMP): pyproject.toml
	$(PY) -m venv $(MS_VENV)
	$(MS_VENV)/bin/pip install -q -e '.[mindspore,test]'
	touch $(MS_STAMP)

test-mindspore: $(MS_STAMP)
	$(call PYTEST,$(MS_VENV)/bin/python,-n auto -q tests/ms_dump)

# No test may depend on this CPU's vector kernels: the fast PyTorch suite once more with torch's plain
# (non-vectorised) kernels, and the MindSpore fixture tests with oneDNN held to AVX2.
test-portable: $(STAMP) $(MS_STAMP)
	$(call PYTEST,ATEN_CPU_CAPABILITY=default $(BIN)/python,-n auto -q -m "not slow")
	$(call PYTEST,ONEDNN_MAX_CPU_ISA=AVX2 $(MS_VENV)/bin/python,-n auto -q -m "not slow" tests/ms_dump)

lint: $(STAMP)
	$(BIN)/ruff check msprobe tests benchmarks
	$(BIN)/ruff format --check msprobe tests benchmarks
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python benchmarks/dump_overhead.py
	$(BIN)/python benchmarks/replay_speed.py
	$(BIN)/python benchmarks/compare_speed.py

clean:
	rm -rf $(VENV) $(MS_VENV) msprobe_demo
