# itwin-report: `make demo` to see a report from emulated data, `make test` to run the tests.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# the suite in one process per core (at most 4); PARALLEL= runs it in this one process
PARALLEL ?= -n auto --maxprocesses 4
DEMO_EXPERIMENT ?= emulated-cluster
DEMO_TRUTH := mllogs/$(DEMO_EXPERIMENT)-truth.json
DEMO_TRACES := mllogs/traces
# the oldest supported versions (constraints/min.txt), each in a venv of its own
MIN_VENV := .venv-min
MIN_STAMP := $(MIN_VENV)/.installed-stamp
OLD_SERVER_VENV := .venv-mlflow2-server
OLD_SERVER_STAMP := $(OLD_SERVER_VENV)/.installed-stamp
OLD_SERVER_PINS := "mlflow==2.22.5" "numpy<2" "pandas<3" "sqlalchemy<2.1"
# itwinai 0.4.2's report, for the benchmark: the package without its training stack (ray, torch,
# wandb, ...), with what its generate-scalability-report command imports; MLflow 3 like the
# project's venv, so that it reads the stores the benchmark writes
ITWINAI_VENV := .venv-itwinai
ITWINAI_STAMP := $(ITWINAI_VENV)/.installed-stamp
ITWINAI_REPORT_DEPS := "mlflow>=3" "numpy<2" "pandas<3" "click==8.1.8" \
	typer hydra-core omegaconf validators seaborn scipy pyyaml requests
# Holistic Trace Analysis 0.5.0, for make test-hta and the trace benchmark: the package without
# its notebook and test requirements (jupyterlab, pytest), with what its trace analysis imports
# (no torch), on the pandas and numpy of its time
HTA_VENV := .venv-hta
HTA_STAMP := $(HTA_VENV)/.installed-stamp
HTA_DEPS := "numpy<2.3" "pandas<3" plotly networkx pydot ijson pyyaml psutil
# torch for tools/gloo_traces.py, which writes the real gloo traces of tests/fixtures/traces/gloo
TORCH_VENV := .venv-torch
TORCH_STAMP := $(TORCH_VENV)/.installed-stamp

.DEFAULT_GOAL := test
.PHONY: install demo test test-slow mutants test-min test-postgres test-old-server test-registry test-browser lint bench clean-demo help test-hta gloo-traces

help:
	@echo "make demo             emulate sample runs (and their traces) into mllogs/, print the report, write plots/ and report.html"
	@echo "make test             install (if needed) and run the tests under 1 s each (about two minutes on 2 cores)"
	@echo "make test-slow        the slowest tests (real servers, every plot format, property sweeps): CI runs them too"
	@echo "make test-min         the whole suite, PostgreSQL included, on the oldest supported versions"
	@echo "make test-postgres    the tests against a real PostgreSQL server started by the suite"
	@echo "make test-old-server  the tests reading through an MLflow 2.22 server (gunicorn)"
	@echo "make test-registry    pip resolves the project with itwinai 0.4.2 (needs the registry)"
	@echo "make test-browser     the HTML page in headless Chromium (installs Debian's chromium if missing)"
	@echo "make test-hta         analyze-traces against Holistic Trace Analysis 0.5.0 (in .venv-hta)"
	@echo "make gloo-traces      rewrite the real gloo traces of tests/fixtures/traces/gloo (torch in .venv-torch)"
	@echo "make lint             ruff (lint + format check) and mypy"
	@echo "make mutants          plant 48 realistic bugs one at a time; the suite must catch every one"
	@echo "make bench            speed benchmarks: every ratio, printed and written under bench/out/"
	@echo "make clean-demo       remove the demo store, truth file, plots and page"

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

install: $(STAMP)

$(DEMO_TRUTH): | $(STAMP)
	$(VENV)/bin/itwin-report emulate --experiment-name $(DEMO_EXPERIMENT) --truth $@ --traces $(DEMO_TRACES)

demo: $(STAMP) $(DEMO_TRUTH)
	$(VENV)/bin/itwin-report generate-scalability-report --experiment-name $(DEMO_EXPERIMENT) --plot-dir plots --predict 64,128 --target 'val_accuracy>=0.76' --traces $(DEMO_TRACES) --html report.html
	@echo "HTML report: report.html"

# the markers whose tests run from make targets of their own (pyproject.toml's addopts)
OWN_TARGETS := not postgres and not old_server and not registry and not browser and not hta

test: $(STAMP)
	$(PY) -m pytest -q $(PARALLEL) -m 'not slow and $(OWN_TARGETS)'

test-slow: $(STAMP)
	$(PY) -m pytest -q $(PARALLEL) -m 'slow and $(OWN_TARGETS)'

test-browser: demo
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)
	ITWIN_REPORT_DEMO_PAGE=$(CURDIR)/report.html $(PY) -m pytest -q -m browser tests/test_browser.py

$(MIN_STAMP): pyproject.toml constraints/min.txt
	@test -x $(MIN_VENV)/bin/python || $(PYTHON) -m venv $(MIN_VENV)
	$(MIN_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(MIN_VENV)/bin/python -m pip install --quiet -c constraints/min.txt -e '.[test]'
	@touch $@

test-min: $(MIN_STAMP)
	$(MIN_VENV)/bin/python -m pytest -q $(PARALLEL) -m 'not old_server and not registry and not browser and not hta'

test-postgres: $(STAMP)
	$(PY) -m pytest -q -m postgres

$(OLD_SERVER_STAMP):
	@test -x $(OLD_SERVER_VENV)/bin/python || $(PYTHON) -m venv $(OLD_SERVER_VENV)
	$(OLD_SERVER_VENV)/bin/python -m pip install --quiet $(OLD_SERVER_PINS)
	@touch $@

test-old-server: $(STAMP) $(OLD_SERVER_STAMP)
	ITWIN_OLD_MLFLOW=$(CURDIR)/$(OLD_SERVER_VENV)/bin/mlflow $(PY) -m pytest -q -m old_server

test-registry: $(STAMP)
	$(PY) -m pytest -q -m registry

mutants: $(STAMP)
	$(PY) tools/mutants.py

lint: $(STAMP)
	$(VENV)/bin/ruff check itwin_report tests bench tools
	$(VENV)/bin/ruff format --check itwin_report tests bench tools
	$(VENV)/bin/mypy

$(ITWINAI_STAMP):
	@test -x $(ITWINAI_VENV)/bin/python || $(PYTHON) -m venv $(ITWINAI_VENV)
	$(ITWINAI_VENV)/bin/python -m pip install --quiet --no-deps itwinai==0.4.2
	$(ITWINAI_VENV)/bin/python -m pip install --quiet $(ITWINAI_REPORT_DEPS)
	@touch $@

bench: $(STAMP) $(ITWINAI_STAMP) $(HTA_STAMP)
	ITWINAI_PYTHON=$(CURDIR)/$(ITWINAI_VENV)/bin/python $(PY) bench/bench.py
	$(PY) bench/bench_html.py
	$(PY) bench/bench_limits.py
	HTA_PYTHON=$(CURDIR)/$(HTA_VENV)/bin/python $(PY) bench/bench_traces.py

$(HTA_STAMP):
	@test -x $(HTA_VENV)/bin/python || $(PYTHON) -m venv $(HTA_VENV)
	$(HTA_VENV)/bin/python -m pip install --quiet --no-deps holistictraceanalysis==0.5.0
	$(HTA_VENV)/bin/python -m pip install --quiet $(HTA_DEPS)
	@touch $@

test-hta: $(STAMP) $(HTA_STAMP)
	ITWIN_HTA_PYTHON=$(CURDIR)/$(HTA_VENV)/bin/python $(PY) -m pytest -q -m hta tests/test_traces_hta.py

$(TORCH_STAMP):
	@test -x $(TORCH_VENV)/bin/python || $(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/python -m pip install --quiet torch
	@touch $@

gloo-traces: $(TORCH_STAMP)
	rm -f tests/fixtures/traces/gloo/worker_*.pt.trace.json.gz
	$(TORCH_VENV)/bin/python tools/gloo_traces.py tests/fixtures/traces/gloo

clean-demo:
	rm -rf mllogs/mlflow.db mllogs/artifacts/$(DEMO_EXPERIMENT) $(DEMO_TRUTH) $(DEMO_TRACES) plots report.html
