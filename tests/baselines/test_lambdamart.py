"""LambdaMART (LightGBM lambdarank): LightGBM's metric against ctxrank's, early stopping, determinism,
saved models, parameter handling, cross-fitting without leakage."""

import dataclasses
import json
import pickle
import subprocess
import sys

import numpy as np
import pytest

from ctxrank.baselines import lambdamart
from ctxrank.baselines.lambdamart import MODEL_FILE, LambdaMART, NotFittedError, cross_fit_predict
from ctxrank.data.registry import load_fold
from ctxrank.metrics import evaluate_queries, mean_metrics
from ctxrank.training.checkpoint import FORMAT_VERSION, META_FILE, load_model
from tests.conftest import make_ranking_data

FAST = {"n_estimators": 60, "learning_rate": 0.1, "early_stopping_rounds": 10, "min_data_in_leaf": 5}
CUTOFFS = (1, 3, 5, 10)


def _mean(scores, data, metric="ndcg@10", **kw):
    return mean_metrics(evaluate_queries(scores, data.labels, data.query_offsets, [metric], **kw))[metric]


def _with_no_relevant_queries(data, every=4):
    """Zero the labels of every ``every``-th query, so both no-relevant conventions are exercised."""
    labels = data.labels.copy()
    for q in range(0, data.n_queries, every):
        labels[data.query_slice(q)] = 0
    return dataclasses.replace(data, labels=labels)


@pytest.fixture(scope="module")
def mq2008():
    return load_fold("mq2008", 1, cache=False)  # cache=False: module scope runs outside the tmp cache


@pytest.fixture(scope="module")
def fitted(mq2008):
    """The default configuration (lr 0.05, patience 50, up to 1000 trees), NDCG recorded at 1/3/5/10."""
    return LambdaMART(eval_at=CUTOFFS).fit(mq2008.train, mq2008.valid)


@pytest.fixture(scope="module")
def small():
    tr = _with_no_relevant_queries(make_ranking_data(60, seed=1))
    va = _with_no_relevant_queries(make_ranking_data(25, seed=2))
    return tr, va


# ---------------------------------------------------------------------------------------- fit/predict


@pytest.mark.parametrize("no_relevant", [0.0, 1.0, "skip"])
def test_fit_predict_shapes_attributes_and_best_score(small, no_relevant):
    tr, va = small
    m = LambdaMART(**FAST, no_relevant=no_relevant).fit(tr, va)
    for data in (tr, va):
        p = m.predict(data)
        assert p.shape == (data.n_items,) and p.dtype == np.float64 and np.isfinite(p).all()
    assert m.n_features_in_ == m.n_features == 5
    assert m.feature_names_in_ == ("f1", "f2", "f3", "f4", "f5")
    assert m.label_gain_ == [0.0, 1.0, 3.0]
    assert m.lgb_params_["label_gain"] == [0.0, 1.0, 3.0] and m.lgb_params_["objective"] == "lambdarank"
    assert m.booster_.current_iteration() == m.best_iteration_ <= len(m.evals_result_["valid"]["ndcg@10"])
    # best_score_ is ctxrank's NDCG@10 of the kept model on valid, in the model's no-relevant convention
    assert m.best_score_ == pytest.approx(_mean(m.predict(va), va, no_relevant=no_relevant), abs=1e-9)


def test_early_stopping_keeps_the_first_best_iteration(fitted, mq2008):
    va = mq2008.valid
    raw = np.array(fitted.evals_result_["valid"]["ndcg@10"])
    assert 1 <= fitted.best_iteration_ < fitted.n_estimators
    # stopped exactly `early_stopping_rounds` rounds after the best one
    assert raw.size == fitted.best_iteration_ + fitted.early_stopping_rounds
    n0 = va.queries_without_relevant()
    ours = (raw * va.n_queries - n0) / va.n_queries  # the default no_relevant=0 convention
    assert fitted.best_iteration_ == int(np.argmax(ours)) + 1
    assert fitted.best_score_ == pytest.approx(ours.max(), abs=1e-12)
    assert fitted.booster_.current_iteration() == fitted.best_iteration_  # truncated to the best trees


def test_lightgbm_validation_ndcg_equals_ctxrank(fitted, mq2008):
    """LightGBM's own validation NDCG@k at the best iteration == evaluate_queries(no_relevant=1.0).

    Precisely: LightGBM scores a query without a relevant item as 1 (rank_metric.hpp) and orders
    equal scores by input position (std::stable_sort in dcg_calculator.cpp), as ctxrank does. Tree
    ensembles tie often (this model ties hundreds of MQ2008 items), and the two still agree because
    both the tie rule and the scores (LightGBM's incremental validation scores vs ``predict``) agree.
    """
    va = mq2008.valid
    n0 = va.queries_without_relevant()
    assert n0 > 0  # MQ2008 S4 has queries with no relevant document: the conventions differ here
    p = fitted.predict(va)
    tied = sum(
        int(p[va.query_slice(q)].size - np.unique(p[va.query_slice(q)]).size) for q in range(va.n_queries)
    )
    assert tied > 0
    best = fitted.best_iteration_ - 1
    for k in CUTOFFS:
        lgb_value = fitted.evals_result_["valid"][f"ndcg@{k}"][best]
        assert lgb_value == pytest.approx(_mean(p, va, f"ndcg@{k}", no_relevant=1.0), abs=1e-9)
        ours = _mean(p, va, f"ndcg@{k}", no_relevant=0.0)
        assert lgb_value - ours == pytest.approx(n0 / va.n_queries, abs=1e-9)
    assert fitted.best_score_ == pytest.approx(_mean(p, va, no_relevant=0.0), abs=1e-9)


def test_lightgbm_metric_conventions_on_tied_scores():
    """LightGBM's NDCG of given scores (as a validation init_score, trees scaled away by a 1e-30
    learning rate) on heavy ties, no-relevant and short queries: stable ties, no-relevant = 1."""
    import lightgbm as lgb

    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 15, size=40)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    n = int(offsets[-1])
    y = rng.integers(0, 4, size=n).astype(np.float32)
    for q in range(0, 40, 5):
        y[offsets[q] : offsets[q + 1]] = 0
    scores = 10.0 * rng.integers(1, 4, size=n)  # three values: ties everywhere; 1e-30 * leaf is absorbed
    x = rng.normal(size=(n, 3)).astype(np.float32)
    params = {
        "objective": "lambdarank",
        "metric": "ndcg",
        "eval_at": [10, 1, 3, 5],
        "label_gain": [0.0, 1.0, 3.0, 7.0],
        "learning_rate": 1e-30,
        "min_data_in_leaf": 1,
        "num_threads": 1,
        "deterministic": True,
        "verbosity": -1,
    }
    train = lgb.Dataset(x, label=y, group=lengths)
    valid = lgb.Dataset(x, label=y, group=lengths, init_score=scores, reference=train)
    evals: dict = {}
    lgb.train(
        params, train, 1, valid_sets=[valid], valid_names=["v"], callbacks=[lgb.record_evaluation(evals)]
    )
    later_first = scores + 1e-6 * np.arange(n)  # the other tie order: later rows first
    for k in (1, 3, 5, 10):
        name = f"ndcg@{k}"
        got = evals["v"][name][0]
        per = evaluate_queries(scores, y, offsets, [name], no_relevant=1.0)[name]
        assert got == pytest.approx(per.mean(), abs=1e-12)
        # the comparison has power: the other conventions give other values
        assert abs(got - evaluate_queries(scores, y, offsets, [name])[name].mean()) > 0.1
        other = evaluate_queries(later_first, y, offsets, [name], no_relevant=1.0)[name].mean()
        assert abs(got - other) > 1e-3


def test_determinism_and_seed(small):
    tr, va = small
    params = {**FAST, "bagging_fraction": 0.7, "feature_fraction": 0.7}
    a = LambdaMART(**params, seed=3).fit(tr, va).predict(va)
    b = LambdaMART(**params, seed=3).fit(tr, va).predict(va)
    c = LambdaMART(**params, seed=4).fit(tr, va).predict(va)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)  # the seed reaches LightGBM's bagging / feature sampling


def test_without_validation_or_without_early_stopping(small):
    tr, va = small
    m = LambdaMART(n_estimators=15, min_data_in_leaf=5).fit(tr)
    assert m.best_iteration_ == m.booster_.current_iteration() == 15
    assert m.evals_result_ == {} and m.best_score_ is None
    m = LambdaMART(n_estimators=15, min_data_in_leaf=5, early_stopping_rounds=None).fit(tr, va)
    assert m.best_iteration_ == m.booster_.current_iteration() == 15
    assert len(m.evals_result_["valid"]["ndcg@10"]) == 15
    assert m.best_score_ == pytest.approx(_mean(m.predict(va), va), abs=1e-9)


# ------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize("bad", [-1.0, 0.5, float("nan")])
@pytest.mark.parametrize("split", ["train", "valid"])
def test_labels_must_be_non_negative_integers(small, bad, split):
    tr, va = small
    data = tr if split == "train" else va
    labels = data.labels.copy()
    labels[7] = bad
    broken = dataclasses.replace(data, labels=labels)
    args = (broken, va) if split == "train" else (tr, broken)
    with pytest.raises(ValueError, match=rf"{split} labels must be integers.*found {bad!r} at row 7"):
        LambdaMART(**FAST).fit(*args)


def test_feature_count_mismatch_and_not_fitted(small):
    tr, va = small
    fewer = make_ranking_data(10, n_features=4, seed=5)
    m = LambdaMART(**FAST)
    with pytest.raises(NotFittedError, match="not fitted"):
        m.predict(tr)
    with pytest.raises(NotFittedError):
        m.save("unused")
    with pytest.raises(ValueError, match="train has 5 features but valid has 4"):
        m.fit(tr, fewer)
    m.fit(tr, va)
    with pytest.raises(ValueError, match=r"trained on 5 features but .* has 4"):
        m.predict(fewer)
    with pytest.raises(TypeError, match="RankingData"):
        m.predict(tr.features)


# ------------------------------------------------------------------------------------------- params


def test_get_set_params_and_extra_lightgbm_params(small):
    tr, va = small
    m = LambdaMART(num_leaves=7, max_bin=31)
    params = m.get_params()
    assert params["num_leaves"] == 7 and params["max_bin"] == 31 and params["max_position"] == 30
    assert LambdaMART(**params).get_params() == params  # clone round trip
    assert m.set_params(learning_rate=0.2, lambdarank_norm=False) is m
    assert m.learning_rate == 0.2 and m.get_params()["lambdarank_norm"] is False
    assert "num_leaves=7" in repr(m) and "max_bin=31" in repr(m) and "seed" not in repr(m)
    m.set_params(**FAST).fit(tr, va)
    lp = m.lgb_params_
    assert lp["max_bin"] == 31 and lp["lambdarank_norm"] is False and lp["lambdarank_truncation_level"] == 30
    assert lp["eval_at"] == [10] and "bagging_freq" not in lp


@pytest.mark.parametrize(
    "params, message",
    [
        ({"metric": "map@10"}, "metric must be 'ndcg@K'"),
        ({"eval_at": 0}, "eval_at must be"),
        ({"no_relevant": 0.5}, "no_relevant must be"),
        ({"n_estimators": 0}, "n_estimators must be"),
        ({"early_stopping_rounds": 0}, "early_stopping_rounds must be"),
        ({"num_iterations": 5}, "pass n_estimators=5 instead"),
        ({"subsample": 0.5}, "pass bagging_fraction=0.5 instead"),
        ({"objective": "regression"}, "objective is always 'lambdarank'"),
        ({"label_gain": [0, 1, 2]}, "label_gain is always"),
        ({"num_leaves": 1}, "LightGBM rejected"),
        ({"list_features": "zscore"}, r"list_features must be one of \['none', 'query-zscore'\]"),
    ],
)
def test_bad_parameters(small, params, message):
    tr, va = small
    with pytest.raises(ValueError, match=message):
        LambdaMART(**{**FAST, **params}).fit(tr, va)


# ------------------------------------------------------------------------------------- persistence


def test_save_load_identical_predictions(fitted, mq2008, tmp_path, monkeypatch):
    out = fitted.save(tmp_path / "lm", run_config={"model": "lambdamart", "train": {"seed": 0}})
    assert sorted(p.name for p in out.iterdir()) == ["config.toml", META_FILE, MODEL_FILE]
    meta = json.loads((out / META_FILE).read_text())
    assert meta["kind"] == "lightgbm" and meta["format_version"] == FORMAT_VERSION
    as_json = json.loads(json.dumps(fitted.get_params()))  # eval_at=(1, 3, 5, 10) comes back as a list
    assert meta["params"] == as_json
    assert meta["n_features"] == 46 and meta["feature_names"] == list(mq2008.train.feature_names)
    assert meta["label_gain"] == [0.0, 1.0, 3.0] and meta["best_iteration"] == fitted.best_iteration_
    assert meta["lightgbm_version"] and meta["ctxrank_version"]
    assert (out / MODEL_FILE).read_text().startswith("tree\n")  # LightGBM's text format

    def no_unpickling(*args, **kwargs):
        raise AssertionError("loading a LightGBM model must not unpickle")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, no_unpickling)
    expected = fitted.predict(mq2008.test)
    loaded = LambdaMART.load(out)
    assert np.array_equal(loaded.predict(mq2008.test), expected)
    assert loaded.get_params() == as_json
    assert loaded.best_iteration_ == fitted.best_iteration_ and loaded.best_score_ == fitted.best_score_
    assert (
        loaded.evals_result_ == fitted.evals_result_ and loaded.feature_names_in_ == fitted.feature_names_in_
    )
    via_checkpoint = load_model(out)
    assert isinstance(via_checkpoint, LambdaMART) and via_checkpoint.n_features == 46
    assert np.array_equal(via_checkpoint.predict(mq2008.test), expected)


def test_load_rejects_changed_or_foreign_directories(small, tmp_path):
    tr, va = small
    out = LambdaMART(**FAST).fit(tr, va).save(tmp_path / "lm")
    assert not (out / "config.toml").exists()
    model_file = out / MODEL_FILE
    text = model_file.read_text()
    model_file.write_text(text.replace("tree\n", "tree \n", 1))
    with pytest.raises(ValueError, match=r"model\.txt was changed after it was saved: sha256 "):
        load_model(out)
    model_file.unlink()
    with pytest.raises(ValueError, match="cannot read the LightGBM model"):
        LambdaMART.load(out)
    meta = json.loads((out / META_FILE).read_text())
    (out / META_FILE).write_text(json.dumps({**meta, "kind": "torch"}))
    with pytest.raises(ValueError, match="not a LightGBM one"):
        LambdaMART.load(out)
    (out / META_FILE).write_text(json.dumps({**meta, "kind": "xgboost"}))
    with pytest.raises(ValueError, match="unknown model kind 'xgboost'"):
        load_model(out)
    with pytest.raises(ValueError, match="not a ctxrank model directory"):
        LambdaMART.load(tmp_path / "nothing")


# ------------------------------------------------------------------------------------ cross-fitting


def test_cross_fit_never_scores_a_query_with_a_model_that_saw_it(monkeypatch):
    """By construction: record which queries each fold model fitted on, early-stopped on and scored."""
    data = make_ranking_data(53, seed=7)
    seen: dict[int, dict[str, set]] = {}
    predicted: dict[int, np.ndarray] = {}
    models: list[LambdaMART] = []  # kept alive: a freed model's id() can be reused by the next fold's
    fit, predict_rows = LambdaMART._fit, lambdamart._predict_rows

    def recording_fit(self, train, valid, train_x, valid_x):
        models.append(self)
        seen[id(self)] = {"fit": set(train.query_ids), "es": set(valid.query_ids) if valid else set()}
        return fit(self, train, valid, train_x, valid_x)

    def recording_predict(model, d, rows):
        seen[id(model)]["scored"] = set(d.query_ids[d.query_index[rows]])
        out = predict_rows(model, d, rows)
        predicted[id(model)] = out
        return out

    monkeypatch.setattr(LambdaMART, "_fit", recording_fit)
    monkeypatch.setattr(lambdamart, "_predict_rows", recording_predict)
    scores, folds = cross_fit_predict(data, n_folds=4, seed=1, return_folds=True, **FAST)

    assert scores.shape == (data.n_items,) and np.isfinite(scores).all()
    assert len(seen) == 4 and np.bincount(folds).tolist() in ([14, 13, 13, 13], [13, 14, 13, 13])
    everything = set(data.query_ids)
    scored_once: list[str] = []
    for record in seen.values():
        assert not record["fit"] & record["es"]
        assert not record["scored"] & (record["fit"] | record["es"])  # no leakage
        assert record["fit"] | record["es"] | record["scored"] == everything
        assert len(record["es"]) == round(0.2 * (data.n_queries - len(record["scored"])))
        scored_once += sorted(record["scored"])
    assert sorted(scored_once) == sorted(everything)  # every query scored exactly once
    for f in range(4):
        fold_queries = {data.query_ids[q] for q in np.flatnonzero(folds == f)}
        assert fold_queries in [r["scored"] for r in seen.values()]
    assert np.array_equal(np.sort(scores), np.sort(np.concatenate(list(predicted.values()))))


def test_cross_fit_copies_no_fold_of_the_features():
    """The fold models read train's rows in place (views; LightGBM builds from a list of row blocks)
    and the held-out rows are scored a block at a time: NumPy allocates well under the 80 % of the
    features a fold's copies took (``train.subset`` of the fit and early-stopping queries), and the
    scores are those of the copies."""
    import tracemalloc

    import lightgbm  # noqa: F401  (imported here, not inside the traced fit: its import is not the fit's)

    data = make_ranking_data(200, max_len=60, min_len=30, n_features=136, seed=3)  # about 5 MB of features
    few = {**FAST, "n_estimators": 10}
    tracemalloc.start()
    try:
        scores = cross_fit_predict(data, n_folds=5, seed=0, **few)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 0.45 * data.features.nbytes, (peak, data.features.nbytes)
    # the same numbers as fold models fitted on copies of their rows
    folds = np.empty(data.n_queries, dtype=np.int64)
    rng = np.random.default_rng(0)
    folds[rng.permutation(data.n_queries)] = np.arange(data.n_queries) % 5
    held = np.flatnonzero(folds == 0)
    rest = np.flatnonzero(folds != 0)
    es = np.zeros(rest.size, dtype=bool)
    es[rng.permutation(rest.size)[: round(0.2 * rest.size)]] = True
    model = LambdaMART(**{"seed": 0, **few}).fit(data.subset(rest[~es]), data.subset(rest[es]))
    assert np.array_equal(scores[data.query_rows(held)], model.predict(data.subset(held)))


def test_cross_fit_mq2008_finite_seeded_and_out_of_sample(fitted, mq2008):
    tr = mq2008.train
    params = {**fitted.get_params(), "early_stopping_rounds": 20}  # its "seed" binds to the fold seed
    a = cross_fit_predict(tr, n_folds=3, **params)
    assert a.shape == (tr.n_items,) and a.dtype == np.float64 and np.isfinite(a).all()
    del params["seed"]
    assert np.array_equal(a, cross_fit_predict(tr, n_folds=3, seed=0, **params))
    assert not np.array_equal(a, cross_fit_predict(tr, n_folds=3, seed=1, **params))
    oof, in_sample = _mean(a, tr), _mean(fitted.predict(tr), tr)
    assert _mean(np.zeros(tr.n_items), tr) + 0.02 < oof < in_sample  # learned, but not an in-sample fit


def test_cross_fit_arguments():
    data = make_ranking_data(6, seed=0)
    with pytest.raises(ValueError, match="n_folds"):
        cross_fit_predict(data, n_folds=1)
    with pytest.raises(ValueError, match="n_folds"):
        cross_fit_predict(data, n_folds=7)
    with pytest.raises(ValueError, match="valid_fraction"):
        cross_fit_predict(data, valid_fraction=1.0)
    with pytest.raises(ValueError, match="metric must be"):
        cross_fit_predict(data, n_folds=2, metric="err@10")


def test_import_does_not_pull_lightgbm():
    code = (
        "import sys, ctxrank.baselines, ctxrank.baselines.lambdamart; "
        "print('lightgbm' in sys.modules, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def _categorical_task(seed):
    """Relevance decided by a categorical column alone (code 3 relevant); numeric features are noise."""
    data = make_ranking_data(60, max_len=10, min_len=4, n_features=3, seed=seed)
    rng = np.random.default_rng(seed)
    codes = rng.integers(1, 6, size=(data.n_items, 1))
    return dataclasses.replace(
        data,
        labels=(codes[:, 0] == 3).astype(np.float32),
        categorical=codes,
        categorical_names=("airline",),
        categorical_cardinalities=(6,),
    )


def test_categorical_columns_are_native_lightgbm_categoricals(tmp_path):
    tr, va, te = (_categorical_task(s) for s in (1, 2, 3))
    m = LambdaMART(**FAST).fit(tr, va)
    assert m.n_categorical_in_ == 1 and m.booster_.num_feature() == tr.n_features + 1
    has_rel = np.maximum.reduceat(te.labels, te.query_offsets[:-1]) > 0
    per_q = evaluate_queries(m.predict(te), te.labels, te.query_offsets, ["ndcg@1"])["ndcg@1"]
    assert per_q[has_rel].mean() == 1.0  # the code decides relevance: the trees must find it
    blind = LambdaMART(**FAST).fit(*(dataclasses.replace(d, categorical=None) for d in (tr, va)))
    blind_te = dataclasses.replace(te, categorical=None)
    blind_q = evaluate_queries(blind.predict(blind_te), te.labels, te.query_offsets, ["ndcg@1"])["ndcg@1"]
    assert blind_q[has_rel].mean() < 0.8  # without the column: noise
    with pytest.raises(ValueError, match="1 categorical columns but"):
        m.predict(blind_te)
    m.save(tmp_path / "m")
    np.testing.assert_array_equal(LambdaMART.load(tmp_path / "m").predict(te), m.predict(te))


# ------------------------------------------------------------------------------------ list features


def _above_their_list(n_queries, seed):
    """Lists at levels ``c_q ~ N(0, 10^2)``; an item is relevant when its feature 0 is above its list's
    mean: a per-list question that the raw feature (dominated by the level) cannot answer."""
    data = make_ranking_data(n_queries, min_len=4, seed=seed)
    rng = np.random.default_rng(seed)
    level = np.repeat(rng.normal(scale=10.0, size=data.n_queries), data.query_lengths)
    x = data.features.copy()
    x[:, 0] += level.astype(np.float32)
    mean = np.repeat(
        np.add.reduceat(x[:, 0], data.query_offsets[:-1]) / data.query_lengths, data.query_lengths
    )
    return dataclasses.replace(data, features=x, labels=(x[:, 0] > mean).astype(np.float32))


def test_list_features_are_the_same_after_a_constant_is_added_to_a_list(small):
    tr, _ = small
    model = LambdaMART(list_features="query-zscore")
    shift = np.repeat(np.arange(tr.n_queries, dtype=np.float32) * 7.0 - 50.0, tr.query_lengths)
    moved = dataclasses.replace(tr, features=tr.features + shift[:, None])
    f = tr.n_features
    np.testing.assert_allclose(
        model._with_list_features(moved).features[:, f:],
        model._with_list_features(tr).features[:, f:],
        atol=1e-4,
    )
    assert model._with_list_features(tr).feature_names[f] == f"{tr.feature_names[0]}:query-zscore"
    assert LambdaMART()._with_list_features(tr) is tr


def test_list_features_rank_lists_whose_relevance_depends_on_the_list():
    """Per-list z-scores let the trees see an item's place in its list; the features alone do not."""
    train, valid, test = (_above_their_list(n, seed) for n, seed in ((80, 1), (30, 2), (40, 3)))
    plain = LambdaMART(**FAST).fit(train, valid)
    listed = LambdaMART(**FAST, list_features="query-zscore").fit(train, valid)
    assert listed.n_features == plain.n_features == 5 and len(listed.feature_names_in_) == 5
    assert _mean(listed.predict(test), test) > 0.95 > _mean(plain.predict(test), test) + 0.1
    with pytest.raises(ValueError, match="features"):
        listed.predict(listed._with_list_features(test))  # the model takes the F given features


def test_list_features_survive_save_load_and_cross_fitting(tmp_path):
    train, valid = _above_their_list(50, 1), _above_their_list(20, 2)
    model = LambdaMART(**FAST, list_features="query-zscore").fit(train, valid)
    loaded = LambdaMART.load(model.save(tmp_path / "m"))
    assert loaded.list_features == "query-zscore" and loaded.n_features == 5
    np.testing.assert_array_equal(loaded.predict(valid), model.predict(valid))
    params = {**FAST, "list_features": "query-zscore"}
    scores = cross_fit_predict(train, n_folds=2, seed=0, **params)
    assert scores.shape == (train.n_items,) and np.all(np.isfinite(scores))
    plain = cross_fit_predict(train, n_folds=2, seed=0, **FAST)
    assert not np.allclose(scores, plain)
