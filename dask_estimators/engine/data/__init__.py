"""Data placement and its transports: the shards, one per worker, and how
they get there (:mod:`.placement`); dask input checked and copied block by
block on the workers (:mod:`._dask_input`); a shard and its memory
(:mod:`._worker`), held by its worker beside Dask's data store
(:mod:`._held`); memory shared between the processes of a host
(:mod:`._memfd`, :mod:`._shared`, :mod:`._shm`); and the long-lived actors
that hold the shards and take the rounds' calls (:mod:`._actor`).
"""
