# Two entry points (see README): `make demo` and `make test`. Both bootstrap .venv themselves.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The demo's smaller install: the same venv without the layout-check extra (torch + transformers, ~1.2 GB of the
# download). `make test`/`setup` add it on top; a venv that has the full install is never narrowed back.
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: demo test lint typecheck unit setup clean bench faults chromium lock

# The functions' own packages come from the hash-pinned lock the bundle ships (functions/requirements.lock), so the
# suite tests exactly what is deployed; the dev/cli extras are installed on top (tests/unit/test_bundle_lock.py).
# The dev env also carries the `layout-check` extra (torch + transformers) so the tensor-layout check of exports
# (formats/checkpoints/tensor_layout.py) really runs in the tests. torch is installed first, pinned to the CPU build
# this machine kind keeps on disk (pip's find-links takes it: 192 MB wheel, ~750 MB installed); a bare `torch` from
# the package index is a CUDA build of several GB. Elsewhere, pass a CPU wheel: `make setup TORCH_SPEC=...`.
TORCH_SPEC ?= torch==2.13.0

# The install takes minutes behind `pip -q`: each stage is announced on stderr as it starts, when stderr is a
# terminal and QUIET is unset (`make demo QUIET=1`); pip's own output stays quiet.
step = if [ -t 2 ] && [ -z "$(QUIET)" ]; then printf 'make: %s\n' "$(1)" >&2; fi

# [1-3/5] are the demo's install (rlcleanup with the cli and stack extras: every README block after `make demo`
# runs on it); [4-5/5] add torch and the dev + layout-check extras for the tests. The full install runs all five
# itself (never through the demo's stamp, so a venv installed before the demo stamp existed is not redone).
define demo_install
	@$(call step,[1/5] creating $(VENV))
	$(PY) -m venv $(VENV)
	@$(call step,[2/5] upgrading pip)
	$(BIN)/pip install -q --upgrade pip
	@$(call step,[3/5] installing the functions' pinned packages (functions/requirements.lock) then rlcleanup with its cli and stack extras)
	$(BIN)/pip install -q --require-hashes -r functions/requirements.lock
	$(BIN)/pip install -q -e '.[cli,stack]'
	touch $(DEMO_STAMP)
endef

$(DEMO_STAMP): pyproject.toml functions/requirements.lock
	$(demo_install)

$(STAMP): pyproject.toml functions/requirements.lock
	$(demo_install)
	@$(call step,[4/5] installing $(TORCH_SPEC) (CPU build: the largest download))
	$(BIN)/pip install -q '$(TORCH_SPEC)'
	@$(call step,[5/5] installing rlcleanup with its dev and layout-check extras)
	$(BIN)/pip install -q -e '.[dev,layout-check]'
	@$(call step,installed: $(VENV) is ready)
	touch $(STAMP)

setup: $(STAMP)

# checkov (infra/ scan in tests/unit/test_infra.py) lives in its own venv: it pins versions that clash with ours.
CHECKOV_STAMP := .venv-checkov/.installed
$(CHECKOV_STAMP):
	$(PY) -m venv .venv-checkov
	.venv-checkov/bin/pip install -q 'checkov==3.*'
	touch $(CHECKOV_STAMP)

# A real local Ray head for the export-grant chain (tests/e2e/test_model_events_stack.py: `ray start --head`, the
# dashboard's Job Submission REST API). Its own venv: ray[default] pins packages (grpcio, pydantic extras, aiohttp)
# rlcleanup does not need, and rlcleanup never imports ray: it only starts the head and speaks HTTP to it.
RAY_STAMP := .venv-ray/.installed
$(RAY_STAMP):
	$(PY) -m venv .venv-ray
	.venv-ray/bin/pip install -q 'ray[default]==2.60.0'
	touch $(RAY_STAMP)

# Headless Chromium for tests/e2e/test_report_browser.py (Debian's package); that test skips only without it.
chromium:
	@command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
		|| echo "make: chromium could not be installed (no apt?): the report browser test will skip" >&2

# The demo needs no layout-check extra (the check is recorded as skipped, a warning on each candidate): a fresh
# clone installs the smaller set. A venv with the full install (`make test` ran) keeps it, refreshed as before.
demo:
	@if [ -f $(STAMP) ]; then $(MAKE) --no-print-directory $(STAMP); else $(MAKE) --no-print-directory $(DEMO_STAMP); fi
	$(BIN)/python scripts/demo.py

lint: $(STAMP)
	$(BIN)/ruff check shared functions tests bench scripts examples
	$(BIN)/ruff format --check shared functions tests bench scripts examples
	$(BIN)/mypy
	$(BIN)/mypy examples/evaluation_trigger/main.py  # its own module named main: checked on its own
	$(BIN)/lint-imports  # the layer contract in pyproject.toml ([tool.importlinter])

# Two xdist workers, files kept whole (--dist loadfile: module fixtures stay in one process). Each worker starts its
# own emulator stack on free ports with its own state dir (tests/conftest.py), so they never share a server. Measured
# on 2 cores: 590 s with 2 workers vs 885 s serial for the same suite. TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
test: $(STAMP) lint $(CHECKOV_STAMP) $(RAY_STAMP) chromium
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile

# Recompile the lock after changing [project].dependencies (keeps current pins where they still fit).
lock: $(STAMP)
	$(BIN)/uv pip compile pyproject.toml --generate-hashes --python-version 3.11 \
		--python-platform x86_64-manylinux_2_28 --custom-compile-command "make lock" -o functions/requirements.lock

bench: $(STAMP)
	$(BIN)/python -m bench

# The fault scenarios on the emulator stack, one table (bench/faults.py; ~10 min on 2 cores, plus 20-40 min for the
# 200-run load scenario: `python -m bench.faults --only kill firestore storage` leaves it out).
faults: $(STAMP)
	$(BIN)/python -m bench.faults

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
