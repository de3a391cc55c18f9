"""LambdaMART trained from a click log: LightGBM's position debiasing and IPS weights against naive
training (by the true labels' NDCG), the options' checks, positions never an input of the model."""

import dataclasses
import warnings

import numpy as np
import pytest

from ctxrank.api import LambdaMARTRanker
from ctxrank.api._params import run_config
from ctxrank.baselines.lambdamart import LambdaMART, LogValidationWarning, cross_fit_predict, ips_weights
from ctxrank.config import RunConfig, TrainConfig
from ctxrank.data.ranking_data import RankingData
from ctxrank.metrics import evaluate_queries, mean_metrics
from ctxrank.registry import DEBIAS_TRAIN_KEYS, get_model
from ctxrank.serving.directory import DirectoryRanker
from ctxrank.training.checkpoint import load_model
from ctxrank.training.run import run_training, save_result

LENGTH = 10
TREES = {"n_estimators": 50, "learning_rate": 0.1, "num_leaves": 7, "min_data_in_leaf": 5}
TREES = {**TREES, "early_stopping_rounds": None}


def _labelled(rng, n_queries):
    """Features and graded true labels 0-2 (from features 0 and 1; feature 4 is irrelevant)."""
    x = rng.normal(size=(n_queries * LENGTH, 5)).astype(np.float32)
    labels = np.digitize(x[:, 0] + 0.5 * x[:, 1], [0.5, 1.5]).astype(np.float32)
    return x, labels


def _pbm_log(seed, n_sessions=600, eta=1.0, noise=0.1):
    """A position-based-model click log (Richardson et al. 2007; Joachims et al. 2017) and its truth.

    The logging ranker orders each session mostly by the irrelevant feature 4, so the top positions,
    examined with probability ``(1/r)^eta``, hold items a naive learner takes for relevant. An examined
    item is clicked with probability ``noise + (1 - noise) * (2^y - 1) / 3``. Returns ``(log, truth)``:
    the log as RankingData (clicks as labels, ``shown_positions`` 1-based), the same rows with the true
    labels and no positions."""
    rng = np.random.default_rng(seed)
    x, labels = _labelled(rng, n_sessions)
    logging = (1.5 * x[:, 4] + 0.3 * x[:, 0] + rng.normal(scale=0.3, size=labels.size)).reshape(-1, LENGTH)
    order = np.argsort(-logging, axis=1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(1, LENGTH + 1)[None].repeat(n_sessions, 0), axis=1)
    position = ranks.ravel()
    click_given_seen = noise + (1 - noise) * (2.0**labels - 1) / 3
    clicks = (rng.random(labels.size) < (1.0 / position) ** eta * click_given_seen).astype(np.float32)
    sessions = np.repeat(np.arange(n_sessions), LENGTH)
    log = RankingData.from_arrays(x, clicks, sessions, position=position, source="pbm log")
    return log, RankingData.from_arrays(x, labels, sessions, source="truth")


@pytest.fixture(scope="module")
def test_queries():
    x, labels = _labelled(np.random.default_rng(1000), 150)
    return RankingData.from_arrays(x, labels, np.repeat(np.arange(150), LENGTH), source="test")


def _ndcg(model, data):
    return mean_metrics(evaluate_queries(model.predict(data), data.labels, data.query_offsets, ["ndcg@10"]))[
        "ndcg@10"
    ]


# ------------------------------------------------------------------------------ debiasing pays


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_debiased_lambdamart_ranks_better_by_the_true_labels_than_naive(seed, test_queries):
    log, truth = _pbm_log(seed)
    naive = _ndcg(LambdaMART(**TREES).fit(log), test_queries)
    lightgbm = _ndcg(LambdaMART(**TREES, debias="lightgbm").fit(log), test_queries)
    ips = _ndcg(LambdaMART(**TREES, debias="ips", propensity=1.0).fit(log), test_queries)
    skyline = _ndcg(LambdaMART(**TREES).fit(truth), test_queries)
    # margins measured on seeds 0-9: LightGBM's debiasing +0.053 to +0.094, IPS +0.032 to +0.085
    assert lightgbm > naive + 0.04, (naive, lightgbm, skyline)
    assert ips > naive + 0.02, (naive, ips, skyline)
    assert skyline > max(lightgbm, ips)


def test_ips_with_every_propensity_one_is_naive_training(test_queries):
    log, _ = _pbm_log(3, n_sessions=100)
    naive = LambdaMART(**TREES).fit(log).predict(test_queries)
    ones = LambdaMART(**TREES, debias="ips", propensity=[1.0] * LENGTH).fit(log).predict(test_queries)
    np.testing.assert_array_equal(ones, naive)


def test_ips_weights_rule():
    # session a: one click at position 2; session b: clicks at 1 and 4; session c: no click
    x = np.zeros((12, 2), np.float32)
    clicks = [0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0]
    position = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4]
    log = RankingData.from_arrays(x, clicks, np.repeat(["a", "b", "c"], 4), position=position)
    w = ips_weights(log, [1.0, 0.5, 0.25, 0.2])
    raw = np.array([2, 2, 2, 2, 1, 3, 3, 5, 1, 1, 1, 1], dtype=np.float64)  # 1/p; mean of (1, 5) = 3
    np.testing.assert_allclose(w, raw / raw.mean())
    clipped = np.array([2, 2, 2, 2, 1, 2.5, 2.5, 4, 1, 1, 1, 1], dtype=np.float64)  # 1/p cut at 4
    np.testing.assert_allclose(ips_weights(log, [1.0, 0.5, 0.25, 0.2], clip=4), clipped / clipped.mean())
    eta = np.array([2, 2, 2, 2, 1, 2.5, 2.5, 4, 1, 1, 1, 1], dtype=np.float64)  # (1/r)^1 -> r
    np.testing.assert_allclose(ips_weights(log, 1.0), eta / eta.mean())
    assert np.isfinite(ips_weights(dataclasses.replace(log, labels=np.zeros(12, np.float32)), 2.0)).all()


# ---------------------------------------------------------------------------- the served model


@pytest.mark.parametrize("debias", ["lightgbm", "ips"])
def test_positions_are_never_an_input_of_the_model(debias, tmp_path, test_queries):
    log, _ = _pbm_log(4, n_sessions=100)
    extra = {"propensity": 1.0} if debias == "ips" else {}
    model = LambdaMART(**TREES, debias=debias, **extra).fit(log)
    assert model.n_features_in_ == model.booster_.num_feature() == log.n_features == 5
    without = dataclasses.replace(log, shown_positions=None)
    shuffled = dataclasses.replace(log, shown_positions=log.shown_positions[::-1].copy())
    np.testing.assert_array_equal(model.predict(log), model.predict(without))
    np.testing.assert_array_equal(model.predict(log), model.predict(shuffled))
    model.save(tmp_path / "m")
    loaded = load_model(tmp_path / "m")
    assert loaded.booster_.num_feature() == 5 and loaded.debias == debias
    np.testing.assert_array_equal(loaded.predict(test_queries), model.predict(test_queries))


def test_the_served_directory_of_a_debiased_run_takes_the_features_only(tmp_path):
    log, _ = _pbm_log(4, n_sessions=100)
    result = run_training(run_config("lambdamart", {**TREES, "debias": "pal"}), log, log)
    save_result(result, tmp_path / "run", write_log=False)
    served = DirectoryRanker(tmp_path / "run")
    assert served.n_features == 5
    scores = served.predict(log.features, np.repeat(log.query_ids, log.query_lengths))
    np.testing.assert_array_equal(scores, result.predictor.predict(log))


@pytest.mark.parametrize("debias", ["lightgbm", "ips"])
def test_debiased_fit_is_deterministic(debias, test_queries):
    log, _ = _pbm_log(5, n_sessions=100)
    extra = {"propensity": [1.0 / r for r in range(1, LENGTH + 1)]} if debias == "ips" else {}
    runs = [LambdaMART(**TREES, debias=debias, **extra).fit(log).predict(test_queries) for _ in range(2)]
    np.testing.assert_array_equal(runs[0], runs[1])


def test_parameters_survive_get_params_and_saving(tmp_path):
    model = LambdaMART(no_relevant=1.0, debias="ips", propensity=0.5, propensity_clip=10.0)
    clone = LambdaMART(**model.get_params())
    assert (clone.no_relevant, clone.debias, clone.propensity, clone.propensity_clip) == (
        1.0,
        "ips",
        0.5,
        10.0,
    )
    assert LambdaMART().set_params(debias="lightgbm").debias == "lightgbm"
    log, _ = _pbm_log(6, n_sessions=40)
    model.set_params(**TREES).fit(log).save(tmp_path / "m")
    loaded = LambdaMART.load(tmp_path / "m")
    assert (loaded.no_relevant, loaded.debias, loaded.propensity, loaded.propensity_clip) == (
        1.0,
        "ips",
        0.5,
        10.0,
    )


def test_cross_fitting_a_log_keeps_each_rows_position():
    log, _ = _pbm_log(7, n_sessions=40)
    for debias in ({}, {"debias": "lightgbm"}):
        scores = cross_fit_predict(log, n_folds=2, valid_fraction=0.0, **debias, **TREES)
        assert scores.shape == (log.n_items,) and np.isfinite(scores).all()


# ------------------------------------------------------------------------------ option errors


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"debias": "position"}, r"debias must be one of \['none', 'lightgbm', 'ips'\], got 'position'"),
        ({"debias": "ips"}, r"debias='ips' needs propensity"),
        ({"debias": "ips", "propensity": 0}, r"propensity eta must be a finite number > 0"),
        (
            {"debias": "ips", "propensity": [1.0, 1.5]},
            r"propensity must be a non-empty list of numbers in \(0, 1\]",
        ),
        ({"debias": "ips", "propensity": []}, r"non-empty list"),
        ({"debias": "ips", "propensity": [1.0, float("nan")]}, r"non-empty list of numbers in \(0, 1\]"),
        ({"debias": "ips", "propensity": float("inf")}, r"propensity eta must be a finite number > 0"),
        ({"debias": "ips", "propensity": 1.0, "propensity_clip": float("nan")}, r"propensity_clip must be"),
        ({"debias": "ips", "propensity": "1"}, r"propensity must be a list p_1..p_K"),
        (
            {"debias": "ips", "propensity": 1.0, "propensity_clip": 0.5},
            r"propensity_clip must be a number >= 1",
        ),
        ({"propensity": 1.0}, r"propensity is read with debias='ips' only; debias is 'none'"),
        ({"debias": "lightgbm", "propensity_clip": 5}, r"propensity_clip is read with debias='ips' only"),
        (
            {"lambdarank_position_bias_regularization": 0.1},
            r"'lambdarank_position_bias_regularization' applies to LightGBM's position debiasing only",
        ),
    ],
)
def test_bad_debias_options_fail_before_training(params, message):
    with pytest.raises(ValueError, match=message):
        LambdaMART(**params).check_params()
    with pytest.raises(ValueError, match=message) as raised:
        get_model("lambdamart").build(params)
    assert str(raised.value).startswith("model_params: ")


@pytest.mark.parametrize("debias", ["lightgbm", "ips"])
def test_debiasing_data_without_shown_positions_is_an_error_naming_the_option(debias):
    _, truth = _pbm_log(8, n_sessions=20)
    extra = {"propensity": 1.0} if debias == "ips" else {}
    with pytest.raises(
        ValueError, match=rf"debias='{debias}' needs the position each training item was shown"
    ):
        LambdaMART(**TREES, debias=debias, **extra).fit(truth)


def test_a_position_beyond_the_propensities_is_an_error_naming_the_row():
    log, _ = _pbm_log(9, n_sessions=20)
    with pytest.raises(
        ValueError, match=r"propensity gives 3 positions but row \d+ \(session .*shown at position"
    ):
        LambdaMART(**TREES, debias="ips", propensity=[1.0, 0.5, 0.3]).fit(log)


def test_lightgbm_debiasing_takes_its_regularisation(test_queries):
    log, _ = _pbm_log(10, n_sessions=100)
    plain = LambdaMART(**TREES, debias="lightgbm").fit(log)
    held = LambdaMART(**TREES, debias="lightgbm", lambdarank_position_bias_regularization=1e6).fit(log)
    assert held.lgb_params_["lambdarank_position_bias_regularization"] == 1e6
    assert not np.array_equal(plain.predict(test_queries), held.predict(test_queries))


# ------------------------------------------------------------------ train.debias, as for every model


def _lambdamart_run(debias, **train):
    return RunConfig(model="lambdamart", model_params=TREES, train=TrainConfig(debias=debias, **train))


@pytest.mark.parametrize(
    ("debias", "train", "expected"),
    [
        ("pal", {}, {"debias": "lightgbm", "propensity": None, "propensity_clip": None}),
        ("ips", {"propensity_eta": 0.5}, {"debias": "ips", "propensity": 0.5, "propensity_clip": 100.0}),
        (
            "ips",
            {"propensity": (1.0,) + (0.5,) * (LENGTH - 1), "propensity_clip": 20.0},
            {"debias": "ips", "propensity": [1.0] + [0.5] * (LENGTH - 1), "propensity_clip": 20.0},
        ),
    ],
)
def test_train_debias_sets_lambdamarts_debiasing(debias, train, expected):
    """``train.debias`` (the one option of every model): pal is LightGBM's position debiasing (its
    ``Dataset(position=...)``), ips its IPS weights with the run's propensities and clip."""
    log, _ = _pbm_log(11, n_sessions=40)
    log = dataclasses.replace(
        log, shown_positions=np.minimum(log.shown_positions, 2)
    )  # within 2 propensities
    fitted = run_training(_lambdamart_run(debias, **train), log, log).predictor
    assert {k: fitted.get_params()[k] for k in expected} == expected
    naive = run_training(_lambdamart_run("none"), log, log).predictor
    assert naive.debias == "none"
    assert not np.array_equal(fitted.predict(log), naive.predict(log))


def test_lightgbm_debiasing_by_train_debias_passes_the_positions_to_lightgbm(monkeypatch):
    import lightgbm as lgb

    seen = {}
    original = lgb.Dataset.__init__

    def spy(self, *args, **kwargs):
        seen.setdefault("position", kwargs.get("position"))
        original(self, *args, **kwargs)

    monkeypatch.setattr(lgb.Dataset, "__init__", spy)
    log, _ = _pbm_log(12, n_sessions=30)
    run_training(_lambdamart_run("pal"), log, log)
    np.testing.assert_array_equal(seen["position"], log.shown_positions)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            lambda: _lambdamart_run("dla"),
            r"train.debias = 'dla': lambdamart learns from a click log with train.debias none, ips .*, pal "
            r"\(LightGBM's position debiasing, an additive position term.*dla applies to the neural models",
        ),
        (
            lambda: RunConfig(model="lambdamart", model_params={"debias": "lightgbm"}),
            r"model_params: debias is not a model parameter of lambdamart: a click log is debiased by "
            r"train.debias, train.propensity",
        ),
        (
            lambda: RunConfig(model="lambdamart", model_params={"propensity_clip": 5.0}),
            r"model_params: propensity_clip is not a model parameter of lambdamart",
        ),
        (
            lambda: RunConfig(model="ranksvm", train=TrainConfig(debias="pal")),
            r"train.debias: ranksvm is a baseline and does not use it",
        ),
    ],
)
def test_debiasing_a_baseline_is_checked_when_the_config_is_built(config, message):
    with pytest.raises(ValueError, match=message):
        config()


def test_estimator_debias_is_the_train_option():
    assert run_config("lambdamart", {"debias": "pal"}).train.debias == "pal"
    assert "debias" not in run_config("lambdamart", {}).model_params
    with pytest.raises(ValueError, match=r"debias = 'dla': lambdamart learns from a click log"):
        run_config("lambdamart", {"debias": "dla"})


@pytest.mark.parametrize(
    ("old", "train"),
    [
        ({"debias": "none", "propensity": None, "propensity_clip": None}, {"debias": "none"}),
        ({"debias": "lightgbm"}, {"debias": "pal"}),
        (
            {"debias": "ips", "propensity": 0.5, "propensity_clip": None},
            {"debias": "ips", "propensity_eta": 0.5, "propensity_clip": None},
        ),
        (
            {"debias": "ips", "propensity": [1.0, 0.5], "propensity_clip": 10.0},
            {"debias": "ips", "propensity": (1.0, 0.5), "propensity_clip": 10.0},
        ),
    ],
)
def test_a_model_saved_with_debias_in_model_params_still_loads(tmp_path, old, train):
    """A LambdaMART directory saved when ``debias`` / ``propensity*`` were model_params: its run config
    reads them as ``train.debias`` and its propensities; the model, its estimator and its server load."""
    from ctxrank.api import load
    from tests import saved_models

    log, _ = _pbm_log(13, n_sessions=20)
    result = run_training(_lambdamart_run("none"), log, log)
    save_result(result, tmp_path / "m", write_log=False)
    meta = saved_models.read(tmp_path / "m")
    saved = meta["run_config"]
    saved["model_params"].update(old)
    saved["train"] = {k: v for k, v in saved["train"].items() if k not in DEBIAS_TRAIN_KEYS}
    saved_models.write(tmp_path / "m", meta)
    config = RunConfig.from_saved(saved)
    assert {k: getattr(config.train, k) for k in train} == train
    assert not set(config.model_params) & {"debias", "propensity", "propensity_clip"}
    np.testing.assert_array_equal(load_model(tmp_path / "m").predict(log), result.predictor.predict(log))
    assert load(tmp_path / "m").get_params()["debias"] == train["debias"]
    assert DirectoryRanker(tmp_path / "m").n_features == 5


def test_a_pipelines_initial_lambdamart_keeps_its_debias_through_saving(tmp_path):
    """The initial ranker's ``debias`` (an estimator parameter, ``train.debias``) reaches the class as
    ``rerank.initial_params``, and a loaded pipeline's initial estimator has it back."""
    from ctxrank.api import MLPRanker, RerankPipeline, load
    from tests import saved_models

    log, _ = _pbm_log(14, n_sessions=30)
    qid = np.repeat(log.query_ids, log.query_lengths)
    initial = LambdaMARTRanker(debias="pal", n_estimators=5, min_data_in_leaf=5)
    pipe = RerankPipeline(initial=initial, reranker=MLPRanker(max_epochs=1, hidden=[4]), top_k=5)
    assert pipe.run_config().rerank.initial_params["debias"] == "lightgbm"
    with warnings.catch_warnings():  # one epoch: the re-ranker may do worse than its initial ranker
        warnings.simplefilter("ignore")
        pipe.fit(log.features, log.labels, qid=qid, position=log.shown_positions)
    pipe.save(tmp_path / "pipe")
    assert load(tmp_path / "pipe").initial.get_params()["debias"] == "pal"
    # saved before: every argument of the class in initial_params, None included
    meta = saved_models.read(tmp_path / "pipe")
    meta["run_config"]["rerank"]["initial_params"].update(propensity=None, propensity_clip=None)
    saved_models.write(tmp_path / "pipe", meta)
    assert load(tmp_path / "pipe").initial.get_params()["debias"] == "pal"


# ------------------------------------------------------------------------ validating on a click log

STOPPING = {**TREES, "n_estimators": 40, "early_stopping_rounds": 8}


@pytest.fixture(scope="module")
def logs():
    """A training and a validation PBM log, and the validation log's true labels."""
    log, _ = _pbm_log(0, n_sessions=300)
    valid, valid_truth = _pbm_log(1, n_sessions=150)
    return log, valid, valid_truth


def test_ips_debiased_lambdamart_selects_its_iteration_by_the_ips_estimate(logs):
    """Early stopping and the kept iteration follow the IPS estimate of DCG@10 (the feval), never the
    clicks' NDCG (which LightGBM does not even compute)."""
    from ctxrank.clicks.validation import log_objective

    log, valid, _ = logs
    objective = log_objective("ndcg@10", valid, debias="ips", propensity_eta=1.0, clip=50.0)
    model = LambdaMART(**STOPPING, debias="ips", propensity=1.0, propensity_clip=50.0)
    model.fit(log, valid, valid_objective=objective)
    assert list(model.evals_result_["valid"]) == ["ips_dcg@10"]
    curve = model.evals_result_["valid"]["ips_dcg@10"]
    assert model.best_iteration_ == int(np.argmax(curve)) + 1 > 1
    assert model.best_score_ == max(curve)
    assert model.best_score_ == pytest.approx(objective.value(valid, model.predict(valid)), rel=1e-12)
    assert model.training_summary()["validation"] == (
        "IPS estimate of DCG@10 on a click log (propensities (1/k)^1, weights clipped at 50)"
    )
    assert model.training_summary()["validation_metric"] == objective.name == "IPS estimate of DCG@10"


def _run(debias, **train):
    return RunConfig(model="lambdamart", model_params=STOPPING, train=TrainConfig(debias=debias, **train))


def test_a_run_with_train_debias_ips_stops_on_the_ips_estimate_and_records_it(logs):
    log, valid, _ = logs
    result = run_training(_run("ips", propensity_eta=1.0), log, valid)
    curve = result.predictor.evals_result_["valid"]["ips_dcg@10"]
    assert result.summary.best_iteration == int(np.argmax(curve)) + 1
    assert result.summary.best_valid_metric == max(curve)
    assert result.summary.validation.startswith("IPS estimate of DCG@10 on a click log (propensities (1/k)^1")
    assert result.summary.validation_metric == "IPS estimate of DCG@10"


def test_ips_validation_propensities_must_cover_the_validation_positions(logs):
    log, valid, _ = logs
    train = dataclasses.replace(log, shown_positions=np.minimum(log.shown_positions, 3))
    with pytest.raises(
        ValueError, match="propensity gives 3 positions, but the log shows items at positions up"
    ):
        run_training(_run("ips", propensity=(1.0, 0.5, 0.3)), train, valid)


@pytest.mark.parametrize(
    ("debias", "why"),
    [
        ({"debias": "lightgbm"}, "LightGBM's position debiasing estimates no propensities"),
        ({"debias": "ips", "propensity": 1.0}, r"no valid_objective \(the IPS estimate"),
    ],
)
def test_a_debiased_fit_never_stops_on_the_clicks_of_a_validation_log(logs, debias, why):
    """No estimate to stop by: every tree is kept, with a warning, instead of stopping where the clicks'
    NDCG (which rewards the logging order) peaks."""
    log, valid, _ = logs
    with pytest.warns(
        LogValidationWarning,
        match=f"early_stopping_rounds is not applied: the validation split is a click log and {why}",
    ):
        model = LambdaMART(**STOPPING, **debias).fit(log, valid)
    clicks = model.evals_result_["valid"]["ndcg@10"]
    assert len(clicks) == model.best_iteration_ == STOPPING["n_estimators"]
    assert int(np.argmax(clicks)) + 1 < STOPPING["n_estimators"]  # where the clicks would have selected
    summary = model.training_summary()
    assert summary["validation"].startswith(
        "ndcg@10 of the clicks of a log (naive: biased by the shown positions), recorded only"
    )
    assert summary["validation_metric"] == "ndcg@10 of the clicks of a log"
    assert summary["warnings"][0].startswith("early_stopping_rounds is not applied")


def test_a_pal_run_keeps_every_tree_and_says_why(logs):
    log, valid, _ = logs
    with pytest.warns(LogValidationWarning, match="LightGBM's position debiasing estimates no propensities"):
        result = run_training(_run("pal"), log, valid)
    assert result.summary.best_iteration == STOPPING["n_estimators"]
    assert "recorded only: LightGBM's position debiasing" in result.summary.validation
    assert any("early_stopping_rounds is not applied" in w for w in result.summary.warnings)


@pytest.mark.parametrize("api", [True, False])
def test_naive_lambdamart_on_a_validation_log_is_recorded_as_naive(logs, api):
    log, valid, _ = logs
    if api:
        model = LambdaMART(**STOPPING).fit(log, valid)
        summary = model.training_summary()
    else:
        result = run_training(_run("none"), log, valid)
        model, summary = result.predictor, result.summary.to_json()
    curve = model.evals_result_["valid"]["ndcg@10"]
    assert model.best_iteration_ == int(np.argmax(curve)) + 1 < STOPPING["n_estimators"]
    assert summary["validation"] == "ndcg@10 of the clicks of a log (naive: biased by the shown positions)"


def test_labelled_validation_records_no_log_objective(logs):
    from ctxrank.clicks.validation import log_objective

    log, valid, valid_truth = logs
    summary = LambdaMART(**STOPPING).fit(valid_truth, valid_truth).training_summary()
    assert set(summary) == {"best_iteration", "metric", "best_valid_metric"}
    objective = log_objective("ndcg@10", valid, debias="ips", propensity_eta=1.0)
    with pytest.raises(ValueError, match="valid_objective applies to a validation split that is a click log"):
        LambdaMART(**STOPPING).fit(log, valid_truth, valid_objective=objective)


def test_tuning_lambdamart_with_pal_on_a_log_is_refused_before_the_study(logs, tmp_path):
    """No propensities to score a trial by: never a study labelled as an estimate but run on raw clicks."""
    from ctxrank.tune import tune

    log, valid, _ = logs
    base = {"model": "lambdamart", "model_params": STOPPING, "train": {"debias": "pal"}}
    with pytest.raises(
        ValueError, match=r"tune lambdamart on a click log with train\.debias = 'pal': LightGBM's"
    ):
        tune(base, log, valid, out=tmp_path / "t", trials=1)
    assert not (tmp_path / "t" / "study.db").exists()
