"""A re-ranking model as ONE ONNX graph: LambdaMART's trees, the top-k cut, the re-ranker, the merge.

A model trained with ``rerank.initial = "lambdamart"`` scores a query in four steps
(:class:`ctxrank.training.rerank.RerankPredictor`); the graph runs all of them::

    (features float32 (B, L, F) raw, mask bool (B, L)[, categorical int64 (B, L, C)])
        -> scores float32 (B, L), one per input row, in the input's row order

1. **Initial scores** (:func:`tree_nodes`): LightGBM's trees as one ``ai.onnx.ml`` ``TreeEnsemble``
   node (opset 5) in float64, one output column per tree, summed tree after tree by ``CumSum``: the
   same additions in the same order as LightGBM's ``Predict`` (``0 + w_1 + w_2 + ...``), so the scores
   equal ``LambdaMART.predict``'s bit for bit (LightGBM's input conventions included: values with
   ``|x| <= 1e-35f`` read as 0, NaN by each split's ``missing_type``, categorical splits as set
   membership). The node's own sum would need no (items x trees) output, but onnxruntime's threads add
   blocks of trees apart, not in LightGBM's order (docs/export.md).
2. **The cut** (:func:`ctxrank.training.rerank.graph_cut`): each list ordered by stable sorts (ONNX
   ``TopK``, O(L log L)), by descending initial score with the project's order-free tie rule
   (:func:`ctxrank.data.lists.initial_order`: tied scores by the hash of the raw float32 features,
   then by row), and its first ``top_k`` kept, with the
   ``initial_rank`` (average rank of tied scores) and ``initial_score`` features
   (:func:`ctxrank.training.rerank.graph_top_features`).
3. **Re-ranking**: the saved normalizer and neural re-ranker (:class:`ctxrank.export.ServingModel` /
   ``EnsembleServing``, given to :class:`RerankServing`) on the kept lists.
4. **The merge** (:func:`ctxrank.training.rerank.graph_merge`, the graph form of
   :func:`~ctxrank.training.rerank.merge_scores`): the kept items by re-ranker score (ties by initial
   place), then the cut items in initial order; each row's score is ``-rank`` (0-based), and
   interchangeable rows share their group's best rank. These are the values ``ctxrank predict`` gives.

Steps 2-4 are a torch module, exported by ``torch.onnx.export`` with the initial scores as an input;
:func:`splice_trees` then replaces that input by the tree nodes (graph surgery, not
``onnx.compose.merge_models``: both graphs read the input ``features``, which the merged graph
would list twice, and onnx 1.23's checker refuses that as not in SSA form). TorchScript cannot hold
LightGBM's trees: a re-ranking model exports to ONNX only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from ctxrank.data.ranking_data import feature_hash_multipliers
from ctxrank.training.rerank import graph_cut, graph_merge, graph_top_features, hash_weights, take
from ctxrank.training.rerank_spec import RerankSpec

__all__ = [
    "INITIAL_SCORES",
    "ML_OPSET",
    "RerankServing",
    "splice_trees",
    "tree_nodes",
]

ML_OPSET = 5  #: ai.onnx.ml opset of the TreeEnsemble node (float64 splits and leaf weights)
INITIAL_SCORES = "initial_scores"  # the torch graph's input that the tree nodes replace
# LightGBM's kZeroThreshold (include/meta.h: ``const double kZeroThreshold = 1e-35f``, a float32 value):
# dense rows read |x| <= it as 0; compared in float32 on the raw features, the same test
LIGHTGBM_ZERO = np.float32(1e-35)


# ------------------------------------------------------------------------------ cut, re-rank, merge
class RerankServing(nn.Module):
    """Steps 2-4 of the module docstring: ``(features float32 (B, L, F) raw, mask bool (B, L),
    initial_scores float64 (B, L)[, categorical int64 (B, L, C)]) -> scores float32 (B, L)``
    (``-rank`` per row, 0 at padding).

    Args:
        reranker: ``ServingModel`` / ``EnsembleServing`` of the re-ranker (its features: the F raw
            ones, then ``initial_rank`` and/or ``initial_score``).
        n_features: F, the initial ranker's features.
        spec: the re-rank settings (``top_k``, ``rank_feature``, ``score_feature``).
    """

    def __init__(self, reranker: nn.Module, n_features: int, spec: RerankSpec) -> None:
        super().__init__()
        extra = spec.n_extra_features
        if reranker.n_features != n_features + extra:
            raise ValueError(
                f"the re-ranker reads {reranker.n_features} features, expected {n_features} + {extra} "
                "(initial rank / score)"
            )
        self.reranker = reranker.eval()
        self.n_features, self.n_categorical = int(n_features), int(reranker.n_categorical)
        self.top_k, self.rank_feature, self.score_feature = spec.top_k, spec.rank_feature, spec.score_feature
        self.register_buffer("hash_weights", hash_weights(feature_hash_multipliers(n_features)))

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
        cut = graph_cut(features, mask, initial_scores, self.hash_weights, self.top_k)
        top = graph_top_features(features, mask, initial_scores, cut, self.rank_feature, self.score_feature)
        inputs = [top, cut.kept_mask]
        if self.n_categorical:
            if categorical is None:
                raise ValueError(f"this model needs categorical codes (B, L, {self.n_categorical})")
            inputs.append(take(categorical, cut.kept))
        return graph_merge(self.reranker(*inputs), cut, features, mask, initial_scores)


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
        mode, value, missing, members = _lgb_split(node, t)
        for key, v in (("featureids", int(node["split_feature"])), ("modes", mode), ("splits", value),
                       ("missing", missing), ("truenodeids", 0), ("trueleafs", 0), ("falsenodeids", 0),
                       ("falseleafs", 0)):  # fmt: skip
            a[key].append(v)
        if members is not None:
            a["members"].append(members)
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


def _lgb_split(node: dict, t: int) -> tuple[int, float, int, list[float] | None]:
    """``(mode, split value, missing value goes the true way, category set or None)`` of one LightGBM
    split node of tree ``t`` as a ``TreeEnsemble`` node (the rules: :func:`_lgb_node_attrs`)."""
    kind, missing = node["decision_type"], node["missing_type"]
    if kind == "==":  # categorical: codes in the set go left; NaN and negatives right
        return 6, np.nan, 0, [float(c) for c in str(node["threshold"]).split("||")]  # BRANCH_MEMBER
    if kind != "<=":  # pragma: no cover - LightGBM writes only these two
        raise ValueError(f"tree {t}: unknown LightGBM decision type {kind!r}")
    threshold = float(node["threshold"])  # BRANCH_LEQ
    zero_left = 0.0 <= threshold
    if missing == "NaN":
        return 0, threshold, int(bool(node["default_left"])), None
    if missing == "None" or (missing == "Zero" and bool(node["default_left"]) == zero_left):
        return 0, threshold, int(zero_left), None
    raise ValueError(
        f"tree {t}: a split with missing_type {missing!r} whose default direction differs from "
        "0 <= threshold (zero_as_missing) cannot be written as an ONNX tree node"
    )


def zero_test_matters(attrs: dict[str, Any], n_features: int) -> bool:
    """Whether reading ``|x| <= kZeroThreshold`` as 0 (LightGBM's dense rows) can change a decision of
    the trees (``attrs``: :func:`_lgb_node_attrs`) on the F raw features: a numerical split whose
    threshold ``t`` lies in ``[-Z, Z)`` (then ``x <= t`` and ``0 <= t`` differ for some such ``x``; the
    usual thresholds next to 0 are ``+-Z``, and ``-Z`` is one) or a categorical split on a raw feature
    (a tiny value is not the code 0). A one-leaf tree's placeholder split decides nothing; the
    categorical codes after the F features are integers."""
    z = float(LIGHTGBM_ZERO)
    nodes = zip(attrs["featureids"], attrs["modes"], attrs["splits"], attrs["trueleafs"], attrs["falseleafs"],
                attrs["truenodeids"], attrs["falsenodeids"], strict=True)  # fmt: skip
    for feature, mode, t, true_leaf, false_leaf, true_id, false_id in nodes:
        one_leaf = true_leaf and false_leaf and true_id == false_id
        if feature < n_features and not one_leaf and (mode != 0 or -z <= t < z):
            return True
    return False


def tree_nodes(booster: Any, n_trees: int, n_features: int, n_categorical: int, prefix: str = "lgbm/"):
    """(ONNX nodes, initializers) computing ``initial_scores`` float64 (B, L) from the graph inputs
    ``features`` float32 (B, L, F)[ and ``categorical`` int64 (B, L, C)]: LightGBM's input row (the
    features, then the codes as numbers), features with ``|x| <= 1e-35f`` (:data:`LIGHTGBM_ZERO`) set to
    0 as LightGBM's dense rows do (where that can change a decision: :func:`zero_test_matters`), one
    ``TreeEnsemble`` with one target per tree (each output is one leaf value, exact), and ``CumSum``
    over the trees: each prefix sum is ``previous + next tree`` in float64, LightGBM's order
    (onnxruntime's CumSum adds slice after slice)."""
    from onnx import TensorProto, helper, numpy_helper

    a = _lgb_node_attrs(booster, n_trees)
    p = prefix
    inits = [
        numpy_helper.from_array(np.array([-1, n_features + n_categorical], dtype=np.int64), f"{p}row_shape"),
        numpy_helper.from_array(np.array(0, dtype=np.int64), f"{p}axis0"),
        numpy_helper.from_array(np.array(-1, dtype=np.int64), f"{p}last"),
    ]
    nodes = []
    if zero_test_matters(a, n_features):  # |x| <= kZeroThreshold to 0, in float32 (the same test)
        inits += [
            numpy_helper.from_array(np.array(LIGHTGBM_ZERO, dtype=np.float32), f"{p}zero_threshold"),
            numpy_helper.from_array(np.array(0.0, dtype=np.float32), f"{p}zero"),
        ]
        nodes += [
            helper.make_node("Abs", ["features"], [f"{p}abs"], name=f"{p}abs"),
            helper.make_node("LessOrEqual", [f"{p}abs", f"{p}zero_threshold"], [f"{p}tiny"], name=f"{p}tiny"),
            helper.make_node("Where", [f"{p}tiny", f"{p}zero", "features"], [f"{p}x"], name=f"{p}zeroed"),
        ]
    x = f"{p}x" if nodes else "features"
    nodes.append(helper.make_node("Cast", [x], [f"{p}x64"], to=TensorProto.DOUBLE, name=f"{p}cast"))
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
        helper.make_node(
            "TreeEnsemble", [f"{p}rows"], [f"{p}leaves"], domain="ai.onnx.ml", name=f"{p}trees", **ensemble
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
