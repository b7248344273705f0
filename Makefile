# The course in two commands:
#   make lab    create .venv if missing, then open JupyterLab on labs/ (127.0.0.1, token auth)
#   make test   create .venv if missing, then run every test and execute every notebook
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PORT   ?= 8888
BUILD  := build

.PHONY: lab test test-unit test-notebooks bench doctor strip clean-venv

$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	$(PY) -m ipykernel install --sys-prefix --name distributed-labs --display-name "Distributed labs (.venv)" >/dev/null
	@touch $(STAMP)

lab: $(STAMP)
	$(PY) -m lab_utils doctor --no-smoke || true
	$(VENV)/bin/jupyter lab --ServerApp.ip=127.0.0.1 --ServerApp.port=$(PORT) --ServerApp.root_dir=labs

# Everything CI checks: unit + multi-rank tests, then every notebook twice in quick mode
# (nbval --nbval-lax, and papermill writing executed copies to build/executed/).
test: $(STAMP)
	LAB_QUICK=1 $(PY) -m pytest -q -p no:cacheprovider tests labs --nbval-lax --nbval-current-env

test-unit: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests --ignore=tests/test_notebooks.py

doctor: $(STAMP)
	$(PY) -m lab_utils doctor

# Speed goals (never timed tests): launcher overhead, ring all-reduce, DDP, bubbles, widgets.
bench: $(STAMP)
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

strip: $(STAMP)
	$(PY) -m lab_utils.nbtools strip labs/*.ipynb

clean-venv:
	rm -rf $(VENV)
