"""Datasets with known contents and exact shard sizes (tests/helpers/datasets.py)."""

from tests.helpers.datasets import small_dataset, uneven_dataset  # noqa: F401  (fixtures)
