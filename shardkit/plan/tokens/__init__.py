"""Token blocks at plan level: block options and cutting, the token index and pools, the per-consumer
rows and pack counts, and their part of the resume state (specs/token-blocks.md). Pure.
"""
