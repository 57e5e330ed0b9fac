# itwin-report: `make demo` to see a report from emulated data, `make test` to run the tests.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
DEMO_EXPERIMENT ?= emulated-cluster
DEMO_TRUTH := mllogs/$(DEMO_EXPERIMENT)-truth.json

.DEFAULT_GOAL := test
.PHONY: install demo test test-browser lint bench clean-demo help

help:
	@echo "make demo        emulate sample runs into mllogs/mlflow.db, print the report, write plots/ and report.html"
	@echo "make test        install (if needed) and run the test suite"
	@echo "make test-browser  the HTML page in headless Chromium (installs Debian's chromium if missing)"
	@echo "make lint        ruff (lint + format check) and mypy"
	@echo "make bench       loading benchmark: report vs one-SQL-query floor vs per-run MLflow calls"
	@echo "make clean-demo  remove the demo store, truth file and plots"

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

install: $(STAMP)

$(DEMO_TRUTH): | $(STAMP)
	$(VENV)/bin/itwin-report emulate --experiment-name $(DEMO_EXPERIMENT) --truth $@

demo: $(STAMP) $(DEMO_TRUTH)
	$(VENV)/bin/itwin-report generate-scalability-report --experiment-name $(DEMO_EXPERIMENT) --plot-dir plots --html report.html
	@echo "HTML report: report.html"

test: $(STAMP)
	$(PY) -m pytest -q

test-browser: demo
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)
	ITWIN_REPORT_DEMO_PAGE=$(CURDIR)/report.html $(PY) -m pytest -q -m browser tests/test_browser.py

lint: $(STAMP)
	$(VENV)/bin/ruff check itwin_report tests bench tools
	$(VENV)/bin/ruff format --check itwin_report tests bench tools
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) bench/bench_load.py

clean-demo:
	rm -rf mllogs/mlflow.db mllogs/artifacts/$(DEMO_EXPERIMENT) $(DEMO_TRUTH) plots report.html
