"""A re-ranking model as ONE ONNX graph: LambdaMART's trees, the top-k cut, the re-ranker, the merge.

A model trained with ``rerank.initial = "lambdamart"`` scores a query in four steps
(:class:`ctxrank.training.rerank.RerankPredictor`); the graph runs all of them::

    (features float32 (B, L, F) raw, mask bool (B, L)[, categorical int64 (B, L, C)])
        -> scores float32 (B, L), one per input row, in the input's row order

1. **Initial scores** (:func:`tree_nodes`): LightGBM's trees as one ``ai.onnx.ml`` ``TreeEnsemble``
   node (opset 5) in float64, one output column per tree, summed tree after tree by ``CumSum``: the
   same additions in the same order as LightGBM's ``Predict`` (``0 + w_1 + w_2 + ...``), so the scores
   equal ``LambdaMART.predict``'s bit for bit (LightGBM's input conventions included: values with
   ``|x| <= 1e-35`` read as 0, NaN by each split's ``missing_type``, categorical splits as set
   membership).
2. **The cut** (:class:`RerankServing`, :func:`initial_places`): each list ordered by descending
   initial score with the project's order-free tie rule (:func:`ctxrank.data.lists.initial_order`:
   tied scores by the hash :func:`ctxrank.data.ranking_data.feature_hash` of the raw float32 features, then
   by row), and its first ``top_k`` kept; the hash is computed in the graph from the features' IEEE
   bits (:func:`float32_bits`, exact integer arithmetic on 16-bit limbs: ONNX has no bit cast and no
   wrapping uint64 product). ``initial_rank`` is the average rank of tied scores
   (:func:`ctxrank.data.lists.truncate_top_k`), ``initial_score`` the float32 initial score.
3. **Re-ranking**: the saved normalizer and neural re-ranker (``ctxrank.export.ServingModel`` /
   ``EnsembleServing``, given to :class:`RerankServing`) on the kept lists.
4. **The merge** (:func:`ctxrank.training.rerank.merge_scores`): the kept items by re-ranker score (ties
   by initial place), then the cut items in initial order; each row's score is ``-rank`` (0-based),
   and interchangeable rows (same initial score, identical features, adjacent in the initial order)
   share their group's best rank. These are the values ``ctxrank predict`` gives.

Steps 2-4 are a torch module, exported by ``torch.onnx.export`` with the initial scores as an input;
:func:`splice_trees` then replaces that input by the tree nodes (graph surgery, not
``onnx.compose.merge_models``: both graphs read the input ``features``, which the merged graph
would list twice, and onnx 1.23's checker refuses that as not in SSA form).
Sorting is done by pairwise comparisons ((B, L, L) booleans): exact for any key, no stable sort needed,
and the list length stays dynamic. TorchScript cannot hold LightGBM's trees: a re-ranking model exports
to ONNX only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from ctxrank.data.ranking_data import feature_hash_multipliers

__all__ = [
    "INITIAL_SCORES",
    "ML_OPSET",
    "RerankServing",
    "float32_bits",
    "initial_places",
    "splice_trees",
    "tree_nodes",
]

ML_OPSET = 5  #: ai.onnx.ml opset of the TreeEnsemble node (float64 splits and leaf weights)
INITIAL_SCORES = "initial_scores"  # the torch graph's input that the tree nodes replace
LIGHTGBM_ZERO = 1e-35  # LightGBM's kZeroThreshold: |x| <= it is read as 0 (dense rows, include/meta.h)
_POW2 = torch.tensor([2.0**k for k in range(-150, 129)], dtype=torch.float64)  # 2^-150 .. 2^128
_LIMB = 65536  # 2^16
_NEVER = 2**62  # above every rank


# ------------------------------------------------------------------------------ the tie rule's hash
def float32_bits(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The IEEE-754 bits of float32 ``x`` (any shape) as two int64 halves ``(bits >> 16, bits & 0xFFFF)``,
    by exact float64 arithmetic (ONNX has no bit cast): ``|x| = (1 + M / 2^23) 2^(E - 127)`` (normal)
    or ``M 2^-149`` (subnormal), ``bits = sign 2^31 + E 2^23 + M``. The exponent is ``floor(log2 |x|)``
    corrected by one comparison with exact powers of two either way. ``-0.0`` keeps its sign bit; every
    NaN gives the canonical quiet NaN ``0x7FC00000`` (the NaN of ctxrank's readers; ONNX cannot read a
    NaN's sign or payload)."""
    x = x.double()
    a = x.abs()
    nan, inf, zero = torch.isnan(a), torch.isinf(a), a == 0
    negative = (x < 0) | (zero & (1.0 / x < 0))  # 1 / -0.0 = -inf
    safe = torch.where(nan | inf | zero, torch.ones_like(a), a)
    pow2 = _POW2.to(x.device)
    e0 = torch.floor(torch.log(safe) / float(np.log(2.0))).clamp(-149.0, 127.0)
    idx = (e0 + 150.0).long()
    e = e0 - (safe < pow2[idx]).double() + (safe >= pow2[idx + 1]).double()
    normal = safe >= 2.0**-126
    scale = pow2[(e.clamp(-149.0, 127.0) + 150.0).long()]
    mantissa = torch.where(normal, (safe / scale - 1.0) * 2.0**23, safe * 2.0**149)
    exponent = torch.where(normal, e + 127.0, torch.zeros_like(e))
    special = nan | inf | zero
    mantissa = torch.where(
        special, torch.where(nan, torch.full_like(a, 2.0**22), torch.zeros_like(a)), mantissa
    )
    exponent = torch.where(
        special, torch.where(zero, torch.zeros_like(a), torch.full_like(a, 255.0)), exponent
    )
    high_m = torch.floor(mantissa / _LIMB)
    low = mantissa - high_m * _LIMB
    high = negative.double() * 2.0**15 + exponent * 2.0**7 + high_m
    return high.long(), low.long()


def _limbs(mult: np.ndarray) -> torch.Tensor:
    """int64 (4, F): the 16-bit limbs of uint64 (F,) constants, least significant first."""
    return torch.from_numpy(
        np.stack([(mult >> np.uint64(16 * j)) & np.uint64(0xFFFF) for j in range(4)]).astype(np.int64)
    )


def _floor_div(x: torch.Tensor, d: int) -> torch.Tensor:
    return torch.div(x, d, rounding_mode="floor")


def feature_hash(features: torch.Tensor, limbs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`ctxrank.data.ranking_data.feature_hash` of float32 rows (..., F) as ``(hash >> 32, hash &
    0xFFFFFFFF)`` int64 (...,): ``sum_f bits_f * m_f mod 2^64`` on 16-bit limbs (every partial product
    < 2^32, every column sum < 2^33 F: exact in int64 for F < 2^30), then the carries."""
    b1, b0 = float32_bits(features)  # (..., F)
    m0, m1, m2, m3 = limbs[0], limbs[1], limbs[2], limbs[3]
    c = [
        (b0 * m0).sum(-1),
        (b0 * m1 + b1 * m0).sum(-1),
        (b0 * m2 + b1 * m1).sum(-1),
        (b0 * m3 + b1 * m2).sum(-1),  # b1 * m3 is a multiple of 2^64
    ]
    h, carry = [], torch.zeros_like(c[0])
    for part in c:
        total = part + carry
        carry = _floor_div(total, _LIMB)
        h.append(total - carry * _LIMB)
    return h[3] * _LIMB + h[2], h[1] * _LIMB + h[0]


def initial_places(
    scores: torch.Tensor, mask: torch.Tensor, key_high: torch.Tensor, key_low: torch.Tensor
) -> torch.Tensor:
    """int64 (B, L): each item's 0-based place in :func:`ctxrank.data.lists.initial_order` within its
    row: descending ``scores`` (float64 (B, L)), ties by the hash ``(key_high, key_low)`` ascending,
    then by position; padded items after every real one. A permutation of 0..L-1 per row.

    ``place_i = #{j : j precedes i}`` over all pairs ((B, L, L) comparisons)."""
    s = torch.where(mask, scores, torch.full_like(scores, -torch.inf))
    hi = torch.where(mask, key_high, torch.zeros_like(key_high))
    lo = torch.where(mask, key_low, torch.zeros_like(key_low))
    pos = torch.cumsum(torch.ones_like(hi), dim=1)

    def pair(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # (B, L_j, 1), (B, 1, L_i)
        return v.unsqueeze(2), v.unsqueeze(1)

    (sj, si), (hj, hi_), (lj, li), (pj, pi) = pair(s), pair(hi), pair(lo), pair(pos)
    tied_key = (lj < li) | ((lj == li) & (pj < pi))
    precedes = (sj > si) | ((sj == si) & ((hj < hi_) | ((hj == hi_) & tied_key)))
    return precedes.long().sum(dim=1)


def average_ranks(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """float64 (B, L) 1-based rank of each real item by descending ``scores`` within its row, tied
    scores sharing their average rank (:func:`ctxrank.data.lists.truncate_top_k`'s ``initial_rank``):
    ``#{j: s_j > s_i} + (#{j: s_j = s_i} + 1) / 2`` over real ``j``."""
    s = torch.where(mask, scores, torch.full_like(scores, -torch.inf))
    sj, si = s.unsqueeze(2), s.unsqueeze(1)
    above = (sj > si).double().sum(dim=1)
    equal = ((sj == si) & mask.unsqueeze(2)).double().sum(dim=1)
    return above + (equal + 1.0) / 2.0


def _take(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``x`` (B, L[, D]) at the positions ``index`` (B, M) of each row -> (B, M[, D])."""
    if x.dim() == 2:
        return torch.gather(x, 1, index)
    return torch.gather(x, 1, index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


# ------------------------------------------------------------------------------ cut, re-rank, merge
class RerankServing(nn.Module):
    """Steps 2-4 of the module docstring: ``(features float32 (B, L, F) raw, mask bool (B, L),
    initial_scores float64 (B, L)[, categorical int64 (B, L, C)]) -> scores float32 (B, L)``
    (``-rank`` per row, 0 at padding).

    Args:
        reranker: ``ServingModel`` / ``EnsembleServing`` of the re-ranker (its features: the F raw
            ones, then ``initial_rank`` and/or ``initial_score``).
        n_features: F, the initial ranker's features.
        top_k, rank_feature, score_feature: ``ctxrank.json["rerank"]``.
    """

    def __init__(
        self, reranker: nn.Module, n_features: int, top_k: int, rank_feature: bool, score_feature: bool
    ) -> None:
        super().__init__()
        extra = int(rank_feature) + int(score_feature)
        if reranker.n_features != n_features + extra:
            raise ValueError(
                f"the re-ranker reads {reranker.n_features} features, expected {n_features} + {extra} "
                "(initial rank / score)"
            )
        self.reranker = reranker.eval()
        self.n_features, self.n_categorical = int(n_features), int(reranker.n_categorical)
        self.top_k, self.rank_feature, self.score_feature = (
            int(top_k),
            bool(rank_feature),
            bool(score_feature),
        )
        self.register_buffer("hash_limbs", _limbs(feature_hash_multipliers(n_features)))

    # the re-ranker's, for ctxrank.export's example inputs and messages
    @property
    def model(self) -> nn.Module:
        return self.reranker.model

    @property
    def normalizer(self) -> nn.Module:
        return self.reranker.normalizer

    def forward(
        self,
        features: torch.Tensor,
        mask: torch.Tensor,
        initial_scores: torch.Tensor,
        categorical: torch.Tensor | None = None,
    ) -> torch.Tensor:
        mask = mask.bool()
        initial_scores = initial_scores.double()
        high, low = feature_hash(features, self.hash_limbs)
        place = initial_places(initial_scores, mask, high, low)  # (B, L) item -> place
        row = torch.cumsum(torch.ones_like(place), dim=1) - 1  # (B, L) 0..L-1
        order = torch.zeros_like(place).scatter(1, place, row)  # (B, L) place -> item
        kept = order[:, : self.top_k]  # (B, L') with L' = min(L, k)

        # the re-ranker's lists: raw features + initial rank / score, in initial order
        columns = [_take(features, kept)]
        if self.rank_feature:
            columns.append(_take(average_ranks(initial_scores, mask), kept).float().unsqueeze(-1))
        if self.score_feature:
            columns.append(_take(initial_scores, kept).float().unsqueeze(-1))
        kept_mask = _take(mask, kept)
        inputs = [torch.cat(columns, dim=-1) if len(columns) > 1 else columns[0], kept_mask]
        if self.n_categorical:
            if categorical is None:
                raise ValueError(f"this model needs categorical codes (B, L, {self.n_categorical})")
            inputs.append(_take(categorical, kept))
        y = self.reranker(*inputs)  # (B, L')

        # merge_scores: kept items by re-ranker score (ties: initial place), then the rest in initial order
        yq, yp = y.unsqueeze(2), y.unsqueeze(1)
        kq = torch.cumsum(torch.ones_like(kept), dim=1).unsqueeze(2)
        kp = kq.transpose(1, 2)
        before = kept_mask.unsqueeze(2) & ((yq > yp) | ((yq == yp) & (kq < kp)))
        kept_rank = before.long().sum(dim=1)  # (B, L')
        by_place = torch.where(
            row < self.top_k, torch.gather(kept_rank, 1, row.clamp(max=self.top_k - 1)), row
        )

        # interchangeable rows: adjacent in the initial order, same score, identical features
        f_sorted, s_sorted, m_sorted = (
            _take(features, order),
            _take(initial_scores, order),
            _take(mask, order),
        )
        previous = torch.cat([order[:, :1], order[:, :-1]], dim=1)
        same = (
            (row > 0)
            & m_sorted
            & _take(mask, previous)
            & (s_sorted == _take(initial_scores, previous))
            & (f_sorted == _take(features, previous)).all(dim=-1)
        )
        group = torch.cumsum((~same).long(), dim=1)  # (B, L) run of interchangeable rows
        shared = group.unsqueeze(2) == group.unsqueeze(1)
        never = torch.full_like(by_place, _NEVER).unsqueeze(2)
        best = torch.where(shared, by_place.unsqueeze(2), never).min(dim=1).values  # (B, L) by place
        rank = torch.gather(best, 1, place)  # back to the input's rows
        return torch.where(mask, -rank.float(), torch.zeros_like(features[..., 0]))


# ------------------------------------------------------------------------------ LightGBM's trees
def _lgb_node_attrs(booster: Any, n_trees: int) -> dict[str, Any]:
    """The ``TreeEnsemble`` (ai.onnx.ml 5) attributes of LightGBM's first ``n_trees`` trees, one target
    per tree, from LightGBM's own dump (``Booster.dump_model``: thresholds and leaf values printed with
    17 significant digits, so they are read back exactly).

    LightGBM's decisions (``Tree::NumericalDecision`` / ``CategoricalDecision``): a numerical split goes
    left when ``x <= threshold``; NaN goes the ``default_left`` way when ``missing_type`` is NaN, and is
    read as 0 otherwise (so left when ``0 <= threshold``); ``missing_type`` Zero sends 0 the default way
    (refused when that differs from ``0 <= threshold``: one node cannot say it). A categorical split
    goes left when the code is in its set."""
    dump = booster.dump_model(num_iteration=n_trees)
    trees = dump["tree_info"]
    if len(trees) != n_trees:
        raise ValueError(f"the LightGBM model holds {len(trees)} trees, expected {n_trees}")
    a: dict[str, list] = {k: [] for k in (
        "featureids", "modes", "splits", "truenodeids", "trueleafs", "falsenodeids", "falseleafs",
        "missing", "roots", "leaf_target", "leaf_weight", "members")}  # fmt: skip

    def leaf(value: float, t: int) -> int:
        a["leaf_target"].append(t)
        a["leaf_weight"].append(float(value))
        return len(a["leaf_weight"]) - 1

    def child(node: dict, t: int) -> tuple[int, int]:  # (id, is_leaf)
        return (leaf(node["leaf_value"], t), 1) if "leaf_value" in node else (split(node, t), 0)

    def split(node: dict, t: int) -> int:
        i = len(a["modes"])
        for key in (
            "featureids",
            "modes",
            "splits",
            "truenodeids",
            "trueleafs",
            "falsenodeids",
            "falseleafs",
            "missing",
        ):
            a[key].append(0)
        a["featureids"][i] = int(node["split_feature"])
        kind, missing = node["decision_type"], node["missing_type"]
        if kind == "==":  # categorical: codes in the set go left; NaN and negatives right
            a["modes"][i], a["splits"][i] = 6, np.nan  # BRANCH_MEMBER
            a["members"].append([float(c) for c in str(node["threshold"]).split("||")])
        elif kind == "<=":
            threshold = float(node["threshold"])
            zero_left = 0.0 <= threshold
            if missing == "NaN":
                a["missing"][i] = int(bool(node["default_left"]))
            elif missing == "None":
                a["missing"][i] = int(zero_left)
            elif missing == "Zero" and bool(node["default_left"]) == zero_left:
                a["missing"][i] = int(zero_left)
            else:
                raise ValueError(
                    f"tree {t}: a split with missing_type {missing!r} whose default direction differs from "
                    "0 <= threshold (zero_as_missing) cannot be written as an ONNX tree node"
                )
            a["modes"][i], a["splits"][i] = 0, threshold  # BRANCH_LEQ
        else:  # pragma: no cover - LightGBM writes only these two
            raise ValueError(f"tree {t}: unknown LightGBM decision type {kind!r}")
        a["truenodeids"][i], a["trueleafs"][i] = child(node["left_child"], t)
        a["falsenodeids"][i], a["falseleafs"][i] = child(node["right_child"], t)
        return i

    for t, tree in enumerate(trees):
        root = tree["tree_structure"]
        if "leaf_value" in root:  # a one-leaf tree: a split whose both ways reach the leaf
            i = len(a["modes"])
            target = leaf(root["leaf_value"], t)
            one_leaf = {"featureids": 0, "modes": 0, "splits": 0.0, "truenodeids": target, "trueleafs": 1,
                        "falsenodeids": target, "falseleafs": 1, "missing": 1}  # fmt: skip
            for key, value in one_leaf.items():
                a[key].append(value)
            a["roots"].append(i)
        else:
            a["roots"].append(split(root, t))
    return a


def tree_nodes(booster: Any, n_trees: int, n_features: int, n_categorical: int, prefix: str = "lgbm/"):
    """(ONNX nodes, initializers) computing ``initial_scores`` float64 (B, L) from the graph inputs
    ``features`` float32 (B, L, F)[ and ``categorical`` int64 (B, L, C)]: LightGBM's input row (the
    features, then the codes as numbers), values with ``|x| <= 1e-35`` set to 0 as LightGBM's dense rows
    do, one ``TreeEnsemble`` with one target per tree (each output is one leaf value, exact), and
    ``CumSum`` over the trees: each prefix sum is ``previous + next tree`` in float64, LightGBM's order
    (onnxruntime's CumSum adds slice after slice)."""
    from onnx import TensorProto, helper, numpy_helper

    a = _lgb_node_attrs(booster, n_trees)
    p = prefix
    inits = [
        numpy_helper.from_array(np.array([-1, n_features + n_categorical], dtype=np.int64), f"{p}row_shape"),
        numpy_helper.from_array(np.array(LIGHTGBM_ZERO, dtype=np.float64), f"{p}zero_threshold"),
        numpy_helper.from_array(np.array(0.0, dtype=np.float64), f"{p}zero"),
        numpy_helper.from_array(np.array(0, dtype=np.int64), f"{p}axis0"),
        numpy_helper.from_array(np.array(-1, dtype=np.int64), f"{p}last"),
    ]
    nodes = [helper.make_node("Cast", ["features"], [f"{p}x64"], to=TensorProto.DOUBLE, name=f"{p}cast")]
    row = f"{p}x64"
    if n_categorical:
        nodes += [
            helper.make_node(
                "Cast", ["categorical"], [f"{p}c64"], to=TensorProto.DOUBLE, name=f"{p}cast_codes"
            ),
            helper.make_node("Concat", [row, f"{p}c64"], [f"{p}xc"], axis=-1, name=f"{p}concat"),
        ]
        row = f"{p}xc"
    members = [v for s in a["members"] for v in [*s, np.nan]][:-1] if a["members"] else []
    ensemble = dict(
        nodes_featureids=a["featureids"],
        nodes_modes=numpy_helper.from_array(np.array(a["modes"], dtype=np.uint8)),
        nodes_splits=numpy_helper.from_array(np.array(a["splits"], dtype=np.float64)),
        nodes_truenodeids=a["truenodeids"],
        nodes_trueleafs=a["trueleafs"],
        nodes_falsenodeids=a["falsenodeids"],
        nodes_falseleafs=a["falseleafs"],
        nodes_missing_value_tracks_true=a["missing"],
        tree_roots=a["roots"],
        leaf_targetids=a["leaf_target"],
        leaf_weights=numpy_helper.from_array(np.array(a["leaf_weight"], dtype=np.float64)),
        n_targets=n_trees,
        aggregate_function=1,  # SUM: one leaf per target, so each output is that leaf's value
        post_transform=0,
    )
    if members:
        ensemble["membership_values"] = numpy_helper.from_array(np.array(members, dtype=np.float64))
    nodes += [
        helper.make_node("Reshape", [row, f"{p}row_shape"], [f"{p}rows"], name=f"{p}rows"),
        helper.make_node("Abs", [f"{p}rows"], [f"{p}abs"], name=f"{p}abs"),
        helper.make_node("LessOrEqual", [f"{p}abs", f"{p}zero_threshold"], [f"{p}tiny"], name=f"{p}tiny"),
        helper.make_node("Where", [f"{p}tiny", f"{p}zero", f"{p}rows"], [f"{p}input"], name=f"{p}input"),
        helper.make_node(
            "TreeEnsemble", [f"{p}input"], [f"{p}leaves"], domain="ai.onnx.ml", name=f"{p}trees", **ensemble
        ),
        helper.make_node("Transpose", [f"{p}leaves"], [f"{p}by_tree"], perm=[1, 0], name=f"{p}by_tree"),
        helper.make_node("CumSum", [f"{p}by_tree", f"{p}axis0"], [f"{p}prefix"], name=f"{p}prefix"),
        helper.make_node("Gather", [f"{p}prefix", f"{p}last"], [f"{p}total"], axis=0, name=f"{p}total"),
        helper.make_node("Shape", ["features"], [f"{p}bl"], start=0, end=2, name=f"{p}bl"),
        helper.make_node("Reshape", [f"{p}total", f"{p}bl"], [INITIAL_SCORES], name=f"{p}scores"),
    ]
    return nodes, inits


def splice_trees(proto: Any, booster: Any, n_trees: int, n_features: int, n_categorical: int) -> None:
    """Replace the graph input ``initial_scores`` of ``proto`` (the exported :class:`RerankServing`)
    by LightGBM's trees (:func:`tree_nodes`), in place; the inputs become ``features``, ``mask``[,
    ``categorical``] and the model imports ``ai.onnx.ml`` opset :data:`ML_OPSET`."""
    from onnx import helper

    graph = proto.graph
    names = [i.name for i in graph.input]
    if INITIAL_SCORES not in names:
        raise ValueError(f"the exported re-ranker has no input {INITIAL_SCORES!r}: {names}")
    nodes, inits = tree_nodes(booster, n_trees, n_features, n_categorical)
    kept = [i for i in graph.input if i.name != INITIAL_SCORES]
    if n_categorical and "categorical" not in names:  # the re-ranker ignores the codes the trees read
        raise ValueError("the exported re-ranker does not take the categorical codes the trees read")
    del graph.input[:]
    graph.input.extend(kept)
    old = list(graph.node)
    del graph.node[:]
    graph.node.extend([*nodes, *old])
    graph.initializer.extend(inits)
    if not any(o.domain == "ai.onnx.ml" for o in proto.opset_import):
        proto.opset_import.append(helper.make_opsetid("ai.onnx.ml", ML_OPSET))
