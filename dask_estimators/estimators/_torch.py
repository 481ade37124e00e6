"""What every torch estimator shares: which strategy, one training run on placed shards, live progress."""

from __future__ import annotations

import sys

from ..engine import DistributedEvaluator
from ..engine.collective import run_collective
from ..engine.ddp import ddp_rank
from ..optim.progress import progress_bar
from ..optim.torch_driver import train_tree

__all__ = ["STRATEGIES", "Progress", "resolve_strategy", "train_on_placement"]

STRATEGIES = ("auto", "tree", "ddp")


def resolve_strategy(strategy: str, client, workers) -> str:
    """``"auto"``: "ddp" when every worker is its own process (measured faster, see benchmarks/), else "tree"."""
    if strategy != "auto":
        return strategy
    return "ddp" if _one_process_per_worker(client, workers) else "tree"


def _one_process_per_worker(client, workers) -> bool:
    from ..engine.collective import one_process_per_worker

    return one_process_per_worker(client, workers)


def train_on_placement(placement, strategy, spec, w0, cfg, monitor, opt_state=None, progress=None):
    """Train ``spec`` on the placed shards with the given strategy; returns (TrainResult, round statistics)."""
    if strategy == "ddp":
        outs = run_collective(placement, ddp_rank, spec, w0, cfg, monitor, opt_state, on_event=progress)
        return outs[0], dict(outs[0].info)
    evaluator = DistributedEvaluator(placement)
    res = train_tree(evaluator, spec, w0, cfg, monitor, opt_state, report=progress)
    return res, evaluator.stats.as_dict()


class Progress:
    """Per-epoch records as they arrive: kept, printed when ``verbose``, counted on a tqdm bar when ``progress``."""

    def __init__(self, verbose, total, desc, callback=None, progress=False):
        self.records = []
        self.callback = callback
        self.verbose = verbose
        self.bar = progress_bar(total, desc, "epoch") if progress else None

    def __call__(self, rec):
        if self.callback is not None:
            self.callback(rec)
        rec = {k: v for k, v in rec.items() if k != "params"}
        self.records.append(rec)
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{rec['loss']:.5f}", refresh=False)
        if not self.verbose:
            return
        line = f"Iteration {rec['epoch']}, loss = {rec['loss']:.8f}"
        if rec.get("validation_score") is not None:
            line += f", validation score = {rec['validation_score']:.6f}"
        if self.bar is not None:
            self.bar.write(line, file=sys.stdout)
        else:
            print(line, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None
