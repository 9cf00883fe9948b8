"""Mixtures at read level: the user's description (``Source``, ``Mixture``, mixture files), the opened
sources, and a consumer's interleaved stream over them (specs/mixture.md).
"""
