"""The conditional logit ``mnl``: fitted to its maximum likelihood, checked against an independent
Newton-Raphson written here in NumPy; its SGD loss; save / load / predict / export."""

import numpy as np
import pytest
import torch

from ctxrank.config import resolve_config
from ctxrank.data.lists import ListBatch
from ctxrank.data.ranking_data import RankingData
from ctxrank.losses import get_loss
from ctxrank.registry import make_model
from ctxrank.training.run import run_training


def test_mnl_loss_is_the_negative_log_likelihood_of_the_choice():
    torch.manual_seed(0)
    model = make_model("mnl", 4)
    with torch.no_grad():
        model.net[0].weight.normal_()
    assert [type(m).__name__ for m in model.net] == ["Linear"]  # linear utilities
    x = torch.randn(2, 5, 4)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    labels = torch.zeros(2, 5)
    labels[0, 3] = 1
    labels[1, 1] = 1
    batch = ListBatch(features=x, labels=labels, mask=mask, query_index=torch.arange(2))
    loss = model.training_loss(batch, get_loss("listnet"))  # the model's default options apply
    v = model(x, mask).masked_fill(~mask, -torch.inf)
    expected = -(torch.log_softmax(v[0], -1)[3] + torch.log_softmax(v[1], -1)[1]) / 2
    assert torch.allclose(loss, expected)
    # an explicitly bound option wins over the model's default
    exp_form = model.training_loss(batch, lambda s, y, m: get_loss("listnet")(s, y, m, label_transform="exp"))
    assert not torch.allclose(exp_form, expected)


def choice_data(n_situations: int, seed: int) -> RankingData:
    """Synthetic conditional-logit choices: 2-5 alternatives, 3 features, one categorical ``alt``
    (codes 1..3) with its own constants and a situation-level feature (the third) that acts through
    the alternative; the choice drawn from the logit."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, 6, size=n_situations)
    n = int(lengths.sum())
    q = np.repeat(np.arange(n_situations), lengths)
    x = rng.normal(size=(n, 3))
    x[:, 2] = rng.normal(size=n_situations)[q]  # constant within a situation (income, say)
    alt = rng.integers(1, 4, size=n)
    v = x @ np.array([1.0, -0.7, 0.0]) + np.array([0.0, 0.5, -0.4, 0.3])[alt] + 0.8 * x[:, 2] * (alt == 2)
    g = v + rng.gumbel(size=n)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    labels = np.zeros(n, dtype=np.float32)
    for s in range(n_situations):
        labels[offsets[s] + np.argmax(g[offsets[s] : offsets[s + 1]])] = 1
    return RankingData(
        features=x.astype(np.float32),
        labels=labels,
        query_ids=np.array([f"s{i}" for i in range(n_situations)]),
        query_offsets=offsets,
        categorical=alt[:, None].astype(np.int64),
        feature_names=("a", "b", "income"),
        categorical_names=("alt",),
        categorical_cardinalities=(4,),
    )


def newton_raphson_logit(design: np.ndarray, chosen: np.ndarray, offsets: np.ndarray) -> float:
    """The oracle: maximum log-likelihood (sum over situations) of a conditional logit with utilities
    ``design @ beta``, by Newton-Raphson with the exact Hessian (pseudo-inverse: a design may hold
    columns that are constant within every situation or collinear, which leave the likelihood flat)."""
    q = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
    beta = np.zeros(design.shape[1])
    for _ in range(100):
        v = design @ beta
        m = np.maximum.reduceat(v, offsets[:-1])
        e = np.exp(v - m[q])
        p = e / np.add.reduceat(e, offsets[:-1])[q]
        xbar = np.add.reduceat(p[:, None] * design, offsets[:-1])  # (Q, D) expected design
        grad = design[chosen].sum(0) - xbar.sum(0)
        hess = (design * p[:, None]).T @ design - xbar.T @ xbar  # minus the Hessian of the log-lik
        step = np.linalg.pinv(hess, rcond=1e-12) @ grad
        beta += step
        if np.max(np.abs(step)) < 1e-12:
            break
    v = design @ beta
    m = np.maximum.reduceat(v, offsets[:-1])
    lse = np.log(np.add.reduceat(np.exp(v - m[q]), offsets[:-1])) + m
    return float(v[chosen].sum() - lse.sum())


def _design(data: RankingData, alternative_specific: bool) -> np.ndarray:
    x = data.features.astype(np.float64)
    onehot = np.eye(4)[data.categorical[:, 0]]  # every code, the unknown one included
    parts = [x, onehot]
    if alternative_specific:
        parts += [onehot[:, [k]] * x for k in range(4)]
    return np.concatenate(parts, axis=1)


@pytest.mark.parametrize("solver", ["lbfgs", "newton"])
@pytest.mark.parametrize("alternative_specific", [False, True])
def test_mnl_reaches_the_maximum_likelihood_of_an_independent_newton_raphson(solver, alternative_specific):
    train, valid = choice_data(400, seed=0), choice_data(100, seed=1)
    config = resolve_config(
        None,
        [
            "model=mnl",
            "transform=none",
            f"model_params.solver={solver}",
            f"model_params.alternative_specific={str(alternative_specific).lower()}",
            "train.threads=1",
        ],
    )
    result = run_training(config, train, valid, valid, progress=False)
    chosen = train.labels > 0
    oracle = newton_raphson_logit(_design(train, alternative_specific), chosen, train.query_offsets)
    fitted = result.summary["log_likelihood"] * train.n_queries  # summed over situations
    assert result.summary["converged"] and result.summary["l2"] == 0.0
    assert abs(fitted - oracle) < 1e-4, (fitted, oracle)
    # the saved-model path scores the same: the log-likelihood from the predictor's scores
    from ctxrank.metrics import evaluate_queries

    scores = result.predictor.predict(train)
    ll = evaluate_queries(scores, train.labels, train.query_offsets, ["loglik"])["loglik"].sum()
    assert abs(ll - oracle) < 1e-3  # float32 scores
    assert "loglik" in result.test_metrics and "p@1" in result.test_metrics  # choice data: choice metrics


def test_mnl_situation_level_feature_needs_alternative_specific_coefficients():
    train, valid = choice_data(400, seed=0), choice_data(100, seed=1)
    ll = {}
    for spec in (False, True):
        config = resolve_config(
            None, ["model=mnl", "transform=none", f"model_params.alternative_specific={str(spec).lower()}"]
        )
        ll[spec] = run_training(config, train, valid, progress=False).summary["log_likelihood"]
    assert ll[True] > ll[False] + 0.01  # income acts through alt 2: only the specific model sees it


def test_mnl_l2_is_chosen_on_validation_and_everything_is_recorded(tmp_path):
    train, valid, test = choice_data(150, seed=2), choice_data(100, seed=3), choice_data(100, seed=4)
    config = resolve_config(None, ["model=mnl", "model_params.l2=[0.0, 0.01, 10.0]"])
    result = run_training(config, train, valid, test, out=tmp_path / "m", progress=False)
    s = result.summary
    assert [t["l2"] for t in s["tried"]] == [0.0, 0.01, 10.0]
    best = max(s["tried"], key=lambda t: t["valid_log_likelihood"])
    assert s["l2"] == best["l2"] != 10.0 and s["valid_log_likelihood"] == best["valid_log_likelihood"]
    assert s["fit_seconds"] > 0 and s["solver"] == "scipy L-BFGS-B"
    # save / load / predict: the saved model scores as the trained one
    from ctxrank.checkpoint import load_model

    loaded = load_model(tmp_path / "m")
    np.testing.assert_allclose(loaded.predict(test), result.test_scores, rtol=1e-6, atol=1e-6)


def test_mnl_re_ranking_an_initial_ranker_is_fitted_to_its_maximum_likelihood_on_the_top_lists():
    """Re-ranking LambdaMART's top k, the logit's utilities ignore the initial scores, so the exact
    full-batch fit applies to the top-k lists (it was SGD); a residual wrapper needs the initial scores
    and still trains by SGD."""
    from ctxrank.training.full_batch import fit_full_batch, mean_log_likelihood

    train, valid, test = choice_data(150, seed=7), choice_data(80, seed=8), choice_data(80, seed=9)
    rerank = ["rerank.initial=lambdamart", "rerank.top_k=3", "rerank.initial_params={n_estimators=5}"]
    config = resolve_config(None, ["model=mnl", *rerank])
    result = run_training(config, train, valid, test, progress=False)
    assert result.summary["solver"] == "scipy L-BFGS-B" and result.history == []
    # the same fit made by hand on the top-3 lists of the run's own initial ranker
    predictor = result.predictor
    reranker = predictor.reranker
    top = {name: predictor.prepare(d).top for name, d in (("t", train), ("v", valid))}
    model = make_model(
        "mnl",
        top["t"].n_features,
        config.model_params,
        categorical_cardinalities=top["t"].categorical_cardinalities,
    )
    fit_full_batch(model, reranker.transform.transform(top["t"]), reranker.transform.transform(top["v"]))
    # the same maximum (the coefficient of the situation-level feature cancels: compare likelihoods)
    for d in (top["t"], top["v"]):
        x = reranker.transform.transform(d)
        mine = mean_log_likelihood(model, x)
        assert mean_log_likelihood(reranker.model, x) == pytest.approx(mine, abs=1e-6)
    residual = run_training(
        resolve_config(None, ["model=mnl", *rerank, "rerank.residual=true", "train.max_epochs=2"]),
        train,
        valid,
        test,
        progress=False,
    )
    assert "solver" not in residual.summary and len(residual.history) >= 1


def test_mnl_exports_like_every_neural_model(tmp_path):
    from ctxrank.export import export_model

    train, valid = choice_data(60, seed=5), choice_data(30, seed=6)
    config = resolve_config(None, ["model=mnl", "model_params.alternative_specific=true"])
    run_training(config, train, valid, out=tmp_path / "m", progress=False)
    export_model(tmp_path / "m", "torchscript", tmp_path / "m.pt")  # checks the file reproduces the model
    assert (tmp_path / "m.pt").is_file()


def test_mnl_options_are_validated():
    for bad, match in (
        ({"l2": -1.0}, "model_params.l2"),
        ({"l2": []}, "at least one"),
        ({"solver": "sgd"}, "model_params.solver"),
        ({"alternative_specific": 1}, "alternative_specific"),
    ):
        with pytest.raises(ValueError, match=match):
            make_model("mnl", 3, bad)
