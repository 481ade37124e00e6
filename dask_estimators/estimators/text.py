"""CharLSTM: a character-level LSTM that learns from a list of strings and generates new ones."""

from __future__ import annotations

import copy
import math
import os
import pickle
import warnings
from numbers import Integral, Real

import distributed
import numpy as np
import torch
from sklearn.base import _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ..objectives import module as M
from ..objectives import sequence as S
from .._progress import check_progress
from ..optim.torch_driver import Monitor, TrainConfig
from ..session import DataSession, is_dask_collection
from ._base import DistributedEstimator
from ..callbacks import Callback
from ._torch import Progress, resolve_strategy, split_callbacks, strategy_constraint

__all__ = ["CharLSTM"]


def _as_strings(X):
    """A list of strings from a list, tuple, NumPy array or pandas Series/one-column DataFrame."""
    if hasattr(X, "columns"):
        if X.shape[1] != 1:
            raise ValueError(f"CharLSTM learns from one column of strings; got {X.shape[1]} columns.")
        X = X.iloc[:, 0]
    if isinstance(X, str):
        raise ValueError("CharLSTM expects a sequence of strings, not one string; wrap it in a list.")
    try:
        items = list(X)
    except TypeError:
        raise ValueError(f"CharLSTM expects a sequence of strings, got {type(X).__name__}.") from None
    for s in items:
        if not isinstance(s, str):
            raise ValueError(f"CharLSTM learns from strings; got an item of type {type(s).__name__}: {s!r}.")
    return items


def _dask_strings(X):
    """A dask bag, Series, one-column DataFrame or array of strings as a 1-d dask array of objects."""
    import dask.bag as db

    if isinstance(X, db.Bag):
        import dask.array as da

        parts = X.map_partitions(_object_array).to_delayed()
        return da.concatenate(
            [da.from_delayed(d, shape=(np.nan,), dtype=object) for d in parts], allow_unknown_chunksizes=True
        )
    if getattr(X, "ndim", 1) == 2 and hasattr(X, "columns"):  # a dask DataFrame (a Series has columns too)
        if len(X.columns) != 1:
            raise ValueError(f"CharLSTM learns from one column of strings; got {len(X.columns)} columns.")
        X = X[X.columns[0]]
    if hasattr(X, "to_dask_array"):
        return X.to_dask_array()
    return X


class CharLSTM(DistributedEstimator):
    """A character-level LSTM trained on a Dask cluster; it generates new strings like its training strings.

    Each string ``c_1 .. c_m`` gives ``m + 1`` training pairs (the previous
    ``context_length`` symbols, the next symbol), the last one predicting the
    stop symbol.  The pairs are built on the workers from their own shard of
    strings.  Training is Adam on the mean next-symbol cross-entropy, by the
    same distributed optimizer as the other networks (``strategy="rounds"`` or
    ``"ddp"``).

    Parameters
    ----------
    hidden_size : int, default=128
    num_layers : int, default=1
    embedding_dim : int, default=32
        Width of the character embedding; 0 feeds one-hot vectors.
    context_length : int, default=8
        Symbols of context for each prediction.
    dropout : float, default=0.0
    max_epochs : int, default=10
    batch_size : int, default=256
        Pairs per global minibatch.
    learning_rate : float, default=0.003
    random_state : int, RandomState or None, default=None
        Seeds the initial weights, the batch order and dropout.
    lowercase : bool, default=False
    max_length : int or None, default=32
        Longest string learned (longer ones are cut) and generated.
    handle_unknown : {"error", "ignore"}, default="error"
        What ``score``, ``perplexity``, ``predict_proba`` and ``generate`` do
        with a character the training strings did not have (the model gives
        it no probability): ``"error"`` raises a ValueError; ``"ignore"``
        leaves the strings that have one out of the score, with a warning
        that counts them (so a cross-validation fold whose held-out strings
        hold a rare character is scored on the others), and leaves the
        character out of a prefix's context.
    strategy : {"auto", "rounds", "ddp"}, default="auto"
        ``"rounds"``: one engine round per batch, the optimizer on the client;
        ``"ddp"``: ``DistributedDataParallel`` on the workers; ``"auto"``:
        "ddp".  ``"tree"`` is a deprecated alias of ``"rounds"`` (a
        FutureWarning; removed in 0.4.0).
    device : {"auto", "cpu", "cuda"}, default="auto"
    checkpoint_path : str or None, default=None
        Written after every epoch (parameters, vocabulary, epochs done); a
        fit with ``warm_start=True`` resumes from it.
    warm_start : bool, default=False
        Continue from the fitted parameters, or from ``checkpoint_path``.
    verbose : bool, default=False
        Print one line per epoch with its loss, as it ends on the workers.
    progress : bool, default=False
        Show a tqdm progress bar of the epochs (up to ``max_epochs``) on
        stderr.  Needs tqdm (``pip install tqdm``).
    callbacks : list of dask_estimators.callbacks.Callback, default=None
        Objects called after every epoch, as the MLPs' are: ``EarlyStopping``
        (on the training loss: CharLSTM holds out no validation rows),
        ``LRScheduler``, ``Checkpoint``, ``ProgressBar``, ``PrintLog``, or
        your own.  The fit works on copies, kept in ``callbacks_``.
    client : distributed.Client, str or None, default=None
    timeout : float or None, default=None
        Seconds one distributed round (``strategy="ddp"``: one collective
        operation) may take before a ``TimeoutError``; None for no limit.

    Attributes
    ----------
    classes_ : ndarray of str
        The vocabulary: ``"<pad>"``, ``"<s>"``, ``"</s>"`` then the characters.
    n_iter_ : int
        Epochs trained.
    loss_curve_ : list of float
    history_ : list of dict
        Per epoch: loss, seconds, samples per second (streamed during the fit).
    params_ : ndarray
        The flat parameters (float32).
    n_pairs_ : int
        Training pairs over all workers.
    callbacks_ : list of Callback
        The last fit's copies of ``callbacks`` as the training left them
        (loop callbacks first; with ``strategy="ddp"``, rank 0's copies).

    Examples
    --------
    >>> from dask_estimators import CharLSTM
    >>> names = ["luna", "bella", "max", "charlie", "lucy", "cooper"] * 50
    >>> model = CharLSTM(hidden_size=32, max_epochs=5, random_state=0).fit(names)  # doctest: +SKIP
    >>> model.generate(3, random_state=0)  # doctest: +SKIP
    ['lucy', 'bella', 'maxie']
    """

    _parameter_constraints: dict = {
        "hidden_size": [Interval(Integral, 1, None, closed="left")],
        "num_layers": [Interval(Integral, 1, None, closed="left")],
        "embedding_dim": [Interval(Integral, 0, None, closed="left")],
        "context_length": [Interval(Integral, 1, None, closed="left")],
        "dropout": [Interval(Real, 0, 1, closed="left")],
        "max_epochs": [Interval(Integral, 1, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "random_state": ["random_state"],
        "lowercase": ["boolean"],
        "max_length": [None, Interval(Integral, 1, None, closed="left")],
        "handle_unknown": [StrOptions({"error", "ignore"})],
        "strategy": [strategy_constraint()],
        "device": [StrOptions({"auto", "cpu", "cuda"})],
        "checkpoint_path": [None, str, os.PathLike],
        "warm_start": ["boolean"],
        "verbose": ["verbose"],
        "progress": ["boolean"],
        "callbacks": [list, tuple, None],
        "client": [None, str, distributed.Client],
        "timeout": [Interval(Real, 0, None, closed="neither"), None],
    }

    def __init__(
        self,
        hidden_size=128,
        num_layers=1,
        embedding_dim=32,
        context_length=8,
        dropout=0.0,
        max_epochs=10,
        batch_size=256,
        learning_rate=0.003,
        random_state=None,
        lowercase=False,
        max_length=32,
        handle_unknown="error",
        strategy="auto",
        device="auto",
        checkpoint_path=None,
        warm_start=False,
        verbose=False,
        progress=False,
        callbacks=None,
        client=None,
        timeout=None,
    ):
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.embedding_dim = embedding_dim
        self.context_length = context_length
        self.dropout = dropout
        self.max_epochs = max_epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.random_state = random_state
        self.lowercase = lowercase
        self.max_length = max_length
        self.handle_unknown = handle_unknown
        self.strategy = strategy
        self.device = device
        self.checkpoint_path = checkpoint_path
        self.warm_start = warm_start
        self.verbose = verbose
        self.progress = progress
        self.callbacks = callbacks
        self.client = client
        self.timeout = timeout

    # ---------------------------------------------------------------- fitting
    def _spec(self, vocab_size):
        return S.CharLSTMSpec(
            vocab_size, self.context_length, self.embedding_dim, self.hidden_size, self.num_layers,
            float(self.dropout),
        )

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Learn the vocabulary and train the network on the strings ``X``.

        Parameters
        ----------
        X : sequence of str, pandas Series, or dask bag / Series / array of str
            The training strings.  Empty strings are skipped.
        y : None
            Ignored (for scikit-learn's API).

        Returns
        -------
        self : object
        """
        check_progress(self.progress)  # a missing tqdm fails now, before any cluster starts
        dask_input = is_dask_collection(X) or _is_bag(X)
        if dask_input:
            texts = _dask_strings(X)
        else:
            strings = _as_strings(X)
            texts = np.empty(len(strings), dtype=object)
            texts[:] = strings
            if not any(strings):
                raise ValueError("CharLSTM needs at least one non-empty string; got none.")
        with DataSession(self.client, device=self.device, timeout=self.timeout) as session:
            self._fit_placed(session.data(X=texts, workers=session.workers_per_gpu(), same_layout=True))
        return self

    def _fit_placed(self, data):
        found = data.map(S.text_chars, self.lowercase, self.max_length)
        chars = sorted(set().union(*(set(c) for c, _ in found)))
        training = frozenset().union(*(set(d) for _, d in found))
        if not chars:
            raise ValueError("CharLSTM needs at least one non-empty string; got none.")
        resume = self._resume_state(chars)
        vocab = resume["vocabulary"] if resume else list(S.SPECIALS) + chars
        spec = self._spec(len(vocab))
        rng = check_random_state(self.random_state)
        seed = int(rng.randint(np.iinfo(np.int32).max))
        if resume:
            w0, epochs_done = np.asarray(resume["params"], dtype=np.float64), resume["n_iter"]
        else:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                w0 = torch.nn.utils.parameters_to_vector(spec.build("cpu", torch.float64).parameters()).detach().numpy()
            epochs_done = 0
        counts = data.map_each(
            S.prepare_text,
            [(vocab, self.context_length, self.lowercase, self.max_length, seed, r) for r in range(data.n_shards)],
        )
        n_pairs = sum(c["n_train"] for c in counts)
        batch = int(min(self.batch_size, n_pairs))
        # exact global batches, as the MLPs': a batch smaller than the number of shards takes rows of some alone
        cuts = M.batch_cuts([c["n_train"] for c in counts], batch)
        data.map_each(M.set_batch_cuts, [(row,) for row in cuts])
        loop_callbacks, client_callbacks = split_callbacks(copy.deepcopy(self.callbacks))
        if any(getattr(cb, "monitor", None) == "validation_score" for cb in loop_callbacks + client_callbacks):
            raise ValueError("A callback monitors 'validation_score', but CharLSTM holds out no validation "
                             "strings; monitor 'loss'.")
        # the checkpoint file is one more client callback, which reads each epoch's parameters
        resume_file = [_ResumeFile(self)] if self.checkpoint_path is not None else []
        cfg = TrainConfig(
            solver="adam", learning_rate_init=self.learning_rate, alpha=0.0, max_iter=self.max_epochs, tol=0.0,
            n_iter_no_change=self.max_epochs + 1, shuffle=True, seed=seed, n_steps=math.ceil(n_pairs / batch),
            n_train=n_pairs, epoch0=epochs_done,
            send_params=any(cb.needs_params for cb in client_callbacks + resume_file),
        )
        strategy = resolve_strategy(self.strategy)
        monitor = Monitor(0.0, cfg.n_iter_no_change, False)
        self.classes_ = np.array(vocab, dtype=object)
        progress = Progress(self.verbose, self.max_epochs, "CharLSTM", progress=self.progress,
                            callbacks=resume_file + client_callbacks, spec=spec)
        try:
            res, stats = data.train(strategy, spec, w0, cfg, monitor, None, progress, callbacks=loop_callbacks)
        finally:
            progress.close()
        self.callbacks_ = res.callbacks + client_callbacks
        history = res.history
        self.params_ = res.w.astype(np.float32)
        self.n_iter_ = epochs_done + res.n_epochs
        prev = list(getattr(self, "history_", [])) if resume else []
        self.history_ = prev + history
        self.loss_curve_ = [r["loss"] for r in self.history_]
        self.n_pairs_ = n_pairs
        self.spec_ = spec
        self.fit_stats_ = dict(stats, strategy=strategy, placement=data.stats()["placement"], n_shards=data.n_shards,
                               rows_per_shard=[c["n_train"] for c in counts], batch_size=batch)
        self._training_strings = training
        self._net = None
        if self.checkpoint_path is not None:
            self._write_checkpoint(self.params_, self.n_iter_)

    def _resume_state(self, chars):
        """The state to continue from (warm_start): the fitted one, else the checkpoint file, else None."""
        if not self.warm_start:
            return None
        if hasattr(self, "params_"):
            state = {"params": self.params_, "vocabulary": list(self.classes_), "n_iter": self.n_iter_}
        elif self.checkpoint_path is not None and os.path.exists(self.checkpoint_path):
            state = torch.load(self.checkpoint_path, weights_only=False)
            if state.get("spec") != self._spec(len(state["vocabulary"])):
                raise ValueError(
                    f"The checkpoint {self.checkpoint_path!r} was written by a model with other parameters "
                    f"({state.get('spec')})."
                )
        else:
            return None
        unknown = set(chars) - set(state["vocabulary"])
        if unknown:
            raise ValueError(f"warm_start: the strings have characters outside the fitted vocabulary: {sorted(unknown)}")
        return state

    def _write_checkpoint(self, params, n_iter):
        tmp = f"{self.checkpoint_path}.tmp"
        torch.save(
            {"params": np.asarray(params), "vocabulary": list(self.classes_), "n_iter": int(n_iter),
             "spec": self._spec(len(self.classes_))},
            tmp,
        )
        os.replace(tmp, self.checkpoint_path)

    # ------------------------------------------------------------- inference
    def _normalise(self, s):
        s = s.lower() if self.lowercase else s
        return s if self.max_length is None else s[: self.max_length]

    def _network(self):
        check_is_fitted(self, "params_")
        if getattr(self, "_net", None) is None:
            net = self.spec_.build("cpu")
            torch.nn.utils.vector_to_parameters(torch.as_tensor(self.params_, dtype=net.head.weight.dtype),
                                                net.parameters())
            self._net = net.eval()
        return self._net

    def _index(self):
        return {c: i for i, c in enumerate(self.classes_) if i >= len(S.SPECIALS)}

    def _log_probs(self, ctx):
        with torch.no_grad():
            out = []
            for lo in range(0, len(ctx), 8192):
                z = self._network()(torch.as_tensor(ctx[lo : lo + 8192]))
                out.append(torch.log_softmax(z.double(), 1))
            return torch.cat(out) if out else torch.zeros((0, len(self.classes_)), dtype=torch.float64)

    def _contexts(self, prefixes):
        index, L = self._index(), self.context_length
        ctx = np.full((len(prefixes), L), S.PAD, dtype=np.int64)
        for i, p in enumerate(prefixes):
            p = p.lower() if self.lowercase else p
            if self.handle_unknown == "ignore":
                codes = [S.BOS] + [index[c] for c in p if c in index]
            else:
                try:
                    codes = [S.BOS] + [index[c] for c in p]
                except KeyError as e:
                    raise ValueError(f"The character {e.args[0]!r} of {p!r} is not in the vocabulary (classes_); "
                                     "handle_unknown='ignore' leaves it out.") from None
            codes = codes[-L:]
            ctx[i, L - len(codes) :] = codes
        return ctx

    def predict_proba(self, X):
        """The distribution of the next character after each prefix, columns in ``classes_`` order.

        Parameters
        ----------
        X : sequence of str
            Prefixes ("" for the first character).

        Returns
        -------
        ndarray of shape (n_prefixes, len(classes_))
        """
        check_is_fitted(self, "params_")
        ctx = self._contexts(_as_strings(X))
        return self._log_probs(ctx).exp().numpy()

    def score(self, X, y=None):
        """Mean log-likelihood per character (the stop symbol included) of the strings ``X``.

        Parameters
        ----------
        X : sequence of str
        y : None
            Ignored.

        Returns
        -------
        float
            Higher is better (scikit-learn's convention); ``-score`` is the log-loss in nats.
        """
        check_is_fitted(self, "params_")
        strings = [s for s in _as_strings(X) if s]
        if not strings:
            raise ValueError("score needs at least one non-empty string.")
        index = self._index()
        if self.handle_unknown == "ignore":
            known = [s for s in strings if set((s.lower() if self.lowercase else s)[: self.max_length]) <= index.keys()]
            if not known:
                raise ValueError(f"All {len(strings)} strings have characters outside the vocabulary (classes_); "
                                 "there is nothing to score.")
            if len(known) < len(strings):
                warnings.warn(f"{len(strings) - len(known)} of {len(strings)} strings have characters outside the "
                              "vocabulary (classes_) and are left out of the score.", UserWarning, stacklevel=2)
            strings = known
        try:
            ctx, nxt = S.encode_pairs(strings, index, self.context_length, self.lowercase, self.max_length)
        except ValueError as e:
            raise ValueError(f"{e} handle_unknown='ignore' leaves such strings out of the score.") from None
        lp = self._log_probs(ctx)
        return float(lp[torch.arange(len(nxt)), torch.as_tensor(nxt)].mean())

    def perplexity(self, X):
        """``exp(-score(X))``: the per-character perplexity of the strings ``X``.

        Parameters
        ----------
        X : sequence of str

        Returns
        -------
        float
        """
        return float(math.exp(-self.score(X)))

    def generate(self, n, temperature=1.0, prefix="", max_length=None, random_state=None, exclude_training=False):
        """Sample ``n`` new strings, each until the stop symbol (or ``max_length`` characters).

        Parameters
        ----------
        n : int
        temperature : float, default=1.0
            Below 1 more likely characters, above 1 more varied ones.
        prefix : str, default=""
            Every string starts with it.
        max_length : int, optional
            Longest string (default: the estimator's ``max_length``, else 32).
        random_state : int, RandomState or None, default=None
            The same value gives the same strings.
        exclude_training : bool, default=False
            Only strings that are not in the training data.

        Returns
        -------
        list of str
        """
        check_is_fitted(self, "params_")
        if int(n) != n or n < 0:
            raise ValueError(f"n must be a non-negative integer, got {n!r}.")
        n = int(n)
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}.")
        max_length = max_length or self.max_length or 32
        gen = torch.Generator().manual_seed(int(check_random_state(random_state).randint(np.iinfo(np.int32).max)))
        out: list = []
        for _ in range(50):
            need = n - len(out)
            if need <= 0:
                break
            batch = self._sample(max(need, 16) if exclude_training else need, temperature, prefix, max_length, gen)
            if exclude_training:
                batch = [s for s in batch if self._normalise(s) not in self._training_strings and s not in out]
            out.extend(batch[:need])
        if len(out) < n:
            warnings.warn(f"Only {len(out)} of {n} strings could be generated outside the training data.")
        return out

    def _sample(self, n, temperature, prefix, max_length, gen):
        ctx = torch.as_tensor(self._contexts([prefix] * n))
        vocab = self.classes_
        done = torch.zeros(n, dtype=torch.bool)
        chars = [[] for _ in range(n)]
        net = self._network()
        with torch.no_grad():
            for _ in range(max_length - len(prefix)):
                logits = net(ctx).double() / temperature
                logits[:, S.PAD] = -math.inf
                logits[:, S.BOS] = -math.inf
                nxt = torch.multinomial(torch.softmax(logits, 1), 1, generator=gen)[:, 0]
                for i in torch.nonzero(~done)[:, 0].tolist():
                    c = int(nxt[i])
                    if c == S.EOS:
                        done[i] = True
                    else:
                        chars[i].append(vocab[c])
                if bool(done.all()):
                    break
                ctx = torch.cat([ctx[:, 1:], nxt[:, None]], 1)
        return [prefix + "".join(c) for c in chars]

    # ------------------------------------------------------------- persistence
    def save(self, path):
        """Write the fitted model to ``path`` (a pickle with no cluster inside).

        Parameters
        ----------
        path : str or os.PathLike
        """
        with open(path, "wb") as f:
            pickle.dump(self, f)

    @classmethod
    def load(cls, path):
        """Read a model written by :meth:`save`.

        Parameters
        ----------
        path : str or os.PathLike

        Returns
        -------
        CharLSTM
        """
        with open(path, "rb") as f:
            model = pickle.load(f)
        if not isinstance(model, cls):
            raise TypeError(f"{path!r} holds a {type(model).__name__}, not a {cls.__name__}.")
        return model

    def __getstate__(self):
        return dict(super().__getstate__(), _net=None)


def _object_array(part):
    """One bag partition as a 1-d object array of its items."""
    out = np.empty(len(part), dtype=object)
    out[:] = list(part)
    return out


def _is_bag(X):
    try:
        import dask.bag as db
    except ImportError:  # pragma: no cover
        return False
    return isinstance(X, db.Bag)


class _ResumeFile(Callback):
    """CharLSTM's ``checkpoint_path`` as a client callback: the parameters, vocabulary and epochs after each epoch."""

    on_client = True
    needs_params = True

    def __init__(self, model):
        self.model = model

    def on_epoch_end(self, history, **info):
        rec = history[-1]
        if "params" in rec:
            w = np.frombuffer(rec["params"], dtype=np.float64)
            self.model._write_checkpoint(w.astype(np.float32), int(rec["epoch"]))
