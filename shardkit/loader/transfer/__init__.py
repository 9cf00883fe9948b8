"""Batch transport: how a collated batch's bytes get from the process that made it to the
training loop, and when those bytes may be reused. Spec: specs/batch-transport.md (X1–X10).

One module per mechanism:

* ``dtypes``   torch ⇄ numpy dtypes and element counts (cached; used on every batch);
* ``lending``  the one release rule for reusable memory (``lend``: free once its array is garbage);
* ``buffers``  fresh buffers for a batch that has no reusable one (inline bytes or shared memory);
* ``ring``     shared slots a forked worker fills and the training process lends out (X3–X5);
* ``recycler`` reused buffers for batches collated in the training process (X6);
* ``arena``    a bump allocator so collation writes straight into the buffer that will travel;
* ``packed``   one buffer per batch, groups of batches per DataLoader item (X7, X8);
* ``meta``     what travels beside a batch: its consumed boundary as ints, a stats snapshot (X9);
* ``control``  the training process → workers mailbox (epoch, topology, resume state).

Kept free of imports in this file so that the loader's modules can import any one of them.
"""
