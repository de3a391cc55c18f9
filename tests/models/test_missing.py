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
    first = int(np.flatnonzero(np.isnan(X[:, 1]))[0])  # the caller's row, and the fix
    fix = r'ListNetRanker\(missing="indicator"\)'
    with pytest.raises(ValueError, match=rf"X: row {first}, column 1 is missing .*{fix}"):
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


def _frame_with_missing_cells():
    """(DataFrame, the same values as a float array, its categorical column indices, y, qid): 4 queries
    of 6 items; a float column with NaN, nullable Int64 / Float64 columns with pd.NA, a nullable boolean
    column and a category column with a missing cell (both categorical)."""
    import pandas as pd

    rng = np.random.default_rng(3)
    n = 24
    values = rng.normal(size=(n, 5)).round(2)
    values[:, 1] = rng.integers(0, 5, n)
    values[:, 3:] = rng.integers(0, 2, (n, 2))
    for j in range(5):
        values[rng.random(n) < 0.25, j] = np.nan
    values[0, :] = np.nan  # every kind missing at least once
    df = pd.DataFrame(
        {
            "a": values[:, 0],
            "b": pd.array([None if np.isnan(v) else int(v) for v in values[:, 1]], dtype="Int64"),
            "c": pd.array([None if np.isnan(v) else v for v in values[:, 2]], dtype="Float64"),
            "d": pd.array([None if np.isnan(v) else bool(v) for v in values[:, 3]], dtype="boolean"),
            "e": pd.Categorical([None if np.isnan(v) else "xy"[int(v)] for v in values[:, 4]]),
        }
    )
    y = (rng.random(n) < 0.4).astype(int)
    qid = np.repeat(np.arange(4), 6)
    return df, values, [3, 4], y, qid


def _tiny(model: str, **params):
    """A fast estimator of ``model`` (``params`` added): the fewest epochs / trees / rounds."""
    from ctxrank.api._params import param_spec
    from ctxrank.api.estimators import ESTIMATOR_OF_MODEL, Ranker

    defaults = param_spec(model).defaults
    for key, value in (("max_epochs", 1), ("n_estimators", 3), ("n_rounds", 2)):
        if key in defaults and not (model == "mnl" and key == "max_epochs"):
            params.setdefault(key, value)
    cls = ESTIMATOR_OF_MODEL.get(model)
    if cls is None or cls.__name__ == "AdaRankRanker":
        return Ranker(model=model, **params)
    return cls(**params)


def _all_models():
    from ctxrank.registry import MODELS

    return list(MODELS)


@pytest.mark.parametrize("model", _all_models())
def test_every_estimator_takes_a_frame_with_missing_cells_as_the_same_array(model):
    """A DataFrame with missing cells (NaN, pd.NA in Int64 / Float64 / boolean, a missing category) is
    read as the same values in a NumPy array: the same model, the same scores; or, where the model
    reads no missing value, the same refusal naming the fix."""
    from ctxrank.registry import MODELS

    df, values, cats, y, qid = _frame_with_missing_cells()
    neural = MODELS[model].traits.torch_module
    params = {"missing": "indicator"} if neural else {}
    if neural or MODELS[model].traits.reads_missing:
        a = _tiny(model, **params).fit(df, y, qid=qid)
        b = _tiny(model, **params).fit(values, y, qid=qid, categorical_features=cats)
        scores = a.predict(df, qid=qid)
        assert np.isfinite(scores).all()
        np.testing.assert_allclose(scores, b.predict(values, qid=qid), rtol=1e-5, atol=1e-6)
    else:  # RankSVM, AdaRank: one refusal, naming the caller's first row with a missing value
        for X, kw in ((df, {}), (values, {"categorical_features": cats})):
            with pytest.raises(ValueError, match=r"X: row 0, column .* is missing .* impute X first"):
                _tiny(model).fit(X, y, qid=qid, **kw)
    if neural:  # without a missing strategy: refused, naming missing="indicator"
        with pytest.raises(ValueError, match=r'X: row 0, column \'a\' is missing .*\(missing="indicator"\)'):
            _tiny(model).fit(df, y, qid=qid)


KINDS = ["float-nan", "float-none", "Int64-NA", "Float64-NA", "boolean-NA", "category"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("model", ["lambdamart", "qilcm"])
def test_each_kind_of_missing_cell_reads_as_nan(kind, model):
    import pandas as pd

    rng = np.random.default_rng(4)
    n = 24
    raw = rng.integers(0, 2, n).astype(float)
    raw[[0, 5, 13]] = np.nan
    cells = [None if np.isnan(v) else v for v in raw]
    column = {
        "float-nan": raw,
        "float-none": pd.Series(cells, dtype=float),
        "Int64-NA": pd.array([None if c is None else int(c) for c in cells], dtype="Int64"),
        "Float64-NA": pd.array(cells, dtype="Float64"),
        "boolean-NA": pd.array([None if c is None else bool(c) for c in cells], dtype="boolean"),
        "category": pd.Categorical([None if c is None else "no yes".split()[int(c)] for c in cells]),
    }[kind]
    other = rng.normal(size=n)
    df = pd.DataFrame({"x": other, "m": column})
    X = np.column_stack([other, raw])
    cats = [1] if kind in ("boolean-NA", "category") else None
    y = (rng.random(n) < 0.4).astype(int)
    qid = np.repeat(np.arange(4), 6)
    params = {"missing": "indicator"} if model == "qilcm" else {}
    a = _tiny(model, random_state=0, **params).fit(df, y, qid=qid)
    b = _tiny(model, random_state=0, **params).fit(X, y, qid=qid, categorical_features=cats)
    np.testing.assert_allclose(a.predict(df, qid=qid), b.predict(X, qid=qid), rtol=1e-5, atol=1e-6)
