# The targets here are exactly what README and CI run.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test test-fast lint bench clean

$(BIN)/shardkit: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev,s3,parquet]' torch==2.13.0  # dev pulls lightning/transformers: keep torch
	$(BIN)/pip install --quiet -e '.[ray]'
	touch $(BIN)/shardkit

demo: $(BIN)/shardkit
	$(BIN)/python tools/demo.py

test: $(BIN)/shardkit
	$(BIN)/python -m pytest tests -q --durations=25

# The inner loop: unit and CLI tests (no multi-process loader, S3 or Ray integration), ~2 minutes.
test-fast: $(BIN)/shardkit
	$(BIN)/python -m pytest tests/unit tests/cli -q -m "not slow"

# No `ruff format --check` yet: the tree was never formatted with it (87 files would change).
lint: $(BIN)/shardkit
	$(BIN)/ruff check shardkit tests tools benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

# Peers (mosaicml-streaming, litdata, webdataset) live in their own .venv-bench, never in .venv.
bench:
	tools/bench_env.sh

clean:
	rm -rf $(VENV) build *.egg-info
