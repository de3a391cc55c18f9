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
            "model_params.l2=[0.0]",  # the plain maximum likelihood (the default chooses l2 on validation)
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
            None,
            [
                "model=mnl",
                "transform=none",
                "model_params.l2=[0.0]",
                f"model_params.alternative_specific={str(spec).lower()}",
            ],
        )
        ll[spec] = run_training(config, train, valid, progress=False).summary["log_likelihood"]
    assert ll[True] > ll[False] + 0.01  # income acts through alt 2: only the specific model sees it


def test_mnl_l2_is_chosen_on_validation_and_everything_is_recorded(tmp_path):
    train, valid, test = choice_data(150, seed=2), choice_data(100, seed=3), choice_data(100, seed=4)
    config = resolve_config(None, ["model=mnl", "model_params.l2=[0.0, 0.01, 10.0]"])
    result = run_training(config, train, valid, test, out=tmp_path / "m", progress=False)
    s = result.summary
    assert [t["l2"] for t in s["tried"]] == [10.0, 0.01, 0.0]  # a path: the strongest penalty first
    best = max(s["tried"], key=lambda t: t["valid_log_likelihood"])
    assert s["l2"] == best["l2"] != 10.0 and s["valid_log_likelihood"] == best["valid_log_likelihood"]
    assert s["fit_seconds"] > 0 and s["solver"] == "scipy L-BFGS-B"
    # save / load / predict: the saved model scores as the trained one
    from ctxrank.training.checkpoint import load_model

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
    # compared with the initial ranker on the same validation lists, in train.metric
    s = result.summary
    assert s["train_metric"]["name"] == "ndcg@10" and 0 < s["initial_valid_metric"] <= 1
    worse = s["train_metric"]["valid"] < s["initial_valid_metric"]
    assert worse == any("the re-ranker is worse than its initial ranker" in w for w in s.get("warnings", []))
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


# ----------------------------------------------------------------------------- existence and convergence
def with_levels(data: RankingData, n_levels: int, seed: int) -> RankingData:
    """``data`` with a second categorical column ``model`` of ``n_levels`` levels drawn at random for
    every alternative (most seen a few times: many never chosen), named ``m001``.. in the encoder."""
    from dataclasses import replace

    codes = np.random.default_rng(seed).integers(1, n_levels + 1, size=data.n_items)
    vocab = {"alt": ["a1", "a2", "a3"], "model": [f"m{k:03d}" for k in range(1, n_levels + 1)]}
    return replace(
        data,
        categorical=np.stack([data.categorical[:, 0], codes], axis=1),
        categorical_names=("alt", "model"),
        categorical_cardinalities=(4, n_levels + 1),
        info={"categorical_encoder": {"min_count": 1, "columns": ["alt", "model"], "vocab": vocab}},
    )


def _fit(data, valid, *overrides):
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run_training(resolve_config(None, ["model=mnl", *overrides]), data, valid, progress=False)
    from ctxrank.training.full_batch import FitWarning

    return result.summary, [str(w.message) for w in caught if issubclass(w.category, FitWarning)]


def test_mnl_separation_is_detected_and_named_and_the_penalty_is_chosen_on_validation():
    """About 200 levels, most seen a few times: a level present but never chosen has no finite constant
    (its utility runs off to -inf; one only ever chosen to +inf). The default fit says so, names them,
    does not fit l2 = 0, and keeps the penalty with the best validation log-likelihood."""
    train = with_levels(choice_data(400, seed=0), 200, 0)
    valid = with_levels(choice_data(150, seed=1), 200, 1)
    chosen, level = train.labels > 0, train.categorical[:, 1]
    never, always = set(level[~chosen]) - set(level[chosen]), set(level[chosen]) - set(level[~chosen])
    assert len(never) > 10
    s, caught = _fit(train, valid, "transform=zscore")
    sep = s["separation"]
    named = set(sep["coefficients"])
    assert {f"model=m{k:03d} -> -inf" for k in never} | {f"model=m{k:03d} -> +inf" for k in always} <= named
    assert all(n.startswith("model=m") for n in named) and sep["n_coefficients"] == len(named)
    assert 0 < sep["situations"] < sep["of"] == 400 and sep["complete"] and s["mle_exists"] is False
    assert s["tried"][-1] == {"l2": 0.0, "skipped": "no finite maximum likelihood (separation)"}
    fitted = [t for t in s["tried"] if "skipped" not in t]
    assert s["l2"] > 0 and s["valid_log_likelihood"] == max(t["valid_log_likelihood"] for t in fitted)
    assert len(caught) == 2 and "the maximum likelihood does not exist" in caught[0]
    assert "model=m" in caught[0] and "l2 = 0 was not fitted" in caught[0]
    # the penalty chosen is the largest of the grid: said, with how to extend it
    assert s["l2"] == 0.01 and s["l2_grid_edge"] == "largest" and s["warnings"] == caught
    assert "is the largest of the values fitted (0.0001, 0.001, 0.01)" in caught[1]
    # asked for explicitly, l2 = 0 is fitted, and the summary and the warning say it has no estimate
    s, caught = _fit(train, valid, "transform=zscore", "model_params.l2=[0.0]")
    assert s["l2"] == 0.0 and s["mle_exists"] is False and s["separation"]["coefficients"]
    assert any("has no finite estimate" in c for c in caught)


def test_mnl_fits_on_when_the_separation_check_cannot_decide(monkeypatch):
    """Every linear program of the check reporting numerical trouble (HiGHS status 4): the fit goes on
    (l2 = 0 fitted with the others), the summary says the existence is undetermined and why, and one
    FitWarning names the program that failed."""
    from scipy.optimize import OptimizeResult

    from ctxrank.training import separation

    def trouble(c, **kw):
        return OptimizeResult(status=4, x=None, message="Numerical difficulties encountered")

    monkeypatch.setattr(separation, "linprog", trouble)
    s, caught = _fit(choice_data(120, seed=0), choice_data(60, seed=1), "transform=zscore")
    assert [t["l2"] for t in s["tried"]] == [0.01, 0.001, 0.0001, 0.0] and s["mle_exists"] is None
    assert "round 1's program" in s["separation"]["undetermined"]
    assert "status 4: Numerical difficulties" in s["separation"]["undetermined"]
    assert len([c for c in caught if "could not decide" in c]) == 1
    assert "l2 = 0 was fitted like the other penalties" in caught[0] and caught == s["warnings"][:1]
    chosen = f"(the penalty chosen on validation is {s['l2']:g})" if s["l2"] else ", and chosen on validation"
    assert chosen in caught[0]


def test_mnl_says_when_the_penalty_chosen_is_the_smallest_of_its_grid():
    train, valid = choice_data(300, seed=0), choice_data(100, seed=1)
    s, caught = _fit(train, valid, "transform=zscore", "model_params.l2=[0.1, 1.0, 10.0]")
    assert s["l2"] == 0.1 and s["l2_grid_edge"] == "smallest"
    assert caught == [
        "mnl: the model_params.l2 chosen on validation (0.1) is the smallest of the values fitted (0.1, 1, "
        "10): the best one may lie beyond them; add smaller values (e.g. 0.01, 0.001) to model_params.l2 "
        "(--set model_params.l2=[...])"
    ]


def test_mnl_where_the_maximum_exists_is_not_flagged_and_an_explicit_penalty_is_respected():
    from ctxrank.models.mlp import MNLConfig

    assert MNLConfig().l2[0] == 0.0 and len(MNLConfig().l2) > 1  # the default: chosen on validation
    train, valid = choice_data(300, seed=0), choice_data(100, seed=1)
    s, caught = _fit(train, valid, "transform=zscore")
    assert s["separation"] is None and s["mle_exists"] is True and caught == [] and s["converged"]
    assert [t["l2"] for t in s["tried"]] == sorted(MNLConfig().l2, reverse=True)
    s, caught = _fit(train, valid, "model_params.l2=[0.001]")
    assert [t["l2"] for t in s["tried"]] == [0.001] and s["l2"] == 0.001 and s["mle_exists"] is None


def test_mnl_convergence_is_what_the_gradient_says_not_the_solvers_word(monkeypatch):
    """An iteration cap, or a solver that reports success at a point where the gradient is not small,
    is not 'converged': the summary says why it stopped and a FitWarning is given."""
    import scipy.optimize

    from ctxrank.training import full_batch

    train, valid = choice_data(300, seed=0), choice_data(100, seed=1)
    s, caught = _fit(train, valid, "model_params.l2=[0.0]", "model_params.max_iter=2")
    assert not s["converged"] and s["stop"] == "iteration cap (model_params.max_iter = 2)"
    assert len(caught) == 1 and "did not converge (iteration cap" in caught[0]

    def claims_success(fun, x0, **kw):  # stops at the start and calls it a success
        return scipy.optimize.OptimizeResult(x=x0, success=True, nit=1, message="CONVERGENCE (claimed)")

    monkeypatch.setattr(full_batch, "minimize", claims_success)
    s, caught = _fit(train, valid, "model_params.l2=[0.0]")
    assert not s["converged"] and s["stop"] == "solver stopped: CONVERGENCE (claimed)"
    assert s["max_abs_gradient"] > 1e-3 and "did not converge" in caught[0]


def test_mnl_several_penalties_need_a_validation_split():
    from ctxrank.training.full_batch import fit_full_batch

    train = choice_data(50, seed=0)
    model = make_model("mnl", 3, {}, categorical_cardinalities=(4,))
    with pytest.raises(ValueError, match=r"model_params\.l2 lists 4 penalties, chosen on the validation"):
        fit_full_batch(model, train, None)


def test_cli_mnl_says_what_it_fits_and_warns_of_separation(tmp_path):
    """``ctxrank train --model mnl`` on a table with a many-level column: the log names maximum
    likelihood (not a loss), the separation warning is one ``ctxrank: warning:`` line, the summary line
    names the penalty chosen on validation."""
    import contextlib
    import io

    import pandas as pd

    from ctxrank.cli import main

    data = with_levels(choice_data(400, seed=0), 200, 0)
    q = np.repeat(data.query_ids, np.diff(data.query_offsets))
    frame = pd.DataFrame({"s": q, "chosen": data.labels.astype(int), "a": data.features[:, 0]})
    frame["b"], frame["income"] = data.features[:, 1], data.features[:, 2]
    frame["alt"], frame["model"] = data.categorical[:, 0], [f"m{k:03d}" for k in data.categorical[:, 1]]
    frame.to_csv(tmp_path / "t.csv", index=False)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([
            "train", "--model", "mnl", "--data", str(tmp_path / "t.csv"), "--query-col", "s",
            "--label-col", "chosen", "--categorical", "alt,model", "--set", "transform=zscore",
            "--out", str(tmp_path / "m"), "--no-progress",
        ])  # fmt: skip
    assert rc == 0, err.getvalue()
    text = out.getvalue()
    assert "mnl (trains its maximum likelihood" in text and "listnet" not in text
    assert "chosen on validation from 4 values" in text and ", converged," in text
    warning = [line for line in err.getvalue().splitlines() if "does not exist" in line]
    assert len(warning) == 1 and warning[0].startswith("ctxrank: warning: mnl: the maximum likelihood")
    assert "model=m" in warning[0]
    # the penalty chosen is the largest of the grid: the summary line and a warning line say so
    edge = [line for line in err.getvalue().splitlines() if "is the largest of the values fitted" in line]
    assert "chosen on validation from 4 values, the largest of them" in text and len(edge) == 1
    assert "add larger values (e.g. 0.1, 1) to model_params.l2" in edge[0]
