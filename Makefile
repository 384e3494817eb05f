# Everything a fresh clone needs: `make demo` and `make test` set up .venv first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# Caches live in the clone (ignored by git) so a re-run downloads nothing.
export PIP_CACHE_DIR := $(CURDIR)/.cache/pip
export DBT_FENCED_SPARK_JARS_CACHE := $(CURDIR)/.cache/ivy
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: setup demo test unit functional lint format clean

setup: $(STAMP)

$(STAMP): setup.py requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e . -r requirements-dev.txt
	touch $(STAMP)

demo: setup
	$(PY) integration_projects/lakehouse_orders/race_demo.py

# pytest exits 5 when it collected no test: that is a failure here, not a pass.
test: setup lint
	$(PY) -m pytest tests -q -ra --durations=15; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

unit: setup
	$(PY) -m pytest tests/unit -q

functional: setup
	$(PY) -m pytest tests/functional -q -ra

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) .fenced_spark logs target
