"""Executors that run opgen's work on more than one process or machine.

``driver``: the pool-agnostic driver of a checkpoint sweep (`opgen eval`): one pull queue of
(model, data, chunk) units over replicas, chunk-by-chunk scoring, the in-process pool.
``ray_executor``: Ray as the executor of `opgen build` (shards), `opgen score` (sandbox actors)
and `opgen eval` (engine replicas as actors). Nothing here is imported until ``--executor ray``
or a sweep asks for it (Ray itself is an extra: ``pip install 'opgen[ray]'``).
"""
