"""The topology-invariant global order: global batches as a pure function of (dataset, seed, epoch,
global batch size), each rank taking its slice (specs/partition.md P27-P34). Pure.
"""
