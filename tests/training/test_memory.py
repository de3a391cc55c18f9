"""Memory estimates and budgets (``ctxrank.training.memory``): the estimates bound the tensors
every model and loss allocates; a long list or a huge model is refused before anything is allocated,
naming the query and the option; out of memory is one line, never a traceback."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import weakref

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ctxrank.cli import main
from ctxrank.data.lists import ListBatch, iterate_batches
from ctxrank.data.ranking_data import RankingData
from ctxrank.losses import LOSSES, loss_memory
from ctxrank.models.residual import Residual
from ctxrank.registry import MODELS, make_model
from ctxrank.training.memory import MemoryBudgetError, scoring_fits
from ctxrank.training.predict import predict
from tests.conftest import REPO


class _PeakBytes(TorchDispatchMode):
    """The most bytes of tensor storage alive at once among the tensors created while active: every
    operator's outputs are counted when made and dropped when their storage is freed."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[tuple[int, int], tuple[weakref.ref, int]] = {}  # storage -> (its weakref, bytes)
        self.total = self.peak = 0

    def _free(self, key: tuple[int, int]) -> None:
        self.total -= self.live.pop(key, (None, 0))[1]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.layout == torch.strided:
                storage = t.untyped_storage()
                key = (storage.data_ptr(), storage.nbytes())
                if storage.nbytes() and key not in self.live:
                    ref = weakref.ref(storage, lambda _, key=key: self._free(key))
                    self.live[key] = (ref, storage.nbytes())
                    self.total += storage.nbytes()
        self.peak = max(self.peak, self.total)
        return out


F = 10
SHAPES = [(1, 8), (3, 48), (2, 120)]  # (lists, padded length)


def _batch(B: int, L: int, n_categorical: int = 0) -> ListBatch:
    g = torch.Generator().manual_seed(B * 1000 + L)
    lengths = torch.randint(max(1, L // 2), L + 1, (B,), generator=g)
    lengths[0] = L
    mask = torch.arange(L)[None, :] < lengths[:, None]
    cat = torch.randint(0, 5, (B, L, n_categorical), generator=g) * mask[..., None] if n_categorical else None
    return ListBatch(
        features=torch.rand(B, L, F, generator=g) * mask[..., None],
        labels=torch.randint(0, 3, (B, L), generator=g).float() * mask,
        mask=mask,
        query_index=torch.arange(B),
        init_scores=torch.rand(B, L, generator=g) * mask,
        categorical=cat,
    )


def _measured(model, loss_fn, batch: ListBatch, training: bool) -> int:
    """Peak bytes of the tensors one step allocates: forward, loss and backward (training) or forward
    under ``inference_mode`` (scoring). The batch exists before (its bytes are ``input_bytes``')."""
    tracker = _PeakBytes()
    if training:
        model.train()
        with tracker:
            model.training_loss(batch, loss_fn).backward()
        model.zero_grad(set_to_none=True)
    else:
        model.eval()
        with torch.inference_mode(), tracker:
            model.score_batch(batch)
    return tracker.peak


NEURAL = [name for name in MODELS if MODELS[name].traits.torch_module]
VARIANTS = [
    *((name, {}, 0, False) for name in NEURAL),
    ("mlp", {"dropout": 0.3, "hidden": [32]}, 2, True),
    ("qilcm", {"confusion_pairs": 5}, 0, False),
    ("qilcm", {"dropout": 0.2, "pooling": "mean"}, 2, True),
    ("dlcm", {"gru": "torch", "encoder_widths": [16, 8], "gru_hidden": 64}, 0, True),
    ("dlcm", {"bidirectional": True, "encoder_widths": [16, 8], "gru_hidden": 32}, 2, False),
    ("dcm", {"cell": "gru"}, 2, True),
    ("arsm", {"n_levels": 5, "hidden": [16]}, 2, False),
    ("mnl", {"alternative_specific": True}, 2, False),
    ("attn", {"norm_first": False, "rank_embedding": True, "dropout": 0.0}, 2, True),
    ("setrank", {"block": "imsab", "dropout": 0.2, "rank_embedding": True}, 0, False),
]


@pytest.mark.parametrize(
    ("name", "params", "n_cat", "residual"), VARIANTS, ids=[f"{v[0]}{v[1] or ''}" for v in VARIANTS]
)
@pytest.mark.parametrize("training", [True, False], ids=["training", "scoring"])
def test_estimates_bound_the_tensors_allocated(name, params, n_cat, residual, training):
    """For every model of the registry (and other configurations: recurrent cells, bidirectional,
    dropout, categorical embeddings, sampled Chamfer pairs, a residual wrapper), ``batch_memory`` plus
    the loss's ``loss_memory`` and the gradients of the weights bound the tensors a step allocates, on
    short and longer lists with padding; and not by more than a factor that would refuse sensible runs."""
    torch.manual_seed(0)
    model = make_model(name, F, params, categorical_cardinalities=[5, 7][:n_cat])
    if residual:
        model = Residual(model)
    loss_fn = None if model.traits.own_objective else LOSSES[model.traits.default_loss]
    weights = model.state_memory(training=False)
    for B, L in SHAPES:
        got = _measured(model, loss_fn, _batch(B, L, n_cat), training)
        bound = model.batch_memory(B, L, training=training)
        if training:
            bound += model.state_memory(training=True) - weights  # gradients (Adam's moments unused here)
            bound += 0 if model.traits.own_objective else loss_memory(model.traits.default_loss, B, L)
        assert got <= bound, f"{name} {params} B={B} L={L}: {got:,} bytes allocated, estimate {bound:,}"
        assert bound <= 12 * got + 2**20, f"{name} B={B} L={L}: estimate {bound:,} for {got:,} bytes"


@pytest.mark.parametrize(
    ("loss", "options"),
    [*((name, {}) for name in LOSSES), ("softrank", {"k": 5}), ("neuralndcg", {"sinkhorn_iters": 200})],
)
def test_loss_estimates_bound_the_tensors_allocated(loss, options):
    """Every loss, O(B L) and O(B L^2) alike (SoftRank's rank distributions, NeuralNDCG's Sinkhorn
    blocks), on lists up to 300 items: the estimate bounds what the loss allocates, forward and backward."""
    model = make_model("listnet", F)
    loss_fn = functools.partial(LOSSES[loss], **options)
    for B, L in [*SHAPES, (1, 300)]:
        got = _measured(model, loss_fn, _batch(B, L), True)
        bound = model.batch_memory(B, L, training=True) + loss_memory(loss, B, L, options)
        bound += model.state_memory(training=True)
        assert got <= bound, f"{loss} B={B} L={L}: {got:,} bytes allocated, estimate {bound:,}"


# ----------------------------------------------------------------------------- refusals and scoring
def _long_query_file(path, n_long=3000, n_features=3):
    """One query of ``n_long`` items and two short ones (a LETOR file)."""
    rng = np.random.default_rng(0)
    lines = []
    for qid, n in ((1, n_long), (2, 10), (3, 12)):
        for _ in range(n):
            feats = " ".join(f"{j + 1}:{rng.random():.3f}" for j in range(n_features))
            lines.append(f"{rng.integers(0, 3)} qid:{qid} {feats}\n")
    path.write_text("".join(lines))
    return path


@pytest.fixture(scope="module")
def long_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("long")
    valid = d / "valid.txt"
    valid.write_text("".join(f"{i % 3} qid:9 1:0.{i} 2:0.5 3:0.1\n" for i in range(8)))
    return _long_query_file(d / "train.txt"), valid


@pytest.mark.parametrize("model", ["dlcm", "qilcm", "mlp"])
def test_a_long_query_is_refused_before_allocating_naming_it(model, long_files, tmp_path, capsys):
    """A LETOR file with one 3,000-item query made DLCM allocate for minutes and end in a traceback:
    under ``train.max_memory_bytes`` the run is refused before its first batch, in one line naming the
    query, its length, the estimate, the limit and the options that help; nothing is left in --out."""
    train, valid = long_files
    out = tmp_path / "out"
    budget = 5_000_000 if model == "mlp" else 400_000_000
    args = ["train", "--model", model, "--train", str(train), "--valid", str(valid), "--out", str(out)]
    assert main([*args, "--set", f"train.max_memory_bytes={budget}", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ctxrank: error: training") and len(err.splitlines()) == 1
    for part in ("query '1' has 3,000 items", f"train.max_memory_bytes = {budget}", "--top-k", "fit"):
        assert part in err, (part, err)
    assert not out.exists()  # the refused run left nothing: the same command with more memory starts afresh
    # with the top 100 of an initial ranker, the same budget trains
    if model == "qilcm":
        argv = [*args, "--set", f"train.max_memory_bytes={budget}", "--set", "train.max_epochs=1"]
        assert main([*argv, "--initial", "lambdamart", "--top-k", "100", "--no-progress"]) == 0


_CAPPED = """
import resource, sys
import torch
from ctxrank.cli import main
vm = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize:")).split()[1]) * 1024
cap = vm + {headroom}
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
sys.exit(main(sys.argv[1:]))
"""


def _capped_cli(argv, headroom=600 << 20, *, preload=(), env=None):
    """``ctxrank ARGV`` in a subprocess whose address space is capped at its size after importing torch
    and ctxrank (and the modules ``preload``) plus ``headroom``: (exit status, stderr). ``env``: more
    environment variables."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the memory cap reads /proc/self/status")
    env = {
        **os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
        **(env or {}),
    }  # fmt: skip
    code = "".join(f"import {m}\n" for m in preload) + _CAPPED.format(headroom=headroom)
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300, env=env
    )
    return proc.returncode, proc.stderr


def test_a_long_query_under_a_memory_cap_is_one_line_never_a_traceback(long_files, tmp_path):
    """Under an address-space cap: with ``"auto"`` the run is refused before allocating (the room under
    the cap is the budget); with a budget above the machine the run fails allocating, and says so in
    one line (it blamed the output directory: releasing its lock failed with ENOMEM and masked the
    error), exit status 2."""
    train, valid = long_files
    args = ["train", "--model", "dlcm", "--train", str(train), "--valid", str(valid), "--no-progress"]
    rc, err = _capped_cli([*args, "--out", str(tmp_path / "auto")])
    assert rc == 2 and "Traceback" not in err, err[-3000:]
    assert "query '1' has 3,000 items" in err and "'auto'" in err and "ulimit -v" in err
    huge = ["--out", str(tmp_path / "huge"), "--set", "train.max_memory_bytes=1000000000000000"]
    rc, err = _capped_cli([*args, *huge])
    assert rc == 2 and "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("ctxrank: error:")]
    assert len(lines) == 1 and "out of memory" in lines[0] and "huge" not in lines[0], err[-3000:]


def _data(lengths, n_features=F) -> RankingData:
    rng = np.random.default_rng(1)
    n = int(sum(lengths))
    return RankingData(
        features=rng.random((n, n_features), dtype=np.float32),
        labels=rng.integers(0, 3, n).astype(np.float32),
        query_ids=np.array([f"q{i}" for i in range(len(lengths))]),
        query_offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
    )


def test_scoring_cuts_batches_to_fit_and_refuses_a_list_too_long_alone():
    """Scoring is per list: a batch above the budget is cut into smaller ones (the same scores), and a
    list that does not fit alone is refused before anything is scored, naming it."""
    torch.manual_seed(0)
    model = make_model("qilcm", F)
    data = _data([5, 40, 120, 300, 7, 90])
    free = predict(model, data, max_memory_bytes=2**40)
    state = model.state_memory(training=False)
    budget = state + 2 * model.batch_memory(1, 300, training=False)  # the longest list, not all of them
    batches = list(iterate_batches(data, 512, fits=scoring_fits(model, data, budget, "cpu")))
    assert len(batches) > 1 and sorted(int(q) for b in batches for q in b.query_index) == list(range(6))
    np.testing.assert_allclose(predict(model, data, max_memory_bytes=budget), free, rtol=1e-5, atol=1e-6)
    with pytest.raises(MemoryBudgetError, match=r"query 'q3' \(300 items\).*lists of at most \d+ items fit"):
        predict(model, data, max_memory_bytes=state + model.batch_memory(1, 100, training=False))


@pytest.mark.parametrize(
    ("model", "sets"),
    [
        ("mlp", ["model_params.hidden=[16000000, 16000000]"]),
        ("listnet", ["model_params.hidden=[16000000, 16000000]"]),
        ("arsm", ["model_params.hidden=[16000000, 16000000]"]),
        ("dcm", ["model_params.hidden=16000000"]),
        ("dlcm", ["model_params.gru_hidden=16000000"]),
        ("qilcm", ["model_params.encoder_width=16000000"]),
        ("qilcm-variant3", ["model_params.rank_hidden=[16000000, 16000000]"]),
    ],
)
def test_a_huge_model_is_refused_before_the_data_and_allocates_nothing(model, sets, tmp_path):
    """``--set model_params.hidden=[100000000]`` allocated 18.4 GB, then a traceback. Within the config
    bounds a model can still ask for petabytes: its weights are counted on the meta device before the
    data are read (the data file does not exist) and the run is refused in one line, also under a memory
    cap of 600 MiB (so nothing was allocated)."""
    argv = ["train", "--model", model, "--data", str(tmp_path / "none.txt"), "--out", str(tmp_path / "o")]
    for s in sets:
        argv += ["--set", s]
    rc, err = _capped_cli(argv)
    assert rc == 2 and "Traceback" not in err, err[-3000:]
    assert err.startswith(f"ctxrank: error: {model} with these model_params has") and "weights" in err, err
    assert "train.max_memory_bytes" in err and "none.txt" not in err and len(err.splitlines()) == 1


def test_out_of_memory_is_one_line_whatever_fails(monkeypatch, capsys):
    """PyTorch's allocation failure, NumPy's MemoryError and ENOMEM from the system print one line."""
    import errno

    from ctxrank.cli import data

    for exc in (
        RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory"),
        MemoryError("Unable to allocate 3.2 GiB for an array"),
        OSError(errno.ENOMEM, "Cannot allocate memory", "/some/out/dir"),
    ):

        def fail(*_a, exc=exc, **_k):
            raise exc

        monkeypatch.setattr(data, "data_info", fail)
        assert main(["data-info", "whatever.txt"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("ctxrank: error: out of memory") and len(err.strip().splitlines()) == 1
        assert "/some/out/dir" not in err
    monkeypatch.setattr(data, "data_info", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("a bug")))
    with pytest.raises(RuntimeError, match="a bug"):  # any other RuntimeError is a bug: its traceback shows
        main(["data-info", "whatever.txt"])


@pytest.mark.parametrize("cap", ["items", "bytes"])
@pytest.mark.parametrize("name", ["dlcm", "qilcm", "attn", "setrank", "dcm"])
def test_cpu_scoring_batches_hold_at_most_the_caps_and_score_the_same(name, cap, monkeypatch):
    """On the CPU a scoring batch holds at most ``CPU_SCORING_ITEMS`` padded items and
    ``CPU_SCORING_BYTES`` estimated bytes (a longer list alone): the validation batch of 512 lists of 100
    items no longer holds DLCM's activations for 51,200 items at once. The scores equal those of uncapped
    batches up to float32 rounding (a list padded to another length sums its products in another order:
    5e-5 relative for DLCM here)."""
    from ctxrank.training import memory

    torch.manual_seed(0)
    model = make_model(name, F)
    data = _data([5, 40, 12, 30, 7, 90, 3, 25, 60, 18, 1, 33])
    uncapped = {"CPU_SCORING_ITEMS": 2**40, "CPU_SCORING_BYTES": 2**60}
    for key, value in uncapped.items():
        monkeypatch.setattr(memory, key, value)
    assert len(list(iterate_batches(data, 512, fits=scoring_fits(model, data, 2**40, "cpu")))) == 1
    whole = predict(model, data, max_memory_bytes=2**40)
    limit = 64 if cap == "items" else memory._step_bytes(model, data, 2, 40, None)
    monkeypatch.setattr(memory, "CPU_SCORING_ITEMS" if cap == "items" else "CPU_SCORING_BYTES", limit)
    fits = scoring_fits(model, data, 2**40, "cpu")
    batches = list(iterate_batches(data, 512, fits=fits))
    assert len(batches) > 3
    for b in batches:
        B, L = b.features.shape[:2]
        size = B * L if cap == "items" else memory._step_bytes(model, data, B, L, None)
        assert b.batch_size == 1 or size <= limit, (b.batch_size, b.list_len)
    assert sorted(int(q) for b in batches for q in b.query_index) == list(range(12))
    np.testing.assert_allclose(predict(model, data, max_memory_bytes=2**40), whole, rtol=1e-4, atol=1e-6)
