"""train.propensity = "estimate:METHOD": propensities estimated from the training log before training,
used by the IPS weights and the validation estimate, recorded in the summary and saved with the model."""

import dataclasses
import json

import numpy as np
import pytest

from ctxrank.api import LambdaMARTRanker
from ctxrank.clicks.click_models import PositionBasedModel
from ctxrank.clicks.estimate import estimate_propensities, training_curve
from ctxrank.clicks.propensity import Propensities
from ctxrank.clicks.simulate import simulate_clicks
from ctxrank.clicks.validation import log_objective
from ctxrank.config import PROPENSITIES, RunConfig, TrainConfig, read_propensity_file
from ctxrank.experiments import load_spec
from ctxrank.training.checkpoint import load_model
from ctxrank.training.run import run_training
from ctxrank.tune import tune
from tests.clicks.test_propensity import simulate_pbm
from tests.clicks.test_validation import K, labelled
from tests.experiments.test_clicks_spec import CLICKS, MODELS, _spec

# the tiny fits are under-trained on purpose
pytestmark = pytest.mark.filterwarnings("ignore::ctxrank.training.diagnostics.TrainingWarning")


def _ips(propensity, **train):
    return TrainConfig(debias="ips", propensity=propensity, **train)


@pytest.fixture
def few_resamples(monkeypatch):
    """Runs estimate with 5 bootstrap resamples (each an EM run for regression-EM): the plumbing, fast."""
    import ctxrank.clicks.estimate as module

    real = module.estimate_propensities
    monkeypatch.setattr(module, "estimate_propensities", lambda *a, **kw: real(*a, **kw, n_resamples=5))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"propensity": "estimate:em"}, r"one of \['estimate:randomized', 'estimate:regression-em'\]"),
        ({"propensity": "estimate:harvesting"}, r"harvesting needs each session's logging ranker"),
        ({"propensity": "estimate:regression-em", "propensity_eta": 1.0}, r"not both"),
        ({"propensity": "estimate:randomized", "debias": "dla"}, r"propensities of train.debias = 'ips'"),
    ],
    ids=["unknown", "harvesting", "with-eta", "not-ips"],
)
def test_the_option_refuses_what_it_cannot_estimate(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**{"debias": "ips", **kwargs})


def test_the_option_is_kept_as_given_by_every_entrance():
    assert PROPENSITIES("estimate:regression-em") == "estimate:regression-em"  # --propensity
    with pytest.raises(ValueError, match="expected one of"):
        PROPENSITIES("estimate:em")
    config = RunConfig(model="mlp", train=_ips("estimate:randomized"))
    assert config.to_dict()["train"]["propensity"] == "estimate:randomized"
    assert RunConfig.from_dict(config.to_dict()).train.propensity == "estimate:randomized"
    over = RunConfig(model="lambdamart").with_overrides(
        [("train.debias", "ips"), ("train.propensity", "estimate:regression-em")]
    )
    assert over.train.propensity == "estimate:regression-em"  # LambdaMART's early check takes it


def test_randomized_and_regression_em_recover_the_curve_of_a_tiny_log():
    truth = 1.0 / np.arange(1, 7)
    shuffled, _ = simulate_pbm(n_sessions=3000, n_items=6, randomize="shuffle", seed=3)
    rand = estimate_propensities(shuffled, "randomized", seed=0)
    assert rand.method == "randomized" and rand.sessions == 3000
    assert ((np.array(rand.lower) <= truth) & (truth <= np.array(rand.upper))).all(), rand
    plain, _ = simulate_pbm(n_sessions=600, n_items=6, n_rankers=3, seed=2)
    em = estimate_propensities(plain, "regression-em", seed=0, n_resamples=5)  # no randomisation needed
    assert em.method == "regression_em" and np.abs(np.array(em.values) - truth).max() < 0.12, em.values


def test_randomized_refuses_a_simulated_log_that_was_not_shuffled_whole():
    log, _ = simulate_pbm(n_sessions=50, n_items=6, seed=3)
    for settings, message in [
        ({"randomize": "none", "shuffle_n": None}, r"simulated with randomize = 'none'"),
        ({"randomize": "swap", "shuffle_n": None}, r"does not say which row it was"),
        ({"randomize": "shuffle_top", "shuffle_n": 4}, r"top 4 only .* positions up to 6"),
    ]:
        simulated = dataclasses.replace(log, info={"simulation": settings})
        with pytest.raises(ValueError, match=message):
            estimate_propensities(simulated, "randomized", seed=0)
    labelled = dataclasses.replace(log, shown_positions=None)
    with pytest.raises(ValueError, match="need the shown position"):
        estimate_propensities(labelled, "regression-em", seed=0)


def test_training_curve_caps_at_one_and_floors_at_the_clip():
    made = Propensities((1.0, 1.2, 0.0), (1.0, 0.9, 0.0), (1.0, 1.5, 0.1), "randomized", 10)
    assert training_curve(made, 10.0) == (1.0, 1.0, 0.1)
    with pytest.raises(ValueError, match="position 3 is 0"):
        training_curve(made, None)


def test_a_run_trains_on_the_estimate_records_it_and_saves_it(tmp_path, few_resamples):
    log, _ = simulate_pbm(n_sessions=300, n_items=6, n_rankers=3, seed=5)
    train, valid = log.subset(np.arange(240)), log.subset(np.arange(240, 300))
    tc = {"max_epochs": 2, "batch_size": 32, "metric": "dcg@5"}
    estimated = RunConfig(model="mlp", train=_ips("estimate:regression-em", **tc))
    result = run_training(estimated, train, valid, out=tmp_path / "m", progress=False)
    made = Propensities.from_json(json.dumps(result.summary.propensity))
    assert made.method == "regression_em" and made.sessions == 240
    # the fit read the estimated curve: the same run given its values scores the same
    curve = training_curve(made, estimated.train.propensity_clip)
    given = RunConfig(model="mlp", train=_ips(curve, **tc))
    again = run_training(given, train, valid, progress=False)
    np.testing.assert_allclose(result.predictor.predict(valid), again.predictor.predict(valid), rtol=1e-6)
    assert result.summary.best_valid_metric == pytest.approx(again.summary.best_valid_metric)
    # saved: the config as given, the estimate as a propensities file that train.propensity reads
    meta = json.loads((tmp_path / "m" / "ctxrank.json").read_text())
    assert meta["run_config"]["train"]["propensity"] == "estimate:regression-em"
    assert meta["training"]["propensity"] == result.summary.propensity
    assert read_propensity_file(str(tmp_path / "m" / "propensity.json")) == made.values
    np.testing.assert_allclose(load_model(tmp_path / "m").predict(valid), result.predictor.predict(valid))


def test_lambdamart_estimator_estimates_from_its_log(tmp_path, few_resamples):
    log, _ = simulate_pbm(n_sessions=300, n_items=6, n_rankers=3, seed=6)
    est = LambdaMARTRanker(n_estimators=3, debias="ips", propensity="estimate:regression-em")
    est.fit(log.features, log.labels, qid=log.query_index, position=log.shown_positions)
    est.save(tmp_path / "lm")
    saved = Propensities.from_json((tmp_path / "lm" / "propensity.json").read_text())
    assert saved.method == "regression_em" and saved.n_positions == 6


def test_tune_scores_every_trial_by_the_estimate_of_the_training_log(tmp_path):
    data = labelled()
    model = PositionBasedModel(eta=1.0, eps_minus=0.1)

    def shuffled(sessions, seed):
        return simulate_clicks(
            data, data.features[:, 1], model, sessions=sessions, top_k=K, randomize="shuffle_top",
            shuffle_n=K, seed=seed,
        ).log  # fmt: skip

    train, valid = shuffled(400, 4), shuffled(60, 5)
    tc = {"max_epochs": 1, "metric": "ndcg@4", "debias": "ips", "propensity": "estimate:randomized"}
    result = tune({"model": "listnet", "transform": "none", "train": tc}, train, valid, out=tmp_path / "t",
                  trials=1, prune=False)  # fmt: skip
    (trial,) = result.study.trials
    curve = training_curve(estimate_propensities(train, "randomized", seed=0), 100.0)
    objective = log_objective("ndcg@4", valid, debias="ips", propensity=curve, clip=100.0)
    again = run_training(result.best, train, valid, None, progress=False).predictor.predict(valid)
    assert trial.value == pytest.approx(objective.value(valid, again), rel=1e-6)


@pytest.mark.parametrize(
    ("clicks", "refused"),
    [
        ("", True),
        ('randomize = "shuffle_top"\nshuffle_n = 4', True),
        ('randomize = "shuffle_top"\nshuffle_n = 6', False),
    ],
    ids=["not-randomised", "top-4-of-6", "shuffled-whole"],
)
def test_a_spec_refuses_estimate_randomized_on_a_log_not_shuffled_whole(tmp_path, clicks, refused):
    MODELS["mlp-est"] = 'model = "mlp"\ntrain = { debias = "ips", propensity = "estimate:randomized" }'
    try:
        path = _spec(tmp_path, clicks=CLICKS + clicks)
        if refused:
            with pytest.raises(ValueError, match=r"\[models.mlp-est\] .*shuffle_n >= top_k = 6"):
                load_spec(str(path))
        else:
            assert load_spec(str(path)).run_config("mlp-est", 0).train.propensity == "estimate:randomized"
    finally:
        del MODELS["mlp-est"]
