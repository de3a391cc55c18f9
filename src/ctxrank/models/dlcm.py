"""DLCM: the Deep Listwise Context Model (Ai, Bi, Guo, Croft; SIGIR 2018).

DLCM re-ranks the top ``n`` items of an initial ranking. **The row order of a list is the initial
ranking**: position 0 is the initial top-1 (``ctxrank.data.lists.truncate_top_k`` / the re-ranking
pipeline order the items that way; on whole lists without re-ranking the rows are in file order and
DLCM reads that order). ``init_scores`` are not used (the authors' ``use_residua`` was dropped from
their final model). Three steps, per list of ``n`` real items ``d_1..d_n`` (``d_1`` = top):

1. **Input representation** (sec. 4.1, eq. 3): a two-layer ELU network abstracts each feature vector
   and the abstraction is concatenated with it (Wide & Deep style)::

       z^(0) = x,  z^(l) = elu(W_z^(l-1) z^(l-1) + b_z^(l-1)),  l = 1, 2;   x' = [x; z^(2)]

   ``alpha`` = width of ``x`` and ``beta`` = width of ``z^(2)``; ``beta = 0`` means ``x' = x``.
2. **Local context** (sec. 4.2, eq. 4): a GRU reads the ``n`` items one by one, by default from the
   LOWEST position to the HIGHEST (``d_n`` first, ``d_1`` last, so the top items weigh most on the
   final state). ``d_i`` is then fed at step ``n + 1 - i`` and its output is ``o_{n+1-i}``; the state
   after the last step, ``s_n``, is the local context ``I(R_q^n, X_q^n)``. (Eq. 4 writes ``s_t`` for
   the candidate activation and ``o_t`` for the GRU output; for a one-layer GRU the final state is the
   last output, and, as in the authors' code (``static_rnn``'s final state), ``s_n`` here is that
   final state ``o`` after the last step.)
3. **Local ranking function** (sec. 4.3, eq. 5)::

       phi(o_{n+1-i}, s_n) = V_phi . ( o_{n+1-i} (.) tanh(W_phi . s_n + b_phi) )

   with ``W_phi`` in ``R^{A x k x A}``, ``b_phi`` in ``R^{A x k}``, ``V_phi`` in ``R^k`` (``A`` = GRU
   width). ``W_phi . s_n + b_phi`` is an ``A x k`` matrix ``C``; ``o`` multiplies it along ``A``
   (broadcast over the ``k`` columns) and the result is summed over ``A`` (``o^T C``, a ``k``-vector)
   and dotted with ``V_phi``::

       score_i = sum_{a, j} o[a] * tanh( sum_c W_phi[a, j, c] s_n[c] + b_phi[a, j] ) * V_phi[j]

   ``k`` plays the role of the attention heads of the authors' code: their ``att_strategy="multi"``
   (the setting in their README) computes, per head ``j``, ``sum_a o[a] tanh(W_j s_n + b_j)[a]``,
   scales it by a learned ``head_weight_j`` and averages the ``k = num_heads = 3`` heads, which is
   eq. 5 with ``V_phi = head_weight / k``.

Shapes (``B`` lists, ``L`` padded length, ``F`` input width incl. categorical embeddings)::

    features (B, L, F) -> x' (B, L, alpha) -> [per-row reordering] -> GRU outputs (B, L, A),
    s_n (B, A) -> C = tanh(einsum("akc,bc->bak", W_phi, s_n) + b_phi) (B, A, k)
    -> scores = einsum("bla,bak,k->bl", o, C, V_phi) (B, L)

with ``A = H`` or ``2 H`` (bidirectional), ``H`` = GRU hidden size (default ``alpha``, as in eq. 4).

**Padding.** Real items come first in each row (``mask`` True). Each row is reordered *within its own
length* (a gather with per-row indices: for the reverse order, step ``t`` reads item ``n_b - 1 - t``),
so every row's real items occupy steps ``0..n_b - 1`` and padding only follows them; the recurrence
stops at each row's length (the state is frozen after step ``n_b - 1``), so ``s_n`` is the state after
the last real item and no padded item ever enters a real item's output, the context or a real score.
(The authors' code pads to a fixed ``rank_list_size`` and feeds a learned PAD vector through the GRU
*before* the real items, for both feeding orders; the context then depends on the amount of padding,
and the PAD outputs also enter their min-shift and softmax. Here scores do not depend on padding at
all, which the tests check.)

**Loss.** ``default_loss = "attrank"`` and, unless the loss options say otherwise, DLCM trains with
``form="dlcm"``, the two-sided Attention Rank cross entropy of the paper (eq. 11)::

    L = - sum_i [ a^y_i log a^S_i + (1 - a^y_i) log(1 - a^S_i) ]

(``DLCM.traits.default_loss_params``, applied in :meth:`RankingModule.training_loss` when the trainer's
loss is ``attrank`` with no ``form`` bound). Other choices, as run-config overrides::

    --set loss_params.form=dlcm_code   # the authors' released code: softmax cross entropy only
    --set loss_params.form=qilcm       # QILCM's eq. 12
    --set loss=listmle                 # ListMLE (paper sec. 4.4)
    --set loss=softrank                # SoftRank, sigma = 0.1 as in the paper (the loss default)

**Defaults from the authors' code** (``QingyaoAi/Deep-Listwise-Context-Model-for-Ranking-Refinement``,
``DLCM/RankLSTM_model.py`` and ``DLCM/main.py``): ``--embed_size 1024`` is the width of ``x'``; the
abstraction adds ``beta = max(1024 - F, 0)`` columns through hidden widths
``[(F + beta) // 2, beta]`` = ``[512, 1024 - F]`` with ELU after both layers (``abstract()`` in
``embedding_rnn_seq2seq``); the GRU (``tf.contrib.rnn.GRUCell``) has ``F + beta`` units, i.e.
``H = alpha``; ``num_heads = 3`` (``k``); ``reverse_input = True``; one layer; no dropout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ctxrank._checks import check_bool, check_choice, check_dropout, check_int
from ctxrank.models._dropout import Dropout
from ctxrank.models._jit import records_backward, traceable_loop, tracing
from ctxrank.models.base import FLOAT_BYTES, ModelTraits, RankingModule

__all__ = ["AUTHORS_EMBED_SIZE", "DIRECTIONS", "DLCM", "GRU_CELLS", "DLCMConfig", "PaperGRU"]

DIRECTIONS: tuple[str, ...] = ("reverse_rank", "rank")
GRU_CELLS: tuple[str, ...] = ("paper", "torch")
AUTHORS_EMBED_SIZE = 1024  # width of x' in the authors' code (main.py, --embed_size)


@dataclass(frozen=True)
class DLCMConfig:
    """Attributes:
    encoder_widths: widths ``(h1, beta)`` of the two ELU layers of the input abstraction (eq. 3);
        ``()`` = no abstraction (``beta = 0``, ``x' = x``); ``None`` (default) = the authors' rule
        for ``F`` input features: ``beta = max(1024 - F, 0)``, ``h1 = (F + beta) // 2`` (so ``x'`` has
        1024 columns; no abstraction when ``F >= 1024``).
    gru_hidden: GRU state width ``H``; ``None`` = ``alpha``, the width of ``x'`` (eq. 4).
    k: hidden units of the local ranking function (eq. 5); the authors' code uses 3 heads.
    direction: feeding order of the GRU: ``"reverse_rank"`` (paper: lowest position first, the
        top-1 last) or ``"rank"`` (top-1 first).
    bidirectional: also run a second GRU (own weights) in the other order and concatenate outputs
        and final states, ``[primary; other]`` (``A = 2 H``).
    gru: ``"paper"`` = eq. 4 as written (reset gate applied before the recurrent matrix, as in the
        TensorFlow ``GRUCell`` of the authors' code; a Python loop over steps) or ``"torch"`` =
        ``torch.nn.GRU`` (reset gate applied after the recurrent matrix; fused cuDNN kernel, faster
        on GPU). Both have biases (eq. 4 omits them, the authors' cell has them).
    dropout: dropout probability on ``x'`` before the GRU (not in the paper or code: default 0).
    """

    #: the search space of ``ctxrank tune``: run-config key -> distribution (format: ``ctxrank.tune``)
    SEARCH_SPACE: ClassVar[Mapping[str, tuple[Any, ...]]] = {
        "loss": ("choice", ("attrank", "listnet", "listmle", "lambdaloss")),
        "model_params.gru_hidden": ("choice", (64, 128, 256)),
        "model_params.dropout": ("float", 0.0, 0.5),
    }

    encoder_widths: tuple[int, ...] | None = None
    gru_hidden: int | None = None
    k: int = 3
    direction: str = "reverse_rank"
    bidirectional: bool = False
    gru: str = "paper"
    dropout: float = 0.0

    def __post_init__(self) -> None:
        w = self.encoder_widths
        if w is not None and (
            not isinstance(w, tuple)
            or len(w) not in (0, 2)
            or any(isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in w)
        ):
            raise ValueError(
                "model_params.encoder_widths must be two positive integers [h1, beta] (the two ELU "
                f"layers of eq. 3), [] for no abstraction, or omitted for the authors' rule; got {w!r}"
            )
        check_int("model_params.gru_hidden", self.gru_hidden, allow_none=True)
        check_int("model_params.k", self.k)
        check_choice("model_params.direction", self.direction, DIRECTIONS)
        check_bool("model_params.bidirectional", self.bidirectional)
        check_choice("model_params.gru", self.gru, GRU_CELLS)
        check_dropout("model_params.dropout", self.dropout)

    def resolved_encoder_widths(self, n_inputs: int) -> tuple[int, ...]:
        """``(h1, beta)`` or ``()`` for ``n_inputs`` input columns (applies the authors' rule)."""
        if self.encoder_widths is not None:
            return self.encoder_widths
        beta = max(AUTHORS_EMBED_SIZE - n_inputs, 0)
        return ((n_inputs + beta) // 2, beta) if beta > 0 else ()


class PaperGRU(nn.Module):
    """The GRU of DLCM eq. 4, run over length-masked sequences.

    With ``x_t`` the input and ``o_{t-1}`` the previous output (= state)::

        u_t = sigmoid(W_u^x x_t + W_u^s o_{t-1} + b_u)        update gate
        r_t = sigmoid(W_r^x x_t + W_r^s o_{t-1} + b_r)        reset gate
        c_t = tanh(W^x x_t + W^s (r_t (.) o_{t-1}) + b)       candidate (the paper's s_t)
        o_t = (1 - u_t) (.) o_{t-1} + u_t (.) c_t

    The reset gate acts before ``W^s`` (as in eq. 4 and TensorFlow's ``GRUCell``), unlike
    ``torch.nn.GRU`` which computes ``r_t (.) (W^s o_{t-1} + b)``. The initial state is 0.
    """

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.input_proj = nn.Linear(input_size, 3 * hidden_size)  # [W_u^x; W_r^x; W^x] and biases
        self.gate_proj = nn.Linear(hidden_size, 2 * hidden_size, bias=False)  # [W_u^s; W_r^s]
        self.cand_proj = nn.Linear(hidden_size, hidden_size, bias=False)  # W^s
        bound = hidden_size**-0.5  # torch.nn.GRU's initialization
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def forward(self, seq: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``seq`` (B, T, D), row b real at steps ``0..lengths[b]-1`` -> outputs (B, T, H), state (B, H).

        After step ``lengths[b] - 1`` row b's state is frozen (later steps repeat it), so the returned
        state is the state after the row's last real step (0 for an empty row).
        """
        if self.projects_inside(seq):  # training: the projections' gradient formed a few steps at a time
            weights = self.weights()
            if not torch.is_autocast_enabled(seq.device.type):
                return _PaperGRUSteps.apply(seq, *weights, lengths)
            # its hand-written backward multiplies by the weights: under autocast (bf16 / fp16 training)
            # the recurrence runs in the weights' precision, not autocast's
            with torch.autocast(seq.device.type, enabled=False):
                return _PaperGRUSteps.apply(seq.to(weights[0].dtype), *weights, lengths)
        return self.recur(self.input_proj(seq), lengths)  # (B, T, 3H): all input projections at once

    def weights(self) -> tuple[torch.Tensor, ...]:
        """``W^x`` (3H, D), its bias (3H,), ``[W_u^s; W_r^s]`` (2H, H) and ``W^s`` (H, H)."""
        return self.input_proj.weight, self.input_proj.bias, self.gate_proj.weight, self.cand_proj.weight

    def projects_inside(self, seq: torch.Tensor) -> bool:
        """Whether :meth:`forward` trains (autograd records it, not traced): the steps then project
        ``seq`` themselves; otherwise the caller may project first (:meth:`recur`) and free ``seq``."""
        return seq.shape[1] > 0 and records_backward(seq, *self.weights())

    def recur(self, xp: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The recurrence over the input projections ``xp`` (B, T, 3H) = ``input_proj(seq)`` when
        nothing is trained (scoring, tracing): what :meth:`forward` returns (the caller may then free
        ``seq`` before the T steps)."""
        B, T, _ = xp.shape
        if T == 0:
            return xp.new_zeros(B, 0, self.hidden_size), xp.new_zeros(B, self.hidden_size)
        return traceable_loop(paper_gru_steps)(xp, self.gate_proj.weight, self.cand_proj.weight, lengths)


def paper_gru_steps(
    xp: torch.Tensor, w_gate: torch.Tensor, w_cand: torch.Tensor, lengths: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The recurrence of DLCM eq. 4 (:class:`PaperGRU`) over the T steps (TorchScript-compatible,
    :func:`ctxrank.models._jit.traceable_loop`).

    ``xp`` (B, T, 3H) input projections ``[W_u^x x_t + b_u; W_r^x x_t + b_r; W^x x_t + b]``,
    ``w_gate`` (2H, H) ``[W_u^s; W_r^s]``, ``w_cand`` (H, H) ``W^s``, ``lengths`` (B,) -> outputs
    (B, T, H) and the state (B, H) after each row's last real step (frozen afterwards).
    """
    H = w_cand.size(0)
    h = torch.zeros(xp.size(0), H, dtype=xp.dtype, device=xp.device)  # o_0 = 0
    live = torch.arange(xp.size(1), device=xp.device)[None, :] < lengths[:, None]  # (B, T)
    outputs: list[torch.Tensor] = []
    for t, x_t in enumerate(xp.transpose(0, 1)):  # x_t (B, 3H); see _jit on why not xp[:, t]
        h, _, _, _ = paper_gru_cell(x_t, h, w_gate, w_cand, live[:, t, None])
        outputs.append(h)
    return torch.stack(outputs, dim=1), h


def paper_gru_cell(
    x_t: torch.Tensor, h: torch.Tensor, w_gate: torch.Tensor, w_cand: torch.Tensor, live_t: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step of eq. 4: ``x_t`` (B, 3H) input projections, ``h`` (B, H) the state before it, ``live_t``
    (B, 1) whether the step is real -> the new state and the step's ``u``, ``r``, ``c`` (B, H) each."""
    H = w_cand.size(0)
    xu, xr, xc = x_t.split(H, dim=-1)  # (B, H) each
    hu, hr = F.linear(h, w_gate).split(H, dim=-1)  # (B, H) each
    u = torch.sigmoid(xu + hu)  # update gate
    r = torch.sigmoid(xr + hr)  # reset gate, applied before W^s
    c = torch.tanh(xc + F.linear(r * h, w_cand))  # candidate (the paper's s_t)
    return torch.where(live_t, torch.lerp(h, c, u), h), u, r, c  # o_t = (1 - u) o_{t-1} + u c


class _PaperGRUSteps(torch.autograd.Function):
    """:class:`PaperGRU` in training: the input projections and :func:`paper_gru_steps`, with the
    backward through time written out.

    Autograd would record about ten operations a step and keep five ``(B, H)`` tensors of each of the
    ``T`` steps, allocated one by one: at 80 lists of 100 items and ``H = 1,024`` that was 500 small
    blocks, which the C allocator kept fragmented after each step (the resident set grew by about 370
    MiB over a few steps; docs/benchmarks.md). Here the forward runs the same operations (the same
    values, bit for bit) and keeps the gates ``u``, ``r``, the candidate ``c`` and the outputs in four
    ``(B, T, H)`` tensors, and the input ``seq`` for the projections' gradient; the backward applies eq.
    4's derivatives step by step from the last, sums the recurrent weights' gradients as it goes, and
    turns the input projections' gradient ``[da_u; da_r; da_c]`` into those of ``seq``, ``W^x`` and its
    bias every :func:`_steps_per_block` steps, so that no ``(B, T, 3H)`` gradient exists (94 MiB at 80 x
    100 x 1,024). torch.nn.GRU computes another cell (the reset gate after ``W^s``), so no library kernel
    does this.

    With ``h`` the state before step ``t``, ``live`` the step mask, ``h' = where(live, lerp(h, c, u), h)``
    and upstream gradient ``g`` of ``h'``: ``dh_new = g live``; ``du = dh_new (c - h)``; ``dc = dh_new u``;
    ``da_c = dc (1 - c^2)``; ``d(r h) = da_c W^s``; ``dr = d(r h) h``; ``da_u = du u (1 - u)``, ``da_r = dr
    r (1 - r)``; ``dh = g (1 - live) + dh_new (1 - u) + d(r h) r + [da_u; da_r] [W_u^s; W_r^s]``; the
    input projections' gradient at step ``t`` is ``[da_u; da_r; da_c]``.
    """

    @staticmethod
    def forward(
        ctx: Any,
        seq: torch.Tensor,
        w_in: torch.Tensor,
        b_in: torch.Tensor,
        w_gate: torch.Tensor,
        w_cand: torch.Tensor,
        lengths: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        xp = F.linear(seq, w_in, b_in)  # (B, T, 3H), as PaperGRU.forward computes it; freed on return
        B, T, _ = xp.shape
        H = w_cand.size(0)
        out, gates, cand = xp.new_empty(B, T, H), xp.new_empty(B, T, 2 * H), xp.new_empty(B, T, H)
        h = xp.new_zeros(B, H)
        live = torch.arange(T, device=xp.device)[None, :] < lengths[:, None]  # (B, T)
        for t, x_t in enumerate(xp.transpose(0, 1)):  # paper_gru_steps' loop, keeping each step's gates
            h, u, r, c = paper_gru_cell(x_t, h, w_gate, w_cand, live[:, t, None])
            out[:, t], gates[:, t, :H], gates[:, t, H:], cand[:, t] = h, u, r, c
        ctx.save_for_backward(seq, out, gates, cand, w_in, w_gate, w_cand, live)
        return out, h.clone()

    @staticmethod
    def backward(ctx: Any, g_out: torch.Tensor, g_state: torch.Tensor) -> tuple[Any, ...]:
        # both gradients are tensors: autograd materializes an unused output's as zeros
        seq, out, gates, cand, w_in, w_gate, w_cand, live = ctx.saved_tensors
        B, T, H = out.shape
        d_seq = torch.empty_like(seq)
        d_w_in, d_b_in = torch.zeros_like(w_in), w_in.new_zeros(3 * H)
        # the recurrent weights' gradients, summed over the steps as they go (no (B, T, H) copy of the
        # states before each step): [da_u; da_r]^T h and da_c^T (r h); step 0's h is 0
        d_gate, d_cand = torch.zeros_like(w_gate), torch.zeros_like(w_cand)
        block = _steps_per_block(B)
        d_xp = out.new_empty(B, min(block, T), 3 * H)  # [da_u; da_r; da_c] of the block's steps
        dh = g_state
        for t in range(T - 1, -1, -1):
            dh = dh + g_out[:, t]
            h = out[:, t - 1] if t else out.new_zeros(B, H)
            u, r, c, m = gates[:, t, :H], gates[:, t, H:], cand[:, t], live[:, t, None]
            dh_new = torch.where(m, dh, 0.0)
            da_c = dh_new * u * (1 - c * c)
            d_rh = da_c @ w_cand
            da_u = dh_new * (c - h) * u * (1 - u)
            da_r = d_rh * h * r * (1 - r)
            first = t - t % block  # the block's first step: blocks are [0, block), [block, 2 block), ...
            d_step = d_xp[:, t - first]
            d_step[:, :H], d_step[:, H : 2 * H], d_step[:, 2 * H :] = da_u, da_r, da_c
            da_ur = d_step[:, : 2 * H]
            if t:
                d_gate.addmm_(da_ur.T, h)
                d_cand.addmm_(da_c.T, r * h)
            dh = torch.where(m, 0.0, dh) + dh_new * (1 - u) + d_rh * r + da_ur @ w_gate
            if t == first:  # the block is complete: the projections' gradients of its steps
                steps = min(block, T - first)
                d_block = d_xp[:, :steps].reshape(B * steps, 3 * H)
                d_seq[:, first : first + steps] = (d_block @ w_in).view(B, steps, -1)
                d_w_in.addmm_(d_block.T, seq[:, first : first + steps].reshape(B * steps, -1))
                d_b_in.add_(d_block.sum(dim=0))
        return d_seq, d_w_in, d_b_in, d_gate, d_cand, None


def _steps_per_block(batch_lists: int) -> int:
    """How many steps :class:`_PaperGRUSteps`' backward turns into input gradients at once: enough for
    about 512 rows a matrix product (its speed; 7 steps of 80 lists), so that the block's gradient stays
    a few MiB at any ``T``."""
    return max(1, -(-512 // max(batch_lists, 1)))


def _reorder(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``x`` (B, L, D) with each row's items taken in the order ``idx`` (B, L): ``out[b, t] = x[b, idx[b,
    t]]``. In training by indexing, whose backward keeps only ``idx`` (``gather`` keeps ``x`` too: a
    (B, L, D) copy of DLCM's widest tensor alive through the recurrence); traced, by ``gather``."""
    if not records_backward(x):
        return x.gather(1, idx[..., None].expand_as(x))
    return x[torch.arange(x.shape[0], device=x.device)[:, None], idx]


class DLCM(RankingModule):
    """Deep Listwise Context Model: ``(B, L, F)`` features in initial-rank order -> ``(B, L)`` scores.

    See the module docstring for the equations, the padding treatment and the loss options.
    """

    name = "dlcm"
    config_class = DLCMConfig
    #: the loss options apply when the loss is ``default_loss`` and the run does not set them; no
    #: rerank_features: DLCM reads the raw feature vectors only (paper sec. 4.1: no extra features)
    traits = ModelTraits(default_loss="attrank", default_loss_params={"form": "dlcm"}, reads_order=True)

    def __init__(self, n_features: int, config: DLCMConfig, *, categorical_cardinalities: Sequence[int] = ()):
        super().__init__(n_features, config, categorical_cardinalities=categorical_cardinalities)
        widths = config.resolved_encoder_widths(self.input_dim)
        if widths:
            h1, beta = widths
            self.encoder: nn.Module | None = nn.Sequential(
                nn.Linear(self.input_dim, h1), nn.ELU(), nn.Linear(h1, beta), nn.ELU()
            )
        else:
            beta = 0
            self.encoder = None
        self.alpha = self.input_dim + beta  # width of x' (the paper's alpha in eq. 4)
        self.hidden = self.alpha if config.gru_hidden is None else config.gru_hidden
        self.dropout = Dropout(config.dropout) if config.dropout > 0 else None
        orders = [config.direction]
        if config.bidirectional:
            orders.append("rank" if config.direction == "reverse_rank" else "reverse_rank")
        self.orders = tuple(orders)
        self.grus = nn.ModuleList(self._make_gru() for _ in self.orders)
        A, k = self.hidden * len(self.orders), config.k
        self.context_width = A
        bound = A**-0.5
        self.W_phi = nn.Parameter(torch.empty(A, k, A).uniform_(-bound, bound))  # (A, k, A)
        self.b_phi = nn.Parameter(torch.empty(A, k).uniform_(-bound, bound))  # (A, k)
        self.V_phi = nn.Parameter(torch.empty(k).uniform_(-(k**-0.5), k**-0.5))  # (k,)

    def batch_memory(self, batch_size: int, list_len: int, *, training: bool) -> int:
        """Per item: ``x'`` and the abstraction's layers (eq. 3), per direction the reordered input, its
        projections and the GRU's per-step gates and states (eq. 4: about 20 ``H``-wide values a step
        kept for backward, 8 without), the outputs gathered back, and eq. 5's ``(A, k)`` products."""
        widths = sum(self.config.resolved_encoder_widths(self.input_dim))
        A, H, k = self.context_width, self.hidden, self.config.k
        width = 3 if training else 2
        per_direction = (3 * self.alpha + 20 * H) if training else (self.alpha + 8 * H)
        per_item = (
            self.input_floats(training=training)
            + width * (widths + self.alpha)
            + len(self.orders) * per_direction
            + A * (k + 4)
        )
        return FLOAT_BYTES * batch_size * list_len * per_item

    def _make_gru(self) -> nn.Module:
        if self.config.gru == "paper":
            return PaperGRU(self.alpha, self.hidden)
        return nn.GRU(self.alpha, self.hidden, batch_first=True)

    # ------------------------------------------------------------------------------------------------
    def represent(self, features: torch.Tensor, categorical: torch.Tensor | None = None) -> torch.Tensor:
        """x' = [x; z^(2)] (DLCM eq. 3): (B, L, F) -> (B, L, alpha)."""
        x = self.item_inputs(features, categorical)
        if self.encoder is None:
            return x
        if self.training and torch.is_grad_enabled() and not tracing():
            # training: the abstraction's activations are recomputed in backward instead of kept (the
            # same values: no randomness in it), 3 % more time for a step's widest (B, L, 1400) tensors
            z = checkpoint(self.encoder, x, use_reentrant=False, preserve_rng_state=False)
        else:
            z = self.encoder(x)
        return torch.cat([x, z], dim=-1)

    @staticmethod
    def feed_order(lengths: torch.Tensor, L: int, order: str) -> torch.Tensor:
        """int64 (B, L): ``idx[b, t]`` = the item fed at step ``t``.

        ``"rank"``: ``t``. ``"reverse_rank"``: ``n_b - 1 - t`` for ``t < n_b`` (real items reversed
        within the row's own length), ``t`` on padding. Both are involutions: ``idx[b, idx[b, i]] = i``,
        so the same index maps step outputs back to items.
        """
        t = torch.arange(L, device=lengths.device).expand(lengths.shape[0], L)
        if order == "rank":
            return t
        n = lengths[:, None]
        return torch.where(t < n, n - 1 - t, t)

    @staticmethod
    def _gru_inputs(gru: nn.Module, seq: torch.Tensor) -> torch.Tensor:
        """What :meth:`_run` reads of ``seq`` (B, T, alpha): scoring with the paper GRU, its input
        projections (B, T, 3H), computed before its steps so that ``seq`` can be freed; otherwise
        ``seq`` itself (the paper GRU then projects it in its steps, keeping ``seq`` for backward)."""
        if isinstance(gru, PaperGRU) and not gru.projects_inside(seq):
            return gru.input_proj(seq)
        return seq

    def _run(
        self, gru: nn.Module, seq: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One direction over :meth:`_gru_inputs` ``seq`` (B, T, .) in feeding order -> outputs (B, T,
        H), s_n (B, H)."""
        if isinstance(gru, PaperGRU):
            return gru(seq, lengths) if gru.projects_inside(seq) else gru.recur(seq, lengths)
        B, T, _ = seq.shape
        if T == 0:
            return seq.new_zeros(B, 0, self.hidden), seq.new_zeros(B, self.hidden)
        # Real steps come first in every row and a GRU is causal: outputs at real steps never see the
        # padded steps after them, so no packing is needed; s_n is the output at the last real step.
        out, _ = gru(seq)  # (B, T, H)
        last = (lengths - 1).clamp(min=0)  # (B,)
        s_n = out.gather(1, last[:, None, None].expand(B, 1, self.hidden)).squeeze(1)  # (B, H)
        return out, torch.where(lengths[:, None] > 0, s_n, torch.zeros_like(s_n))

    def context(
        self, features: torch.Tensor, mask: torch.Tensor, categorical: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-item GRU outputs ``o`` (B, L, A), aligned with the items, and the context ``s_n`` (B, A)."""
        self.check_mask(features, mask)
        B, L = mask.shape
        lengths = mask.sum(dim=1)  # (B,)
        steps = torch.arange(L, device=mask.device)
        if not torch.equal(mask, steps[None, :] < lengths[:, None]):
            raise ValueError("DLCM needs the real items first in each row (mask = True, then padding)")
        x = self.represent(features, categorical)  # (B, L, alpha)
        if self.dropout is not None:
            x = self.dropout(x)
        # steps beyond the longest list are never needed; a trace runs all L (its length stays dynamic)
        T = L if tracing() else int(lengths.max()) if B > 0 else 0
        # Memory (scoring, where no autograd graph keeps them): x' is freed once the last direction has
        # gathered it, each direction's input once projected, and one direction is not concatenated, so
        # the peak of a batch is the paper GRU's projections (3H) and outputs (twice H), not also x',
        # its reordered copy and a concatenated copy of the outputs (same values)
        outs, states = [], []
        last = len(self.orders) - 1
        for i, (order, gru) in enumerate(zip(self.orders, self.grus, strict=True)):
            idx = self.feed_order(lengths, L, order)  # (B, L) item fed at each step
            seq = _reorder(x, idx)  # (B, L, alpha) in feeding order
            if i == last:
                del x
            inputs = self._gru_inputs(gru, seq[:, :T] if T < L else seq)
            del seq
            o_steps, s_n = self._run(gru, inputs, lengths)  # (B, T, H), (B, H)
            del inputs
            if T < L:
                o_steps = F.pad(o_steps, (0, 0, 0, L - T))  # (B, L, H); padded steps -> 0
            outs.append(_reorder(o_steps, idx))  # back to items
            del o_steps
            states.append(s_n)
        if len(outs) == 1:
            return outs[0], states[0]
        return torch.cat(outs, dim=-1), torch.cat(states, dim=-1)

    def local_ranking(self, o: torch.Tensor, s_n: torch.Tensor) -> torch.Tensor:
        """Eq. 5: ``o`` (B, L, A), ``s_n`` (B, A) -> scores (B, L).

        ``C = tanh(W_phi . s_n + b_phi)`` (B, A, k); ``score = sum_{a,j} o[a] C[a, j] V_phi[j]``.
        """
        C = torch.tanh(torch.einsum("akc,bc->bak", self.W_phi, s_n) + self.b_phi)  # (B, A, k)
        return torch.einsum("bla,bak,k->bl", o, C, self.V_phi)  # (B, L)

    def forward(
        self,
        features: torch.Tensor,
        mask: torch.Tensor,
        *,
        init_scores: torch.Tensor | None = None,
        categorical: torch.Tensor | None = None,
    ) -> torch.Tensor:
        o, s_n = self.context(features, mask, categorical)
        return self.local_ranking(o, s_n)
