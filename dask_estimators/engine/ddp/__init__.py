"""The ranks of a network fit: one long-running call per worker that trains
its shard, resumed after a worker loss (:mod:`.train`), the ranks' process
group and its collectives (:mod:`.collective`), and the allreduce through
shared memory between the ranks of one host (:mod:`._shm_allreduce`).
"""
