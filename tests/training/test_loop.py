"""fit / predict / checkpoints: learning, early stopping, determinism, safe loading."""

import functools
import json
import pickle

import numpy as np
import pytest
import torch

from ctxrank.config import RunConfig, TrainConfig, resolve_config
from ctxrank.data.transforms import make_transform
from ctxrank.losses import get_loss
from ctxrank.metrics import evaluate_queries, mean_metrics
from ctxrank.registry import MODELS, make_model
from ctxrank.training.checkpoint import load_model, save_checkpoint
from ctxrank.training.loop import NonFiniteLossError, fit, seed_everything
from ctxrank.training.predict import predict
from tests import saved_models as sm
from tests.conftest import make_ranking_data

# every neural model of the registry (the baselines are trained in test_baselines)
NEURAL = sorted(name for name in MODELS if MODELS[name].traits.torch_module)
FAST = {"batch_size": 16, "max_epochs": 8, "patience": 3, "lr": 0.01, "threads": 1}
# small widths so that every registered model trains in a second or two
SMALL_PARAMS = {
    "dlcm": {"encoder_widths": [16, 16]},
    "arsm": {"hidden": [16], "n_levels": 5},
    "dcm": {"hidden": 16, "embed": 8},
    "mnl": {},
    "attn": {"d_fc": 16, "heads": 2, "d_ff": 32, "blocks": 2},
    "setrank": {"d_model": 16, "heads": 2, "d_ff": 32, "blocks": 2},
    **{
        name: {"encoder_width": 8, "att_hidden": [16], "rank_hidden": [16]}
        for name in NEURAL
        if name.startswith("qilcm")
    },
}


@pytest.fixture(scope="module")
def splits():
    return make_ranking_data(80, seed=1), make_ranking_data(30, seed=2), make_ranking_data(30, seed=3)


def _ndcg(model, data):
    return mean_metrics(evaluate_queries(predict(model, data), data.labels, data.query_offsets, ["ndcg@10"]))[
        "ndcg@10"
    ]


def _train(splits, seed=0, model="listnet", **train):
    tr, va, _ = splits
    seed_everything(seed)
    m = make_model(model, tr.n_features, SMALL_PARAMS.get(model))
    cfg = TrainConfig(**{**FAST, "seed": seed, **train})
    loss_fn = None if MODELS[model].traits.own_objective else get_loss(MODELS[model].traits.default_loss)
    result = fit(m, loss_fn, tr, va, cfg, progress=False)
    return m, result


@pytest.mark.parametrize("name", NEURAL)
def test_every_model_learns_the_synthetic_task(splits, name):
    tr, va, te = splits
    seed_everything(0)
    untrained = _ndcg(make_model(name, tr.n_features, SMALL_PARAMS.get(name)), te)
    model, result = _train(splits, model=name, max_epochs=15, patience=15)
    assert _ndcg(model, te) > untrained + 0.05
    assert result.best_metric == pytest.approx(_ndcg(model, va), abs=1e-12)  # best weights restored


def test_same_seed_is_bitwise_equal_and_another_seed_differs(splits):
    a, ra = _train(splits, seed=7)
    b, rb = _train(splits, seed=7)
    c, _ = _train(splits, seed=8)
    assert [h["valid_ndcg@10"] for h in ra.history] == [h["valid_ndcg@10"] for h in rb.history]
    for (k, va), (_, vb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(va, vb), k
    assert not all(
        torch.equal(x, y) for x, y in zip(a.state_dict().values(), c.state_dict().values(), strict=True)
    )


def test_early_stopping_with_patience(splits):
    tr, va, _ = splits
    model = make_model("listnet", tr.n_features)
    # a zero learning-rate-like setting: nothing improves after the first epoch
    cfg = TrainConfig(batch_size=16, max_epochs=50, patience=2, lr=1e-12, min_delta=0.5, threads=1)
    result = fit(model, get_loss("listnet"), tr, va, cfg, progress=False)
    assert result.best_epoch == 1 and result.epochs_run == 3 and result.stopped_early


def test_jsonl_log_one_record_per_epoch(splits, tmp_path):
    tr, va, _ = splits
    model = make_model("listnet", tr.n_features)
    result = fit(
        model,
        get_loss("listnet"),
        tr,
        va,
        TrainConfig(**FAST),
        log_path=tmp_path / "log.jsonl",
        progress=False,
    )
    records = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == list(range(1, result.epochs_run + 1))
    assert all({"train_loss", "valid_ndcg@10", "best_epoch", "seconds"} <= set(r) for r in records)


def test_non_finite_loss_stops_with_a_clear_message(splits):
    tr, va, _ = splits
    model = make_model("listnet", tr.n_features)

    def broken(scores, labels, mask):
        return scores.sum() * float("nan")

    with pytest.raises(NonFiniteLossError, match=r"non-finite training loss .* epoch 1, batch 1"):
        fit(model, broken, tr, va, TrainConfig(**FAST), progress=False)


def test_predict_is_in_file_order_and_padding_free(splits):
    tr, _, _ = splits
    seed_everything(0)
    model = make_model("mlp", tr.n_features)
    scores = predict(model, tr, batch_size=7)
    with torch.no_grad():
        direct = model.net(torch.from_numpy(tr.features)).squeeze(-1).double().numpy()
    np.testing.assert_allclose(scores, direct, rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------------- checkpoints
def _saved(splits, tmp_path, model="mlp"):
    tr, va, _ = splits
    cfg = resolve_config(None, [f"model={model}", "train.max_epochs=2", "train.threads=1"])
    transform = make_transform(cfg.transform).fit(tr)
    seed_everything(0)
    m = make_model(cfg.model, tr.n_features, cfg.model_params)
    fit(
        m,
        get_loss(cfg.loss_name),
        transform.transform(tr),
        transform.transform(va),
        cfg.train,
        progress=False,
    )
    save_checkpoint(tmp_path / "m", m, cfg, transform, train_data=tr)
    return m, transform


def test_checkpoint_round_trip(splits, tmp_path):
    m, transform = _saved(splits, tmp_path)
    te = splits[2]
    loaded = load_model(tmp_path / "m")
    np.testing.assert_array_equal(loaded.predict(te), predict(m, transform.transform(te)))
    meta = json.loads((tmp_path / "m" / "ctxrank.json").read_text())
    assert meta["n_features"] == te.n_features and meta["model"] == "mlp" and meta["kind"] == "torch"
    assert isinstance(loaded.config, RunConfig) and (tmp_path / "m" / "config.toml").is_file()


def test_checkpoint_feature_count_mismatch(splits, tmp_path):
    _saved(splits, tmp_path)
    other = make_ranking_data(5, n_features=7)
    with pytest.raises(ValueError, match=r"trained on 5 features but .* has 7"):
        load_model(tmp_path / "m").predict(other)


def test_checkpoint_errors(splits, tmp_path):
    with pytest.raises(ValueError, match="not a ctxrank model directory"):
        load_model(tmp_path)
    _saved(splits, tmp_path)
    meta_path = tmp_path / "m" / "ctxrank.json"
    meta = json.loads(meta_path.read_text())
    meta["model_config"]["hidden"] = [3]
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="weights do not fit the model"):
        load_model(tmp_path / "m")


def test_planted_pickle_is_refused_and_never_runs(splits, tmp_path):
    _saved(splits, tmp_path)
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    (tmp_path / "m" / "model.safetensors").write_bytes(pickle.dumps({"w": Evil()}))
    torch.save({"w": Evil()}, tmp_path / "evil.pt")
    (tmp_path / "evil.pt").replace(tmp_path / "m" / "model.safetensors")
    with pytest.raises(ValueError, match=r"model\.safetensors was changed after it was saved"):
        load_model(tmp_path / "m")
    sm.rehash(tmp_path / "m")  # an attacker records the planted file's digest: it is still no safetensors
    with pytest.raises(ValueError, match="cannot read weights"):
        load_model(tmp_path / "m")
    assert not marker.exists()


def test_loss_params_reach_the_loss():
    cfg = resolve_config(None, ["loss=listnet", "loss_params.temperature=2.0", "train.max_epochs=1"])
    fn = functools.partial(get_loss(cfg.loss_name), **cfg.loss_params)
    s = torch.randn(2, 3)
    y = torch.tensor([[2.0, 0, 1], [1, 0, 0]])
    m = torch.ones(2, 3, dtype=torch.bool)
    assert fn(s, y, m) == pytest.approx(get_loss("listnet")(s, y, m, temperature=2.0).item())


def test_batching_is_the_models_unless_configured(splits, monkeypatch):
    """QILCM eq. 13 pairs the queries of a batch: its batches are drawn at random by default; every
    other model keeps length buckets; ``train.batching`` overrides both; the fit records its batching."""
    import ctxrank.training.loop as loop

    seen = []
    real = loop.iterate_batches

    def spy(*args, **kw):
        seen.append(kw["bucket"])
        return real(*args, **kw)

    monkeypatch.setattr(loop, "iterate_batches", spy)
    cases = [
        ("qilcm", "model", False, "random"),
        ("listnet", "model", True, "buckets"),
        ("qilcm", "buckets", True, "buckets"),
        ("listnet", "random", False, "random"),
    ]
    for model, batching, bucket, recorded in cases:
        seen.clear()
        _, result = _train(splits, model=model, batching=batching, max_epochs=2, patience=5)
        assert seen == [bucket, bucket]
        assert result.batching == recorded and result.summary().batching == recorded
    assert MODELS["qilcm"].traits.batching == MODELS["qilcm-variant2"].traits.batching == "random"
    assert all(MODELS[n].traits.batching == "buckets" for n in NEURAL if not n.startswith("qilcm"))
    with pytest.raises(ValueError, match=r"train.batching must be one of \['model', 'random', 'buckets'\]"):
        TrainConfig(batching="length")


def test_random_batches_mix_lengths():
    """Random batches pair short and long lists (what eq. 13 averages over); buckets do not."""
    from ctxrank.data.lists import iterate_batches

    data = make_ranking_data(60, seed=4, min_len=2, max_len=40)
    spans = {}
    for bucket in (True, False):
        gen = np.random.default_rng(0)
        lengths = [
            batch.mask.sum(1).tolist()
            for batch in iterate_batches(data, 10, shuffle=True, generator=gen, bucket=bucket)
        ]
        spans[bucket] = np.mean([max(b) / min(b) for b in lengths])
    assert spans[False] > 3 * spans[True]


def test_eval_batch_size_sizes_the_test_and_predict_batches(splits, monkeypatch):
    """``train.eval_batch_size`` is the lists scored at once everywhere a run scores: validation, its
    test split and the trained predictor's ``predict`` (the scores are the same at any size)."""
    import ctxrank.training.predict as predict_module
    from ctxrank.training.run import run_training

    tr, va, te = splits
    sizes = []
    real = predict_module.iterate_batches

    def spy(data, batch_size, **kw):
        sizes.append(batch_size)
        return real(data, batch_size, **kw)

    monkeypatch.setattr(predict_module, "iterate_batches", spy)
    overrides = ["train.max_epochs=1", "train.eval_batch_size=7"]
    result = run_training(resolve_config(None, overrides, model="listnet"), tr, va, te, progress=False)
    again = result.predictor.predict(te)
    assert sizes and set(sizes) == {7}
    np.testing.assert_allclose(again, result.test_scores, rtol=1e-6)
    monkeypatch.setattr(predict_module, "iterate_batches", real)
    whole = predict(result.predictor.model, result.predictor.transform.transform(te))  # 512 lists at once
    np.testing.assert_allclose(whole, again, rtol=1e-6)


def test_a_stalled_run_is_warned_about_and_recorded(splits):
    """Every training feature 0: a linear scorer's scores are constant, its gradients zero, its training
    loss the same every epoch and the weights of epoch 1 are kept. Said, with what to change."""
    import dataclasses

    from ctxrank.training.diagnostics import TrainingWarning

    tr, va, _ = splits
    flat = dataclasses.replace(tr, features=np.zeros_like(tr.features))
    cfg = TrainConfig(batch_size=16, max_epochs=4, patience=10, threads=1)
    with pytest.warns(TrainingWarning, match="listnet: training stalled") as caught:
        result = fit(make_model("listnet", tr.n_features), get_loss("listnet"), flat, va, cfg, progress=False)
    assert result.best_epoch == 1 and result.epochs_run == 4
    assert [str(w.message) for w in caught if w.category is TrainingWarning] == result.warnings
    assert "for the last 4 epochs (1-4" in result.warnings[0] and "train.lr" in result.warnings[0]
    assert result.summary().to_json()["warnings"] == result.warnings
    # a learning rate too small to move the weights: the loss wanders with the batches, the weights stay
    cfg = TrainConfig(batch_size=16, max_epochs=3, patience=5, lr=1e-12, threads=1)
    with pytest.warns(TrainingWarning, match=r"the weights stopped moving \(their norm stayed at"):
        result = fit(make_model("listnet", tr.n_features), get_loss("listnet"), tr, va, cfg, progress=False)
    assert result.best_epoch == 1 and "for the last 3 epochs (1-3" in result.warnings[0]


def test_a_run_cut_by_max_epochs_while_improving_is_warned_about_and_an_early_stopped_one_is_not(splits):
    import warnings

    from ctxrank.training.diagnostics import TrainingWarning

    with pytest.warns(TrainingWarning, match=r"listnet: training stopped at train.max_epochs = 3 while"):
        _, result = _train(splits, max_epochs=3, patience=3)
    assert result.best_epoch == result.epochs_run == 3 and "raise train.max_epochs" in result.warnings[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", TrainingWarning)
        _, result = _train(splits, max_epochs=1)  # one epoch: no sign of improving
        assert result.warnings == [] and "warnings" not in result.summary().to_json()
        _, result = _train(splits, max_epochs=40, patience=2)  # stopped early: the best epoch is kept
        assert result.stopped_early and result.warnings == []


def test_stalled_and_epoch_cap_read_the_history():
    """A SetRank-like collapse: the loss constant to 7 digits over epochs 2-4, epoch 1 kept; a loss that
    still moves, or a best epoch inside the flat stretch, is no stall."""
    from ctxrank.training.diagnostics import epoch_cap, stalled

    def history(losses, metrics):
        best = [int(np.argmax(metrics[: i + 1])) + 1 for i in range(len(metrics))]
        return [
            {"epoch": i + 1, "train_loss": loss, "valid_ndcg@10": m, "best_epoch": b}
            for i, (loss, m, b) in enumerate(zip(losses, metrics, best, strict=True))
        ]

    collapsed = history([0.9, 0.52341234, 0.52341236, 0.52341235], [0.6, 0.2, 0.2, 0.2])
    assert "the last 3 epochs (2-4" in stalled(collapsed, best_epoch=1)
    assert stalled(history([0.9, 0.8, 0.7, 0.6], [0.1, 0.2, 0.3, 0.4]), best_epoch=4) is None
    assert stalled(history([0.9, 0.5, 0.5, 0.5], [0.1, 0.2, 0.3, 0.4]), best_epoch=4) is None
    assert stalled(history([0.5, 0.5], [0.1, 0.1]), best_epoch=1) is None  # too short to say
    frozen = history([0.9, 0.7, 0.8, 0.75], [0.3, 0.3, 0.3, 0.3])
    for record, norm in zip(frozen, [1.0, 2.0, 2.0, 2.0], strict=True):
        record["weight_norm"] = norm
    said = stalled(frozen, best_epoch=1)
    assert "the weights stopped moving (their norm stayed at 2) for the last 3 epochs (2-4" in said
    assert stalled(frozen, best_epoch=3) is None  # a best epoch inside the flat stretch: no stall
    assert epoch_cap(history([0.9, 0.8], [0.1, 0.2]), 2, "ndcg@10") is not None
    assert epoch_cap(history([0.9, 0.8], [0.2, 0.1]), 2, "ndcg@10") is None
    assert epoch_cap(history([0.9, 0.8], [0.1, 0.2]), 5, "ndcg@10") is None  # stopped early
    # on a click log the values are an estimate, named as such (never "the validation ndcg@10")
    shown = epoch_cap(history([0.9, 0.8], [0.1, 0.2]), 2, "ndcg@10", "IPS estimate of DCG@10")
    assert "the validation IPS estimate of DCG@10 was still improving" in shown
