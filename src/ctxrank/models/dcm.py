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

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ctxrank._checks import check_dropout, check_int
from ctxrank.models.base import Ranker

CELLS = ("lstm", "gru")


@dataclass(frozen=True)
class DCMConfig:
    """Attributes:
    embed: width of the input embedding ``e_j``.
    hidden: width of the encoder/decoder state ``H`` and of the pointer's attention layer.
    cell: ``"lstm"`` (the pointer network's) or ``"gru"``.
    dropout: dropout on the input embedding.
    """

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


class DCM(Ranker):
    """Pointer-network choice model: ``[B, L, F]`` alternatives (real items first) -> ``[B, L]`` logits."""

    name = "dcm"
    config_class = DCMConfig
    default_loss = "attrank"

    def __init__(self, n_features: int, config: DCMConfig, *, categorical_cardinalities: Sequence[int] = ()):
        super().__init__(n_features, config, categorical_cardinalities=categorical_cardinalities)
        H = config.hidden
        self.embed = nn.Linear(self.input_dim, config.embed)
        self.dropout = nn.Dropout(config.dropout) if config.dropout > 0 else None
        rnn = nn.LSTM if config.cell == "lstm" else nn.GRU
        self.encoder = rnn(config.embed, H, batch_first=True)
        self.decoder = (nn.LSTMCell if config.cell == "lstm" else nn.GRUCell)(config.embed, H)
        self.go = nn.Parameter(torch.zeros(config.embed).uniform_(-0.1, 0.1))
        self.W1 = nn.Linear(H, H, bias=False)
        self.W2 = nn.Linear(H, H)
        self.v = nn.Linear(H, 1, bias=False)

    def encode(
        self, features: torch.Tensor, mask: torch.Tensor, categorical: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | tuple[torch.Tensor, torch.Tensor]]:
        """Encoder outputs ``h`` (B, L, H) (0 on padding) and the final state after each row's last item."""
        if mask.dtype != torch.bool or mask.shape != features.shape[:2]:
            raise ValueError(
                f"mask must be a bool tensor of shape {tuple(features.shape[:2])}, "
                f"got {mask.dtype} {tuple(mask.shape)}"
            )
        B, L = mask.shape
        lengths = mask.sum(1)
        if not torch.equal(mask, torch.arange(L, device=mask.device)[None, :] < lengths[:, None]):
            raise ValueError("DCM needs the real items first in each row (mask = True, then padding)")
        e = self.embed(self.item_inputs(features, categorical))  # (B, L, embed)
        if self.dropout is not None:
            e = self.dropout(e)
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
            h = h.index_put((live.nonzero(as_tuple=True)[0],), out)
            if self.config.cell == "lstm":
                hn, cn = last
                state = (zeros.index_put((live,), hn[0]), zeros.index_put((live,), cn[0]))
            else:
                state = zeros.index_put((live,), last[0])
        return h, state

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
