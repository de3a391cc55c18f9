"""The self-attention rankers: ``attn`` (Pobrotyn et al. 2020, allRank's context-aware ranker) and
``setrank`` (Pang et al., SIGIR 2020). Equations against plain references and against PyTorch's own
``nn.TransformerEncoderLayer``; permutation equivariance, padding, determinism, gradients; training
with several losses, ``ctxrank tune``, the estimators, export and re-ranking LambdaMART's top k."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import math

import numpy as np
import pytest
import torch

from ctxrank.api import SelfAttentionRanker, SetRankRanker
from ctxrank.cli import main
from ctxrank.config import TrainConfig, resolve_config
from ctxrank.data.lists import pad_queries
from ctxrank.export import export_model
from ctxrank.losses import LOSSES, attrank, get_loss
from ctxrank.models._attention import AttentionBlock, MultiHeadAttention, attention_mask
from ctxrank.models.attn import ContextAwareAttention, ContextAwareAttentionConfig
from ctxrank.models.setrank import SetRank, SetRankConfig
from ctxrank.registry import MODELS, make_model
from ctxrank.serving.onnx_ranker import OnnxRanker
from ctxrank.training.checkpoint import load_model
from ctxrank.training.loop import fit, seed_everything
from ctxrank.training.run import run_training
from tests.conftest import make_ranking_data, rows_sorted_by

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
F = 4
SMALL = {
    "attn": {"d_fc": 8, "heads": 2, "d_ff": 16, "blocks": 2},
    "setrank": {"d_model": 8, "heads": 2, "d_ff": 16, "blocks": 2, "inducing_points": 3},
}
# (registry name, extra params) of every structural variant
VARIANTS = [
    ("attn", {}),
    ("attn", {"norm_first": False}),
    ("attn", {"fc_activation": "relu"}),
    ("setrank", {}),
    ("setrank", {"block": "imsab"}),
]
IDS = [f"{n}{'-' + '-'.join(f'{k}={v}' for k, v in p.items()) if p else ''}" for n, p in VARIANTS]


def _model(name, seed=0, dtype=torch.float64, **params):
    torch.manual_seed(seed)
    return make_model(name, F, {**SMALL[name], "dropout": 0.0, **params}).to(dtype).eval()


def _batch(lengths, seed=0, dtype=torch.float64, n_features=F):
    """Features (B, L, F) with real items first (zeros after) and the mask."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(lengths)
    L = int(lengths.max())
    mask = torch.arange(L)[None, :] < lengths[:, None]
    x = torch.randn(len(lengths), L, n_features, generator=g, dtype=dtype)
    return torch.where(mask[..., None], x, torch.zeros_like(x)), mask


# ------------------------------------------------------------------------------- equations, plainly
def _mha(att, q_in, k_in):
    """Multi-head attention of one list written out head by head: (n, d), (m, d) -> (n, d)."""
    d, h = att.d_model, att.heads
    dk = d // h
    q = q_in @ att.q_proj.weight.T + att.q_proj.bias
    kv = k_in @ att.kv_proj.weight.T + att.kv_proj.bias
    k, v = kv[:, :d], kv[:, d:]
    heads = []
    for j in range(h):
        cols = slice(j * dk, (j + 1) * dk)
        logits = q[:, cols] @ k[:, cols].T / math.sqrt(dk)  # eq. 1: Q K^T / sqrt(d_k)
        weights = torch.exp(logits - logits.max(dim=1, keepdim=True).values)
        heads.append((weights / weights.sum(dim=1, keepdim=True)) @ v[:, cols])
    return torch.cat(heads, dim=1) @ att.out_proj.weight.T + att.out_proj.bias  # Concat(...) W^O


def _ln(norm, x):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def _block(block: AttentionBlock, q, k=None):
    """One Transformer block on one list (eval: no dropout)."""
    k = q if k is None else k
    rff = lambda x: torch.relu(x @ block.ff1.weight.T + block.ff1.bias) @ block.ff2.weight.T + block.ff2.bias  # noqa: E731
    if block.norm_first:
        b = q + _mha(block.attention, _ln(block.norm1, q), _ln(block.norm1, k))
        return b + rff(_ln(block.norm2, b))
    b = _ln(block.norm1, q + _mha(block.attention, q, k))  # B = LN(Q + Multihead(Q, K, K))
    return _ln(block.norm2, b + rff(b))  # MAB = LN(B + rFF(B))


def _reference_scores(m, x):
    """The scores of ONE list ``x`` (n, F) of real items, from the equations."""
    if isinstance(m, ContextAwareAttention):
        h = m.fc_activation(x @ m.fc.weight.T + m.fc.bias)
        if m.rank_embedding is not None:
            h = h + m.rank_embedding.table.weight[: len(x)]
        for block in m.blocks:
            h = _block(block, h)
        if m.final_norm is not None:
            h = _ln(m.final_norm, h)
    else:
        h = torch.relu(x @ m.represent.weight.T + m.represent.bias)
        if m.rank_embedding is not None:
            h = h + m.rank_embedding.table.weight[: len(x)]
        for block in m.blocks:
            if m.config.block == "imsab":  # IMSAB_m(X) = MAB(X, H, H), H = MAB(I_m, X, X)
                h = _block(block.attend, h, _block(block.summarize, block.inducing, h))
            else:  # MSAB(X) = MAB(X, X, X)
                h = _block(block.mab, h)
    return h @ m.score.weight[0] + m.score.bias[0]


@pytest.mark.parametrize(("name", "params"), [*VARIANTS, ("attn", {"rank_embedding": True})], ids=str)
def test_scores_match_the_equations_written_out(name, params):
    m = _model(name, **params)
    x, mask = _batch([6, 3, 1])
    with torch.no_grad():
        got = m(x, mask)
        for b, n in enumerate(mask.sum(1).tolist()):
            torch.testing.assert_close(got[b, :n], _reference_scores(m, x[b, :n]), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("norm_first", [True, False])
def test_an_attn_block_is_pytorchs_transformer_encoder_layer(norm_first):
    """An independent implementation: ``torch.nn.TransformerEncoderLayer`` (its own attention, key
    padding mask, dropout placement and norms) with the same weights gives the same block outputs."""
    torch.manual_seed(0)
    d, h, ff = 8, 2, 16
    ours = AttentionBlock(d, h, ff, 0.0, norm_first=norm_first).double().eval()
    ref = torch.nn.TransformerEncoderLayer(
        d, h, ff, dropout=0.0, batch_first=True, norm_first=norm_first, dtype=torch.float64
    ).eval()
    with torch.no_grad():
        ref.self_attn.in_proj_weight.copy_(
            torch.cat([ours.attention.q_proj.weight, ours.attention.kv_proj.weight])
        )
        ref.self_attn.in_proj_bias.copy_(torch.cat([ours.attention.q_proj.bias, ours.attention.kv_proj.bias]))
        ref.self_attn.out_proj.load_state_dict(ours.attention.out_proj.state_dict())
        ref.linear1.load_state_dict(ours.ff1.state_dict())
        ref.linear2.load_state_dict(ours.ff2.state_dict())
        ref.norm1.load_state_dict(ours.norm1.state_dict())
        ref.norm2.load_state_dict(ours.norm2.state_dict())
        x, mask = _batch([5, 2, 4], n_features=d)
        got = ours(x, None, attention_mask(mask))
        want = ref(x, src_key_padding_mask=~mask)
    torch.testing.assert_close(got[mask], want[mask], rtol=1e-10, atol=1e-10)


def test_defaults_are_the_papers_settings():
    cfg = ContextAwareAttentionConfig()
    assert (cfg.d_fc, cfg.blocks, cfg.heads, cfg.d_ff, cfg.dropout) == (128, 4, 4, 512, 0.3)
    assert cfg.fc_activation == "identity" and cfg.norm_first and not cfg.rank_embedding
    m = make_model("attn", 136)
    assert isinstance(m, ContextAwareAttention) and len(m.blocks) == 4 and m.fc.out_features == 128
    assert MODELS["attn"].traits.default_loss == "lambdaloss"  # NDCGLoss2++ (mu = 10, sigma = 1 by default)
    s = SetRankConfig()
    assert (s.d_model, s.heads, s.blocks, s.d_ff, s.block, s.inducing_points) == (256, 8, 6, 1024, "msab", 20)
    assert isinstance(make_model("setrank", 10), SetRank)
    assert MODELS["setrank"].traits.default_loss == "attrank"


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("attn", {"d_fc": 10, "heads": 4}, r"d_fc \(10\) must be a multiple of model_params.heads \(4\)"),
        ("attn", {"fc_activation": "swish"}, r"fc_activation must be one of \['identity', "),
        ("attn", {"blocks": 0}, "blocks must be a positive integer"),
        ("attn", {"dropout": 1.0}, "dropout must be < 1"),
        ("attn", {"rank_embedding": 1}, "rank_embedding must be true or false"),
        ("attn", {"input_clip": 0}, "input_clip must be a positive number"),
        ("attn", {"heads_": 2}, r"unknown option\(s\) \['heads_'\]"),
        ("setrank", {"block": "isab"}, r"block must be one of \['msab', 'imsab'\]"),
        ("setrank", {"d_model": 12, "heads": 8}, r"d_model \(12\) must be a multiple"),
        ("setrank", {"inducing_points": 0}, "inducing_points must be a positive integer"),
        ("setrank", {"max_rank": True}, "max_rank must be a positive integer"),
    ],
)
def test_bad_options_are_refused_naming_them(name, params, message):
    with pytest.raises(ValueError, match=message):
        make_model(name, F, params)


# ------------------------------------------------------------------------------------ invariants
@pytest.mark.parametrize(("name", "params"), VARIANTS, ids=IDS)
def test_permuting_a_list_permutes_its_scores(name, params):
    m = _model(name, **params)
    x, mask = _batch([7, 5], seed=3)
    with torch.no_grad():
        base = m(x, mask)
        for seed in range(3):
            g = torch.Generator().manual_seed(seed)
            perm = torch.cat([torch.randperm(5, generator=g), torch.arange(5, 7)])  # padding stays last
            perm = torch.stack([torch.randperm(7, generator=g), perm])
            xp = torch.stack([x[b, perm[b]] for b in range(2)])
            got = m(xp, mask)
            want = torch.stack([base[b, perm[b]] for b in range(2)])
            torch.testing.assert_close(got[mask], want[mask], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["attn", "setrank"])
def test_the_rank_embedding_makes_the_scores_read_the_row_order(name):
    """With ``rank_embedding`` the same items in another row order score differently (the check above
    would fail), and the embedding of row r is the same whatever the list."""
    m = _model(name, rank_embedding=True, max_rank=3)
    x, mask = _batch([5], seed=3)
    perm = torch.tensor([4, 3, 2, 1, 0])
    with torch.no_grad():
        got, base = m(x[:, perm], mask), m(x, mask)
        assert (got[0] - base[0, perm]).abs().max() > 1e-3
        emb = m.rank_embedding(torch.ones(2, 5, dtype=torch.bool))
    table = m.rank_embedding.table.weight
    torch.testing.assert_close(emb[1], torch.stack([table[0], table[1], table[2], table[2], table[2]]))


@pytest.mark.parametrize(("name", "params"), [*VARIANTS, ("setrank", {"rank_embedding": True})], ids=str)
def test_padding_never_changes_real_scores(name, params):
    m = _model(name, **params)
    x, mask = _batch([7, 4, 1, 2], seed=1)
    base = m(x, mask)
    g = torch.Generator().manual_seed(9)
    noisy = torch.where(mask[..., None], x, 1e3 * torch.randn(x.shape, generator=g, dtype=x.dtype))
    extra = 1e3 * torch.randn(4, 5, F, generator=g, dtype=x.dtype)
    x2 = torch.cat([noisy, extra], dim=1).requires_grad_(True)
    mask2 = torch.cat([mask, torch.zeros(4, 5, dtype=torch.bool)], dim=1)
    out = m(x2, mask2)
    torch.testing.assert_close(out[:, :7][mask], base[mask], rtol=0, atol=1e-12)
    out[mask2].sum().backward()  # real scores do not depend on padded features at all
    assert torch.all(x2.grad[~mask2] == 0) and x2.grad[mask2].abs().sum() > 0


def test_a_list_without_real_items_stays_finite():
    m = _model("attn")
    x, mask = _batch([3, 2])
    mask[1] = False
    assert torch.isfinite(m(x, mask)).all()


@pytest.mark.parametrize(("name", "params"), VARIANTS, ids=IDS)
def test_same_seed_same_model_and_scores(name, params):
    """Weights come from the seed alone, and so do the dropout masks of a training-mode forward."""
    x, mask = _batch([6, 3], dtype=torch.float32)
    outs = []
    for seed in (5, 5, 6):
        torch.manual_seed(seed)
        m = make_model(name, F, {**SMALL[name], "dropout": 0.3, **params}).train()
        torch.manual_seed(100)
        outs.append((m(x, mask), m.eval()(x, mask)))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    assert not torch.equal(outs[0][1], outs[2][1])  # another seed, other weights
    assert not torch.equal(outs[0][0][mask], outs[0][1][mask])  # dropout acts in training mode


@pytest.mark.parametrize(("name", "params"), [*VARIANTS, ("attn", {"rank_embedding": True})], ids=str)
def test_gradcheck_float64(name, params):
    m = _model(name, **params)
    x, mask = _batch([3, 2])
    x.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda f: m(f, mask)[mask], (x,), eps=1e-6, atol=1e-6)
    # and with respect to the weights of the first attention (its projections and W^O)
    att = next(module for module in m.modules() if isinstance(module, MultiHeadAttention))
    names = {id(p): n for n, p in m.named_parameters()}
    weights = {
        names[id(p)]: p.detach().clone().requires_grad_(True) for p in att.parameters() if p.dim() == 2
    }
    assert len(weights) == 3  # W^Q, [W^K; W^V], W^O

    def scores(*w):
        return torch.func.functional_call(m, dict(zip(weights, w, strict=True)), (x.detach(), mask))[mask]

    assert torch.autograd.gradcheck(scores, tuple(weights.values()), eps=1e-6, atol=1e-6)


# ------------------------------------------------------------------------------------- training
@pytest.mark.parametrize("name", ["attn", "setrank"])
@pytest.mark.parametrize("loss", ["listnet", "neuralndcg", "lambdaloss", "attrank", "approxndcg"])
def test_one_epoch_trains_with_each_loss(name, loss):
    assert loss in LOSSES
    train, valid = make_ranking_data(24, max_len=9, seed=1), make_ranking_data(8, max_len=9, seed=2)
    seed_everything(0)
    m = make_model(name, train.n_features, SMALL[name])
    before = {k: v.clone() for k, v in m.state_dict().items()}
    cfg = TrainConfig(max_epochs=1, batch_size=8, lr=0.01, threads=1, seed=0)
    result = fit(m, get_loss(loss), train, valid, cfg, progress=False)
    assert len(result.history) == 1 and math.isfinite(result.history[0]["train_loss"])
    changed = [k for k, v in m.state_dict().items() if not torch.equal(v, before[k])]
    assert any("blocks.0" in k for k in changed) and any(k.startswith("score") for k in changed)


def test_setrank_trains_its_attention_rank_loss_by_default():
    """SetRank's loss is the softmax cross entropy of the authors' code: ``attrank`` form ``dlcm_code``,
    unless the run binds a form."""
    data = make_ranking_data(6, seed=4)
    batch = pad_queries(data, np.arange(6))
    m = make_model("setrank", data.n_features, SMALL["setrank"]).eval()
    scores = m.score_batch(batch)
    code = attrank(scores, batch.labels, batch.mask, form="dlcm_code")
    assert not torch.allclose(code, attrank(scores, batch.labels, batch.mask, form="qilcm"))
    torch.testing.assert_close(m.training_loss(batch, LOSSES["attrank"]), code)
    bound = functools.partial(LOSSES["attrank"], form="qilcm")
    torch.testing.assert_close(
        m.training_loss(batch, bound), attrank(scores, batch.labels, batch.mask, form="qilcm")
    )


def _mode_lists(n, seed):
    """Lists of 4-8 items, one relevant: the largest ``mode * x_0``, where the list's mode (+1 or -1)
    shows only in the average of ``x_1 = mode + noise`` over the list's items."""
    from ctxrank.data.ranking_data import RankingData

    r = np.random.default_rng(seed)
    lengths = r.integers(4, 9, size=n)
    x = r.normal(size=(lengths.sum(), 3)).astype(np.float32)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    y = np.zeros(len(x), np.float32)
    for q in range(n):
        rows = slice(offsets[q], offsets[q + 1])
        mode = r.choice([-1.0, 1.0])
        x[rows, 1] = mode + r.normal(size=lengths[q])
        y[offsets[q] + int(np.argmax(mode * x[rows, 0]))] = 1
    return RankingData(features=x, labels=y, query_ids=np.arange(n).astype(str), query_offsets=offsets)


def test_both_learn_a_task_that_needs_the_list_context():
    """Which end of ``x_0`` is relevant depends on the list (its items' average ``x_1``): the
    self-attention rankers learn it, a per-item MLP with the same loss and budget cannot (it sees one
    noisy ``x_1``)."""
    from ctxrank.metrics import evaluate_queries, mean_metrics
    from ctxrank.training.predict import predict

    train, valid, test = _mode_lists(300, 1), _mode_lists(60, 2), _mode_lists(100, 3)
    ndcg = {}
    for name, params in (("attn", SMALL["attn"]), ("setrank", SMALL["setrank"]), ("mlp", {"hidden": [16]})):
        seed_everything(0)
        width = {"attn": {"d_fc": 16, "d_ff": 32, "dropout": 0.0}, "setrank": {"d_model": 16, "d_ff": 32}}
        m = make_model(name, 3, {**params, **width.get(name, {})})
        cfg = TrainConfig(max_epochs=25, patience=25, batch_size=16, lr=0.01, threads=1, seed=0)
        fit(m, get_loss("listnet"), train, valid, cfg, progress=False)
        per = evaluate_queries(predict(m, test), test.labels, test.query_offsets, ["ndcg@1"])
        ndcg[name] = mean_metrics(per)["ndcg@1"]
    assert min(ndcg["attn"], ndcg["setrank"]) > max(0.85, ndcg["mlp"] + 0.15), ndcg


# ------------------------------------------------------------------------------ tune, estimators
@pytest.fixture
def letor(tmp_path):
    from ctxrank.data.synth import write_synthetic_letor

    for name, seed in (("train", 0), ("vali", 1), ("test", 2)):
        write_synthetic_letor(
            tmp_path / f"{name}.txt", n_queries=12, list_size=6, n_features=5, max_label=2, seed=seed
        )
    return tmp_path


def _cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("name", ["attn", "setrank"])
def test_cli_tune_runs_two_trials(name, letor, tmp_path):
    common = ("--train", str(letor / "train.txt"), "--valid", str(letor / "vali.txt"))
    rc, out, err = _cli(
        "tune", "--model", name, *common, "--trials", "2", "--set", "train.max_epochs=1",
        "--set", "model_params.d_ff=8", "--out", str(tmp_path / "tune"), "--no-progress",
    )  # fmt: skip
    assert rc == 0, err
    summary = json.loads((tmp_path / "tune" / "tune.json").read_text())
    assert summary["trials"] == {"complete": 2}
    searched = out.split("searching ")[1].splitlines()[0]
    assert "model_params.blocks" in searched and "model_params.heads" in searched
    assert (tmp_path / "tune" / "best.toml").is_file()


@pytest.mark.parametrize(("cls", "name"), [(SelfAttentionRanker, "attn"), (SetRankRanker, "setrank")])
def test_estimator_fits_predicts_and_lists_the_models_parameters(cls, name, tmp_path):
    import ctxrank

    assert getattr(ctxrank, cls.__name__) is cls
    data = make_ranking_data(20, max_len=8, seed=0)
    params = {**SMALL[name], "max_epochs": 2, "threads": 1, "batch_size": 8}
    est = cls(**params).fit(data.features, data.labels, qid=data.query_index)
    assert est.model_name() == name and set(SMALL[name]) <= set(est.get_params())
    assert "rank_embedding" in est.get_params() and est.get_params()["max_rank"] == 100
    scores = est.predict(data.features, qid=data.query_index)
    assert scores.shape == (data.n_items,) and np.isfinite(scores).all()
    est.save(tmp_path / "m")
    np.testing.assert_array_equal(load_model(tmp_path / "m").predict(data), scores)


def test_the_rank_embedding_on_rows_sorted_by_a_feature_is_warned_about():
    """Without re-ranking the rows are in file order: with the rank embedding, rows sorted by a feature
    would teach the model that feature's rank, as for DLCM / DCM (``train.shuffle_items``)."""
    import warnings

    data = rows_sorted_by(make_ranking_data(30, min_len=3, seed=6), 0)
    base = ["model=attn", *(f"model_params.{k}={v}" for k, v in SMALL["attn"].items()), "train.max_epochs=1"]
    with pytest.warns(UserWarning, match="sorted by f1; attn reads the row order"):
        run_training(
            resolve_config(None, [*base, "model_params.rank_embedding=true"]), data, data, progress=False
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run_training(resolve_config(None, base), data, data, progress=False)  # orderless: no warning
    assert MODELS["setrank"].reads_row_order({"rank_embedding": True})
    assert not MODELS["setrank"].reads_row_order({}) and not MODELS["attn"].traits.reads_order


# --------------------------------------------------------------------------- re-ranking, export
@pytest.mark.parametrize("name", ["attn", "setrank"])
def test_reranks_lambdamarts_top_k_with_the_rank_embedding_and_exports_it(name, tmp_path):
    """``rerank.initial = "lambdamart"``: LambdaMART's top k, ordered by its scores, re-ranked by the
    model with the embedding of the initial rank; the saved model predicts full queries, and the
    exported pipeline graph reproduces it on the full queries."""
    train, valid = make_ranking_data(30, max_len=10, seed=1), make_ranking_data(10, max_len=10, seed=2)
    test = make_ranking_data(10, max_len=10, seed=3)
    small = [f"model_params.{k}={v}" for k, v in SMALL[name].items()]
    sets = [
        f"model={name}", "rerank.initial=lambdamart", "rerank.top_k=5",
        "rerank.initial_params.n_estimators=5", "model_params.rank_embedding=true", "model_params.max_rank=5",
        "train.max_epochs=2", "train.threads=1", *small,
    ]  # fmt: skip
    config = resolve_config(None, sets)
    result = run_training(config, train, valid, test, out=tmp_path / "m", progress=False)
    assert result.test_metrics and all(np.isfinite(v).all() for v in result.test_metrics.values())
    meta = json.loads((tmp_path / "m" / "ctxrank.json").read_text())
    assert meta["rerank"]["top_k"] == 5 and meta["model"] == name
    predictor = load_model(tmp_path / "m")
    full = predictor.predict(test)
    assert full.shape == (test.n_items,) and np.isfinite(full).all()
    model = predictor.reranker.model
    assert model.rank_embedding is not None and model.rank_embedding.table.num_embeddings == 5
    path = tmp_path / "m.onnx"  # the whole pipeline: LambdaMART's trees, the cut, the re-ranker, the merge
    export_model(tmp_path / "m", "onnx", path)
    got = OnnxRanker(path).predict(test.features, test.query_index)
    np.testing.assert_allclose(got, full, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="onnx"):  # TorchScript cannot hold LightGBM's trees
        export_model(tmp_path / "m", "torchscript", tmp_path / "m.pt")
