# Two entry points (see README): `make demo` and `make test`. Both bootstrap .venv themselves.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit setup clean bench chromium

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# checkov (infra/ scan in tests/unit/test_infra.py) lives in its own venv: it pins versions that clash with ours.
CHECKOV_STAMP := .venv-checkov/.installed
$(CHECKOV_STAMP):
	$(PY) -m venv .venv-checkov
	.venv-checkov/bin/pip install -q 'checkov==3.*'
	touch $(CHECKOV_STAMP)

# Headless Chromium for tests/e2e/test_report_browser.py (Debian's package); that test skips only without it.
chromium:
	@command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
		|| echo "make: chromium could not be installed (no apt?): the report browser test will skip" >&2

demo: $(STAMP)
	$(BIN)/python scripts/demo.py

lint: $(STAMP)
	$(BIN)/ruff check shared functions tests bench scripts
	$(BIN)/ruff format --check shared functions tests bench scripts
	$(BIN)/mypy
	$(BIN)/lint-imports  # the layer contract in pyproject.toml ([tool.importlinter])

test: $(STAMP) lint $(CHECKOV_STAMP) chromium
	$(BIN)/pytest -q

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
