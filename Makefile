# Two entry points for a fresh machine (see README): `make demo` and `make test`.
# Both create the virtualenv from pyproject.toml first; nothing else needs installing.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint browser clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/benchledger demo

# Layer contracts (.importlinter) are checked on the installed layout, where the repository's
# folders are subpackages of `benchledger`: import-linter reads packages from the file system,
# which an editable install does not rearrange.
LAYERS := build/layers

lint: $(STAMP)
	$(BIN)/ruff check .
	rm -rf $(LAYERS) && mkdir -p $(dir $(LAYERS))
	$(BIN)/pip install --quiet --no-deps --no-compile --target $(LAYERS) . >$(LAYERS).log 2>&1 \
	  || { cat $(LAYERS).log; exit 1; }
	cd $(LAYERS) && $(CURDIR)/$(BIN)/lint-imports $(CURDIR)/.importlinter

# The report test renders report.html in headless Chromium (Debian's package). Where it
# cannot be installed (no root, no apt) the test is skipped with a message, except in CI
# (CI=true), where a missing browser fails the run.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the report test (needs root and apt)"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
	  || { [ -z "$$CI" ] && echo "chromium could not be installed: the report test will be skipped"; }; }

test: lint browser
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) benchledger-demo .pytest_cache build
