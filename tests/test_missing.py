"""Missing feature values: LETOR ``NULL`` kept as NaN (``null_fill = "keep"``) and NaN in API inputs
reach LambdaMART, which reads them (LightGBM's own missing-value handling, as ``LGBMRanker``); every
other model refuses them with one message naming the fix."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ctxrank.cli import main
from ctxrank.data.letor import read_letor


@pytest.fixture()
def nulls(tmp_path):
    """60 queries of 10 items, 5 features; feature 3 NULL on about 30% of the rows, and NULL exactly
    where it would have been informative (its value predicts the label)."""
    rng = np.random.default_rng(0)
    lines = []
    for q in range(60):
        for _ in range(10):
            x = rng.normal(size=5)
            missing = rng.random() < 0.3
            y = int(missing or x[0] + rng.normal() > 0.5)  # missingness itself carries signal
            shown = ["NULL" if (j == 2 and missing) else f"{v:.4f}" for j, v in enumerate(x)]
            cells = " ".join(f"{j + 1}:{v}" for j, v in enumerate(shown))
            lines.append(f"{y} qid:{q} {cells}")
    path = tmp_path / "nulls.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_keep_leaves_null_cells_missing_and_counts_them(nulls):
    kept = read_letor(nulls, null_fill="keep")
    filled = read_letor(nulls, null_fill="query_min")
    nan = np.isnan(kept.features)
    assert nan.any() and set(np.flatnonzero(nan.any(axis=0))) == {2}
    assert kept.info["missing"] == int(nan.sum()) == filled.info["null_filled"]
    assert kept.info["null_filled"] == 0 and not np.isnan(filled.features).any()
    assert np.array_equal(kept.features[~nan], filled.features[~nan])  # the cache keeps them apart


def test_lambdamart_reads_missing_values_and_the_model_keeps_the_rule(nulls, tmp_path, capsys):
    out = tmp_path / "lm"
    argv = ["train", "--model", "lambdamart", "--data", str(nulls), "--null-fill", "keep", "--out", str(out)]
    assert main([*argv, "--no-progress"]) == 0
    capsys.readouterr()
    # predict reads the file with the model's rule (keep) unless told otherwise
    assert main(["predict", "--model", str(out), "--data", str(nulls), "-o", str(tmp_path / "a.txt")]) == 0
    argv = ["predict", "--model", str(out), "--data", str(nulls), "--null-fill", "keep"]
    assert main([*argv, "-o", str(tmp_path / "b.txt")]) == 0
    argv = ["predict", "--model", str(out), "--data", str(nulls), "--null-fill", "query_min"]
    assert main([*argv, "-o", str(tmp_path / "c.txt")]) == 0
    a, b, c = (np.loadtxt(tmp_path / f"{n}.txt") for n in "abc")
    assert np.array_equal(a, b) and not np.array_equal(a, c)  # NaN is not read as a filled value
    assert main(["data-info", str(nulls), "--null-fill", "keep", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["missing"] == read_letor(nulls, null_fill="keep").info["missing"] and info["null_filled"] == 0
    assert main(["data-info", str(nulls), "--null-fill", "keep"]) == 0
    lines = [" ".join(line.split()) for line in capsys.readouterr().out.splitlines()]
    assert f"missing (NaN) cells {info['missing']:,}" in lines


@pytest.mark.parametrize("model", ["listnet", "ranksvm"])
def test_a_model_that_reads_no_missing_value_refuses_them_naming_the_fix(nulls, tmp_path, capsys, model):
    argv = ["train", "--model", model, "--data", str(nulls), "--null-fill", "keep"]
    assert main([*argv, "--out", str(tmp_path / "m"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "missing feature value(s) (NaN; first: feature f3 of row" in err
    assert f"{model} does not read" in err
    assert "null_fill = query_min, letor_min or a number" in err
    fix = "train lambdamart" if model == "ranksvm" else "set train.missing = 'indicator'"
    assert fix in err


def test_a_neural_model_refuses_missing_values_at_predict(nulls, tmp_path, capsys):
    out = tmp_path / "ln"
    argv = ["train", "--model", "listnet", "--data", str(nulls), "--set", "train.max_epochs=1"]
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    argv = ["predict", "--model", str(out), "--data", str(nulls), "--null-fill", "keep", "-o", "-"]
    assert main(argv) == 2
    assert "listnet does not read missing values" in capsys.readouterr().err


def test_the_estimators_take_nan_for_lambdamart_only():
    from ctxrank.api import LambdaMARTRanker, ListNetRanker

    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 4))
    y = (X[:, 0] > 0).astype(int)
    qid = np.repeat(np.arange(20), 10)
    X[rng.random(200) < 0.2, 1] = np.nan
    ranker = LambdaMARTRanker(n_estimators=20, random_state=0).fit(X, y, qid=qid)
    scores = ranker.predict(X, qid=qid)
    assert scores.shape == (200,) and np.isfinite(scores).all()
    with pytest.raises(ValueError, match=r"X: row \d+, column 1 is NaN or infinite"):  # the caller's row
        ListNetRanker(max_epochs=1).fit(X, y, qid=qid)
    assert ranker.__sklearn_tags__().input_tags.allow_nan
    assert not ListNetRanker().__sklearn_tags__().input_tags.allow_nan
    X[0, 0] = np.inf  # infinite is never a missing value
    with pytest.raises(ValueError, match="X: row 0, column 0 is NaN or infinite"):
        LambdaMARTRanker(n_estimators=5).fit(X, y, qid=qid)


def test_indicator_lets_a_neural_model_learn_from_missing_values(nulls, tmp_path, capsys):
    """``train.missing = "indicator"``: a learned fill and a 0/1 indicator per feature; the model
    trains, saves, reloads and predicts on NaN, and the indicator carries the missingness signal the
    labels of this data hold (an item with feature 3 missing is relevant)."""
    import torch

    from ctxrank.models.missing import MissingIndicator
    from ctxrank.training.checkpoint import load_model

    out = tmp_path / "ind"
    argv = ["train", "--model", "listnet", "--data", str(nulls), "--null-fill", "keep"]
    argv += ["--set", "train.missing=indicator", "--set", "train.max_epochs=30", "--set", "train.lr=0.01"]
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    predictor = load_model(out)
    assert isinstance(predictor.model, MissingIndicator) and predictor.model.fill.shape == (5,)
    data = read_letor(nulls, null_fill="keep")
    scores = predictor.predict(data)
    assert np.isfinite(scores).all()
    missing = np.isnan(data.features[:, 2])
    assert scores[missing].mean() > scores[~missing].mean()  # learned from the indicator
    argv = ["predict", "--model", str(out), "--data", str(nulls), "-o", str(tmp_path / "s.txt")]
    assert main(argv) == 0  # the saved rule (keep) and policy apply
    np.testing.assert_allclose(np.loadtxt(tmp_path / "s.txt"), scores, rtol=1e-6)
    x = torch.tensor([[[1.0, float("nan")], [float("nan"), 2.0]]])
    wrapper = MissingIndicator.__new__(MissingIndicator)
    torch.nn.Module.__init__(wrapper)
    wrapper.fill = torch.nn.Parameter(torch.tensor([5.0, 6.0]))
    expanded = MissingIndicator.expand(wrapper, x)
    assert expanded.tolist() == [[[1.0, 6.0, 0.0, 1.0], [5.0, 2.0, 1.0, 0.0]]]


def test_indicator_is_for_neural_models_and_error_refuses_every_model(nulls, tmp_path, capsys):
    argv = ["train", "--model", "lambdamart", "--data", str(nulls), "--null-fill", "keep"]
    assert main([*argv, "--set", "train.missing=indicator", "--out", str(tmp_path / "a")]) == 2
    assert "train.missing = 'indicator' applies to the neural models" in capsys.readouterr().err
    assert main([*argv, "--set", "train.missing=error", "--out", str(tmp_path / "b")]) == 2
    assert "train.missing = 'error' refuses them" in capsys.readouterr().err
    argv = ["train", "--model", "mlp", "--data", str(nulls), "--null-fill", "keep"]
    assert main([*argv, "--out", str(tmp_path / "c"), "--no-progress"]) == 2
    assert "set train.missing = 'indicator'" in capsys.readouterr().err


def test_the_estimators_take_nan_with_missing_indicator():
    from ctxrank.api import MLPRanker

    rng = np.random.default_rng(2)
    X = rng.normal(size=(120, 3))
    X[rng.random(120) < 0.25, 0] = np.nan
    y = (rng.random(120) < 0.5).astype(int)
    qid = np.repeat(np.arange(12), 10)
    ranker = MLPRanker(missing="indicator", max_epochs=2, random_state=0)
    assert ranker.__sklearn_tags__().input_tags.allow_nan
    assert np.isfinite(ranker.fit(X, y, qid=qid).predict(X, qid=qid)).all()
