"""What practitioners expect of the estimators beside fit / predict: LambdaMART's ``booster_`` and
``feature_importances_`` (as ``lightgbm.LGBMRanker``), ``RankingData.to_frame()``, and ``predict``
without query ids for the models that score each item alone."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ctxrank.api import LambdaMARTRanker, ListNetRanker, QILCMRanker, load
from ctxrank.data.ranking_data import RankingData


def _data(seed=0, n_queries=30, size=8):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_queries * size, 4))
    y = (X[:, 0] + 0.3 * rng.normal(size=len(X)) > 0.5).astype(int) + (X[:, 2] > 1).astype(int)
    qid = np.repeat(np.arange(n_queries), size)
    return X, y, qid


def test_lambdamart_exposes_its_booster_and_split_importances():
    X, y, qid = _data()
    ranker = LambdaMARTRanker(n_estimators=30, random_state=0).fit(X, y, qid=qid)
    booster = ranker.booster_
    assert type(booster).__name__ == "Booster" and booster.num_feature() == 4
    importances = ranker.feature_importances_
    assert importances.dtype == np.int64 and importances.shape == (4,)
    np.testing.assert_array_equal(importances, booster.feature_importance("split"))
    assert importances.sum() > 0


def test_importances_follow_the_columns_of_a_frame_with_categorical_columns():
    X, y, qid = _data(1)
    colour = pd.Categorical(np.where(X[:, 1] > 0, "red", "blue"))
    frame = pd.DataFrame({"colour": colour, "a": X[:, 0], "c": X[:, 2]})
    ranker = LambdaMARTRanker(n_estimators=30, random_state=0).fit(frame, y, qid=qid)
    booster = ranker.booster_  # its columns: the numeric ones, then the categorical codes
    by_name = dict(zip(["a", "c", "colour"], booster.feature_importance("split"), strict=True))
    assert ranker.feature_importances_.tolist() == [by_name["colour"], by_name["a"], by_name["c"]]


def test_to_frame_reads_back_as_the_same_data(tmp_path):
    data = RankingData.from_arrays(*_data(2)[:1], _data(2)[1], qid=_data(2)[2], feature_names=list("wxyz"))
    frame = data.to_frame()
    assert list(frame.columns) == ["qid", "label", "w", "x", "y", "z"] and len(frame) == data.n_items
    again = RankingData.from_frame(frame, query="qid", label="label", numeric=list("wxyz"))
    np.testing.assert_array_equal(again.features, data.features)
    np.testing.assert_array_equal(again.labels, data.labels)
    np.testing.assert_array_equal(again.query_offsets, data.query_offsets)
    with pytest.raises(ValueError, match=r"\['w'\] name both a key column and a feature"):
        data.to_frame(label="w")


ALONE = [lambda: LambdaMARTRanker(n_estimators=20), lambda: ListNetRanker(max_epochs=2)]


@pytest.mark.parametrize("make", ALONE)
def test_a_model_that_scores_items_alone_predicts_without_query_ids(make, tmp_path):
    X, y, qid = _data(3)
    ranker = make().fit(X, y, qid=qid)
    assert ranker.scores_rows_alone()
    np.testing.assert_allclose(ranker.predict(X), ranker.predict(X, qid=qid), rtol=1e-6, atol=1e-7)
    ranker.save(tmp_path / "m")
    np.testing.assert_allclose(load(tmp_path / "m").predict(X), ranker.predict(X), rtol=1e-6, atol=1e-7)


def test_a_context_model_or_a_per_query_normalizer_needs_the_query_ids():
    X, y, qid = _data(4)
    for ranker in (QILCMRanker(max_epochs=1), ListNetRanker(max_epochs=1, normalizer="query-minmax")):
        ranker.fit(X, y, qid=qid)
        assert not ranker.scores_rows_alone()
        with pytest.raises(ValueError, match=r"qid: give the query id of every row"):
            ranker.predict(X)


def test_the_pipeline_and_the_estimators_take_the_run_configs_fields_checks_and_defaults():
    """``RerankPipeline``'s top_k / crossfit / rank_feature are ``RerankConfig``'s fields: the same
    defaults, refused by the same checks (named as the caller knows them); a neural estimator's run
    parameters are ``RunConfig``'s (``transform`` under the name ``normalizer``)."""
    import inspect

    from ctxrank.api import RerankPipeline
    from ctxrank.api._params import param_spec
    from ctxrank.config import RerankConfig, RunConfig

    signature = inspect.signature(RerankPipeline).parameters
    for name, bad in (("top_k", 0), ("top_k", True), ("crossfit", 1), ("rank_feature", 1)):
        assert signature[name].default == getattr(RerankConfig(), name)
        with pytest.raises(ValueError) as got:
            RerankPipeline(**{name: bad}).run_config()
        with pytest.raises(ValueError) as want:
            RerankConfig(initial="lambdamart", **{name: bad})
        assert str(got.value) == str(want.value).replace("rerank.", "") and name in str(got.value)
    with pytest.raises(ValueError, match=r"^rank_feature must be true or false, got 'rerank\.x'$"):
        RerankPipeline(rank_feature="rerank.x").run_config()  # the value as given, not rewritten
    config = RerankPipeline(top_k=4, crossfit=2).run_config()
    assert (config.rerank.initial, config.rerank.top_k, config.rerank.crossfit) == ("lambdamart", 4, 2)
    run = param_spec("mlp").run
    assert run == {"loss": RunConfig().loss, "loss_params": None, "normalizer": RunConfig().transform}
