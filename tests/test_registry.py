"""The model registry's protocol: every entry, neural or baseline, answers the same questions (its traits
as one value, its ``[train]`` keys, loss, checks, parameters, search space, description, ``fit``), so no
code outside the registry asks which kind of model an entry is; a wrapper has its inner model's traits."""

from __future__ import annotations

import dataclasses
import re

import pytest

from ctxrank.api.estimators import model_class_scores_alone
from ctxrank.config import RunConfig
from ctxrank.models.base import ModelTraits
from ctxrank.models.missing import MissingIndicator
from ctxrank.models.residual import Residual
from ctxrank.registry import BASELINE_TRAIN_KEYS, MODELS, Baseline, Description, NeuralEntry, make_model
from ctxrank.tune import NEURAL_SPACE
from tests.conftest import REPO

NEURAL = sorted(name for name, entry in MODELS.items() if entry.traits.torch_module)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_entry_offers_the_protocol(name):
    entry = MODELS[name]
    config = RunConfig(model=name)
    assert entry.name == name and isinstance(entry.traits, ModelTraits)
    assert entry.traits.torch_module == isinstance(entry, NeuralEntry) != isinstance(entry, Baseline)
    capabilities = ("sized_before_training", "streams", "distributed", "missing_indicator", "reranks")
    assert {getattr(entry, c) for c in (*capabilities, "config_params")} == {entry.traits.torch_module}
    assert entry.loss_name("", {}) == config.loss_name
    about = entry.describe()
    assert isinstance(about, Description) and about.cls is entry.cls and about.reference and about.objective
    declared, _ = entry.tune_space(config, NEURAL_SPACE)
    assert declared
    if isinstance(entry, NeuralEntry):
        assert entry.traits is entry.cls.traits and about.documented is entry.config_class
        assert set(entry.resolved_params({})) == {f.name for f in dataclasses.fields(entry.config_class)}
    else:  # a baseline: whole lists in memory, scored item by item, its own [train] keys
        assert entry.train_keys(residual=True) == (*BASELINE_TRAIN_KEYS, *entry.debias_train_keys)
        assert bool(entry.debias_train_keys) == (name == "lambdamart")  # the one that learns from clicks
        assert entry.traits.scores_alone and not entry.reads_row_order({}) and about.documented is entry.cls


def test_the_models_that_score_an_item_alone():
    """``traits.scores_alone``: the estimators' ``predict(X)`` without query ids reads it."""
    alone = {name for name, entry in MODELS.items() if entry.traits.scores_alone}
    assert alone == {"mlp", "listnet", "mnl", "lambdamart", "ranksvm", "adarank-map", "adarank-ndcg"}
    assert all(model_class_scores_alone(name) == (name in alone) for name in MODELS)


@pytest.mark.parametrize("name", NEURAL)
def test_a_wrapper_has_its_inner_models_traits(name):
    """The missing indicator and the residual correction take the wrapped model's traits value (its loss
    defaults, batching, re-ranking features), not copies of some of its attributes."""
    inner = make_model(name, 6)
    wrapped = MissingIndicator(inner, 3)
    assert wrapped.traits is inner.traits is MODELS[name].traits
    if not inner.traits.own_objective:
        assert Residual(wrapped).traits is inner.traits


def test_no_code_outside_the_registry_asks_which_kind_of_model_an_entry_is():
    """A caller asks the entry (``entry.fit``, ``entry.check_run``, ``entry.streams``, ...) or the
    predictor (``ensemble_size``, ``initial``, ``spec``, ``scorer``, ``reads_row_order``): no
    ``isinstance`` on the entry or predictor classes, no ``is_baseline`` and no read of
    ``traits.torch_module`` outside ``ctxrank/registry.py``, except the checks of an input's type
    listed here."""
    kind = re.compile(
        r"\bis_baseline\b|\btraits\.torch_module\b"
        r"|isinstance\([^)]*\b(Baseline|\w*Entry|\w*Predictor|RankingModule|Residual|MissingIndicator"
        r"|LambdaMART|RankSVM|AdaRank|LambdaMARTRanker|RerankPipeline)\b"
    )
    validates_input = {
        # the initial ranker of a saved re-ranking directory: only LambdaMART's trees go into the graph
        ("export/write.py", "isinstance(initial, LambdaMART)"),
        # a RerankPipeline's parts, given by the user: a LambdaMARTRanker, then a neural estimator
        ("api/pipeline.py", "isinstance(initial, LambdaMARTRanker)"),
        ("api/pipeline.py", "isinstance(reranker, RerankPipeline)"),
        # a wrapper's inner module must be a neural model
        ("models/missing.py", "isinstance(inner, RankingModule)"),
        ("models/residual.py", "isinstance(inner, RankingModule)"),
    }
    src = REPO / "src" / "ctxrank"
    hits = [
        f"{path.relative_to(src)}:{number}"
        for path in sorted(src.rglob("*.py"))
        if path != src / "registry.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if kind.search(line)
        and not any(path.relative_to(src).as_posix() == f and code in line for f, code in validates_input)
    ]
    assert not hits, f"branches on the kind of model outside the registry: {hits}"
