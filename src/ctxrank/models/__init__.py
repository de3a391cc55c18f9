"""Ranking models. ``MODELS`` maps a name to a :class:`Ranker` subclass; ``make_model`` builds one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxrank.models.arsm_l2r import ArsmL2R
from ctxrank.models.base import Ranker
from ctxrank.models.dcm import DCM
from ctxrank.models.dlcm import DLCM
from ctxrank.models.mlp import ListNet, MLPScorer, MultinomialLogit
from ctxrank.models.qilcm import QILCM, QILCM_VARIANTS

MODELS: dict[str, type[Ranker]] = {
    "arsm": ArsmL2R,
    "dcm": DCM,
    "dlcm": DLCM,
    "listnet": ListNet,
    "mlp": MLPScorer,
    "mnl": MultinomialLogit,
    "qilcm": QILCM,
    **QILCM_VARIANTS,  # ablations of Table 3: qilcm-variant1, -variant2, -variant3
}


def get_model_class(name: str) -> type[Ranker]:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; valid models: {', '.join(sorted(MODELS))}")
    return MODELS[name]


def make_model(
    name: str,
    n_features: int,
    params: Mapping[str, Any] | None = None,
    *,
    categorical_cardinalities: Sequence[int] = (),
) -> Ranker:
    cls = get_model_class(name)
    return cls(n_features, cls.make_config(params), categorical_cardinalities=categorical_cardinalities)


__all__ = [
    "DCM",
    "DLCM",
    "MODELS",
    "QILCM",
    "ArsmL2R",
    "ListNet",
    "MLPScorer",
    "MultinomialLogit",
    "Ranker",
    "get_model_class",
    "make_model",
]
