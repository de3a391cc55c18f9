"""The torch modules an exported file holds: a model's normalizer and ranker (:class:`ServingModel`),
a seed ensemble's mean (:class:`EnsembleServing`), built from a loaded model by :func:`serving_model`.
The contract of their inputs and outputs: :mod:`ctxrank.export`."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ctxrank.data.transforms import TRANSFORMS, Transform

__all__ = ["EnsembleServing", "FeatureNormalizer", "ServingModel", "serving_model"]


# ---------------------------------------------------------------------------------- normalizers
class FeatureNormalizer(nn.Module):
    """A fitted :class:`Transform` in the graph: raw float (B, L, F) (+ mask (B, L)) -> float32 (B, L, F).

    Only a wrapper: the equations are the transform's own list form
    (:meth:`~ctxrank.data.transforms.Transform.normalize_lists`, written once for numpy and torch),
    run on float64 as :mod:`ctxrank.data.transforms` does, so the result equals ``transform()``; its
    fitted statistics (:meth:`~ctxrank.data.transforms.Transform.list_params`) are float64 buffers.
    """

    def __init__(self, transform: Transform, n_features: int) -> None:
        super().__init__()
        if not transform.has_list_form():
            exportable = ", ".join(name for name, cls in TRANSFORMS.items() if cls.has_list_form())
            raise ValueError(
                f"the normalizer {transform.name!r} ({type(transform).__name__}) cannot be exported: "
                f"only {exportable} are written into the graph"
            )
        if not (transform.stateless or transform.is_fitted):
            raise ValueError(f"the saved normalizer {transform.name!r} is not fitted; cannot export it")
        self.transform = transform
        self.param_names = tuple(transform.list_params())
        for name, value in transform.list_params().items():
            self.register_buffer(name, torch.as_tensor(value, dtype=torch.float64))  # (F,)

    def params(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name) for name in self.param_names}

    def raw_like(self, u: torch.Tensor) -> torch.Tensor:
        """Raw float32 features whose normalized values are ``0.1 + 0.8 u`` (``u`` (..., F) in [0, 1]):
        inside the training range and never clipped (for the export check)."""
        return self.transform.raw_lists(0.1 + 0.8 * u.double(), self.params(), torch).float()

    def forward(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.transform.normalize_lists(features.double(), mask, self.params(), torch).float()


# ------------------------------------------------------------------------------ serving module
class ServingModel(nn.Module):
    """Normalizer + ranker: ``(features (B, L, F) raw float32, mask (B, L) bool[, categorical int64
    (B, L, C)]) -> scores float32 (B, L)`` (see the module docstring for the contract).

    The model's own forward is called: models whose forward loops over the list keep the loop's
    length dynamic while traced (:mod:`ctxrank.models._jit`)."""

    def __init__(self, model: nn.Module, transform: Transform) -> None:
        super().__init__()
        self.model = model.eval()
        self.normalizer = FeatureNormalizer(transform, model.n_features)
        self.n_features = int(model.n_features)
        self.n_categorical = len(model.categorical_cardinalities)

    def forward(
        self, features: torch.Tensor, mask: torch.Tensor, categorical: torch.Tensor | None = None
    ) -> torch.Tensor:
        real = mask.unsqueeze(-1)  # (B, L, 1)
        x = self.normalizer(features, mask)
        x = torch.where(real, x, torch.zeros_like(x))  # padded features are 0, as in ListBatch
        if self.n_categorical:
            if categorical is None:
                raise ValueError(f"this model needs categorical codes (B, L, {self.n_categorical})")
            categorical = torch.where(real, categorical.clamp_min(0), torch.zeros_like(categorical))
        else:
            categorical = None
        return self.model.serving_scores(x, mask, categorical)


class EnsembleServing(nn.Module):
    """A seed ensemble (``ensemble = k``) as one graph: k :class:`ServingModel` (each with its own
    normalizer) on the same inputs, ``scores = mean_i scores_i`` (B, L), as
    ``ctxrank.training.ensemble.EnsemblePredictor`` averages them (here in float32)."""

    def __init__(self, members: list[ServingModel]) -> None:
        super().__init__()
        shapes = {(m.n_features, m.n_categorical) for m in members}
        if len(shapes) != 1:
            raise ValueError(f"the ensemble's members take different inputs (features, categorical) {shapes}")
        self.members = nn.ModuleList(members)
        self.n_features, self.n_categorical = members[0].n_features, members[0].n_categorical

    # the first member's, for the example inputs and the messages (properties: not registered twice)
    @property
    def model(self) -> nn.Module:
        return self.members[0].model

    @property
    def normalizer(self) -> nn.Module:
        return self.members[0].normalizer

    def forward(
        self, features: torch.Tensor, mask: torch.Tensor, categorical: torch.Tensor | None = None
    ) -> torch.Tensor:
        return torch.stack([m(features, mask, categorical) for m in self.members]).mean(dim=0)


def serving_model(predictor: Any) -> ServingModel | EnsembleServing:
    """The :class:`ServingModel` of a loaded model (``ctxrank.training.checkpoint.load_model``): its
    ``scorer``'s module and normalizer (a re-ranking model's neural re-ranker, see the module
    docstring); an ensemble's an :class:`EnsembleServing` of its members'.

    Raises:
        ValueError: a baseline (not a torch model), or a normalizer that cannot be exported.
    """
    if predictor.ensemble_size:
        return EnsembleServing([serving_model(m) for m in predictor.members])
    scorer = predictor.scorer
    if scorer is None:
        kind = type(predictor).__name__
        hint = (
            "; LightGBM's own model.txt in the model directory is its serving format"
            if kind == "LambdaMART"
            else ""
        )
        raise ValueError(
            f"{kind} is a baseline, not a torch model: export applies to the neural models{hint}"
        )
    if scorer.config.rerank.residual:
        raise ValueError(
            "a residual re-ranker (rerank.residual = true) adds the initial ranker's scores, which the "
            "exported graph does not take as an input: it cannot be exported"
        )
    return ServingModel(scorer.model, scorer.transform)
