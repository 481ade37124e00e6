"""The workers' preload (engine/cluster/_warm.py) and what a ddp rank imports."""

import subprocess
import sys


def _modules_after(code):
    probe = (f"import sys; {code}; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sklearn' or m in "
             "('torch._dynamo', 'dask_estimators.engine.ddp.train', 'dask_estimators.objectives._fused_mlp')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=300)
    return eval(out.stdout.strip().splitlines()[-1])


def test_a_ddp_rank_does_not_import_scikit_learn():
    """The rank loop's imports (engine.ddp.train, optim) leave scikit-learn out: 0.8 s of a first fit's worker time.
    The MLP kernel (and numba) comes with the preload (below) or the first step, not with the network's spec,
    which the client builds too."""
    assert _modules_after("import dask_estimators.engine.ddp.train") == ["dask_estimators.engine.ddp.train"]


def test_the_preload_imports_what_a_first_fit_needs():
    """dask_setup imports the rank loop and the MLP kernel, and makes a torch.optim optimizer once (that imports
    torch._dynamo), all before the worker registers; scikit-learn stays out."""
    mods = _modules_after("from dask_estimators import preload; preload.dask_setup(None)")
    assert mods == ["dask_estimators.engine.ddp.train", "dask_estimators.objectives._fused_mlp", "torch._dynamo"]


def test_the_preloads_earlier_name_still_works():
    """``--preload dask_estimators.engine._warm`` (the name the docs gave before the engine's folders) still
    runs the same set-up."""
    from dask_estimators import preload
    from dask_estimators.engine import _warm

    assert _warm.dask_setup is preload.dask_setup
