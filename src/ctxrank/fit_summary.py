"""The summary of a fit: one frozen, typed record for every kind of model.

Every fit produces a :class:`FitSummary` (:func:`ctxrank.training.run.run_training`'s
``RunResult.summary``): a neural model's epochs, a full-batch maximum likelihood fit, a baseline's own
selection (LambdaMART's trees, RankSVM's ``C``, AdaRank's rounds) or a seed ensemble of them. Code
reads its attributes; :meth:`FitSummary.to_json` and :meth:`FitSummary.from_json` are used only where
it is written or read (``ctxrank.json["training"]``, the experiment run files, a tuning study). A
field a fit does not have is None.

The JSON form has the keys of earlier versions in their order (a kind of fit has its own order), and
the summary also reads as that mapping (``summary["best_epoch"]``), the documented form of
``RunResult.summary``. A key this version does not know, in a record of another version, is kept in
:attr:`FitSummary.extra`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FitSummary", "TrainMetric"]


@dataclass(frozen=True)
class TrainMetric:
    """``train.metric`` of a fitted baseline or re-ranker on the validation lists, when the model
    selected on another metric (``name`` of the metric, ``valid`` its mean)."""

    name: str
    valid: float | None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "valid": self.valid}


@dataclass(frozen=True)
class FitSummary(Mapping[str, Any]):
    """What a fit learned about itself. Metrics are means over the validation queries.

    Every fit: ``metric`` (the selection metric's name), ``best_valid_metric`` (its best value; None
    without a validation split), ``seconds`` (the whole run), ``warnings`` (the fit's
    :mod:`ctxrank.training.diagnostics` messages).

    Neural epochs: ``best_epoch`` (0: a residual re-ranker kept its initial order), ``epochs_run``,
    ``stopped_early``, ``resumed_from_epoch``, ``batching`` (``"buckets"``/``"random"``),
    ``model_config`` (the model's whole config, defaults included).

    Re-ranking: ``initial_valid_metric`` (the initial ranker's on the same top-k lists), ``residual``
    (``{"initial_valid_metric", "kept_initial"}`` of a residual re-ranker), ``train_metric``.

    Full-batch maximum likelihood: ``fit``, ``solver``, ``l2`` (the chosen penalty), ``log_likelihood``
    and ``valid_log_likelihood`` (mean per situation), ``separation`` (None when the unpenalized
    maximum exists or was not asked for), ``mle_exists``, ``tried`` (every penalty's fit),
    ``converged``, ``stop``, ``iterations``, ``max_abs_gradient``, ``l2_grid_edge``, ``fit_seconds``.

    Baselines: ``best_iteration`` (LambdaMART's trees); ``C``, ``grid`` (``repr(C)`` -> validation
    metric), ``n_pairs``, ``converged`` (RankSVM); ``best_round``, ``rounds_run``, ``selected_on``,
    ``best_train_metric`` (when selected on train), ``features_used``, ``stop_reason`` (AdaRank); and
    ``train_metric``.

    Seed ensemble: ``ensemble`` (member count), ``seeds``, ``members`` (their summaries).

    Validation on an interaction log: ``validation``, what ``best_valid_metric`` measures (e.g. ``"IPS
    estimate of DCG@10 on a click log (...)"``, :mod:`ctxrank.clicks.validation`), and
    ``validation_metric``, its name in a few words for messages (``"IPS estimate of DCG@10"``,
    ``"ndcg@10 of the clicks of a log"``: ``LogObjective.name``); both None (not written) on labelled
    data, where it is ``metric`` of the labels (:attr:`valid_metric_name`). A record written before
    ``validation_metric`` existed gets it from ``validation`` when read. ``propensity``: the
    propensities estimated from the training log with their intervals (not written when given).
    """

    metric: str | None = None
    best_valid_metric: float | None = None
    seconds: float | None = None
    warnings: tuple[str, ...] = ()
    # neural epochs
    best_epoch: int | None = None
    epochs_run: int | None = None
    stopped_early: bool | None = None
    resumed_from_epoch: int | None = None
    batching: str | None = None
    model_config: dict[str, Any] | None = None
    # re-ranking (and a baseline's train.metric)
    initial_valid_metric: float | None = None
    residual: dict[str, Any] | None = None
    train_metric: TrainMetric | None = None
    # full-batch maximum likelihood
    fit: str | None = None
    solver: str | None = None
    l2: float | None = None
    log_likelihood: float | None = None
    valid_log_likelihood: float | None = None
    separation: dict[str, Any] | None = None
    mle_exists: bool | None = None
    tried: tuple[dict[str, Any], ...] | None = None
    converged: bool | None = None
    stop: str | None = None
    iterations: int | None = None
    max_abs_gradient: float | None = None
    l2_grid_edge: str | None = None
    fit_seconds: float | None = None
    # baselines
    best_iteration: int | None = None
    C: float | None = None
    grid: dict[str, float | None] | None = None
    n_pairs: int | None = None
    best_round: int | None = None
    rounds_run: int | None = None
    selected_on: str | None = None
    best_train_metric: float | None = None
    features_used: int | None = None
    stop_reason: str | None = None
    # seed ensemble
    ensemble: int | None = None
    seeds: tuple[int, ...] | None = None
    members: tuple[FitSummary, ...] | None = None
    # validation on an interaction log
    validation: str | None = None
    validation_metric: str | None = None
    #: the propensities estimated from the training log (``train.propensity = "estimate:METHOD"``), as
    #: ``ctxrank.clicks.propensity.Propensities.to_json`` writes them (values, intervals, method)
    propensity: dict[str, Any] | None = None
    #: keys of a record written by another version, kept as they came
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.validation is None) != (self.validation_metric is None):
            raise ValueError(
                "a fit summary validated on a log gives validation and validation_metric together, got "
                f"validation={self.validation!r}, validation_metric={self.validation_metric!r}"
            )

    @property
    def valid_metric_name(self) -> str | None:
        """What ``best_valid_metric`` measures, in a few words: ``validation_metric`` on a log, else
        ``metric`` (of the labels)."""
        return self.metric if self.validation_metric is None else self.validation_metric

    @property
    def best_step(self) -> int | None:
        """The selected epoch, iteration (LambdaMART) or round (AdaRank); None for the other fits."""
        for step in (self.best_epoch, self.best_iteration, self.best_round):
            if step is not None:
                return int(step)
        return None

    def with_warnings(self, messages: list[str]) -> FitSummary:
        """This summary with ``messages`` added to its warnings."""
        return dataclasses.replace(self, warnings=(*self.warnings, *messages)) if messages else self

    # ------------------------------------------------------------------ (de)serialization
    def to_json(self) -> dict[str, Any]:
        """The JSON object of the summary: its kind's keys in their order, a field of its kind that may
        be null written as null, the others only when set; then :attr:`extra`."""
        order, nullable = _layout(self)
        out: dict[str, Any] = {}
        for key in order:
            value = getattr(self, key)
            if (value is None and key not in nullable) or (key == "warnings" and not value):
                continue
            out[key] = _json_value(value)
        return {**out, **self.extra}

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> FitSummary:
        """The summary of a JSON object written by :meth:`to_json` (of this or an earlier version;
        unknown keys go to :attr:`extra`). Raises TypeError for anything but a JSON object."""
        if not isinstance(record, Mapping):
            raise TypeError(f"a fit summary is a JSON object, got {type(record).__name__}")
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        values: dict[str, Any] = {k: v for k, v in record.items() if k in known}
        extra = {k: v for k, v in record.items() if k not in known}
        for key in ("warnings", "seeds", "tried"):
            if values.get(key) is not None:
                values[key] = tuple(values[key])
        if values.get("warnings") is None:
            values.pop("warnings", None)
        if isinstance(values.get("train_metric"), Mapping):
            tm = values["train_metric"]
            values["train_metric"] = TrainMetric(name=tm.get("name"), valid=tm.get("valid"))
        if values.get("members") is not None:
            values["members"] = tuple(cls.from_json(m) for m in values["members"])
        if isinstance(values.get("validation"), str) and values.get("validation_metric") is None:
            values["validation_metric"] = _metric_of_validation(values["validation"])
        return cls(**values, extra=extra)

    # ------------------------------------------------ the documented mapping form (read only)
    def __getitem__(self, key: str) -> Any:
        return self.to_json()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_json())

    def __len__(self) -> int:
        return len(self.to_json())


def _metric_of_validation(validation: str) -> str:
    """The ``validation_metric`` of a record written before the field: the leading words of its
    ``validation`` (``"IPS estimate of DCG@10 on a click log (...)"`` -> ``"IPS estimate of DCG@10"``,
    ``"ndcg@10 of the clicks of a log (naive: ...)"`` -> ``"ndcg@10 of the clicks of a log"``)."""
    return validation.split(" (")[0].split(", ")[0].removesuffix(" on a click log")


def _json_value(value: Any) -> Any:
    if isinstance(value, (FitSummary, TrainMetric)):
        return value.to_json()
    if isinstance(value, tuple):
        return [_json_value(v) for v in value]
    return value


#: the field that marks a kind of fit -> (its keys in JSON order, its keys written even when null)
_KINDS = {
    "ensemble": (
        "ensemble seeds metric best_valid_metric members warnings seconds validation validation_metric "
        "propensity",
        "best_valid_metric",
    ),
    "fit": (
        "fit solver l2 log_likelihood valid_log_likelihood metric best_valid_metric separation mle_exists "
        "tried converged stop iterations max_abs_gradient l2_grid_edge warnings fit_seconds train_metric "
        "initial_valid_metric best_epoch residual seconds validation validation_metric propensity",
        "valid_log_likelihood best_valid_metric separation mle_exists l2_grid_edge",
    ),
    "best_epoch": (
        "best_epoch best_valid_metric metric epochs_run stopped_early seconds resumed_from_epoch batching "
        "warnings initial_valid_metric residual model_config validation validation_metric propensity",
        "resumed_from_epoch",
    ),
    "best_iteration": (
        "best_iteration metric best_valid_metric warnings train_metric seconds validation validation_metric "
        "propensity",
        "best_valid_metric",
    ),
    "C": (
        "C metric best_valid_metric grid n_pairs converged warnings train_metric seconds validation "
        "validation_metric propensity",
        "best_valid_metric",
    ),
    "best_round": (
        "best_round rounds_run metric selected_on best_valid_metric best_train_metric features_used "
        "stop_reason warnings train_metric seconds validation validation_metric propensity",
        "",
    ),
}


def _layout(summary: FitSummary) -> tuple[list[str], set[str]]:
    """The keys of ``summary``'s kind in their JSON order and those written when null. A neural
    re-ranker's warnings follow its comparison with the initial ranker (which is what warns there)."""
    for marker, (order, nullable) in _KINDS.items():
        if getattr(summary, marker) is not None:
            keys = order.split()
            if marker == "best_epoch" and summary.initial_valid_metric is not None:
                keys.remove("warnings")
                keys.insert(keys.index("model_config"), "warnings")
            return keys, set(nullable.split())
    return [f.name for f in dataclasses.fields(FitSummary) if f.name != "extra"], set()
