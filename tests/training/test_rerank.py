"""Re-ranking protocol: top-k preparation and full-query evaluation after re-ranking."""

import dataclasses

import numpy as np
import pytest
import torch

from ctxrank.data.ranking_data import RankingData, feature_hash_multipliers
from ctxrank.metrics import evaluate_queries
from ctxrank.training.rerank import (
    evaluation_target,
    graph_cut,
    graph_merge,
    graph_top_features,
    hash_weights,
    merge_scores,
    prepare_split,
)
from ctxrank.training.rerank_spec import RerankSpec
from tests.conftest import make_ranking_data


def _data():
    # query a: 5 items, the only relevant one (label 2) has the 4th best initial score
    # query b: 2 items
    x = np.arange(7, dtype=np.float32)[:, None]
    return RankingData(
        features=x,
        labels=np.array([0, 0, 0, 2, 0, 1, 0], dtype=np.float32),
        query_ids=np.array(["a", "b"]),
        query_offsets=np.array([0, 5, 7]),
    )


INITIAL = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.1, 0.2])


def test_prepare_orders_by_initial_score_and_adds_features():
    s = prepare_split(_data(), INITIAL, k=3, rank_feature=True, score_feature=True)
    assert s.rows.tolist() == [0, 1, 2, 6, 5]
    assert s.top.feature_names[-2:] == ("initial_rank", "initial_score")
    np.testing.assert_array_equal(s.top.features[:, 1], [1, 2, 3, 1, 2])
    np.testing.assert_allclose(s.top_initial_scores, INITIAL[s.rows].astype(np.float32))


def test_cut_off_relevant_item_counts_in_the_ideal_dcg():
    s = prepare_split(_data(), INITIAL, k=3)
    rerank = np.array([0.0, 0.0, 1.0, 0.0, 1.0])  # re-ranker lifts row 2 in query a, row 5 in query b
    merged = merge_scores(s, rerank)
    # final order a: row 2, row 0, row 1 (kept), then 3, 4 (cut, initial order); b: row 5, row 6
    order_a = np.argsort(-merged[:5], kind="stable")
    assert order_a.tolist() == [2, 0, 1, 3, 4]
    assert np.argsort(-merged[5:], kind="stable").tolist() == [0, 1]
    full = evaluate_queries(*[merged, s.full.labels, s.full.query_offsets], ["ndcg@10"])["ndcg@10"]
    # relevant item of query a at rank 4: DCG = 3/log2(5), ideal = 3/log2(2)
    assert full[0] == pytest.approx(1 / np.log2(5))
    scores, data = evaluation_target(s, rerank, ideal="top-k")
    top = evaluate_queries(scores, data.labels, data.query_offsets, ["ndcg@10"])["ndcg@10"]
    assert top[0] == 0.0  # the relevant item is not in the top-3 list at all (no relevant: 0)
    assert full[1] == top[1] == 1.0


def test_identity_rerank_reproduces_the_initial_ranking():
    d = make_ranking_data(50, max_len=30, seed=4)
    initial = np.random.default_rng(0).normal(size=d.n_items)
    s = prepare_split(d, initial, k=7)
    merged = merge_scores(s, s.initial_scores[s.rows])
    a = evaluate_queries(merged, d.labels, d.query_offsets, ["ndcg@10", "map", "ndcg@30"])
    b = evaluate_queries(initial, d.labels, d.query_offsets, ["ndcg@10", "map", "ndcg@30"])
    for k in a:
        np.testing.assert_allclose(a[k], b[k], atol=1e-12)


def test_merged_scores_are_never_negative_zero():
    """Each query's first item scores 0.0, not -0.0: ``ctxrank predict`` writes the text the exported
    graph's scores give (a file diff of the two is empty)."""
    s = prepare_split(_data(), INITIAL, k=3)
    merged = merge_scores(s, np.array([0.0, 0.0, 1.0, 0.0, 1.0]))
    assert (merged == 0).sum() == 2  # one first item a query
    assert not np.signbit(merged[merged == 0]).any()


def test_merge_errors():
    s = prepare_split(_data(), INITIAL, k=3)
    with pytest.raises(ValueError, match="expected 5 re-ranking scores"):
        merge_scores(s, np.zeros(4))
    with pytest.raises(ValueError, match="finite"):
        merge_scores(s, np.array([0, 0, np.nan, 0, 0]))
    with pytest.raises(ValueError, match="ideal must be one of"):
        evaluation_target(s, np.zeros(5), ideal="nope")


def test_interchangeable_items_at_the_cut_get_one_score_whatever_the_file_order():
    """Rows 1 and 2 have identical features and initial score: the cut at k = 2 keeps one of them by
    position. Both take the rank the re-ranker gave their feature vector, so shuffling the file changes
    no row's score (before: the kept one ranked 1st, the other 3rd, decided by file order)."""
    x = np.array([[3.0], [1.0], [1.0], [0.0]], dtype=np.float32)
    data = RankingData(
        features=x,
        labels=np.array([0, 1, 0, 0], dtype=np.float32),
        query_ids=np.array(["q"]),
        query_offsets=np.array([0, 4]),
    )
    init = np.array([3.0, 1.0, 1.0, 0.0])
    merged = merge_scores(prepare_split(data, init, k=2), np.array([0.0, 5.0]))  # re-ranker lifts the twin
    assert merged.tolist() == [-1.0, 0.0, 0.0, -3.0]
    for perm in ([2, 1, 0, 3], [3, 2, 1, 0]):
        shuffled = dataclasses.replace(data, features=x[perm], labels=data.labels[perm])
        split = prepare_split(shuffled, init[perm], k=2)
        rerank = np.where(split.top.features[:, 0] == 1.0, 5.0, 0.0)
        np.testing.assert_array_equal(merge_scores(split, rerank), merged[perm])


def test_one_initial_ranker_is_fitted_once_and_shared_by_every_entrance(monkeypatch):
    """The initial LambdaMART was fitted by four code paths (train, tune, experiment, Ray); now one
    ``InitialRanker`` per key, fitted once: the same model and training scores as fitting it directly."""
    from ctxrank.baselines import lambdamart
    from ctxrank.config import resolve_config
    from ctxrank.data.registry import load_fold
    from ctxrank.training.rerank import InitialRanker, InitialRankers

    fold = load_fold("mq2008", 1)
    fits = []
    real_fit = lambdamart.LambdaMART.fit
    def counted(self, *args, **kwargs):
        fits.append(1)
        return real_fit(self, *args, **kwargs)

    monkeypatch.setattr(lambdamart.LambdaMART, "fit", counted)
    shared = InitialRankers(fold.train, fold.valid)
    qilcm = resolve_config(None, [("model", "qilcm"), ("rerank.initial", "lambdamart"), ("train.seed", 3)])
    dlcm = resolve_config(None, [("model", "dlcm"), ("rerank.initial", "lambdamart"), ("train.seed", 3)])
    a, b = shared.for_config(qilcm), shared.for_config(dlcm)
    assert a is b and len(fits) == 1  # one key: (seed 3, 1 thread, default parameters)
    rerank = [("rerank.initial", "lambdamart"), ("rerank.initial_params", {"num_leaves": 7})]
    other = shared.for_config(resolve_config(None, [("model", "qilcm"), *rerank]))
    assert other is not a and len(fits) == 2
    direct = lambdamart.LambdaMART(seed=3, num_threads=1).fit(fold.train, fold.valid)
    np.testing.assert_array_equal(a.train_scores(fold.train, 0), direct.predict(fold.train))
    assert a.train_scores(fold.train, 0) is a.train_scores(fold.train, 0)  # computed once
    oof = lambdamart.cross_fit_predict(fold.train, n_folds=3, seed=3, **{
        k: v for k, v in direct.get_params().items() if k != "seed"})  # fmt: skip
    np.testing.assert_array_equal(a.train_scores(fold.train, 3), oof)
    assert InitialRanker.for_config(qilcm).key == a.key


def _rerank_run(model, transform, extra, monkeypatch, *, gather):
    """``run_training`` of a re-ranker on MQ2008-like synthetic data, with the top-k lists gathered when
    read (as ``prepare_split`` does) or copied (``gather=False``: the code before GatheredRows)."""
    from ctxrank.config import resolve_config
    from ctxrank.data import lists
    from ctxrank.training import rerank
    from ctxrank.training.run import run_training

    real = lists.truncate_top_k
    monkeypatch.setattr(rerank, "truncate_top_k", lambda *a, **k: real(*a, **{**k, "gather": gather}))
    train, valid, test = (make_ranking_data(60, 30, 8, seed=s, min_len=5) for s in (1, 2, 3))
    sets = [("model", model), ("rerank.initial", "lambdamart"), ("rerank.top_k", 10),
            ("transform", transform), ("train.max_epochs", 2), ("train.batch_size", 8), ("train.threads", 1),
            *extra]  # fmt: skip
    result = run_training(resolve_config(None, sets), train, valid, test, progress=False)
    state = {k: v.detach().clone() for k, v in result.predictor.reranker.model.state_dict().items()}
    return result.test_scores, state, [{k: v for k, v in e.items() if k != "seconds"} for e in result.history]


@pytest.mark.parametrize(
    ("model", "transform", "extra"),
    [
        ("qilcm", "zscore", []),
        ("dlcm", "minmax", [("rerank.rank_feature", True), ("model_params.gru_hidden", 16)]),
        ("dcm", "query-minmax", [("rerank.score_feature", True)]),
    ],
)
def test_gathered_top_k_lists_train_and_score_exactly_as_the_copies(model, transform, extra, monkeypatch):
    """The top-k lists of a re-ranking run are gathered from the split when read, not copied (0.56x the
    dense features at WEB30K's size): the trained weights and the test scores are bitwise those of the
    copies, with a row-wise normalizer (applied per batch), a per-query one (which copies) and the
    appended rank / score columns."""
    scores, state, history = _rerank_run(model, transform, extra, monkeypatch, gather=True)
    copied = _rerank_run(model, transform, extra, monkeypatch, gather=False)
    copied_scores, copied_state, copied_history = copied
    assert history == copied_history and len(history) == 2
    np.testing.assert_array_equal(scores, copied_scores)
    assert state.keys() == copied_state.keys()
    for k in state:
        assert torch.equal(state[k], copied_state[k]), k


def test_a_rerank_run_with_a_row_wise_normalizer_never_copies_the_top_k_lists(monkeypatch):
    """Nothing in training, validation, early stopping, the resumable fingerprint or the test split's
    scoring turns the gathered lists into a full array (``np.asarray`` raises here)."""
    from ctxrank.data.gathered import GatheredRows

    def refuse(self, dtype=None, copy=None):
        raise AssertionError(f"{self!r} copied whole")

    reads, take = [], GatheredRows.take
    def counted(self, index):
        reads.append(index.size)
        return take(self, index)

    monkeypatch.setattr(GatheredRows, "__array__", refuse)
    monkeypatch.setattr(GatheredRows, "take", counted)
    scores, _, _ = _rerank_run("qilcm", "zscore", [("rerank.rank_feature", True)], monkeypatch, gather=True)
    assert np.isfinite(scores).all() and len(reads) > 10  # read batch by batch


def test_gathered_rows_read_like_the_copy():
    """Every index form ctxrank's readers use gives the copy's values; a bad index is an IndexError."""
    from ctxrank.data.gathered import GatheredRows

    rng = np.random.default_rng(0)
    base = rng.normal(size=(50, 4)).astype(np.float32)
    rows = rng.permutation(50)[:30]
    extra = rng.normal(size=(30, 2)).astype(np.float32)
    lazy, copy = GatheredRows(base, rows, extra), np.concatenate([base[rows], extra], axis=1)
    assert lazy.shape == copy.shape and lazy.dtype == np.float32 and len(lazy) == 30 and lazy.size == 180
    np.testing.assert_array_equal(np.asarray(lazy), copy)
    for key in (slice(3, 17), slice(None, None, 4), np.array([5, 0, 29, 5]), rng.random(30) < 0.5, -1, 7,
                (slice(2, 9), 4), (np.array([1, 2]), slice(0, 4))):  # fmt: skip
        np.testing.assert_array_equal(lazy[key], copy[key])
    assert lazy.min() == copy.min()
    holed = base.copy()
    holed[rows[3], 1] = np.nan  # a missing value: min is NaN, as ndarray.min
    assert np.isnan(GatheredRows(holed, rows).min())
    for bad in (30, np.array([-31]), np.array([0.5]), (1, 2, 3), np.ones(29, dtype=bool)):
        with pytest.raises(IndexError):
            lazy[bad]


# ------------------------------------------------------------------ the graph form against NumPy's
def _tied_lists(seed: int, lengths: list[int] | None = None) -> tuple[RankingData, np.ndarray]:
    """Lists of ``lengths`` items (default: 1 to 8, a single-item list and a 7-item one always), features
    from a tiny set of values (identical rows, -0.0 beside 0.0) and initial scores with many ties."""
    rng = np.random.default_rng(seed)
    lengths = np.concatenate([[1, 7], rng.integers(1, 9, size=6)]) if lengths is None else np.array(lengths)
    n = int(lengths.sum())
    x = rng.choice(np.array([0.0, -0.0, 0.5, 1.0], dtype=np.float32), size=(n, 3))
    data = RankingData(
        features=x,
        labels=np.zeros(n, dtype=np.float32),
        query_ids=np.array([f"q{i}" for i in range(lengths.size)]),
        query_offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
    )
    return data, rng.integers(0, 3, size=n).astype(np.float64)


def _padded(data: RankingData, values: np.ndarray) -> torch.Tensor:
    """(N, ...) rows -> (B, L, ...) lists padded with 0."""
    lengths = data.query_lengths
    mask = np.arange(lengths.max())[None, :] < lengths[:, None]
    out = np.zeros(mask.shape + values.shape[1:], dtype=values.dtype)
    out[mask] = values
    return torch.from_numpy(out)


@pytest.mark.parametrize("k", [1, 3, 50])  # 50: more than any list holds
@pytest.mark.parametrize("seed", range(4))
def test_the_graph_form_cuts_and_merges_as_numpy(seed, k):
    """graph_cut / graph_top_features / graph_merge (the exported pipeline's) keep the same items in the
    same order with the same initial rank and score, and give merge_scores' scores exactly, on lists
    with tied initial scores, identical rows, tied re-ranker scores, k above a list's length,
    single-item lists and a long list."""
    for data, initial in (_tied_lists(seed), _tied_lists(seed, lengths=[120, 1])):
        split = prepare_split(data, initial, k=k, rank_feature=True, score_feature=True)
        features, scores = _padded(data, data.features), _padded(data, initial)
        mask = _padded(data, np.ones(data.n_items, dtype=bool))
        cut = graph_cut(features, mask, scores, hash_weights(feature_hash_multipliers(data.n_features)), k)
        top = graph_top_features(features, mask, scores, cut, rank_feature=True, score_feature=True)
        np.testing.assert_array_equal(top[cut.kept_mask].numpy(), np.asarray(split.top.features))
        # a re-ranker's scores: a function of an item's columns, with ties
        rerank_scores = np.round(np.asarray(split.top.features, dtype=np.float64) @ [1, -1, 2, 0.5, 1])
        padded_rerank = torch.zeros(cut.kept.shape, dtype=torch.float64)
        padded_rerank[cut.kept_mask] = torch.from_numpy(rerank_scores)
        merged = graph_merge(padded_rerank, cut, features, mask, scores)
        np.testing.assert_array_equal(merged[mask].numpy(), merge_scores(split, rerank_scores))


class _CutRerankMerge(torch.nn.Module):
    """The graph form end to end, as the exported pipeline runs it: cut, both extra features, a
    re-ranker whose scores are a function of an item's columns (with ties), merge."""

    def __init__(self, n_features: int, k: int) -> None:
        super().__init__()
        self.k = k
        self.register_buffer("limbs", hash_weights(feature_hash_multipliers(n_features)))
        self.register_buffer("weights", torch.tensor([1, -1, 2, 0.5, 1], dtype=torch.float64))

    def forward(self, features, mask, scores):
        cut = graph_cut(features, mask, scores, self.limbs, self.k)
        top = graph_top_features(features, mask, scores, cut, rank_feature=True, score_feature=True)
        rerank = torch.round(top.double() @ self.weights)
        return graph_merge(rerank, cut, features, mask, scores), top, cut.kept_mask


def _onnx_session(k: int, every_tensor: bool = False):
    """onnxruntime session of :class:`_CutRerankMerge` exported with dynamic B and L; with
    ``every_tensor``, every intermediate tensor is an output too."""
    import io

    import onnx
    import onnxruntime as ort

    data, initial = _tied_lists(0)
    example = (_padded(data, data.features), _padded(data, np.ones(data.n_items, dtype=bool)),
               _padded(data, initial))  # fmt: skip
    buffer = io.BytesIO()
    names = ["features", "mask", "scores"]
    torch.onnx.export(_CutRerankMerge(3, k), example, buffer, input_names=names,
                      output_names=["merged", "top", "kept_mask"], opset_version=17, dynamo=False,
                      dynamic_axes={n: {0: "B", 1: "L"} for n in names})  # fmt: skip
    proto = onnx.load_from_string(buffer.getvalue())
    if every_tensor:
        known = {o.name for o in proto.graph.output}
        outputs = [o for node in proto.graph.node for o in node.output if o and o not in known]
        proto.graph.output.extend(onnx.ValueInfoProto(name=o) for o in outputs)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("k", [1, 3, 50])
def test_the_exported_graph_cuts_and_merges_as_numpy(k):
    """The ONNX file's cut and merge (``TopK`` on the tie-broken keys) equal prepare_split /
    merge_scores exactly: lists with tied scores and identical rows, k above a list's length, lists of
    one item (a batch of them alone too: L = 1) and long lists (hundreds of ties)."""
    session = _onnx_session(k)
    cases = [_tied_lists(seed) for seed in range(3)]
    cases += [_tied_lists(7, lengths=[1, 1, 1]), _tied_lists(8, lengths=[300, 1, 120])]
    for data, initial in cases:
        split = prepare_split(data, initial, k=k, rank_feature=True, score_feature=True)
        mask = _padded(data, np.ones(data.n_items, dtype=bool))
        feeds = {"features": _padded(data, data.features).numpy(), "mask": mask.numpy(),
                 "scores": _padded(data, initial).numpy()}  # fmt: skip
        merged, top, kept_mask = session.run(None, feeds)
        np.testing.assert_array_equal(top[kept_mask], np.asarray(split.top.features))
        rerank_scores = np.round(np.asarray(split.top.features, dtype=np.float64) @ [1, -1, 2, 0.5, 1])
        np.testing.assert_array_equal(merged[mask.numpy()], merge_scores(split, rerank_scores))


def test_the_exported_graph_holds_no_tensor_of_all_pairs():
    """The cut and the merge are sorts: on a list of L = 64 items with F = 3 features, no tensor of the
    graph has L * L elements or more (a pairwise comparison would have (B, L, L))."""
    session = _onnx_session(3, every_tensor=True)
    data, initial = _tied_lists(1, lengths=[64])
    mask = np.ones((1, 64), dtype=bool)
    feeds = {"features": data.features[None], "mask": mask, "scores": initial[None]}
    names = [o.name for o in session.get_outputs()]
    values = session.run(None, feeds)
    sizes = {name: np.asarray(value).size for name, value in zip(names, values, strict=True)}
    assert len(sizes) > 50 and max(sizes.values()) < 64 * 64, max(sizes.items(), key=lambda kv: kv[1])


def test_rerank_spec_round_trips_the_saved_entries():
    """A model directory's and an exported file's ``rerank`` entries read back to the same JSON, key order
    included (the files stay byte-identical)."""
    saved = {"dir": "initial", "top_k": 5, "rank_feature": True, "score_feature": False, "crossfit": 0,
             "ideal": "full"}  # fmt: skip
    spec = RerankSpec.from_json(saved, "ctxrank.json")
    assert list(spec.to_json().items()) == list(saved.items())
    exported = spec.exported(trees=7).to_json()
    assert list(exported.items()) == [("top_k", 5), ("rank_feature", True), ("score_feature", False),
                                      ("trees", 7)]  # fmt: skip
    assert RerankSpec.from_json(exported, "f.onnx", exported=True) == spec.exported(trees=7)
    old = {k: saved[k] for k in ("dir", "top_k", "rank_feature", "score_feature")}  # before crossfit, ideal
    assert RerankSpec.from_json(old, "ctxrank.json").to_json() == old


@pytest.mark.parametrize(
    ("entry", "exported", "message"),
    [
        ([], False, "'rerank' must be a JSON object or null"),
        ({"dir": "i", "top_k": 0, "rank_feature": True, "score_feature": True}, False, "'rerank.top_k'"),
        ({"dir": "i", "top_k": 3, "rank_feature": 1, "score_feature": True}, False, "'rerank.rank_feature'"),
        ({"top_k": 3, "rank_feature": True, "score_feature": True}, False, "'rerank.dir'"),
        ({"dir": "i", "top_k": 3, "rank_feature": True, "score_feature": True, "crossfit": "5"}, False,
         "'rerank.crossfit'"),
        ({"top_k": 3, "rank_feature": True, "score_feature": True}, True, "'rerank.trees' is missing"),
        ({"top_k": 3, "rank_feature": True, "score_feature": True, "trees": 2, "dir": "i"}, True,
         "unknown key 'rerank.dir'"),
    ],
)  # fmt: skip
def test_rerank_spec_refuses_a_malformed_entry(entry, exported, message):
    with pytest.raises(ValueError, match=message):
        RerankSpec.from_json(entry, "ctxrank.json", exported=exported)
