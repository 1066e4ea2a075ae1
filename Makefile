# Every target bootstraps .venv from pyproject.toml by itself (idempotent: the stamp
# is rebuilt only when pyproject.toml changes).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
RUNTIME := $(VENV)/.runtime
STAMP := $(VENV)/.installed

# Bytecode is cached (in __pycache__, which git ignores) even where the environment says
# PYTHONDONTWRITEBYTECODE, as some CI images do: without the cache every xdist worker re-ran
# pytest's assertion rewriting of every test module (~7 s of CPU a worker) and every server
# and CLI process the suite starts recompiled deniable (~0.2 s each). For the same reason pip
# installs with --no-compile: a module is compiled once, when first imported, and the many
# that nothing imports (most of PySpark) never are (19 s of CPU less per install).
unexport PYTHONDONTWRITEBYTECODE
PIP := $(BIN)/python -m pip install --quiet --no-compile

.PHONY: demo test test-slow lint bench bench-compare clean

# The runtime only (what `make demo` needs); the dev set (tests, linters, PySpark,
# Playwright…) on top of it for everything else.
$(RUNTIME): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip
	$(PIP) -e .
	@touch $(RUNTIME)

$(STAMP): $(RUNTIME)
	$(PIP) -e '.[dev]'
	@touch $(STAMP)

demo: $(RUNTIME)
	$(BIN)/python -m deniable.demo

# One worker more than the cores (pytest-xdist, -n auto: tests/conftest.py): much of the suite
# waits (response deadlines, server, PostgreSQL and JVM starts) and the extra worker fills the
# waits. --dist loadfile keeps each module on one worker, so module-scoped fixtures (a Spark
# session, a PostgreSQL server) are built once; tests/conftest.py hands the modules out
# longest first, the Spark modules as one unit (one JVM).
# (loadgroup cannot be used: pytest 9.2 ignores the node ids xdist 3.8 rewrites for it.)
test: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --dist loadfile

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow -n auto --dist loadfile

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

# Each benchmark writes benchmarks/results/<name>.md; BENCHMARKS.md is assembled from them.
BENCHES := noise query anonymize compile_join server postgres bigdata spark accounting graph utility clamps diagnostics ledger_open server_timing ledger synth_scaling
bench: $(STAMP)
	$(PIP) -e '.[dev,bench]'
	@for b in $(BENCHES); do echo "== $$b"; $(BIN)/python benchmarks/$$b.py || exit 1; done
	$(BIN)/python benchmarks/graph.py --shape communities --edges 1e7 --nodes 1e6 \
		--max-degree 10 --repeat 2 --out benchmarks/results/graph_communities.md
	$(BIN)/python benchmarks/graph.py --ids text --repeat 2 --out benchmarks/results/graph_text.md
	$(BIN)/python benchmarks/assemble.py

# Other DP libraries, each in its own virtualenv (their pins conflict); needs PyPI.
bench-compare: $(STAMP)
	$(BIN)/python benchmarks/compare.py --setup
	$(BIN)/python benchmarks/utility_pipelinedp.py --setup
	$(BIN)/python benchmarks/utility_pipelinedp.py
	$(BIN)/python benchmarks/synth_compare.py --setup
	$(BIN)/python benchmarks/synth_compare.py --dataset census --rows 100000 --repeat 3
	$(BIN)/python benchmarks/synth_compare.py --dataset events --rows 100000 --repeat 3
	$(BIN)/python benchmarks/assemble.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
