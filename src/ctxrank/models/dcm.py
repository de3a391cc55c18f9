"""DCM: the Deep Choice Model (Mottini & Acuna-Agost, KDD 2017), a pointer network over the alternatives.

A session shows ``n`` alternatives; the model reads them with a recurrent encoder and *points* at the one
the customer chooses, as a pointer network (Vinyals, Fortunato & Jaitly, NeurIPS 2015) with a single
decoding step (only one alternative is chosen):

1. **Input embedding**: each alternative's features (numeric, plus learned embeddings of the
   categorical columns) ``x_j`` -> ``e_j = W_in x_j + b`` (width ``embed``).
2. **Encoder**: an LSTM reads ``e_1..e_n`` in the row order of the list and gives outputs ``h_j`` and a
   final state ``(h_n, c_n)`` (the state after the row's last real item; padding never enters it).
3. **Decoder, one step**: an LSTM cell starting from ``(h_n, c_n)`` takes a learned "go" input and gives
   the query ``d``.
4. **Pointer** (content-based attention): ``u_j = v . tanh(W_1 h_j + W_2 d)``; ``p = softmax(u)`` over the
   real alternatives is the choice distribution. ``u`` are the scores.

Choices the description leaves open (options): widths (``embed = 64``, ``hidden = 128``), the cell
(``lstm``; ``gru`` as an option), and the order the encoder reads the alternatives in: the list's row
order (for choice data, the order of the file, e.g. the display order; for re-ranking, the initial
ranking). The model is therefore *not* permutation-invariant, as in the original.

**Loss.** The QILCM paper trains DCM with AttRank, so ``default_loss = "attrank"``; DCM's own objective
(the log-likelihood of the chosen alternative under ``softmax(u)``) is ListNet's cross entropy with
the one-hot target: ``--loss listnet --set loss_params.label_transform=identity``.

Shapes: features ``(B, L, F)`` -> ``e`` ``(B, L, embed)`` -> ``h`` ``(B, L, H)``, ``d`` ``(B, H)`` -> ``u``
``(B, L)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ctxrank._checks import check_dropout, check_int
from ctxrank.models._dropout import Dropout
from ctxrank.models._jit import traceable_loop, tracing
from ctxrank.models.base import FLOAT_BYTES, ModelTraits, RankingModule

CELLS = ("lstm", "gru")


@dataclass(frozen=True)
class DCMConfig:
    """Attributes:
    embed: width of the input embedding ``e_j``.
    hidden: width of the encoder/decoder state ``H`` and of the pointer's attention layer.
    cell: ``"lstm"`` (the pointer network's) or ``"gru"``.
    dropout: dropout on the input embedding.
    """

    #: the search space of ``ctxrank tune``: run-config key -> distribution (format: ``ctxrank.tune``)
    SEARCH_SPACE: ClassVar[Mapping[str, tuple[Any, ...]]] = {
        "loss": ("choice", ("attrank", "listnet", "listmle", "lambdaloss")),
        "model_params.embed": ("choice", (32, 64, 128)),
        "model_params.hidden": ("choice", (64, 128, 256)),
        "model_params.cell": ("choice", ("lstm", "gru")),
        "model_params.dropout": ("float", 0.0, 0.5),
    }

    embed: int = 64
    hidden: int = 128
    cell: str = "lstm"
    dropout: float = 0.0

    def __post_init__(self) -> None:
        check_int("model_params.embed", self.embed)
        check_int("model_params.hidden", self.hidden)
        if self.cell not in CELLS:
            raise ValueError(f"model_params.cell: unknown {self.cell!r}; valid: {', '.join(CELLS)}")
        check_dropout("model_params.dropout", self.dropout)


class DCM(RankingModule):
    """Pointer-network choice model: ``(B, L, F)`` alternatives (real items first) -> ``(B, L)`` logits."""

    name = "dcm"
    config_class = DCMConfig
    traits = ModelTraits(default_loss="attrank", reads_order=True)

    def __init__(self, n_features: int, config: DCMConfig, *, categorical_cardinalities: Sequence[int] = ()):
        super().__init__(n_features, config, categorical_cardinalities=categorical_cardinalities)
        H = config.hidden
        self.embed = nn.Linear(self.input_dim, config.embed)
        self.dropout = Dropout(config.dropout) if config.dropout > 0 else None
        rnn = nn.LSTM if config.cell == "lstm" else nn.GRU
        self.encoder = rnn(config.embed, H, batch_first=True)
        self.decoder = (nn.LSTMCell if config.cell == "lstm" else nn.GRUCell)(config.embed, H)
        self.go = nn.Parameter(torch.zeros(config.embed).uniform_(-0.1, 0.1))
        self.W1 = nn.Linear(H, H, bias=False)
        self.W2 = nn.Linear(H, H)
        self.v = nn.Linear(H, 1, bias=False)

    def batch_memory(self, batch_size: int, list_len: int, *, training: bool) -> int:
        """Per item: the embedding (and its packed copy), the encoder's gates, states and outputs
        (padded back), the pointer's ``W_1 h + W_2 d`` and ``tanh``; with what backward keeps."""
        E, H = self.config.embed, self.config.hidden
        if training:
            per_item = self.input_floats(training=True) + 3 * (self.input_dim + 2 * E) + 24 * H
        else:
            per_item = self.input_floats(training=False) + 2 * (self.input_dim + 2 * E) + 10 * H
        return FLOAT_BYTES * batch_size * list_len * per_item

    def encode(
        self, features: torch.Tensor, mask: torch.Tensor, categorical: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | tuple[torch.Tensor, torch.Tensor]]:
        """Encoder outputs ``h`` (B, L, H) (0 on padding) and the final state after each row's last item.

        Eagerly the encoder runs packed (:meth:`encode_packed`: cuDNN / fused kernels); while a trace
        records (export), as the length-masked loop :meth:`encode_steps`, whose length stays dynamic.
        The two give the same numbers (``tests/models/test_dcm.py``).
        """
        self.check_mask(features, mask)
        L = mask.shape[1]
        lengths = mask.sum(1)
        if not torch.equal(mask, torch.arange(L, device=mask.device)[None, :] < lengths[:, None]):
            raise ValueError("DCM needs the real items first in each row (mask = True, then padding)")
        e = self.embed(self.item_inputs(features, categorical))  # (B, L, embed)
        if self.dropout is not None:
            e = self.dropout(e)
        return self.encode_steps(e, lengths) if tracing() else self.encode_packed(e, lengths)

    def encode_packed(
        self, e: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | tuple[torch.Tensor, torch.Tensor]]:
        """The encoder over packed sequences: ``e`` (B, L, embed), ``lengths`` (B,) -> ``h`` (B, L, H),
        final state (B, H) (an LSTM's ``(h_n, c_n)``); 0 for an empty row."""
        B, L, _ = e.shape
        H = self.config.hidden
        live = lengths > 0
        h = e.new_zeros(B, L, H)
        zeros = e.new_zeros(B, H)
        state: torch.Tensor | tuple[torch.Tensor, torch.Tensor] = (
            (zeros, zeros.clone()) if self.config.cell == "lstm" else zeros
        )
        if bool(live.any()):
            # pack so that the final state is the one after each row's last real item
            packed = pack_padded_sequence(
                e[live], lengths[live].cpu(), batch_first=True, enforce_sorted=False
            )
            out, last = self.encoder(packed)
            out, _ = pad_packed_sequence(out, batch_first=True, total_length=L)  # (B', L, H)
            # under CUDA autocast the cuDNN RNN returns another float type than e's: written back in e's
            h = h.index_put((live.nonzero(as_tuple=True)[0],), out.to(h.dtype))
            if self.config.cell == "lstm":
                hn, cn = last
                state = tuple(zeros.index_put((live,), s[0].to(zeros.dtype)) for s in (hn, cn))
            else:
                state = zeros.index_put((live,), last[0].to(zeros.dtype))
        return h, state

    def encode_steps(
        self, e: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | tuple[torch.Tensor, torch.Tensor]]:
        """:meth:`encode_packed` as a loop over all L steps (:func:`rnn_steps`, traceable)."""
        enc, lstm = self.encoder, self.config.cell == "lstm"
        xp = F.linear(e, enc.weight_ih_l0, enc.bias_ih_l0)  # (B, L, G H)
        h, h_n, c_n = traceable_loop(rnn_steps)(xp, enc.weight_hh_l0, enc.bias_hh_l0, lengths, lstm)
        return h, ((h_n, c_n) if lstm else h_n)

    def forward(
        self,
        features: torch.Tensor,
        mask: torch.Tensor,
        *,
        init_scores: torch.Tensor | None = None,
        categorical: torch.Tensor | None = None,
    ) -> torch.Tensor:
        h, state = self.encode(features, mask, categorical)
        go = self.go.expand(h.shape[0], -1)
        out = self.decoder(go, state)
        d = out[0] if isinstance(out, tuple) else out  # (B, H) decoder query
        return self.v(torch.tanh(self.W1(h) + self.W2(d)[:, None, :])).squeeze(-1)  # (B, L) pointer logits


def rnn_steps(
    xp: torch.Tensor, w_hh: torch.Tensor, b_hh: torch.Tensor, lengths: torch.Tensor, lstm: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A one-layer ``torch.nn.LSTM`` / ``torch.nn.GRU`` as a loop stopping at each row's length
    (TorchScript-compatible, :func:`ctxrank.models._jit.traceable_loop`).

    ``xp`` (B, T, G H) = ``x W_ih^T + b_ih`` (G = 4 for an LSTM, 3 for a GRU) -> outputs (B, T, H) (0
    after the row's length, as ``pad_packed_sequence`` gives), ``h`` and ``c`` (B, H) after the last
    real step (``c`` = ``h`` for a GRU); the state of an empty row stays 0.
    """
    H = w_hh.size(1)
    h = torch.zeros(xp.size(0), H, dtype=xp.dtype, device=xp.device)
    c = torch.zeros_like(h)
    live = torch.arange(xp.size(1), device=xp.device)[None, :] < lengths[:, None]  # (B, T)
    outputs: list[torch.Tensor] = []
    for t, x_t in enumerate(xp.transpose(0, 1)):  # x_t (B, G H)
        g = F.linear(h, w_hh, b_hh)
        if lstm:  # gates i, f, g, o
            i = torch.sigmoid(x_t[:, :H] + g[:, :H])
            f = torch.sigmoid(x_t[:, H : 2 * H] + g[:, H : 2 * H])
            cand = torch.tanh(x_t[:, 2 * H : 3 * H] + g[:, 2 * H : 3 * H])
            o = torch.sigmoid(x_t[:, 3 * H :] + g[:, 3 * H :])
            c_new = f * c + i * cand
            h_new = o * torch.tanh(c_new)
        else:  # gates r, z, n
            r = torch.sigmoid(x_t[:, :H] + g[:, :H])
            z = torch.sigmoid(x_t[:, H : 2 * H] + g[:, H : 2 * H])
            n = torch.tanh(x_t[:, 2 * H :] + r * g[:, 2 * H :])
            h_new = (1.0 - z) * n + z * h
            c_new = h_new
        live_t = live[:, t, None]
        h = torch.where(live_t, h_new, h)
        c = torch.where(live_t, c_new, c)
        outputs.append(torch.where(live_t, h_new, torch.zeros_like(h_new)))
    return torch.stack(outputs, dim=1), h, c
