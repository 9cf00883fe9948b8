"""Mixtures at plan level: the spec (weights, schedules), exact per-epoch counts, per-source cursors, cuts
and remixes, and their part of the resume state (specs/mixture.md). Pure, like the rest of ``shardkit.plan``.
"""
