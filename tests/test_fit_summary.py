"""The typed fit summary: every kind of fit produces one, read by attributes, written as the JSON the
result files have always held (same keys, same order), and older records load."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from ctxrank._io import dumps
from ctxrank.config import resolve_config
from ctxrank.fit_summary import FitSummary, TrainMetric
from ctxrank.training.run import run_training
from tests.conftest import make_ranking_data
from tests.models.test_mnl import choice_data

EVIDENCE = Path(__file__).resolve().parents[1] / "evidence"


def _stored_summaries() -> dict[tuple[str, ...], dict]:
    """One stored run summary of every key layout in the repository's evidence (members included)."""
    found: dict[tuple[str, ...], dict] = {}
    for path in sorted(EVIDENCE.glob("*/runs.json.gz")):
        records = json.loads(gzip.decompress(path.read_bytes()))
        for record in records.values() if isinstance(records, dict) else records:
            summary = record.get("summary") if isinstance(record, dict) else None
            for s in [summary, *((summary or {}).get("members") or ())]:
                if s:
                    found.setdefault(tuple(s), s)
    return found


def test_every_stored_summary_reads_and_writes_back_key_for_key_in_order():
    stored = _stored_summaries()
    assert len(stored) >= 6  # epochs, re-ranking, full-batch, LambdaMART, RankSVM, AdaRank, ensembles
    for keys, record in stored.items():
        written = FitSummary.from_json(record).to_json()
        # every stored key comes back, with its value, in its order; a record of an earlier version
        # gains only the keys added since as null (the full-batch fit's l2_grid_edge)
        assert [(k, v) for k, v in written.items() if k in record] == list(record.items()), keys
        added = {k: v for k, v in written.items() if k not in record}
        if "validation" in record and "validation_metric" not in record:  # read once from validation
            assert added.pop("validation_metric") == FitSummary.from_json(record).validation_metric, keys
        assert added in ({}, {"l2_grid_edge": None}), keys


def test_an_unknown_key_of_another_version_is_kept_and_a_non_object_is_refused():
    summary = FitSummary.from_json({"best_epoch": 2, "metric": "ndcg@10", "from_the_future": [1]})
    assert summary.best_epoch == 2 and summary.extra == {"from_the_future": [1]}
    assert summary.to_json()["from_the_future"] == [1]
    with pytest.raises(TypeError, match="a fit summary is a JSON object, got list"):
        FitSummary.from_json([1, 2])


@pytest.mark.parametrize(
    ("validation", "metric"),
    [
        (
            "IPS estimate of DCG@10 on a click log (propensities (1/k)^1, weights clipped at 100)",
            "IPS estimate of DCG@10",
        ),
        (
            "ndcg@10 of the clicks of a log (naive: biased by the shown positions)",
            "ndcg@10 of the clicks of a log",
        ),
        (
            "ndcg@10 of the clicks of a log (naive: biased by the shown positions), recorded only: "
            "LightGBM's position debiasing estimates no propensities to validate by; no early stopping, "
            "every tree kept",
            "ndcg@10 of the clicks of a log",
        ),
    ],
)
def test_a_log_record_of_an_earlier_version_gets_its_validation_metric_when_read(validation, metric):
    old = {"best_iteration": 7, "metric": "ndcg@10", "best_valid_metric": 1.5, "validation": validation}
    summary = FitSummary.from_json(old)
    assert summary.validation_metric == summary.valid_metric_name == metric
    assert summary.to_json() == {**old, "validation_metric": metric}
    assert FitSummary.from_json(summary.to_json()) == summary


def test_the_validation_metric_is_a_field_never_read_back_from_the_validation_text():
    record = {"best_epoch": 1, "validation": "estimated (details), more", "validation_metric": "DCG@3 by IPS"}
    assert FitSummary.from_json(record).validation_metric == "DCG@3 by IPS"  # read as written
    assert FitSummary(best_epoch=1, metric="ndcg@10").valid_metric_name == "ndcg@10"  # labelled data
    with pytest.raises(ValueError, match="gives validation and validation_metric together"):
        FitSummary(best_epoch=1, metric="ndcg@10", validation="IPS estimate of DCG@10 on a click log")


def test_a_neural_rerankers_comparison_warning_follows_its_comparison():
    s = FitSummary(best_epoch=1, best_valid_metric=0.4, metric="ndcg@10", epochs_run=2, stopped_early=False,
                   seconds=1.0, batching="buckets", initial_valid_metric=0.5, model_config={})  # fmt: skip
    keys = list(s.with_warnings(["worse than the initial ranker"]).to_json())
    assert keys[-3:] == ["initial_valid_metric", "warnings", "model_config"]
    assert "warnings" not in s.to_json()  # none recorded: no key


#: each kind of fit, its fast settings and the field only its kind has
KINDS = {
    "mlp": (["train.max_epochs=2"], "epochs_run"),
    "lambdamart": (["model_params.n_estimators=5"], "best_iteration"),
    "ranksvm": (["model_params.C=[1.0]"], "C"),
    "adarank-map": (["model_params.n_rounds=3"], "best_round"),
    "mnl": ([], "log_likelihood"),
}


@pytest.mark.parametrize("model", sorted(KINDS))
def test_every_fit_returns_a_typed_summary_that_the_model_directory_records(model, tmp_path):
    overrides, own_field = KINDS[model]
    if model == "mnl":
        train, valid = choice_data(60, seed=0), choice_data(30, seed=1)
    else:
        train, valid = make_ranking_data(12, seed=0), make_ranking_data(8, seed=1)
    config = resolve_config(None, [f"model={model}", "train.seed=0", *overrides])
    result = run_training(config, train, valid, out=tmp_path / "m", progress=False)
    s = result.summary
    assert isinstance(s, FitSummary) and s.metric and s.seconds > 0
    assert getattr(s, own_field) is not None
    if model in ("lambdamart", "ranksvm", "adarank-map"):
        assert isinstance(s.train_metric, TrainMetric) and s.train_metric.name == config.train.metric
    saved = json.loads((tmp_path / "m" / "ctxrank.json").read_text())["training"]
    assert saved == json.loads(dumps(s.to_json()))
    assert FitSummary.from_json(saved).best_step == s.best_step
