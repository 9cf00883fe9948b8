# The targets here are exactly what README and CI run.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench clean

$(BIN)/shardkit: pyproject.toml benchmarks/requirements-nodeps.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev,s3,parquet]'
	$(BIN)/pip install --quiet -e '.[ray]'
	$(BIN)/pip install --quiet -c benchmarks/constraints.txt -e '.[peers]'
	$(BIN)/pip install --quiet --no-deps -r benchmarks/requirements-nodeps.txt
	touch $(BIN)/shardkit

demo: $(BIN)/shardkit
	$(BIN)/python tools/demo.py

test: $(BIN)/shardkit
	$(BIN)/python -m pytest tests -q; rc=$$?; [ $$rc -eq 5 ] && rc=0; exit $$rc

lint: $(BIN)/shardkit
	$(BIN)/ruff check shardkit tests tools benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

# Peers (mosaicml-streaming, litdata, webdataset) live in their own .venv-bench, never in .venv.
bench:
	tools/bench_env.sh

clean:
	rm -rf $(VENV) build *.egg-info
