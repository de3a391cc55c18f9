"""Run configuration: frozen dataclasses, loadable from TOML, overridable with ``--set key=value``.

A run is described by one :class:`RunConfig`::

    model = "listnet"            # a name from ctxrank.models.MODELS
    loss = "listnet"             # a name from ctxrank.losses.LOSSES ("" = the model's default loss)
    transform = "minmax"         # feature normalizer fitted on train (ctxrank.data.transforms)

    [model_params]               # the model's own config dataclass (e.g. MLPConfig)
    hidden = [64]

    [loss_params]                # keyword options of the loss function
    temperature = 1.0

    [train]                      # TrainConfig
    lr = 0.001
    batch_size = 80

Overrides use dotted keys whose values are TOML literals (strings may be bare):
``--set train.lr=3e-4 --set model_params.hidden=[128,64] --set loss=listmle``.
Every value is validated when the dataclasses are built; errors name the option.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


@dataclass(frozen=True)
class Baseline:
    """How ``--model NAME`` builds one of the non-neural baselines (``BASELINE_MODELS[NAME]``).

    Attributes:
        module, cls: where the model class lives (imported only when it is built or loaded).
        kind: the ``kind`` its saved ``ctxrank.json`` records (``checkpoint.load_model`` dispatches on it).
        trains: what it optimizes and with which library, for messages.
        objective: ``RunConfig.loss_name`` given ``model_params``.
        fixed: parameters the name implies (``adarank-map``: ``metric = "map"``), checked against
            ``model_params``: ``{name: (default, allowed base metric)}`` for metrics.
        seed, threads: the class's parameters that receive ``train.seed`` and ``train.threads``
            (unless ``model_params`` sets them), or ``""`` when it has none.
    """

    module: str
    cls: str
    kind: str
    trains: str
    objective: Any  # Callable[[Mapping[str, Any]], str]
    fixed: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    seed: str = ""
    threads: str = ""

    def model_class(self) -> type:
        import importlib

        return getattr(importlib.import_module(self.module), self.cls)

    def params(self, model_params: Mapping[str, Any], train: TrainConfig | None = None) -> dict[str, Any]:
        """The constructor's keyword arguments: implied, then seed/threads from ``train``, then
        ``model_params``. Raises ValueError naming ``model_params.<key>`` for a conflict."""
        from ctxrank.metrics import parse_metric

        out: dict[str, Any] = {}
        for key, (default, base) in self.fixed.items():
            value = model_params.get(key, default)
            try:
                ok = isinstance(value, str) and parse_metric(value)[0] == base
            except ValueError:
                ok = False
            if not ok:
                raise ValueError(
                    f"model_params.{key}: this model trains {self.trains}, so {key} must be a "
                    f"{base} metric, got {value!r}"
                )
            out[key] = default
        if train is not None:
            if self.seed:
                out[self.seed] = train.seed
            if self.threads:
                out[self.threads] = train.threads or 1
        out.update(model_params)
        return out

    def build(self, model_params: Mapping[str, Any], train: TrainConfig | None = None) -> Any:
        """An unfitted model. Raises ValueError (``model_params: ...``) for bad parameters."""
        cls = self.model_class()
        params = self.params(model_params, train)
        names = getattr(cls, "_PARAMS", None)
        if names is not None:
            unknown = sorted(set(params) - set(names))
            if unknown:
                raise ValueError(
                    f"model_params: unknown option(s) {unknown} for {self.cls}; "
                    f"valid options: {sorted(names)}"
                )
        try:
            return cls(**params)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"model_params: {exc}") from None

    def load(self, directory: str | Path) -> Any:
        return self.model_class().load(directory)


#: Non-neural models trained by their own library: name -> how to build, describe and load them.
BASELINE_MODELS: dict[str, Baseline] = {
    "lambdamart": Baseline(
        module="ctxrank.baselines.lambdamart",
        cls="LambdaMART",
        kind="lightgbm",
        trains="LightGBM's lambdarank objective",
        objective=lambda params: "lambdarank",
        seed="seed",
        threads="num_threads",
    ),
    "ranksvm": Baseline(
        module="ctxrank.baselines.ranksvm",
        cls="RankSVM",
        kind="ranksvm",
        trains="a pairwise linear SVM (scikit-learn LinearSVC, liblinear)",
        objective=lambda params: "pairwise-" + str(params.get("loss", "squared_hinge")).replace("_", "-"),
        seed="seed",
    ),
    "adarank-map": Baseline(
        module="ctxrank.baselines.adarank",
        cls="AdaRank",
        kind="adarank",
        trains="AdaRank's boosting on MAP (numpy, ctxrank's metrics)",
        objective=lambda params: "adarank-map",
        fixed={"metric": ("map", "map")},
        threads="num_threads",
    ),
    "adarank-ndcg": Baseline(
        module="ctxrank.baselines.adarank",
        cls="AdaRank",
        kind="adarank",
        trains="AdaRank's boosting on NDCG@K (numpy, ctxrank's metrics)",
        objective=lambda params: "adarank-" + str(params.get("metric", "ndcg@10")).replace(" ", "").lower(),
        fixed={"metric": ("ndcg@10", "ndcg")},
        threads="num_threads",
    ),
}


@dataclass(frozen=True)
class TrainConfig:
    """Optimization and model selection (defaults: the QILCM paper, Adam lr 1e-3, batch 80 queries,
    at most 100 epochs with early stopping on validation).

    Attributes:
        lr: Adam learning rate.
        weight_decay: Adam L2 weight decay.
        batch_size: queries per batch.
        max_epochs: epoch limit.
        patience: epochs without an improvement of at least ``min_delta`` before stopping.
        min_delta: smallest validation improvement that counts.
        metric: validation metric for early stopping and model selection (``ndcg@10``, ``map``, ...).
        no_relevant: value of the metric for a validation query with no relevant item (0.0, 1.0, "skip").
        clip_grad_norm: clip the global gradient norm to this value (None = no clipping).
        seed: seeds torch and the batch shuffling generator.
        threads: torch CPU threads (None = leave torch's default).
        eval_batch_size: queries per batch when scoring (no gradients).
        device: ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"`` (CUDA when available).
        precision: ``"fp32"``; ``"bf16"`` (autocast to bfloat16, CPU or CUDA) or ``"fp16"`` (CUDA only,
            autocast with a gradient scaler). Losses and metrics stay float32 (autocast keeps softmax,
            log-softmax and reductions in float32).
    """

    lr: float = 1e-3
    weight_decay: float = 0.0
    batch_size: int = 80
    max_epochs: int = 100
    patience: int = 10
    min_delta: float = 0.0
    metric: str = "ndcg@10"
    no_relevant: float | str = 0.0
    clip_grad_norm: float | None = None
    seed: int = 0
    threads: int | None = None
    eval_batch_size: int = 512
    device: str = "cpu"
    precision: str = "fp32"

    def __post_init__(self) -> None:
        _positive(self, "lr", self.lr)
        _non_negative(self, "weight_decay", self.weight_decay)
        _positive_int(self, "batch_size", self.batch_size)
        _positive_int(self, "max_epochs", self.max_epochs)
        _positive_int(self, "patience", self.patience)
        _non_negative(self, "min_delta", self.min_delta)
        _positive_int(self, "eval_batch_size", self.eval_batch_size)
        if self.precision not in ("fp32", "bf16", "fp16"):
            raise ValueError(f"train.precision must be 'fp32', 'bf16' or 'fp16', got {self.precision!r}")
        if not isinstance(self.device, str) or not (
            self.device in ("cpu", "cuda", "auto") or self.device.startswith("cuda:")
        ):
            raise ValueError(f"train.device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got {self.device!r}")
        if self.clip_grad_norm is not None:
            _positive(self, "clip_grad_norm", self.clip_grad_norm)
        if self.threads is not None:
            _positive_int(self, "threads", self.threads)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"train.seed must be a non-negative integer, got {self.seed!r}")
        if self.no_relevant not in (0.0, 1.0, "skip"):
            raise ValueError(f"train.no_relevant must be 0, 1 or 'skip', got {self.no_relevant!r}")
        from ctxrank.metrics import parse_metric

        try:
            parse_metric(self.metric)
        except ValueError as exc:
            raise ValueError(f"train.metric: {exc}") from None


@dataclass(frozen=True)
class RerankConfig:
    """The re-ranking protocol (see ``ctxrank.rerank``).

    Attributes:
        initial: initial ranker: ``""`` (none: the model ranks whole lists) or ``"lambdamart"``.
        top_k: items kept per query, by initial score (the whole list when shorter).
        crossfit: K > 1 = out-of-fold initial scores (K folds over queries) on the training split.
        rank_feature: append the initial rank as a feature (None = the model's default).
        score_feature: append the initial score as a feature (None = the model's default).
        ideal: evaluation scope: ``"full"`` (ideal DCG over every judged item) or ``"top-k"``.
        initial_params: parameters of the initial ranker (``LambdaMART(**initial_params)``).
    """

    SECTION = "rerank"
    initial: str = ""
    top_k: int = 100
    crossfit: int = 0
    rank_feature: bool | None = None
    score_feature: bool | None = None
    ideal: str = "full"
    initial_params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.initial not in ("", "lambdamart"):
            raise ValueError(f"rerank.initial must be '' or 'lambdamart', got {self.initial!r}")
        _positive_int(self, "top_k", self.top_k)
        if (
            isinstance(self.crossfit, bool)
            or not isinstance(self.crossfit, int)
            or self.crossfit in (1,)
            or self.crossfit < 0
        ):
            raise ValueError(f"rerank.crossfit must be 0 (off) or an integer >= 2, got {self.crossfit!r}")
        for name in ("rank_feature", "score_feature"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise ValueError(f"rerank.{name} must be true or false, got {value!r}")
        if self.ideal not in ("full", "top-k"):
            raise ValueError(f"rerank.ideal must be 'full' or 'top-k', got {self.ideal!r}")
        if not isinstance(self.initial_params, Mapping):
            raise ValueError("rerank.initial_params must be a table")


@dataclass(frozen=True)
class RunConfig:
    """Everything needed to repeat a training run (saved next to the weights)."""

    model: str = "listnet"
    loss: str = ""
    transform: str = "minmax"
    model_params: Mapping[str, Any] = field(default_factory=dict)
    loss_params: Mapping[str, Any] = field(default_factory=dict)
    train: TrainConfig = field(default_factory=TrainConfig)
    rerank: RerankConfig = field(default_factory=RerankConfig)

    def __post_init__(self) -> None:
        from ctxrank.data.transforms import TRANSFORMS
        from ctxrank.losses import LOSSES
        from ctxrank.models import MODELS

        if self.model not in MODELS and self.model not in BASELINE_MODELS:
            valid = ", ".join(sorted([*MODELS, *BASELINE_MODELS]))
            raise ValueError(f"model: unknown model {self.model!r}; valid models: {valid}")
        if self.transform not in TRANSFORMS:
            raise ValueError(
                f"transform: unknown transform {self.transform!r}; valid: {', '.join(sorted(TRANSFORMS))}"
            )
        if not isinstance(self.train, TrainConfig):
            raise TypeError("train must be a TrainConfig")
        baseline = BASELINE_MODELS.get(self.model)
        if baseline is not None:
            # a saved config records loss_name (e.g. "lambdarank"): that one is accepted
            if self.loss and self.loss != baseline.objective(self.model_params):
                raise ValueError(f"loss: {self.model} trains {baseline.trains}; --loss does not apply")
            if self.loss_params:
                raise ValueError(
                    f"loss_params: {self.model} trains {baseline.trains}; loss_params do not apply"
                )
            if self.rerank.initial:
                raise ValueError(
                    f"rerank.initial: {self.model} is a baseline that ranks whole lists"
                    + (" (it is itself the initial ranker)" if self.model == "lambdamart" else "")
                    + "; re-ranking an initial ranker's top k applies to the neural models"
                )
            baseline.build(self.model_params, self.train)  # bad model_params fail before data is read
            return
        own = MODELS[self.model].own_objective if self.model in MODELS else ""
        if self.loss and self.loss not in LOSSES and self.loss != own:
            raise ValueError(f"loss: unknown loss {self.loss!r}; valid losses: {', '.join(sorted(LOSSES))}")
        # a model's params must build its config dataclass (unknown keys and bad values raise here)
        MODELS[self.model].make_config(self.model_params)
        if own:
            if self.loss not in ("", own) or self.loss_params:
                raise ValueError(
                    f"loss: {self.model} trains its own {own} objective (see model_params); "
                    "loss and loss_params do not apply"
                )
            return
        options = loss_options(LOSSES[self.loss_name])
        for key in self.loss_params:
            if key not in options:
                raise ValueError(
                    f"loss_params.{key}: not an option of loss {self.loss_name!r} "
                    f"(options: {', '.join(options) or 'none'})"
                )

    @property
    def loss_name(self) -> str:
        """The loss actually used: ``loss`` or the model's default loss."""
        from ctxrank.models import MODELS

        if self.model in BASELINE_MODELS:
            return BASELINE_MODELS[self.model].objective(self.model_params)
        return self.loss or MODELS[self.model].own_objective or MODELS[self.model].default_loss

    @property
    def effective_loss_params(self) -> dict[str, Any]:
        """``loss_params`` over the model's implied options for its default loss (e.g. DLCM's AttRank
        form), so that saved configs record what was actually used."""
        from ctxrank.models import MODELS

        cls = MODELS.get(self.model)
        if cls is not None and cls.own_objective:
            return {}
        implied = (
            dict(cls.default_loss_params) if cls is not None and self.loss_name == cls.default_loss else {}
        )
        return {**implied, **self.loss_params}

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "loss": self.loss_name,
            "transform": self.transform,
            "model_params": dict(self.model_params),
            "loss_params": self.effective_loss_params if self.model not in BASELINE_MODELS else {},
            "train": dataclasses.asdict(self.train),
            "rerank": {
                k: dict(v) if isinstance(v, Mapping) else v
                for k, v in dataclasses.asdict(self.rerank).items()
            },
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown config key(s) {sorted(unknown)}; valid keys: {sorted(known)}")
        train, rerank = d.get("train", {}), d.get("rerank", {})
        if not isinstance(train, Mapping) or not isinstance(rerank, Mapping):
            raise ValueError("[train] and [rerank] must be tables")
        return cls(
            model=d.get("model", "listnet"),
            loss=d.get("loss", ""),
            transform=d.get("transform", "minmax"),
            model_params=dict(d.get("model_params", {})),
            loss_params=dict(d.get("loss_params", {})),
            train=build_dataclass(TrainConfig, train, "train"),
            rerank=build_dataclass(RerankConfig, rerank, "rerank"),
        )


def loss_options(fn: Any) -> list[str]:
    """Keyword-only options of a loss function settable from a config (not ``reduction``, ``generator``)."""
    import inspect

    return [
        name
        for name, p in inspect.signature(fn).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and name not in ("reduction", "generator")
    ]


def build_dataclass(cls: type, values: Mapping[str, Any], section: str):
    """``cls(**values)`` with errors naming ``section.key``; lists become tuples."""
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"{section}: unknown option(s) {unknown}; valid options: {sorted(names)}")
    clean = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    try:
        return cls(**clean)
    except TypeError as exc:
        raise ValueError(f"{section}: {exc}") from None


def load_toml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ValueError(f"{path}: config file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: invalid TOML ({exc})") from None


def apply_overrides(d: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply ``key=value`` / ``section.key=value`` (any depth) overrides; values are TOML literals or bare
    strings."""
    out: dict[str, Any] = _copy_tables(d)
    for item in overrides:
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ValueError(f"--set expects key=value, got {item!r}")
        value = _parse_value(raw.strip())
        *sections, leaf = key.split(".")
        target = out
        for i, part in enumerate(sections):
            target = target.setdefault(part, {})
            if not isinstance(target, dict):
                raise ValueError(f"--set {key}: {'.'.join(sections[: i + 1])!r} is not a section")
        target[leaf] = value
    return out


def _copy_tables(d: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _copy_tables(v) if isinstance(v, Mapping) else v for k, v in d.items()}


def _parse_value(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw  # a bare string such as listmle


def resolve_config(
    config_file: str | Path | None = None, overrides: Sequence[str] = (), **defaults: Any
) -> RunConfig:
    """Defaults, then the TOML file, then ``--set`` overrides, then validation."""
    d: dict[str, Any] = dict(defaults)
    if config_file is not None:
        for k, v in load_toml(config_file).items():
            if isinstance(v, Mapping) and isinstance(d.get(k), Mapping):
                d[k] = {**d[k], **v}
            else:
                d[k] = v
    return RunConfig.from_dict(apply_overrides(d, overrides))


def to_toml(d: Mapping[str, Any]) -> str:
    """A small TOML writer for saved configs (scalars, lists and nested tables)."""
    lines: list[str] = []
    _write_table(lines, d, prefix="")
    return "\n".join(lines).lstrip("\n") + "\n"


def _write_table(lines: list[str], d: Mapping[str, Any], prefix: str) -> None:
    tables = []
    for k, v in d.items():
        if isinstance(v, Mapping):
            tables.append((k, v))
        elif v is not None:
            lines.append(f"{k} = {_toml_value(v)}")
    for k, v in tables:
        name = f"{prefix}.{k}" if prefix else k
        lines.append(f"\n[{name}]")
        _write_table(lines, v, name)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def _positive(obj: Any, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{_section(obj)}.{name} must be a positive number, got {value!r}")


def _non_negative(obj: Any, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{_section(obj)}.{name} must be a number >= 0, got {value!r}")


def _positive_int(obj: Any, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{_section(obj)}.{name} must be a positive integer, got {value!r}")


def _section(obj: Any) -> str:
    return getattr(obj, "SECTION", "train" if isinstance(obj, TrainConfig) else type(obj).__name__)


check_positive, check_non_negative, check_positive_int = _positive, _non_negative, _positive_int
