"""`RerankSpec`: the re-rank settings of a saved model, as ``ctxrank.json["rerank"]`` holds them.

Two files hold one: a model directory of a re-ranking run (``dir``, ``top_k``, ``rank_feature``,
``score_feature``, ``crossfit``, ``ideal``) and an exported pipeline graph's metadata (``top_k``,
``rank_feature``, ``score_feature``, ``trees``). :meth:`RerankSpec.from_json` is the one reader and
validator of both, :meth:`RerankSpec.to_json` the one writer; everything else reads attributes.
Torch-free: the ONNX server reads it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ctxrank._modeldir import meta_bool, meta_dict, meta_int, meta_keys, meta_str, short

__all__ = ["EXPORTED_KEYS", "RerankSpec"]

#: the keys of an exported file's ``rerank`` entry, every one required
EXPORTED_KEYS = ("top_k", "rank_feature", "score_feature", "trees")


@dataclass(frozen=True)
class RerankSpec:
    """The re-rank settings of a model.

    Attributes:
        top_k: items re-ranked per query (the rest follow in the initial order).
        rank_feature, score_feature: the re-ranker reads the initial rank / score as an extra feature.
        dir: the initial ranker's directory inside the model directory (model directories only).
        crossfit, ideal: the run's cross-fitting folds and evaluation scope, recorded (model
            directories written since they were; None when absent).
        trees: LightGBM's trees in the graph (exported files only).
    """

    top_k: int
    rank_feature: bool
    score_feature: bool
    dir: str | None = None
    crossfit: int | None = None
    ideal: str | None = None
    trees: int | None = None

    @property
    def n_extra_features(self) -> int:
        """The columns the re-ranker reads after the initial ranker's features (rank, then score)."""
        return int(self.rank_feature) + int(self.score_feature)

    def to_json(self) -> dict[str, Any]:
        """The ``rerank`` entry: the fields that are set, in the key order of the saved files."""
        order = ("dir", "top_k", "rank_feature", "score_feature", "crossfit", "ideal", "trees")
        values = dataclasses.asdict(self)
        return {key: values[key] for key in order if values[key] is not None}

    def exported(self, trees: int) -> RerankSpec:
        """The spec an exported pipeline graph records: the settings and its ``trees``."""
        return RerankSpec(self.top_k, self.rank_feature, self.score_feature, trees=trees)

    @classmethod
    def from_json(cls, value: Any, where: Any, *, exported: bool = False) -> RerankSpec:
        """The ``rerank`` entry of a model directory's ``ctxrank.json`` (``dir`` required, other keys
        ignored), or with ``exported`` of an exported file's metadata (exactly :data:`EXPORTED_KEYS`).

        Raises:
            ValueError: one line naming ``where`` and the key at fault.
        """
        if exported:
            rerank = meta_dict({"rerank": value}, "rerank", where)
            meta_keys(rerank, EXPORTED_KEYS, (), where, "rerank.")
        elif not isinstance(value, dict):
            raise ValueError(f"{where}: 'rerank' must be a JSON object or null, got {short(value)}")
        else:
            rerank = value

        def recorded(key: str, read: Any, *args: Any, **kwargs: Any) -> Any:  # None when absent or null
            if rerank.get(key) is None:
                return None
            return read(rerank, key, where, *args, name=f"rerank.{key}", **kwargs)

        return cls(
            dir=None if exported else meta_str(rerank, "dir", where, name="rerank.dir"),
            top_k=meta_int(rerank, "top_k", where, 1, 10**6, name="rerank.top_k"),
            rank_feature=meta_bool(rerank, "rank_feature", where, name="rerank.rank_feature"),
            score_feature=meta_bool(rerank, "score_feature", where, name="rerank.score_feature"),
            trees=meta_int(rerank, "trees", where, 0, 10**7, name="rerank.trees") if exported else None,
            crossfit=None if exported else recorded("crossfit", meta_int, 0, 10**6),
            ideal=None if exported else recorded("ideal", meta_str, max_len=64),
        )
