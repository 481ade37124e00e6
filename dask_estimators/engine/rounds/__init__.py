"""Rounds on placed data: one evaluation over every shard, the parameters
out, one call per shard, the raw sums added pairwise on the workers
(:mod:`.evaluator`, :mod:`.reduce`), and a problem solved in one task on the
worker of its one shard (:func:`.evaluator.solve_on_shard`).
"""
