#!/usr/bin/env bash
# `make bench`: build/refresh the bench venv (.venv-bench, kept apart from the test venv so
# the peers' dependencies never leak into tests), then run every benchmark and regenerate
# benchmarks/RESULTS.md. Extra arguments go to run_all, e.g. `tools/bench_env.sh --scale 0.05`.
set -euo pipefail
cd "$(dirname "$0")/.."
"${PY:-python3}" -m benchmarks.setup
exec .venv-bench/bin/python -m benchmarks.run_all "$@"
