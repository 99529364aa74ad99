# devicepool — developer entry points. Needs only python3 (>= 3.11), pip and make.
#
#   make test   venv + install (when pyproject.toml changed) + ruff + lint-imports + mypy + pytest (e2e included)
#   make test-fast  only the tests that start no server and no process (-m "not devserver and not e2e")
#   make demo   venv + `devicepool dev --apply examples/quickstart.yaml`
#   make lint   ruff check + ruff format --check + lint-imports (layer contracts) + mypy
#   make fmt    ruff format + ruff check --fix
#   make bench  rate-limit benchmarks (bench/ratelimit.py: bound, article loop, fairness, 3 workers; ~10 min)
#   make ui-screenshot  refresh the README's Web UI screenshots (docs/ui-pool.png, docs/ui-pools.png)

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test test-fast demo lint fmt venv clean bench system-deps ui-screenshot

venv: $(STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall only when pyproject.toml is newer than the last install.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e '.[dev]'
	touch $(STAMP)

# promtool (Debian `prometheus`) and headless `chromium` for tests/observability:
# installed with apt-get when missing and we are root; otherwise those tests skip.
system-deps:
	@if command -v promtool >/dev/null && command -v chromium >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus chromium; \
	else echo "promtool/chromium missing and apt-get unavailable: their tests will skip"; fi

# Five xdist workers: the suite mostly waits on servers and timers. The tests
# that start a server or a process run in groups (one stack each), handed out
# longest first; see conftest.py. `$(BIN)/pytest` alone runs it serially.
test: venv system-deps
	$(BIN)/ruff check --no-cache .
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/pytest -n 5 --dist loadgroup --no-loadscope-reorder --durations=12

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

demo: venv
	$(BIN)/devicepool dev --apply examples/quickstart.yaml

# The browser test (headless chromium) writes its screenshots to its tmp dir;
# only here are they copied to docs/.
ui-screenshot: venv system-deps
	DEVICEPOOL_UI_SCREENSHOTS=docs $(BIN)/pytest tests/observability/test_obs_web_ui.py -q

clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache

bench: venv
	$(BIN)/python bench/ratelimit.py
	$(BIN)/python bench/scale.py --pools 300
