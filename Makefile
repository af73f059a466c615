# The two commands of the README: `make demo` and `make test`. Both set up .venv first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# torch is pinned and installed first: the local CPU wheel; an unpinned torch pulls a CUDA build.
TORCH_PIN := torch==2.13.0
# -qq: pip's warnings about this machine's package mirrors would otherwise fill pages; errors still show.
PIP := $(PY) -m pip install -qq --disable-pip-version-check

.PHONY: setup demo test test-fast lint bench clean-home

$(STAMP): pyproject.toml
	@start=$$(date +%s); \
	test -x $(PY) || $(PYTHON) -m venv $(VENV); \
	echo "setup: pip" && $(PIP) --upgrade pip && \
	echo "setup: $(TORCH_PIN) (CPU build)" && $(PIP) $(TORCH_PIN) && \
	echo "setup: agent-retrain and its test tools" && $(PIP) -e '.[test]' && \
	touch $(STAMP) && \
	echo "setup: installed into $(VENV) in $$(( $$(date +%s) - start )) s"

setup: $(STAMP)

demo: $(STAMP)
	$(PY) -m orchestration.cli demo --fresh

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache

test: lint
	$(PY) -m pytest -q

test-fast: lint
	$(PY) -m pytest -q -m "not slow"

bench: $(STAMP)
	$(PY) bench/window.py --rows 1000000
	$(PY) bench/environment.py
	$(PY) bench/evaluation.py
	$(PY) bench/learning.py

clean-home:
	rm -rf .retrain
