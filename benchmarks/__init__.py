"""shardkit's benchmark harness: `python -m benchmarks.run_all` (see benchmarks/README.md)."""
