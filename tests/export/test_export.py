"""ctxrank export: TorchScript and ONNX files that take RAW features and reproduce
``load_model(dir).predict(data)``, for every registered model, normalizer, categorical columns and a
re-ranker; padding invariance; the CLI; clear errors."""

import json
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest
import torch

from ctxrank.cli import main
from ctxrank.config import resolve_config
from ctxrank.data.lists import iterate_batches, scatter_scores
from ctxrank.data.split import split_queries
from ctxrank.data.synth_choice import make_choice_sessions
from ctxrank.data.table import read_table
from ctxrank.data.transforms import TRANSFORMS, GlobalMinMax, Transform, make_transform
from ctxrank.export import EXPORT_FORMATS, ONNX_OPSET, FeatureNormalizer, export_model
from ctxrank.registry import MODELS, make_model
from ctxrank.training.checkpoint import load_model
from ctxrank.training.run import run_training
from tests.conftest import make_ranking_data

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
TOL = 1e-5  # exported vs library scores: max abs difference <= TOL * max(1, max |score|)
# A QILCM with query normalization: its eq. 8 divides by the within-list std + 1e-5, which amplifies
# float32 rounding (the library's own scores move by ~3e-5 when its inputs move by 1e-7 relative), so
# kernels that round differently -- onnxruntime's, or torch's own on other batch shapes -- move its
# scores by more than TOL (docs/export.md, "Precision")
QN_TOL = 1e-4
# every neural model of the registry (baselines are not exported)
NEURAL = sorted(name for name in MODELS if MODELS[name].traits.torch_module)
SMALL = {
    "dlcm": ["model_params.encoder_widths=[8,8]", "model_params.gru_hidden=8"],
    "arsm": ["model_params.hidden=[8]", "model_params.n_levels=5"],
    "dcm": ["model_params.hidden=8", "model_params.embed=8"],
    "mlp": ["model_params.hidden=[8]"],
    "dasalc": ["model_params.hidden=[8]", "model_params.attention_layers=2", "model_params.head_size=4"],
    "gsf": ["model_params.hidden=[8]"],
    "attn": [f"model_params.{k}" for k in ("d_fc=8", "heads=2", "d_ff=8", "blocks=2")],
    "setrank": [f"model_params.{k}" for k in ("d_model=8", "heads=2", "d_ff=8", "blocks=2")],
    **{
        name: ["model_params.encoder_width=8", "model_params.att_hidden=[8]", "model_params.rank_hidden=[8]"]
        for name in NEURAL
        if name.startswith("qilcm")
    },
}
# the other recurrent cells (DLCM's torch.nn.GRU, a bidirectional DLCM, DCM's GRU), GSF's other groups
VARIANTS = [
    ("dlcm", ("model_params.gru=torch", "model_params.bidirectional=true")),
    ("dcm", ("model_params.cell=gru",)),
    ("gsf", ("model_params.groups=all",)),  # the exact form: every ordered pair
    ("gsf", ("model_params.group_size=3", "model_params.reduce=sum")),
    # post-norm blocks, the rank embedding; SetRank's induced blocks
    ("attn", ("model_params.norm_first=false", "model_params.rank_embedding=true")),
    ("setrank", ("model_params.block=imsab", "model_params.rank_embedding=true", "model_params.max_rank=4")),
]


def _heavy(data, seed):
    """Heavy-tailed raw features with a constant column: exercises clipping and log1p."""
    rng = np.random.default_rng(seed)
    x = data.features.astype(np.float64)
    x = np.sign(x) * np.expm1(3 * np.abs(x)) + rng.normal(50.0, 1.0, size=(1, x.shape[1]))
    x[:, 0] = 7.0
    return data.with_features(x.astype(np.float32))


@pytest.fixture(scope="module")
def data():
    """train, valid, test (test lists of 1..9 items)."""
    train, valid = make_ranking_data(12, max_len=8, seed=1), make_ranking_data(6, max_len=8, seed=2)
    return train, valid, make_ranking_data(11, max_len=9, seed=3)


@pytest.fixture(scope="module")
def heavy(data):
    """``data`` with heavy tails: test values far outside the training range. Not for QILCM: features
    clipped to the same value within a list meet its query normalization (docs/export.md, Precision)."""
    return tuple(_heavy(d, seed) for seed, d in enumerate(data, start=1))


@pytest.fixture(scope="module")
def saved(tmp_path_factory, data):
    """``saved(name, *overrides)`` -> a model directory trained one epoch (built once per module)."""
    train, valid, _ = data
    cache = {}

    def get(name, *overrides, train_data=None, valid_data=None):
        key = (name, overrides, id(train_data))
        if key not in cache:
            out = tmp_path_factory.mktemp("models") / name
            sets = [
                f"model={name}",
                # a baseline and a maximum-likelihood fit have no epochs
                *(() if name in ("lambdamart", "mnl") else ("train.max_epochs=1",)),
                "train.threads=1",
                *SMALL.get(name, ()),
                *overrides,
            ]
            tr, va = (train_data, valid_data) if train_data is not None else (train, valid)
            run_training(resolve_config(None, sets), tr, va, out=out, progress=False)
            cache[key] = out
        return cache[key]

    return get


def _runner(path, fmt):
    """The exported file as a function of torch inputs -> numpy scores [B, L]."""
    if fmt == "torchscript":
        module = torch.jit.load(str(path))

        def run(*inputs):
            with torch.no_grad():
                return module(*inputs).numpy()

        return run
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]

    def run(*inputs):
        return session.run(["scores"], {n: t.numpy() for n, t in zip(names, inputs, strict=True)})[0]

    return run


def _inputs(batch):
    return (batch.features, batch.mask) + ((batch.categorical,) if batch.categorical is not None else ())


def _exported_scores(run, data, batch_size):
    """Flat [N] scores of the exported file on the RAW data, through padded batches."""
    out = np.full(data.n_items, np.nan)
    for batch in iterate_batches(data, batch_size):
        scatter_scores(batch, run(*_inputs(batch)).astype(np.float64), data.n_items, out=out)
    return out


def _check_parity(model_dir, fmt, data, tmp_path, reference=None):
    """Export, load back, compare with the library on two batch shapes; returns the max abs diff."""
    path = tmp_path / f"model.{fmt}"
    result = export_model(model_dir, fmt, path)
    assert result.path == path and result.size == path.stat().st_size > 0
    predictor = load_model(model_dir)
    ref = predictor.predict(data) if reference is None else reference
    tol = QN_TOL if _query_norm(model_dir) else TOL
    run = _runner(path, fmt)
    worst = 0.0
    for batch_size in (4, 7):  # different B and L than the traced (3, 5) and checked (4, 7) batches
        got = _exported_scores(run, data, batch_size)
        assert np.isfinite(got).all()
        worst = max(worst, float(np.abs(got - ref).max()))
    scale = max(1.0, float(np.abs(ref).max()))  # only transform=none on raw features exceeds 1
    assert worst <= tol * scale, (worst, scale)
    return run, worst


def _query_norm(model_dir) -> bool:
    """Whether the saved model applies QILCM's query normalization (eq. 8), which amplifies rounding."""
    predictor = load_model(model_dir)
    return bool(getattr(getattr(predictor, "reranker", predictor).model.config, "query_norm", False))


def _padding_is_inert(run, data, atol=1e-6):
    """More padded positions, and garbage at padded positions, never change a real item's score.

    Garbage is not the issue for a model with query normalization; the longer lists are: other matrix
    shapes round differently, and eq. 8 amplifies that (the same difference with zero padding)."""
    g = torch.Generator().manual_seed(0)
    batch = next(b for b in iterate_batches(data, 5) if not bool(b.mask.all()))
    base = run(*_inputs(batch))
    B, L, F = batch.features.shape
    mask = torch.cat([batch.mask, torch.zeros(B, 3, dtype=torch.bool)], dim=1)
    feats = torch.cat([batch.features, torch.zeros(B, 3, F)], dim=1)
    feats = torch.where(mask[..., None], feats, 1e4 * torch.randn(B, L + 3, F, generator=g))
    inputs = [feats, mask]
    if batch.categorical is not None:
        cat = torch.cat(
            [batch.categorical, torch.zeros(B, 3, batch.categorical.shape[-1], dtype=torch.long)], 1
        )
        inputs.append(torch.where(mask[..., None], cat, torch.randint(-3, 1000, cat.shape, generator=g)))
    padded = run(*inputs)
    np.testing.assert_allclose(padded[:, :L][batch.mask.numpy()], base[batch.mask.numpy()], rtol=0, atol=atol)


# ------------------------------------------------------------------------------ every model
@pytest.mark.parametrize("fmt", EXPORT_FORMATS)
@pytest.mark.parametrize(
    ("name", "overrides"), [(name, ()) for name in NEURAL] + VARIANTS, ids=lambda v: str(v)
)
def test_export_reproduces_the_library(name, overrides, fmt, saved, data, tmp_path):
    model_dir = saved(name, *overrides)
    run, _ = _check_parity(model_dir, fmt, data[2], tmp_path)
    _padding_is_inert(run, data[2], QN_TOL if _query_norm(model_dir) else 1e-6)


class _Positional(torch.nn.Module):
    """``model(features, mask, categorical=...)`` with positional inputs, for ``torch.jit.trace``."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, features, mask, categorical):
        return self.model(features, mask, categorical=categorical)


def _lists(B, L, F, cards, seed):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, L + 1, (B,), generator=g)
    lengths[0] = L
    mask = torch.arange(L)[None, :] < lengths[:, None]
    x = torch.where(mask[..., None], torch.rand(B, L, F, generator=g), torch.zeros(B, L, F))
    codes = torch.stack([torch.randint(0, c, (B, L), generator=g) for c in cards], dim=-1)
    return x, mask, torch.where(mask[..., None], codes, torch.zeros_like(codes))


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning", "ignore::DeprecationWarning")
@pytest.mark.parametrize(
    ("name", "overrides"), [(name, ()) for name in NEURAL] + VARIANTS, ids=lambda v: str(v)
)
def test_the_traced_forward_is_the_models_own(name, overrides):
    """Every neural model traced as it is (no export-side restatement) gives its eager scores on
    batches of other shapes than the traced one: the traceable forward is the model's forward."""
    params = resolve_config(None, [f"model={name}", *SMALL.get(name, ()), *overrides]).model_params
    torch.manual_seed(0)
    model = make_model(name, 4, params, categorical_cardinalities=(3, 5)).eval()
    with torch.no_grad():
        traced = torch.jit.trace(_Positional(model), _lists(3, 5, 4, (3, 5), seed=0))
        for seed, (B, L) in enumerate([(4, 7), (2, 3), (5, 1)], start=1):
            x, mask, codes = _lists(B, L, 4, (3, 5), seed)
            eager = model(x, mask, categorical=codes)
            torch.testing.assert_close(traced(x, mask, codes)[mask], eager[mask], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", NEURAL)
def test_no_model_reads_init_scores(name):
    """The export has no init_scores input: that is only right while every model ignores them."""
    torch.manual_seed(0)
    model = make_model(name, 4, {}).eval()
    x, mask = torch.randn(2, 5, 4), torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    with torch.no_grad():
        a = model(x, mask)
        b = model(x, mask, init_scores=100 * torch.randn(2, 5))
    assert torch.equal(a, b), f"{name} reads init_scores: add them to ctxrank.export.ServingModel"


# ------------------------------------------------------------------------------ normalizers
@pytest.mark.parametrize("name", [*sorted(TRANSFORMS), "minmax-noclip"])
def test_normalizer_in_torch_equals_the_transform(name, heavy):
    train, _, test = heavy
    transform = GlobalMinMax(clip=False) if name == "minmax-noclip" else make_transform(name)
    transform.fit(train)
    expected = transform.transform(test).features
    norm = FeatureNormalizer(transform, train.n_features)
    got = np.full_like(expected, np.nan)
    for batch in iterate_batches(test, 4):
        # garbage at padded positions must not move a per-query statistic
        feats = torch.where(batch.mask[..., None], batch.features, torch.full_like(batch.features, -1e6))
        out = norm(feats, batch.mask)
        assert out.dtype == torch.float32
        got[batch.positions[batch.mask].numpy()] = out[batch.mask].numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("fmt", EXPORT_FORMATS)
@pytest.mark.parametrize("transform", sorted(TRANSFORMS))
def test_export_with_every_normalizer(transform, fmt, saved, heavy, tmp_path):
    train, valid, test = heavy
    model_dir = saved("mlp", f"transform={transform}", train_data=train, valid_data=valid)
    _check_parity(model_dir, fmt, test, tmp_path)


def test_a_normalizer_without_a_torch_form_is_refused(data):
    class Rank(Transform):
        name = "rank"
        stateless = True

    with pytest.raises(ValueError, match=r"normalizer 'rank' \(Rank\) cannot be exported"):
        FeatureNormalizer(Rank(), 5)
    with pytest.raises(ValueError, match="'zscore' is not fitted"):
        FeatureNormalizer(make_transform("zscore"), 5)


# ------------------------------------------------------------------ categorical, re-ranking
@pytest.fixture(scope="module")
def table_splits(tmp_path_factory):
    """Choice sessions with two categorical columns (constant columns within a list:
    tests/models/test_row_order.py
    and tests/export/test_pipeline.py's ModeCanada trips)."""
    path = tmp_path_factory.mktemp("table") / "sessions.csv"
    make_choice_sessions(30, min_items=5, max_items=9, seed=5).table.to_csv(path, index=False)
    cols = {"categorical": ["airline", "dep_hour"], "numeric": ["price", "duration"], "docid": "item"}
    full = read_table(path, query="session", label="chosen", **cols)
    train, valid, test, _ = split_queries(full, (0.5, 0.2, 0.3), seed=0)
    return train, valid, test, path


@pytest.mark.parametrize("fmt", EXPORT_FORMATS)
@pytest.mark.parametrize("name", ["mlp", "qilcm", "dcm", "dlcm"])
def test_export_with_categorical_columns(name, fmt, saved, table_splits, tmp_path):
    train, valid, test, _ = table_splits
    assert test.categorical is not None and test.n_features == 2
    model_dir = saved(name, train_data=train, valid_data=valid)
    run, _ = _check_parity(model_dir, fmt, test, tmp_path)
    _padding_is_inert(run, test, QN_TOL if _query_norm(model_dir) else 1e-6)
    result = export_model(model_dir, fmt, tmp_path / "again")
    assert [i[0] for i in result.inputs] == ["features", "mask", "categorical"]
    assert result.inputs[2][1:3] == ("[B, L, 2]", "int64")


# a re-ranking model (rerank.initial = lambdamart) exports as one graph of the whole pipeline:
# tests/export/test_pipeline.py


# ------------------------------------------------------------------------------------- CLI
def test_cli_export_end_to_end(saved, data, tmp_path, capsys):
    model_dir = saved("qilcm")
    onnx_file, ts_file = tmp_path / "q.onnx", tmp_path / "q.pt"
    assert main(["export", "--model", str(model_dir), "--format", "onnx", "--out", str(onnx_file)]) == 0
    text = capsys.readouterr().out
    assert f"ONNX opset {ONNX_OPSET}" in text and "KiB" in text and "'minmax' applied inside" in text
    assert "features   float32  [B, L, 5]" in text and "mask       bool     [B, L]" in text
    assert "features, in this order: f1, f2, f3, f4, f5" in text and "max abs score difference" in text
    assert main(["export", "--model", str(model_dir), "--format", "torchscript", "--out", str(ts_file)]) == 0
    assert "TorchScript (torch " in capsys.readouterr().out
    test = data[2]
    ref = load_model(model_dir).predict(test)
    for path, fmt in ((onnx_file, "onnx"), (ts_file, "torchscript")):
        assert np.abs(_exported_scores(_runner(path, fmt), test, 5) - ref).max() <= QN_TOL
    # the input description travels with the file
    extra = {"ctxrank.json": ""}
    torch.jit.load(str(ts_file), _extra_files=extra)
    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    for text in (extra["ctxrank.json"], session.get_modelmeta().custom_metadata_map["ctxrank.json"]):
        meta = json.loads(text)
        assert meta["model"] == "qilcm" and meta["feature_names"] == ["f1", "f2", "f3", "f4", "f5"]
        assert [i[0] for i in meta["inputs"]] == ["features", "mask"]


def test_cli_export_of_a_model_trained_on_a_table(table_splits, tmp_path, capsys):
    """``ctxrank train --data table.csv --categorical ...`` then export: the encoder's vocabulary
    travels with the file, so a server can turn categories into codes without ctxrank."""
    *_, csv = table_splits
    model_dir, out = tmp_path / "m", tmp_path / "m.onnx"
    cols = ["--query-col", "session", "--label-col", "chosen", "--docid-col", "item"]
    cols += ["--categorical", "airline,dep_hour", "--numeric", "price,duration"]
    quick = ["--set", "model_params.hidden=[8]", "--set", "train.max_epochs=1", "--no-progress"]
    assert main(["train", "--model", "mlp", "--data", str(csv), *cols, *quick, "--out", str(model_dir)]) == 0
    capsys.readouterr()
    assert main(["export", "--model", str(model_dir), "--format", "onnx", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "categorical  int64    [B, L, 2]" in text and "features, in this order: price, duration" in text
    assert "categorical columns: airline (" in text and "codes, 0 = unknown), dep_hour (" in text
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    meta = json.loads(session.get_modelmeta().custom_metadata_map["ctxrank.json"])
    vocab = meta["categorical_vocab"]
    assert list(vocab) == ["airline", "dep_hour"]
    assert [len(v) + 1 for v in vocab.values()] == meta["categorical_cardinalities"]


def test_cli_parser_stays_light():
    """``ctxrank --help`` must not import torch."""
    code = "import sys; from ctxrank.cli import build_parser; build_parser(()); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_cli_errors(saved, tmp_path, capsys):
    lgbm = saved("lambdamart", "model_params.n_estimators=5")
    out = tmp_path / "x.onnx"
    for model, message in (
        (
            lgbm,
            "LambdaMART is a baseline, not a torch model: export applies to the neural models; "
            "LightGBM's own model.txt",
        ),
        (tmp_path / "missing", "missing: no such model directory"),
        (tmp_path, "not a ctxrank model directory"),
    ):
        assert main(["export", "--model", str(model), "--format", "onnx", "--out", str(out)]) == 2
        assert message in capsys.readouterr().err
        assert not out.exists()
    assert main(["export", "--model", str(lgbm), "--format", "pmml", "--out", str(out)]) == 2
    assert "invalid choice: 'pmml'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown export format 'pmml'; valid: torchscript, onnx"):
        export_model(lgbm, "pmml", out)


# ------------------------------------------------------------------------ failures are clear
def test_a_trace_that_does_not_generalize_is_refused(saved, tmp_path, monkeypatch):
    """DLCM's own forward has a data-dependent loop length: traced as is, it would be wrong for other
    list lengths. The check on another batch shape must catch it, for both formats."""
    import ctxrank.models.dlcm

    # the eager path traced as it is: a Python loop unrolled for the traced length
    monkeypatch.setattr(ctxrank.models.dlcm, "tracing", lambda: False)
    monkeypatch.setattr(ctxrank.models.dlcm, "traceable_loop", lambda fn: fn)
    model_dir = saved("dlcm")
    old = tmp_path / "d.pt"
    old.write_bytes(b"an earlier export")
    with pytest.raises(ValueError, match="traced dlcm does not generalize to other batch shapes"):
        export_model(model_dir, "torchscript", old)
    with pytest.raises(ValueError, match=r"exported onnx does not reproduce the model .* not written"):
        export_model(model_dir, "onnx", tmp_path / "d.onnx")
    assert list(tmp_path.iterdir()) == [old] and old.read_bytes() == b"an earlier export"


def test_onnx_errors_are_clear(saved, tmp_path, monkeypatch):
    model_dir = saved("mlp")

    def unsupported(*args, **kwargs):
        raise RuntimeError("Exporting the operator 'aten::foo' to ONNX opset version 17 is not supported")

    monkeypatch.setattr(torch.onnx, "export", unsupported)
    with pytest.raises(ValueError, match="ONNX export of mlp failed: Exporting the operator 'aten::foo'"):
        export_model(model_dir, "onnx", tmp_path / "m.onnx")
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(ValueError, match=r"needs the onnx package: pip install 'ctxrank\[export\]'"):
        export_model(model_dir, "onnx", tmp_path / "m.onnx")
    assert not list(tmp_path.iterdir())


def test_cli_export_refuses_an_existing_file_unless_overwrite(saved, tmp_path, capsys):
    model_dir, out = saved("mlp"), tmp_path / "mine.pt"
    out.write_bytes(b"the user's file")
    argv = ["export", "--model", str(model_dir), "--format", "torchscript", "--out", str(out)]
    assert main(argv) == 2
    assert f"--out {out} exists; give --overwrite to replace it" in capsys.readouterr().err
    assert out.read_bytes() == b"the user's file"
    assert main([*argv, "--overwrite"]) == 0 and out.read_bytes() != b"the user's file"
    assert main([*argv[:-1], str(tmp_path), "--overwrite"]) == 2  # a directory is never replaced
    assert "is a directory" in capsys.readouterr().err


def _with_holes(data, seed):
    """``data`` with about 20% of its feature values missing (NaN)."""
    x = data.features.copy()
    x[np.random.default_rng(seed).random(x.shape) < 0.2] = np.nan
    return data.with_features(x)


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
@pytest.mark.parametrize("name", ["mlp", "qilcm"])
def test_export_of_a_model_with_missing_indicators_reads_nan(name, fmt, saved, data, tmp_path):
    """``train.missing = "indicator"``: the exported graph fills NaN and appends the indicators as
    ``predict`` does (isnan / where / concat ops)."""
    train, valid, test = (_with_holes(d, seed) for seed, d in enumerate(data, start=7))
    model_dir = saved(name, "train.missing=indicator", "transform=zscore", train_data=train, valid_data=valid)
    _check_parity(model_dir, fmt, test, tmp_path)


def test_the_check_shuffles_the_rows_of_an_order_free_model(saved, tmp_path, monkeypatch):
    """A model that claims not to read the row order but whose scores follow the position: the file
    reproduces predict on the check batch as it is, and the check refuses it on the same batch with each
    list's rows shuffled (the message says so and what to do); nothing is written."""
    from ctxrank.models.mlp import MLPScorer

    model_dir = saved("mlp")
    assert export_model(model_dir, "onnx", tmp_path / "ok.onnx").checked_shuffled
    forward = MLPScorer.forward

    def by_position(self, features, mask, **kwargs):
        position = torch.cumsum(mask.to(features.dtype), dim=1)  # (B, L): 1, 2, ... over real items
        return forward(self, features, mask, **kwargs) + 0.1 * position

    monkeypatch.setattr(MLPScorer, "forward", by_position)
    for fmt in EXPORT_FORMATS:
        with pytest.raises(ValueError, match=r"with each list's rows shuffled .* depend on the order") as err:
            export_model(model_dir, fmt, tmp_path / f"m.{fmt}")
        assert "not written" in str(err.value) and "report it" in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.onnx"]
