# The two commands of the README: `make demo` and `make test`. Both set up .venv first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# torch is pinned and installed first: the local CPU wheel; an unpinned torch pulls a CUDA build.
TORCH_PIN := torch==2.13.0

.PHONY: setup demo test test-fast bench clean-home

$(STAMP): pyproject.toml
	@start=$$(date +%s); \
	test -x $(PY) || $(PYTHON) -m venv $(VENV); \
	$(PY) -m pip install --quiet --upgrade pip && \
	$(PY) -m pip install --quiet $(TORCH_PIN) && \
	$(PY) -m pip install --quiet -e '.[test]' && \
	touch $(STAMP) && \
	echo "setup: installed into $(VENV) in $$(( $$(date +%s) - start )) s"

setup: $(STAMP)

demo: $(STAMP)
	$(PY) -m orchestration.cli demo

test: $(STAMP)
	$(PY) -m pytest -q

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

bench: $(STAMP)
	$(PY) bench/window.py --rows 1000000
	$(PY) bench/environment.py
	$(PY) bench/evaluation.py
	$(PY) bench/learning.py

clean-home:
	rm -rf .retrain
