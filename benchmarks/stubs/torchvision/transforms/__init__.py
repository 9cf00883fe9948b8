"""Stub package; see benchmarks/stubs/torchvision/__init__.py."""
