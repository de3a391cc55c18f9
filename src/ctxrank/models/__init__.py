"""Ranking models, one file a model. The name -> class registry is ``ctxrank.registry.MODELS``."""

from __future__ import annotations

from ctxrank.models.arsm_l2r import ArsmL2R
from ctxrank.models.attn import ContextAwareAttention
from ctxrank.models.base import RankingModule
from ctxrank.models.dasalc import DASALC
from ctxrank.models.dcm import DCM
from ctxrank.models.dlcm import DLCM
from ctxrank.models.gsf import GSF
from ctxrank.models.mlp import ListNet, MLPScorer, MultinomialLogit
from ctxrank.models.qilcm import QILCM
from ctxrank.models.setrank import SetRank

__all__ = [
    "DASALC",
    "DCM",
    "DLCM",
    "GSF",
    "QILCM",
    "ArsmL2R",
    "ContextAwareAttention",
    "ListNet",
    "MLPScorer",
    "MultinomialLogit",
    "RankingModule",
    "SetRank",
]
