# The targets here are exactly what README and CI run.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test test-fast lint docs bench clean

$(BIN)/shardkit: pyproject.toml benchmarks/requirements-nodeps.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev,s3,parquet,docs]' torch==2.13.0  # dev pulls lightning/transformers: keep torch
	$(BIN)/pip install --quiet -e '.[ray]'
	$(BIN)/pip install --quiet -c benchmarks/constraints.txt -e '.[peers]'
	$(BIN)/pip install --quiet --no-deps -r benchmarks/requirements-nodeps.txt
	touch $(BIN)/shardkit

demo: $(BIN)/shardkit
	$(BIN)/python tools/demo.py

test: $(BIN)/shardkit
	$(BIN)/python -m pytest tests -q --durations=25

# The inner loop: unit, CLI, golden-file and docs checks (no multi-process loader, S3 or Ray integration;
# the docs code blocks are slow), ~2 minutes.
test-fast: $(BIN)/shardkit
	$(BIN)/python -m pytest tests/unit tests/cli tests/golden tests/docs -q -m "not slow"

# No `ruff format --check` yet: the tree was never formatted with it (87 files would change).
lint: $(BIN)/shardkit
	$(BIN)/ruff check shardkit tests tools benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet  # a broken link or reference fails lint

# The docs site into site/ (open site/index.html, or `$(BIN)/mkdocs serve` to preview while editing).
docs: $(BIN)/shardkit
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The benchmark runs the peers from their own .venv-bench. (.venv has mosaicml-streaming and litdata
# too, installed --no-deps, only so the import tests can build real MDS and LitData folders.)
bench:
	tools/bench_env.sh

clean:
	rm -rf $(VENV) build site *.egg-info
