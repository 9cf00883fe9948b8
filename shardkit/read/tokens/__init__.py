"""Token datasets at read level: documents and their lengths, from one dataset or a mixture
(specs/token-blocks.md).
"""
