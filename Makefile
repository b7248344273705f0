# The course in two commands:
#   make lab    create .venv if missing, then open JupyterLab on labs/ (127.0.0.1, token auth)
#   make test   create .venv if missing, then run every test and execute every notebook
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PORT   ?= 8888
BUILD  := build

.PHONY: lab test test-unit bench soak doctor strip clean-venv browser-deps site walk pyc

# The pins are installed by uv (pinned below; on the 2-core CI machine 43 s instead of pip's 91 s for the
# whole step, see docs/CONTRIBUTING.md). uv reads no pip configuration, so the find-links pip is set up with
# (PIP_FIND_LINKS, else pip.conf: e.g. a machine's local CPU torch wheel) are passed on. --compile-bytecode:
# pip writes the .pyc files at install, uv only when asked, and without them every process under
# PYTHONDONTWRITEBYTECODE compiles torch again (20 s per import). Where uv cannot be installed, pip does it all.
UV_VERSION := 0.13.9
$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@if $(PY) -m pip install --quiet uv==$(UV_VERSION); then \
	  links="$${PIP_FIND_LINKS:-$$($(PY) -m pip config get global.find-links 2>/dev/null)}"; \
	  uv="$(VENV)/bin/uv pip install --quiet --python $(PY)"; \
	  echo "uv pip install -r requirements.txt (find-links: $${links:-none})"; \
	  $$uv --compile-bytecode $$(for l in $$links; do printf -- '--find-links %s ' "$$l"; done) -r requirements.txt \
	    && $$uv --no-deps -e .; \
	else \
	  echo "uv could not be installed: pip installs the pins"; \
	  $(PY) -m pip install --quiet --upgrade pip && $(PY) -m pip install --quiet -r requirements.txt \
	    && $(PY) -m pip install --quiet --no-deps -e .; \
	fi
	$(PY) -m ipykernel install --sys-prefix --name distributed-labs --display-name "Distributed labs (.venv)" >/dev/null
	$(PY) -m lab_utils.tools.nbtools lab-settings >/dev/null
	@touch $(STAMP)

lab: $(STAMP) pyc
	$(PY) -m lab_utils doctor --no-smoke || true
	@$(PY) -m lab_utils.tools.nbtools lab-settings  # saved widget state (a venv made before it)
	$(VENV)/bin/jupyter lab --ServerApp.ip=127.0.0.1 --ServerApp.port=$(PORT) --ServerApp.root_dir=labs \
	  $(if $(filter 0,$(shell id -u)),--allow-root,)

# Everything CI checks, on $(JOBS) pytest-xdist workers (worksteal: an idle worker takes queued
# tests from a busy one, so no notebook waits behind another at the end): unit + multi-rank tests, and every
# notebook twice (tests/test_notebooks.py): nbval in QUICK mode, papermill in FULL mode (a
# learner's Run All).
JOBS ?= 4
test: $(STAMP) browser-deps pyc
	$(PY) -m pytest -q -p no:cacheprovider -n $(JOBS) --dist worksteal tests

# The course's own bytecode, written once: under PYTHONDONTWRITEBYTECODE (set on CI machines) every
# kernel, worker and rank would compile lab_utils again (0.2 s of CPU per process). Up-to-date files
# are skipped; a stale .pyc is ignored by Python, never wrong.
pyc: $(STAMP)
	@$(PY) -m compileall -q -j 0 lab_utils tests benchmarks >/dev/null

test-unit: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests --ignore=tests/test_notebooks.py

# The browser test drives Debian's chromium with Playwright (Playwright's own download is not
# used). Installed here when missing; without apt-get the browser test is skipped (never in CI).
browser-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  if command -v apt-get >/dev/null 2>&1; then \
	    SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	    echo "installing chromium for the browser test (apt-get)"; \
	    $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq \
	      --no-install-recommends chromium fonts-liberation >/dev/null; \
	  else echo "chromium not found and no apt-get: the browser test will be skipped"; fi; }

doctor: $(STAMP)
	$(PY) -m lab_utils doctor

# Speed goals (never timed tests): launcher and pool, ring all-reduce, DDP, bubbles, widgets, CI split.
bench: $(STAMP)
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

# The flake hunt: multi-rank test files 20 times, every notebook 5 times (quick), a table of failures.
soak: $(STAMP)
	$(PY) benchmarks/soak.py --test-runs 20 --notebook-runs 5 --jobs $(JOBS)

# Every lab walked as a learner, cell by cell in JupyterLab in Chromium, each prediction committed
# (not in `make test`: far longer than its budget). LABS="09 12" walks some; build/walk/ has the report.
walk: $(STAMP) browser-deps
	$(PY) benchmarks/walk.py $(LABS)

# A static HTML copy of the executed course (quick mode), readable without running anything.
site: $(STAMP)
	$(PY) -m lab_utils.tools.site

strip: $(STAMP)
	$(PY) -m lab_utils.tools.nbtools strip labs/*.ipynb

clean-venv:
	rm -rf $(VENV)
