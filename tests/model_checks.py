"""Checks every new neural model's test file runs the same way: re-ranking LambdaMART's top k, and
``ctxrank tune`` with two trials."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np

from ctxrank.cli import main
from ctxrank.config import resolve_config
from ctxrank.data.synth import write_synthetic_letor
from ctxrank.training.rerank import RerankPredictor, merge_scores
from ctxrank.training.run import run_training


def check_reranks_lambdamarts_top_k(splits, cls: type, *sets: str) -> None:
    """``cls``'s model (``sets``: its config) re-ranks the top 4 of a small LambdaMART: the scores are
    the merge of the initial ranking and the re-ranker's top-k scores, and both are evaluated."""
    train, valid, test = splits
    sets = (
        *sets,
        "train.max_epochs=2",
        "train.threads=1",
        "rerank.initial=lambdamart",
        "rerank.top_k=4",
        "rerank.initial_params={n_estimators=5, min_data_in_leaf=1}",
    )
    result = run_training(resolve_config(None, list(sets)), train, valid, test, progress=False)
    predictor = result.predictor
    assert isinstance(predictor, RerankPredictor) and isinstance(predictor.reranker.model, cls)
    split = predictor.prepare(test)
    assert split.top.query_lengths.max() == 4
    top_scores = predictor.reranker.predict(split.top, init_scores=split.top_initial_scores)
    np.testing.assert_array_equal(predictor.predict(test), merge_scores(split, top_scores))
    assert set(result.test_metrics) and set(result.initial_test_metrics)


def check_cli_tune_runs_two_trials(tmp_path, model: str, *sets: str) -> str:
    """``ctxrank tune --model MODEL --trials 2`` on small synthetic files completes both trials;
    returns what it printed (the caller checks its own search space there)."""
    for name, seed in (("train", 0), ("vali", 1)):
        write_synthetic_letor(tmp_path / f"{name}.txt", n_queries=12, list_size=6, n_features=4, seed=seed)
    out, err = io.StringIO(), io.StringIO()
    argv = [
        "tune", "--model", model, "--train", str(tmp_path / "train.txt"),
        "--valid", str(tmp_path / "vali.txt"), "--trials", "2", "--set", "train.max_epochs=1",
        *(x for s in sets for x in ("--set", s)),
        "--out", str(tmp_path / "t"), "--no-progress",
    ]  # fmt: skip
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(argv) == 0, err.getvalue()
    summary = json.loads((tmp_path / "t" / "tune.json").read_text())
    assert summary["trials"] == {"complete": 2}
    return out.getvalue()
