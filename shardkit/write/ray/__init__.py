"""Packing on Ray Data: the engine, its parts, rows, the distributed shuffle and the shard sink
(specs/ray-packing.md).
"""
