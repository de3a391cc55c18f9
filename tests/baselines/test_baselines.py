"""The baselines of the model registry (the ``registry.MODELS`` entries that are a ``Baseline``): every
baseline through RunConfig, run_training, the saved directory and ``ctxrank.load_model``."""

import json
import subprocess
import sys

import numpy as np
import pytest

from ctxrank._checks import OptionError
from ctxrank.config import resolve_config
from ctxrank.registry import MODELS, Baseline
from ctxrank.training.checkpoint import META_FILE, load_model
from ctxrank.training.run import run_training
from tests.conftest import make_ranking_data

BASELINES = {name: entry for name, entry in MODELS.items() if isinstance(entry, Baseline)}

# small, fast settings per baseline
FAST = {
    "lambdamart": {"n_estimators": 20, "min_data_in_leaf": 5, "early_stopping_rounds": 5},
    "ranksvm": {"C": [0.01, 1.0]},
    "adarank-map": {"n_rounds": 20, "patience": 5},
    "adarank-ndcg": {"n_rounds": 20, "patience": 5},
}
SUMMARY_KEY = {
    "lambdamart": "best_iteration",
    "ranksvm": "C",
    "adarank-map": "best_round",
    "adarank-ndcg": "best_round",
}
OBJECTIVE = {
    "lambdamart": "lambdarank",
    "ranksvm": "pairwise-squared-hinge",
    "adarank-map": "adarank-map",
    "adarank-ndcg": "adarank-ndcg@10",
}


@pytest.fixture(scope="module")
def splits():
    return make_ranking_data(50, seed=1), make_ranking_data(20, seed=2), make_ranking_data(20, seed=3)


def _overrides(name):
    return [f"model={name}", *(f"model_params.{k}={json.dumps(v)}" for k, v in FAST[name].items())]


def test_registry_names_and_kinds():
    assert set(BASELINES) == {"lambdamart", "ranksvm", "adarank-map", "adarank-ndcg"}
    assert {b.kind for b in BASELINES.values()} == {"lightgbm", "ranksvm", "adarank"}
    with pytest.raises(ValueError, match=r"valid models: .*adarank-map, adarank-ndcg.*lambdamart.*ranksvm"):
        resolve_config(None, ["model=nope"])


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_run_training_save_and_load_model(name, splits, tmp_path):
    train, valid, test = splits
    config = resolve_config(None, [*_overrides(name), "train.seed=3"])
    assert config.loss_name == OBJECTIVE[name]
    result = run_training(config, train, valid, test, out=tmp_path / name)
    s = result.summary
    assert SUMMARY_KEY[name] in s and s["seconds"] > 0 and s["metric"]
    assert s.get("best_valid_metric") is not None
    assert result.test_scores.shape == (test.n_items,) and np.isfinite(result.test_scores).all()
    assert 0 < result.test_metrics["ndcg@10"].mean() <= 1
    meta = json.loads((tmp_path / name / META_FILE).read_text())
    assert meta["kind"] == BASELINES[name].kind
    assert meta["run_config"]["model"] == name and meta["run_config"]["loss"] == OBJECTIVE[name]
    loaded = load_model(tmp_path / name)
    assert loaded.n_features == 5
    assert np.array_equal(loaded.predict(test), result.test_scores)
    # the saved config.toml repeats the run (its loss is the baseline's own objective name)
    again = resolve_config(tmp_path / name / "config.toml")
    assert again.to_dict() == config.to_dict()


@pytest.mark.parametrize("name", ["lambdamart", "ranksvm", "adarank-map"])  # one a class
def test_save_refuses_a_directory_of_the_users_files_unless_overwrite(name, splits, tmp_path):
    """A baseline's own ``save(dir)``: the user's config.toml is refused byte for byte unchanged, then
    written with ``overwrite=True`` (other files kept); an earlier model is refused likewise."""
    train = splits[0]
    entry = BASELINES[name]
    model = entry.cls(**{**FAST[name], **({"C": 1.0} if name == "ranksvm" else {})}).fit(train)
    out = tmp_path / "mine"
    out.mkdir()
    (out / "config.toml").write_bytes(b"# my own config\n")
    (out / "notes.txt").write_bytes(b"kept")
    with pytest.raises(ValueError, match=r"did not write \(config.toml, notes.txt\).*pass overwrite=True"):
        model.save(out, run_config={"model": name})
    assert sorted(p.name for p in out.iterdir()) == ["config.toml", "notes.txt"]
    assert (out / "config.toml").read_bytes() == b"# my own config\n"
    model.save(out, run_config={"model": name}, overwrite=True)
    assert (out / "notes.txt").read_bytes() == b"kept" and b"my own" not in (out / "config.toml").read_bytes()
    np.testing.assert_array_equal(load_model(out).predict(train), model.predict(train))
    with pytest.raises(ValueError, match=r"already holds a saved model; .*pass overwrite=True"):
        model.save(out)
    model.save(out, overwrite=True)


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_loss_and_rerank_do_not_apply(name):
    trains = BASELINES[name].trains
    with pytest.raises(OptionError, match=rf"^loss: {name} trains .*; loss does not apply$") as info:
        resolve_config(None, [f"model={name}", "loss=listnet"])
    assert trains in str(info.value) and info.value.fields == ("loss",)
    with pytest.raises(ValueError, match="loss_params"):
        resolve_config(None, [f"model={name}", "loss_params.temperature=2"])
    with pytest.raises(ValueError, match=rf"rerank.initial: {name} is a baseline that ranks whole lists"):
        resolve_config(None, [f"model={name}", "rerank.initial=lambdamart"])


def test_messages_name_the_right_library():
    assert "LightGBM" in BASELINES["lambdamart"].trains
    assert "LinearSVC" in BASELINES["ranksvm"].trains
    for name in ("ranksvm", "adarank-map", "adarank-ndcg"):
        assert "LightGBM" not in BASELINES[name].trains
    with pytest.raises(ValueError, match="ranksvm trains a pairwise linear SVM"):
        resolve_config(None, ["model=ranksvm", "loss=listnet"])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model=ranksvm", "model_params.kernel=rbf"], r"model_params: unknown option\(s\) \['kernel'\]"),
        (["model=ranksvm", "model_params.C=-1"], r"model_params: C must be a positive number"),
        (["model=adarank-map", "model_params.metric=ndcg@10"], r"model_params\.metric: .* must be a map"),
        (["model=adarank-ndcg", "model_params.metric=map"], r"model_params\.metric: .* must be a ndcg"),
        (["model=adarank-ndcg", "model_params.n_rounds=0"], r"model_params: n_rounds must be a positive int"),
    ],
)
def test_bad_model_params_fail_when_the_config_is_built(overrides, message):
    with pytest.raises(ValueError, match=message):
        resolve_config(None, overrides)


def test_seed_threads_and_params_reach_the_model():
    tc = resolve_config(None, ["model=ranksvm", "train.seed=7", "train.threads=2"]).train
    svm = BASELINES["ranksvm"].build({"loss": "hinge"}, tc)
    assert svm.seed == 7 and svm.loss == "hinge"
    assert BASELINES["ranksvm"].build({"seed": 1}, tc).seed == 1  # model_params win
    ada = BASELINES["adarank-ndcg"].build({"metric": "ndcg@5"}, tc)
    assert ada.metric == "ndcg@5" and ada.num_threads == 2
    assert BASELINES["adarank-map"].build({}, tc).metric == "map"
    c = resolve_config(None, ["model=adarank-ndcg", "model_params.metric=ndcg@5"])
    assert c.loss_name == "adarank-ndcg@5"
    assert resolve_config(None, ["model=ranksvm", "model_params.loss=hinge"]).loss_name == "pairwise-hinge"


def test_importing_the_baselines_pulls_neither_lightgbm_nor_sklearn():
    code = (
        "import sys, ctxrank.baselines, ctxrank.baselines.ranksvm, ctxrank.baselines.adarank; "
        "print('lightgbm' in sys.modules, 'sklearn' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("value", [True, np.True_, 2, "Skip"])
def test_the_baselines_no_relevant_is_the_one_no_relevant_check(value):
    """LambdaMART, RankSVM and AdaRank check ``no_relevant`` with ``_checks.check_no_relevant``, as a run
    config does (one message; ``True`` is not 1.0)."""
    from ctxrank import _checks
    from ctxrank.baselines import AdaRank, LambdaMART, RankSVM

    with pytest.raises(ValueError) as expected:
        _checks.check_no_relevant("no_relevant", value)
    for make in (
        lambda: LambdaMART(no_relevant=value).check_params(),
        lambda: RankSVM(no_relevant=value),
        lambda: AdaRank(no_relevant=value),
    ):
        with pytest.raises(ValueError) as got:
            make()
        assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_a_baseline_that_reads_no_categorical_columns_refuses_data_that_has_them(name):
    """Whatever the entrance (``ctxrank train``, the estimators, an experiment), a baseline that uses
    the numeric columns only refuses categorical columns instead of training without them."""
    data = make_ranking_data(n_queries=12, n_features=3)
    codes = np.random.default_rng(0).integers(1, 3, size=(data.n_items, 1))
    with_codes = type(data)(
        **{
            **data.__dict__,
            "categorical": codes,
            "categorical_names": ("airline",),
            "categorical_cardinalities": (3,),
        }
    )
    config = resolve_config(None, _overrides(name))
    if BASELINES[name].traits.reads_categorical:
        run_training(config, with_codes, with_codes, progress=False)
        return
    with pytest.raises(
        ValueError,
        match=rf"^{name} uses numeric features only and would ignore the categorical columns airline",
    ):
        run_training(config, with_codes, with_codes, progress=False)


def test_the_estimators_tags_say_which_models_take_categorical_input():
    """scikit-learn's ``input_tags.categorical`` follows the registry: RankSVM and AdaRank read numeric
    columns only; LambdaMART and the neural models read (embed) categorical ones."""
    from ctxrank import LambdaMARTRanker, QILCMRanker, Ranker

    assert not Ranker(model="ranksvm").__sklearn_tags__().input_tags.categorical
    assert not Ranker(model="adarank-map").__sklearn_tags__().input_tags.categorical
    assert LambdaMARTRanker().__sklearn_tags__().input_tags.categorical
    assert QILCMRanker().__sklearn_tags__().input_tags.categorical
