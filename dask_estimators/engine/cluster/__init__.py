"""Which cluster: the client a fit uses (the one given, the active one, or the
embedded LocalCluster: :mod:`.client`), the embedded cluster's processes (a
warm zygote that forks the nannies, each nanny forking its worker:
:mod:`._zygote`, :mod:`._nanny` on the client's side and
:mod:`._nanny_process` in the nanny's), the workers' warm-up (:mod:`._warm`), and
the watch on the workers a fit uses: a lost worker, a closed client, results
waited for without hanging (:mod:`._watch`).

Importing this package imports nothing else: the zygote starts before the
client has imported Dask.
"""
