"""Estimators fitted on an interaction log: ``fit(X, clicks, qid=sessions, position=...)`` and a
DataFrame with ``position_column``; the position is never a feature and prediction takes none."""

import json

import numpy as np
import pandas as pd
import pytest

from ctxrank.api import LambdaMARTRanker, ListNetRanker, load
from ctxrank.api._inputs import to_ranking_data


@pytest.fixture(scope="module")
def log():
    """30 sessions of 2..5 shown items, rows shuffled; clicks fall with the position."""
    rng = np.random.default_rng(1)
    rows = []
    for s in range(30):
        for p in range(1, int(rng.integers(2, 6)) + 1):
            rows.append(
                {"session": f"s{s}", "pos": p, "click": int(rng.random() < 0.6 / p), "f1": rng.normal()}
            )
    frame = pd.DataFrame(rows).sample(frac=1.0, random_state=0).reset_index(drop=True)
    frame["f2"] = rng.normal(size=len(frame))
    return frame


def test_fit_reads_positions_as_lightgbm_takes_them_and_never_as_a_feature(log):
    X = log[["f1", "f2"]]
    est = LambdaMARTRanker(n_estimators=3)
    inputs = to_ranking_data(est, X, log["click"], log["session"], None, fit=True, position=log["pos"])
    data, order = inputs.data, inputs.order
    assert data.feature_names == ("f1", "f2")
    assert data.shown_positions.tolist() == log["pos"].to_numpy()[order].tolist()
    assert data.info["sessions_without_interaction"] == int(
        (log.groupby("session")["click"].sum() == 0).sum()
    )
    est.fit(X, log["click"], qid=log["session"], position=log["pos"])
    assert list(est.feature_names_in_) == ["f1", "f2"]
    assert est.predict(X, qid=log["session"]).shape == (len(log),)


def test_position_column_is_dropped_from_the_features_and_from_prediction(log, tmp_path):
    plain = LambdaMARTRanker(n_estimators=3).fit(log[["f1", "f2"]], log["click"], qid=log["session"])
    est = LambdaMARTRanker(n_estimators=3, position_column="pos", query_column="session")
    est.fit(log[["session", "pos", "f1", "f2"]], log["click"])
    assert list(est.feature_names_in_) == ["f1", "f2"]
    with_position = est.predict(log[["session", "pos", "f1", "f2"]])
    np.testing.assert_allclose(with_position, est.predict(log[["session", "f1", "f2"]]))
    np.testing.assert_allclose(with_position, plain.predict(log[["f1", "f2"]], qid=log["session"]))
    est.save(tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "ctxrank.json").read_text())
    assert meta["table"]["position"] == "pos" and meta["table"]["numeric"] == ["f1", "f2"]
    again = load(tmp_path / "m")
    assert again.position_column == "pos"
    np.testing.assert_allclose(again.predict(log[["session", "pos", "f1", "f2"]]), with_position)


@pytest.mark.parametrize("kind", ["lambdamart", "neural"])
def test_a_model_directory_read_by_load_model_points_a_dataframe_to_the_estimator_loader(log, tmp_path, kind):
    """``ctxrank.load_model(dir)`` gives the model object, which scores RankingData: a DataFrame given to
    it is refused in one TypeError naming what reads DataFrames (``ctxrank.api.load``), not with an
    AttributeError from inside; ``load`` then scores that DataFrame as the estimator did."""
    from ctxrank import load_model

    X = log[["session", "f1", "f2"]]
    if kind == "lambdamart":
        est = LambdaMARTRanker(n_estimators=3, query_column="session")
    else:
        est = ListNetRanker(max_epochs=1, query_column="session", threads=1)
    est.fit(X, log["click"]).save(tmp_path / "m")
    refused = r"data must be a RankingData, got \w+: .*ctxrank\.api\.load\(PATH\)"
    for bad in (X, X.to_numpy(), [[0.1, 0.2]]):
        with pytest.raises(TypeError, match=refused):
            load_model(tmp_path / "m").predict(bad)
    np.testing.assert_allclose(load(tmp_path / "m").predict(X), est.predict(X))


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda p: p.where(p.index != 3), r"position: row 3: session '[^']+': missing position"),
        (
            lambda p: p.where(p.index != 3, 2.5),
            r"position: row 3: session '[^']+': position 2.5 .*not a whole",
        ),
        (lambda p: p + 1, r"position: row \d+: session '[^']+': position 2 but no row at position 1"),
        (lambda p: p.where(p != 2, 1), r"position: row \d+: session '[^']+': position 1 is repeated"),
        (lambda p: p.astype(str).where(p.index != 0, "top"), r"position: expected whole numbers >= 1"),
        (lambda p: p[:-1], r"position: expected \d+ values"),
    ],
    ids=["missing", "fraction", "shifted", "repeated", "text", "length"],
)
def test_bad_positions_are_refused_naming_row_and_session(log, change, message):
    with pytest.raises(ValueError, match=message):
        LambdaMARTRanker(n_estimators=3).fit(
            log[["f1", "f2"]], log["click"], qid=log["session"], position=change(log["pos"])
        )


def test_the_position_is_given_once(log):
    est = LambdaMARTRanker(n_estimators=3, position_column="pos", query_column="session")
    with pytest.raises(ValueError, match=r"position: the positions come from X\['pos'\]"):
        est.fit(log[["session", "pos", "f1"]], log["click"], position=log["pos"])
    with pytest.raises(ValueError, match=r"X: no position column 'pos'"):
        est.fit(log[["session", "f1"]], log["click"])
