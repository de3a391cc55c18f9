"""Validating on a click log: early stopping and tuning maximise the IPS estimate of DCG@k, not the
clicks' metric, and say so; labelled validation is unchanged."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from ctxrank.clicks.click_models import PositionBasedModel
from ctxrank.clicks.offline import offline_estimates
from ctxrank.clicks.propensity import Propensities
from ctxrank.clicks.simulate import simulate_clicks
from ctxrank.clicks.towers import Debias
from ctxrank.clicks.validation import log_objective
from ctxrank.clicks.weighting import DEBIAS, TOWER_METHODS
from ctxrank.config import RerankConfig, RunConfig, TrainConfig
from ctxrank.data.ranking_data import RankingData
from ctxrank.losses import get_loss
from ctxrank.metrics import evaluate_queries
from ctxrank.registry import make_model
from ctxrank.training.loop import fit, seed_everything
from ctxrank.training.predict import predict
from ctxrank.training.run import run_training
from ctxrank.tune import tune

K = 6  # items shown per session
# two epochs of a tiny fit are under-trained on purpose
pytestmark = pytest.mark.filterwarnings("ignore::ctxrank.training.diagnostics.TrainingWarning")


def labelled(seed: int = 0, n_queries: int = 12, per_query: int = 8) -> RankingData:
    """Labels 0..2 from feature 0; feature 1 (what the logging ranker sorts by) is unrelated to them."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_queries * per_query, 3)).astype(np.float32)
    labels = np.digitize(X[:, 0], [0.0, 0.8]).astype(np.float32)
    return RankingData.from_arrays(X, labels, np.repeat(np.arange(n_queries), per_query))


def pbm_log(sessions: int, seed: int, eta: float = 1.0, eps_minus: float = 0.1):
    """A seeded position-based-model log of the logging ranker that sorts by feature 1."""
    data = labelled()
    model = PositionBasedModel(eta=eta, eps_minus=eps_minus)
    return simulate_clicks(data, data.features[:, 1], model, sessions=sessions, top_k=K, seed=seed)


def train_config(**kw) -> TrainConfig:
    return TrainConfig(
        **{
            "batch_size": 16,
            "max_epochs": 2,
            "patience": 2,
            "lr": 0.05,
            "threads": 1,
            "metric": "ndcg@4",
            **kw,
        }
    )


def fitted(train: RankingData, valid: RankingData, **kw):
    seed_everything(0)
    model = make_model("listnet", train.n_features)
    result = fit(model, get_loss("listnet"), train, valid, train_config(**kw), progress=False)
    return model, result


def test_the_objective_is_offline_estimates_ips_point_estimate_of_dcg():
    log = pbm_log(300, seed=1).log
    scores = np.random.default_rng(2).normal(size=log.n_items)
    objective = log_objective("ndcg@4", log, debias="ips", propensity_eta=1.0, clip=None)
    expected = offline_estimates(log, scores, Propensities.pbm(1.0, K), metric="dcg", k=4, n_resamples=2)
    assert objective.value(log, scores) == pytest.approx(expected["ips"].value, rel=1e-12)
    assert objective.describe() == "IPS estimate of DCG@4 on a click log (propensities (1/k)^1, unclipped)"
    # train.propensity is read relative to position 1, as the estimators take it
    given = log_objective("dcg@4", log, debias="ips", propensity=tuple(0.5 / np.arange(1, K + 1)), clip=None)
    assert given.value(log, scores) == pytest.approx(expected["ips"].value, rel=1e-12)


def test_ips_prefers_the_relevant_ranker_where_the_clicks_prefer_the_logging_order():
    """A constructed case: strong position bias and click noise. Selecting on the clicks' NDCG picks the
    ranker that copies the logging order; the IPS objective picks the ranker of the true relevance, as
    the true DCG does."""
    made = pbm_log(600, seed=3, eta=2.0, eps_minus=0.3)
    log, truth = made.log, made.true_labels
    copies_logger = -log.shown_positions.astype(np.float64)
    relevant = truth + 1e-3 * copies_logger  # the true order, ties by the logger's
    objective = log_objective("ndcg@3", log, debias="ips", propensity_eta=2.0, clip=None)

    def clicks_ndcg(scores):
        return np.nanmean(evaluate_queries(scores, log.labels, log.query_offsets, ["ndcg@3"])["ndcg@3"])

    def true_dcg(scores):
        skyline = made.skyline()
        return np.nanmean(evaluate_queries(scores, skyline.labels, skyline.query_offsets, ["dcg@3"])["dcg@3"])

    assert clicks_ndcg(copies_logger) > clicks_ndcg(relevant)
    assert objective.value(log, relevant) > objective.value(log, copies_logger)
    assert true_dcg(relevant) > true_dcg(copies_logger)


def test_early_stopping_on_a_log_maximises_the_ips_estimate_and_the_summary_says_so():
    train, valid = pbm_log(200, seed=4).log, pbm_log(120, seed=5).log
    model, result = fitted(train, valid, debias="ips", propensity_eta=1.0, propensity_clip=50.0)
    objective = log_objective("ndcg@4", valid, debias="ips", propensity_eta=1.0, clip=50.0)
    # the selected epoch's value is the IPS estimate of the restored model's scores
    assert result.best_metric == pytest.approx(objective.value(valid, predict(model, valid)), rel=1e-5)
    summary = result.summary()
    assert (
        summary.validation
        == "IPS estimate of DCG@4 on a click log (propensities (1/k)^1, weights clipped at 50)"
    )
    assert summary.to_json()["validation"] == summary.validation
    assert summary.validation_metric == summary.to_json()["validation_metric"] == "IPS estimate of DCG@4"
    assert summary.metric == "ndcg@4"  # the run's metric, which the IPS estimate stands for


def test_a_naive_run_on_a_log_selects_on_the_clicks_and_says_it_is_naive():
    train, valid = pbm_log(200, seed=4).log, pbm_log(120, seed=5).log
    model, result = fitted(train, valid)
    per = evaluate_queries(predict(model, valid), valid.labels, valid.query_offsets, ["ndcg@4"])["ndcg@4"]
    assert result.best_metric == pytest.approx(float(np.nanmean(per)), rel=1e-6)
    assert (
        result.summary().validation == "ndcg@4 of the clicks of a log (naive: biased by the shown positions)"
    )
    assert result.summary().validation_metric == "ndcg@4 of the clicks of a log"


@pytest.mark.parametrize("debias", ["dla", "pal"])
def test_a_learned_position_tower_gives_the_propensities_of_the_estimate(debias):
    train, valid = pbm_log(200, seed=4).log, pbm_log(120, seed=5).log
    _, result = fitted(train, valid, debias=debias, max_epochs=1)
    assert result.summary().validation == (
        f"IPS estimate of DCG@4 on a click log (propensities learned by the {debias} position tower, "
        "weights clipped at 100)"
    )
    assert np.isfinite(result.best_metric)
    # the estimate differs from the naive metric of the clicks
    assert result.best_metric != pytest.approx(fitted(train, valid, max_epochs=1)[1].best_metric)


def test_labelled_validation_is_unchanged_and_its_summary_has_no_validation_key():
    data = labelled()
    _, result = fitted(data, data)
    summary = result.summary().to_json()
    assert "validation" not in summary
    assert [key for key in summary if key != "warnings"] == [
        "best_epoch",
        "best_valid_metric",
        "metric",
        "epochs_run",
        "stopped_early",
        "seconds",
        "resumed_from_epoch",
        "batching",
    ]


def test_what_a_log_cannot_estimate_is_refused_before_training():
    train, valid = pbm_log(60, seed=4).log, pbm_log(30, seed=5).log
    with pytest.raises(ValueError, match=r"train.metric = 'map': on a click log .* IPS estimate of DCG@k"):
        fitted(train, valid, debias="ips", propensity_eta=1.0, metric="map")
    shallow = RankingData.from_arrays(
        train.features, train.labels, train.query_index, position=np.minimum(train.shown_positions, 3)
    )
    # the same log with its positions cut to 1..3: the tower learns 3 propensities
    with pytest.raises(ValueError, match="validation log shows items at positions up to 6, beyond the 3"):
        fitted(shallow, valid, debias="dla")
    with pytest.raises(ValueError, match=r"train\.propensity gives 3 positions, but the log shows items at"):
        fitted(train, valid, debias="ips", propensity=(1.0, 0.5, 0.3))


def test_tune_on_a_log_maximises_and_records_the_ips_estimate(tmp_path):
    train, valid = pbm_log(120, seed=4).log, pbm_log(60, seed=5).log
    base = {
        "model": "listnet",
        "transform": "none",
        "train": {"max_epochs": 1, "metric": "ndcg@4", "debias": "ips", "propensity_eta": 1.0},
    }
    said = []
    result = tune(base, train, valid, out=tmp_path / "t", trials=1, prune=False, log=said.append)
    # the trial's value is named as the estimate it is, never as the run's ndcg@4
    assert any("trial 0: valid IPS estimate of DCG@4 " in line for line in said), said
    assert "valid IPS estimate of DCG@4" in result.table and "ndcg@4" not in result.table
    assert "valid IPS estimate of DCG@4 " in (tmp_path / "t" / "best.toml").read_text()
    described = "IPS estimate of DCG@4 on a click log (propensities (1/k)^1, weights clipped at 100)"
    report = json.loads((tmp_path / "t" / "tune.json").read_text())
    assert report["validation"] == described
    assert result.study.user_attrs["ctxrank"]["validation"] == described
    (trial,) = result.study.trials
    assert trial.user_attrs["summary"]["validation"] == described
    # the trial's value is the IPS estimate of its model's scores (retrained: the same seed, the same model)
    again = run_training(result.best, train, valid, None, progress=False).predictor.predict(valid)
    objective = log_objective("ndcg@4", valid, debias="ips", propensity_eta=1.0, clip=100.0)
    assert trial.value == pytest.approx(objective.value(valid, again), rel=1e-6)
    assert f"# Validation: {described}." in (tmp_path / "t" / "best.toml").read_text()


def test_a_residual_reranker_is_compared_with_its_initial_ranker_on_the_same_estimate():
    train, valid = pbm_log(120, seed=4).log, pbm_log(60, seed=5).log
    config = RunConfig(
        model="mlp",
        model_params={"hidden": [8]},
        train=TrainConfig(max_epochs=1, metric="ndcg@4", debias="ips", propensity_eta=1.0, threads=1),
        rerank=RerankConfig(
            initial="lambdamart", residual=True, top_k=K, initial_params={"n_estimators": 5, "num_threads": 1}
        ),
    )
    result = run_training(config, train, valid, None, progress=False)
    split = result.predictor.prepare(valid)
    objective = log_objective("ndcg@4", valid, debias="ips", propensity_eta=1.0, clip=100.0)
    initial = objective.value(split.top, split.top_initial_scores)
    assert result.summary.initial_valid_metric == pytest.approx(initial, rel=1e-9)
    assert result.summary.residual["initial_valid_metric"] == pytest.approx(initial, rel=1e-9)


def test_a_seed_ensemble_on_a_log_is_validated_by_the_estimate_of_its_mean_scores(tmp_path):
    train, valid = pbm_log(120, seed=4).log, pbm_log(60, seed=5).log
    tc = {"max_epochs": 1, "metric": "ndcg@4", "threads": 1}
    ips = RunConfig(model="listnet", ensemble=2, train=TrainConfig(**tc, debias="ips", propensity_eta=1.0))
    result = run_training(ips, train, valid, None, progress=False)
    objective = log_objective("ndcg@4", valid, debias="ips", propensity_eta=1.0, clip=100.0)
    summary = result.summary
    assert summary.best_valid_metric == pytest.approx(objective.value(valid, result.predictor.predict(valid)))
    assert summary.validation == objective.describe() == summary.members[0].validation
    # members' towers give no one set of propensities: the ensemble's value is the clicks' metric, said so
    dla = RunConfig(model="listnet", ensemble=2, train=TrainConfig(**tc, debias="dla"))
    assert run_training(dla, train, valid, None, progress=False).summary.validation == (
        "ndcg@4 of the clicks of a log (naive: biased by the shown positions)"
    )
    with pytest.raises(ValueError, match=r"seed ensemble \(ensemble = 2\) has one per member"):
        tune(
            {"model": "listnet", "ensemble": 2, "train": {**tc, "debias": "dla"}},
            train,
            valid,
            out=tmp_path / "t",
            trials=1,
        )
    assert not (tmp_path / "t" / "study.db").exists()  # refused before the study


def test_the_methods_with_a_position_tower_are_one_list_for_training_and_validation():
    valid = pbm_log(20, seed=5).log
    for method in DEBIAS[1:]:
        ips = method == "ips"
        tower = Debias(method, K, propensity=torch.ones(K) if ips else None).tower
        eta = 1.0 if ips else None
        objective = log_objective("ndcg@4", valid, debias=method, propensity_eta=eta, learned_positions=K)
        assert (tower is not None) == (method in TOWER_METHODS) == objective.learned, method
