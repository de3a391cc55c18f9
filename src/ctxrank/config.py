"""Run configuration: frozen dataclasses, loadable from TOML, overridable with ``--set key=value``.

A run is described by one :class:`RunConfig`::

    model = "listnet"            # a name from ctxrank.registry.MODELS (a neural model or a baseline)
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
import functools
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ctxrank._checks import (
    MAX_BYTES,
    MAX_SEED,
    Key,
    OptionError,
    build_dataclass,
    check_bool,
    check_choice,
    check_crossfit,
    check_int,
    check_named,
    check_no_relevant,
    check_non_negative,
    check_positive,
    check_seed,
    is_int,
    listed,
)
from ctxrank._declare import NON_NEGATIVE_INT, POSITIVE_INT, SEED, THREADS, declared_as, field_default, option
from ctxrank._memory import AUTO
from ctxrank._overrides import Override, parse_override, set_path
from ctxrank.clicks.weighting import DEBIAS, ESTIMATES, check_propensity, estimate_method
from ctxrank.data.lists import DEFAULT_TOP_K
from ctxrank.data.transforms import TRANSFORMS
from ctxrank.losses import LOSSES
from ctxrank.metrics import parse_metric
from ctxrank.registry import FULL_BATCH_TRAIN_KEYS, MODELS, get_model

#: the largest propensities JSON file read (one number per position and its bounds)
MAX_PROPENSITY_FILE_BYTES = 1 << 20


def _propensities(text: str) -> tuple[float, ...] | str:
    """``--propensity 1,0.5,0.33``: the comma-separated examination probabilities of positions 1, 2, ...;
    one of :data:`~ctxrank.clicks.weighting.ESTIMATES` (estimated from the training log, kept as text);
    any other text is the path of a propensities JSON file (:func:`read_propensity_file`)."""
    if estimate_method(text) is not None:
        return text
    if not re.fullmatch(r"[\s\d.,eE+-]+", text):
        return read_propensity_file(text)
    try:
        values = tuple(float(v) for v in text.split(","))
        check_propensity(values, None, None)
    except ValueError:
        raise ValueError(f"expected comma-separated numbers in (0, 1], got {text[:40]!r}") from None
    return values


def read_propensity_file(path: str) -> tuple[float, ...]:
    """The propensities ``p_1..p_K`` of a JSON file written by ``ctxrank clicks propensity --out``
    (``ctxrank.clicks.propensity.Propensities.to_json``), as ``train.propensity`` takes them: an
    unreadable or invalid file, or values outside ``(0, 1]``, is a ValueError naming the file."""
    from ctxrank.clicks.propensity import Propensities  # SciPy and scikit-learn: only when a file is read

    where = f"train.propensity: propensities file {path!r}"
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_PROPENSITY_FILE_BYTES + 1)
        if len(data) > MAX_PROPENSITY_FILE_BYTES:
            raise ValueError(f"larger than {MAX_PROPENSITY_FILE_BYTES:,} bytes")
        values = Propensities.from_json(data.decode("utf-8")).values
        check_propensity(values, None, None)
    except OSError as exc:
        raise ValueError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    except (ValueError, TypeError) as exc:  # UnicodeDecodeError is a ValueError
        raise ValueError(f"{where}: {str(exc)[:300]}") from None
    return values


PROPENSITIES = _propensities

DEFAULT_CROSSFIT = 0  #: the initial ranker's cross-fitting folds on the training split (0: off, the papers')

#: ``train.batching`` values: ``"model"`` = the model class's ``batching`` (see :class:`TrainConfig`)
BATCHING: tuple[str, ...] = ("model", "random", "buckets")
#: ``train.precision`` values (see :class:`TrainConfig`)
PRECISIONS: tuple[str, ...] = ("fp32", "bf16", "fp16")
#: ``rerank.initial`` values (and an experiment's ``[protocol] initial``): none, or LambdaMART
INITIAL_RANKERS: tuple[str, ...] = ("", "lambdamart")
#: ``rerank.ideal`` values: the ideal DCG over every judged item, or over the top-k lists
IDEAL_SCOPES: tuple[str, ...] = ("full", "top-k")
#: ``train.missing`` values: what a model does with missing feature values (NaN)
MISSING_POLICIES: tuple[str, ...] = ("native", "indicator", "error")
#: ``train.release_memory`` values: when training hands the C heap's freed pages back to the system
RELEASE_MEMORY: tuple[str, ...] = ("epoch", "step")

#: what ``--model`` lists in ``ctxrank train --help``
_NEURAL = ", ".join(name for name, entry in MODELS.items() if entry.kind == "torch")
_BASELINES = ", ".join(name for name, entry in MODELS.items() if entry.kind != "torch")


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
        no_relevant: value of the metric for a validation query with no relevant item (``0.0``, ``1.0``,
            ``"skip"``).
        clip_grad_norm: clip the global gradient norm to this value (None = no clipping).
        seed: seeds torch and the batch shuffling generator.
        threads: CPU threads (:data:`ctxrank._declare.THREADS`): PyTorch's intra-op threads and a
            baseline's ``num_threads``. None (not given): PyTorch keeps its own count; a baseline and
            the initial ranker get 1 (``ctxrank._checks.resolve_threads``).
        eval_batch_size: queries per batch when scoring (no gradients): validation, the test split and
            a trained model's ``predict``; on the CPU a batch also holds at most 16,384 padded items and
            ``512 MiB`` of estimated memory.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"`` (CUDA when available).
        precision: ``"fp32"``; ``"bf16"`` (autocast to bfloat16, CPU or CUDA) or ``"fp16"`` (CUDA only,
            autocast with a gradient scaler). Losses and metrics stay float32 (autocast keeps softmax,
            log-softmax and reductions in float32).
        batching: which queries share a training batch: ``"buckets"`` (queries of similar length, less
            padding), ``"random"`` (uniformly at random) or ``"model"`` (the model's ``batching``
            attribute: ``"random"`` for QILCM, whose eq. 13 term pairs the queries of a batch;
            ``"buckets"`` for the others). The batching used is recorded in the fit summary.
        input_noise: standard deviation ``sigma >= 0`` of Gaussian noise added to the (normalized)
            features of the real items of every training batch, drawn afresh each step (0 = off;
            validation, test and prediction never see noise). Qin et al. 2021 (DASALC).
        shuffle_items: put the items of every training query in a random order (seeded by ``seed``)
            before training, so that a model reading the displayed order (DCM, DLCM) cannot learn from
            it (e.g. rows sorted by price); validation and test keep their order.
        max_memory_bytes: the most memory a training step or a scoring batch may need, by ctxrank's
            estimate made before anything is allocated (``ctxrank.training.memory``): the model's
            weights, gradients and Adam state plus the tensors of the largest batch (``batch_size``
            lists padded to the longest list). A run above it is refused, naming the longest query;
            scoring splits its batches to fit. ``"auto"``: what the device can give when the check runs
            (``ctxrank._memory``); or a number of bytes.
        missing: what the model does with missing feature values (NaN: ``null_fill = "keep"``, NaN in
            the API's ``X``): ``"native"`` (default) its own handling: LambdaMART reads them (LightGBM),
            the other models have none and refuse them; ``"indicator"`` (neural models): each feature's
            missing value becomes a learned fill value and a 0/1 missing indicator joins the inputs
            (:class:`ctxrank.models.missing.MissingIndicator`), in training, prediction and export;
            ``"error"``: refuse them, whatever the model.
        release_memory: when training gives the C heap's freed pages back to the system (glibc's
            ``malloc_trim``; nothing on other C libraries): ``"epoch"`` (default) after each epoch,
            ``"step"`` after every optimizer step too. A step frees its activations, but glibc keeps
            the pages of the freed blocks it cannot return, and the next step's tensors rarely fit
            those holes exactly: ``"step"`` lowers a training stage's peak resident set and costs the
            pages faulted in again, which slows the models of short steps (the two stored full-size
            WEB30K-shaped runs of docs/benchmarks.md). It changes no number: a run may resume under the
            other value.
        debias: learning from a click log (training data with shown positions, ``ctxrank.clicks``):
            ``"none"`` (naive training on the clicks), ``"ips"`` (labels weighted by clipped,
            self-normalised inverse propensities, ``ctxrank.clicks.weighting``), ``"dla"`` (a propensity
            tower learned jointly, dual learning) or ``"pal"`` (an additive position tower, dropped at
            serving; ``ctxrank.clicks.towers``). The full-information skyline is training on the true
            labels (no option). Neural models trained by SGD, and ``lambdamart``: ``"ips"`` (its IPS
            weights) or ``"pal"`` (LightGBM's position debiasing: an additive position term, the
            tree-side analogue of the position tower).
        propensity: ``"ips"``: the examination probability of each shown position ``1, 2, ...`` (values in
            ``(0, 1]``; the log may show no item beyond them), or the path of a propensities JSON file
            (``ctxrank clicks propensity --out``), read when the config is built and replaced by its
            values (so a saved config holds the values); or ``"estimate:randomized"`` /
            ``"estimate:regression-em"``: estimated from the training log before training
            (``ctxrank.clicks.estimate``; kept as given in a saved config, the estimate with its
            confidence intervals in the fit summary's ``propensity`` and the model's
            ``propensity.json``); or empty with ``propensity_eta``.
        propensity_eta: ``"ips"``: the propensities ``(1 / k)^eta`` of the position-based model.
        propensity_clip: the largest inverse-propensity weight (propensities below ``1 / clip`` count
            as ``1 / clip``); None: no cap.
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
    seed: int = option(0, "--seed", "random seed (train.seed)", parse=SEED)
    threads: int | None = declared_as(None, THREADS)
    eval_batch_size: int = 512
    device: str = "cpu"
    precision: str = "fp32"
    batching: str = "model"
    input_noise: float = 0.0
    shuffle_items: bool = False
    max_memory_bytes: int | str = AUTO
    missing: str = "native"
    release_memory: str = "epoch"
    debias: str = option(
        "none", "--debias",
        "learning from a click log: none (naive), ips (inverse propensities), dla (a propensity tower "
        "learned jointly) or pal (an additive position tower; lambdamart: LightGBM's position debiasing, "
        "its tree-side analogue) (train.debias)",
        choices=DEBIAS,
    )  # fmt: skip
    propensity: tuple[float, ...] | str = option(
        (), "--propensity",
        "ips: the examination probability of shown positions 1, 2, ... (comma-separated), a propensities "
        f"JSON file (ctxrank clicks propensity --out), or {' / '.join(ESTIMATES)}: estimated from the "
        "training log before training (saved with the model as propensity.json)",
        parse=PROPENSITIES, metavar="P1,P2,...|FILE|estimate:METHOD",
    )  # fmt: skip
    propensity_eta: float | None = option(
        None, "--propensity-eta", "ips: propensities (1/k)^ETA of the position-based model",
        parse=float, metavar="ETA",
    )  # fmt: skip
    propensity_clip: float | None = option(
        100.0, "--propensity-clip", "the largest inverse-propensity weight (default 100)",
        parse=float, metavar="W",
    )  # fmt: skip

    def __post_init__(self) -> None:
        check_choice("train.debias", self.debias, DEBIAS)
        if isinstance(self.propensity, str) and estimate_method(self.propensity) is None:
            # a propensities file: its values, so a saved config holds them
            object.__setattr__(self, "propensity", read_propensity_file(self.propensity))
        check_propensity(self.propensity, self.propensity_eta, self.propensity_clip)
        if self.debias != "ips" and (self.propensity or self.propensity_eta is not None):
            raise ValueError(
                f"train.propensity / train.propensity_eta are the given propensities of train.debias = 'ips' "
                f"(train.debias is {self.debias!r})"
            )
        if self.debias == "ips" and not self.propensity and self.propensity_eta is None:
            raise ValueError(
                "train.debias = 'ips' needs train.propensity (per-position values) or train.propensity_eta"
            )
        check_bool("train.shuffle_items", self.shuffle_items)
        check_choice("train.release_memory", self.release_memory, RELEASE_MEMORY)
        check_choice("train.missing", self.missing, MISSING_POLICIES)
        check_positive("train.lr", self.lr)
        check_non_negative("train.weight_decay", self.weight_decay)
        check_int("train.batch_size", self.batch_size)
        check_int("train.max_epochs", self.max_epochs)
        check_int("train.patience", self.patience)
        check_non_negative("train.min_delta", self.min_delta)
        check_int("train.eval_batch_size", self.eval_batch_size)
        check_choice("train.batching", self.batching, BATCHING)
        check_non_negative("train.input_noise", self.input_noise)
        check_choice("train.precision", self.precision, PRECISIONS)
        if not isinstance(self.device, str) or not (
            self.device in ("cpu", "cuda", "auto") or self.device.startswith("cuda:")
        ):
            raise ValueError(f"train.device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got {self.device!r}")
        if self.clip_grad_norm is not None:
            check_positive("train.clip_grad_norm", self.clip_grad_norm)
        check_int("train.threads", self.threads, allow_none=True)
        check_seed("train.seed", self.seed)
        memory = self.max_memory_bytes
        if memory != AUTO and not (is_int(memory) and 1 <= memory <= MAX_BYTES):
            raise ValueError(
                f"train.max_memory_bytes must be 'auto' or a number of bytes in [1, {MAX_BYTES:,}], "
                f"got {memory!r}"
            )
        object.__setattr__(self, "no_relevant", check_no_relevant("train.no_relevant", self.no_relevant))

        try:
            parse_metric(self.metric)
        except ValueError as exc:
            raise ValueError(f"train.metric: {exc}") from None


@dataclass(frozen=True)
class RerankConfig:
    """The re-ranking protocol (see ``ctxrank.training.rerank``).

    Attributes:
        initial: initial ranker: ``""`` (none: the model ranks whole lists) or ``"lambdamart"``.
        top_k: items kept per query, by initial score (the whole list when shorter).
        crossfit: K > 1 = out-of-fold initial scores (K folds over queries) on the training split.
        rank_feature: append the initial rank as a feature (None = the model's default).
        score_feature: append the initial score as a feature (None = the model's default).
        ideal: evaluation scope: ``"full"`` (ideal DCG over every judged item) or ``"top-k"``.
        initial_params: parameters of the initial ranker (``LambdaMART(**initial_params)``).
        residual: score = initial score + a learned correction initialized at zero
            (``ctxrank.models.residual.Residual``): untrained, the re-ranker reproduces the initial order;
            after training, the initial order is kept when it scores better on validation.
    """

    initial: str = option(
        "", "--initial",
        "re-rank the top-k lists of this initial ranker (trained first, saved in DIR/initial)",
        choices=("lambdamart",),
    )  # fmt: skip
    top_k: int = option(
        DEFAULT_TOP_K, "--top-k", f"items re-ranked per query (rerank.top_k, default {DEFAULT_TOP_K})",
        parse=POSITIVE_INT,
    )  # fmt: skip
    crossfit: int = option(
        DEFAULT_CROSSFIT, "--crossfit",
        "out-of-fold initial scores on the training split with K folds (rerank.crossfit; default off)",
        parse=NON_NEGATIVE_INT, metavar="K",
    )  # fmt: skip
    rank_feature: bool | None = None
    score_feature: bool | None = None
    ideal: str = "full"
    initial_params: Mapping[str, Any] = field(default_factory=dict)
    residual: bool = False

    def __post_init__(self) -> None:
        """Errors name the keys (``rerank.top_k``: :class:`~ctxrank._checks.Key`), so that a caller with
        other names for them writes its own (an experiment spec's ``[protocol] top_k``)."""
        key = functools.partial(Key, "rerank")
        check_named(key("initial"), check_choice, self.initial, INITIAL_RANKERS)
        check_named(key("top_k"), check_int, self.top_k)
        check_named(key("crossfit"), check_crossfit, self.crossfit)
        for name in ("rank_feature", "score_feature"):
            if getattr(self, name) is not None:
                check_named(key(name), check_bool, getattr(self, name))
        check_named(key("ideal"), check_choice, self.ideal, IDEAL_SCOPES)
        if not isinstance(self.initial_params, Mapping):
            raise OptionError("{initial_params} must be a table", initial_params=key("initial_params"))
        check_named(key("residual"), check_bool, self.residual)
        if self.residual and not self.initial:
            raise OptionError(
                "{residual} = true needs an initial ranker ({initial} = 'lambdamart'): the residual "
                "re-ranker corrects its scores",
                residual=key("residual"),
                initial=key("initial"),
            )
        if not self.initial:  # set without an initial ranker, they would be silently ignored
            unused = [
                key(f.name)
                for f in fields(self)
                if f.name not in ("initial", "residual") and getattr(self, f.name) != field_default(f)
            ]
            if unused:
                raise OptionError(
                    "{unused}: {verb} to a re-ranking run ({initial} = 'lambdamart'); without an initial "
                    "ranker the model ranks whole lists",
                    unused=listed(unused),
                    verb="applies" if len(unused) == 1 else "apply",
                    initial=key("initial"),
                )


@dataclass(frozen=True)
class RunConfig:
    """Everything needed to repeat a training run (saved next to the weights).

    ``ensemble = k``: train k models with seeds ``train.seed .. train.seed + k - 1`` and score with the
    mean of their scores (``ctxrank.training.ensemble``).
    """

    model: str = option(
        "listnet", "--model", metavar="NAME", help=
        f"model name: a neural model ({_NEURAL}) or a baseline ({_BASELINES}; see docs/models.md and "
        "docs/baselines.md); default: the config file's, else listnet. (predict, evaluate, export and serve "
        "take --model DIR: a saved model's directory)",
    )  # fmt: skip
    loss: str = option(
        "", "--loss",
        f"ranking loss of a neural model: {', '.join(sorted(LOSSES))} (default: the model's own; baselines "
        "train their own)",
    )  # fmt: skip
    transform: str = "minmax"
    model_params: Mapping[str, Any] = field(default_factory=dict)
    loss_params: Mapping[str, Any] = field(default_factory=dict)
    train: TrainConfig = field(default_factory=TrainConfig)
    rerank: RerankConfig = field(default_factory=RerankConfig)
    ensemble: int = 1

    def __post_init__(self) -> None:
        check_int("ensemble", self.ensemble)

        try:
            entry = get_model(self.model)
        except ValueError as exc:
            raise ValueError(f"model: {exc}") from None
        if self.transform not in TRANSFORMS:
            raise ValueError(
                f"transform: unknown transform {self.transform!r}; valid: {', '.join(sorted(TRANSFORMS))}"
            )
        if not isinstance(self.train, TrainConfig):
            raise TypeError("train must be a TrainConfig")
        if self.train.seed + self.ensemble - 1 > MAX_SEED:  # the members' seeds: train.seed + i
            raise ValueError(
                f"ensemble = {self.ensemble} trains with seeds up to train.seed + {self.ensemble - 1} = "
                f"{self.train.seed + self.ensemble - 1:,}, above the largest seed {MAX_SEED:,}: "
                "lower train.seed"
            )
        entry.check_run(self)

    @property
    def loss_name(self) -> str:
        """The loss actually used: ``loss`` or the model's default loss."""
        return get_model(self.model).loss_name(self.loss, self.model_params)

    @property
    def fits_by_maximum_likelihood(self) -> bool:
        """Whether the run fits its model to the exact maximum likelihood (full batch, no epochs, no
        loss): the conditional logit (``traits.full_batch``), also on the top-k lists of a re-ranking run
        (its utilities ignore the initial scores), unless ``rerank.residual`` wraps it (trained by SGD)."""
        return get_model(self.model).traits.full_batch and not self.rerank.residual

    @property
    def objective(self) -> str:
        """What the run optimizes, as its registry entry states it (for messages: "MODEL trains ..."):
        a baseline's ``trains`` (with its objective's name, e.g. ``pairwise-hinge``), the maximum
        likelihood of a full-batch model, a model's own objective, else the loss (:attr:`loss_name`)."""
        return get_model(self.model).objective_text(self)

    @property
    def effective_loss_params(self) -> dict[str, Any]:
        """``loss_params`` over the model's implied options for its default loss (e.g. DLCM's AttRank
        form), so that saved configs record what was actually used."""
        traits = get_model(self.model).traits  # a baseline's and an own objective's: none
        implied = dict(traits.default_loss_params) if self.loss_name == traits.default_loss else {}
        return {**implied, **self.loss_params}

    @property
    def resolved_model_params(self) -> dict[str, Any]:
        """Every parameter of the model with its value: ``model_params`` over the model's defaults (a
        neural model's config dataclass; a baseline's constructor, leaving out the parameters that
        ``[train]`` fills, ``seed`` / ``threads``, unless ``model_params`` sets them)."""
        return get_model(self.model).resolved_params(self.model_params)

    def to_dict(self) -> dict[str, Any]:
        """The resolved run config (``config.toml`` / ``ctxrank.json``): ``model_params`` holds every
        parameter of the model (:attr:`resolved_model_params`), ``loss`` the loss actually used."""
        return {
            "model": self.model,
            "loss": self.loss_name,
            "transform": self.transform,
            "model_params": self.resolved_model_params,
            "loss_params": self.effective_loss_params,
            "train": {  # JSON-ready: a tuple (train.propensity) as the list a file reads back
                k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self.train).items()
            },
            "rerank": {
                k: dict(v) if isinstance(v, Mapping) else v
                for k, v in dataclasses.asdict(self.rerank).items()
            },
            "ensemble": self.ensemble,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if "tune" in unknown:
            raise ValueError(
                "[tune] (trials, prune) is read by `ctxrank tune --config FILE`, which searches around this "
                "configuration; a run trains one configuration: tune first, then train its best.toml"
            )
        if unknown:
            raise ValueError(f"unknown config key(s) {sorted(unknown)}; valid keys: {sorted(known)}")
        implied = model_run_defaults(d.get("model", "listnet"))
        implied_train = {k.removeprefix("train."): v for k, v in implied.items() if k.startswith("train.")}
        tables = _train_and_rerank(d.get("train", {}), d.get("rerank", {}), implied_train)
        return cls(
            model=d.get("model", "listnet"),
            loss=d.get("loss", ""),
            transform=d.get("transform", implied.get("transform", "minmax")),
            model_params=dict(d.get("model_params", {})),
            loss_params=dict(d.get("loss_params", {})),
            **tables,
            ensemble=d.get("ensemble", 1),
        )

    @classmethod
    def from_saved(cls, d: Mapping[str, Any]) -> RunConfig:
        """:meth:`from_dict` of a config ctxrank saved (a model directory, a resume record, a study's
        trial): the options that run did not read are dropped first, so that a model trained before
        such options were refused (they were silently ignored, changing nothing) still loads."""
        return cls.from_dict(without_unread(d))

    def with_overrides(self, overrides: Iterable[Override]) -> RunConfig:
        """A new, validated config with the typed ``(dotted key, value)`` overrides set in order (as
        ``--set`` sets them: ``("train.lr", 3e-4)``, ``("rerank", {...})`` a whole table,
        ``("model_params.hidden", [64])`` a key of a table); the values not overridden are kept as
        they are (a new ``model`` does not bring its own run defaults: :meth:`from_dict` does that for a
        config read from a file).

        Raises:
            ValueError: an unknown key (listing the valid ones) or a bad value (naming its key).
        """
        tables: dict[str, Any] = {
            f.name: _as_table(getattr(self, f.name)) if f.name in _TABLES else getattr(self, f.name)
            for f in fields(self)
        }
        for key, value in overrides:
            head = key.partition(".")[0]
            if head not in tables:
                raise ValueError(f"unknown config key {head!r} (in {key!r}); valid keys: {sorted(tables)}")
            set_path(tables, key, value)
        built = _train_and_rerank(tables.pop("train"), tables.pop("rerank"), {})
        return replace(self, **tables, **built)


def _train_and_rerank(train: Any, rerank: Any, train_defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``{"train": TrainConfig, "rerank": RerankConfig}`` of the two tables, ``train_defaults`` (the
    model's implied values) under ``train``; a ValueError for a table that is not one or a bad value."""
    if not isinstance(train, Mapping) or not isinstance(rerank, Mapping):
        raise ValueError("[train] and [rerank] must be tables")
    train = build_dataclass(TrainConfig, {**train_defaults, **train}, "train")
    return {"train": train, "rerank": build_dataclass(RerankConfig, rerank, "rerank")}


#: the run config's fields that are tables (``--set model_params.hidden=[64]`` sets a key inside)
_TABLES = ("model_params", "loss_params", "train", "rerank")


def _as_table(value: Any) -> dict[str, Any]:
    """A table field as a nested dict (a dataclass by its fields, not recursively converted)."""
    items = (
        [(f.name, getattr(value, f.name)) for f in fields(value)]
        if dataclasses.is_dataclass(value)
        else value.items()
    )
    return {k: _as_table(v) if isinstance(v, Mapping) else v for k, v in items}


def without_unread(d: Mapping[str, Any]) -> dict[str, Any]:
    """A run-config dict less what its run does not read: the ``[rerank]`` keys but ``initial`` and
    ``residual`` without ``rerank.initial``, the ``[train]`` keys its model's fit does not read
    (:func:`train_keys_read`), and a maximum-likelihood fit's loss and ensemble size (its members were
    the same model); options saved under an older name are read under today's (the registry entry's
    ``saved_run``: LambdaMART's ``model_params.debias`` is ``train.debias``)."""
    model = MODELS.get(d.get("model", "listnet")) if isinstance(d.get("model", "listnet"), str) else None
    out, reads = with_read_train_keys(d if model is None else model.saved_run(d))
    rerank = out.get("rerank")
    if isinstance(rerank, Mapping) and not rerank.get("initial"):
        out["rerank"] = {k: v for k, v in rerank.items() if k in ("initial", "residual")}
    if reads is FULL_BATCH_TRAIN_KEYS:  # saved before these were refused: its members are one model
        for key in ("loss", "loss_params", "ensemble"):
            out.pop(key, None)
    return out


def with_read_train_keys(d: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[str, ...] | None]:
    """A run-config dict (or an experiment's model table) less the ``[train]`` keys its model's fit does
    not read, and those it reads (:func:`train_keys_read`; None: all)."""
    out, model, train = dict(d), d.get("model", "listnet"), d.get("train")
    rerank = d.get("rerank")
    residual = isinstance(rerank, Mapping) and rerank.get("residual") is True
    reads = train_keys_read(model, residual=residual) if isinstance(model, str) else None
    if reads is not None and isinstance(train, Mapping):
        out["train"] = {k: v for k, v in train.items() if k in reads}
    return out, reads


def model_run_defaults(model: Any) -> dict[str, Any]:
    """The run-config values the neural model ``model`` implies where a run leaves them unset
    (``ModelTraits.run_defaults``: ``"transform"``, ``"train.<field>"``); ``{}`` for a baseline or a name
    that is not a model (the config's own check reports it)."""
    entry = MODELS.get(model) if isinstance(model, str) else None
    return {} if entry is None else dict(entry.traits.run_defaults)


def train_keys_read(model: str, residual: bool = False) -> tuple[str, ...] | None:
    """The ``[train]`` keys the fit of ``model`` reads (``residual``: ``rerank.residual``, which trains a
    maximum-likelihood model by SGD); None: every key (the neural training loop) or an unknown model."""
    entry = MODELS.get(model)
    return None if entry is None else entry.train_keys(residual=residual)


def load_toml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ValueError(f"{path}: config file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: invalid TOML ({exc})") from None


def apply_overrides(d: Mapping[str, Any], overrides: Sequence[Override | str]) -> dict[str, Any]:
    """A copy of ``d`` with the overrides set, in order: typed ``(dotted key, value)`` pairs, or text
    ``KEY=VALUE`` from a person (:func:`parse_override`)."""
    out: dict[str, Any] = _copy_tables(d)
    for item in overrides:
        set_path(out, *(parse_override(item) if isinstance(item, str) else item))
    return out


def _copy_tables(d: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _copy_tables(v) if isinstance(v, Mapping) else v for k, v in d.items()}


def resolve_config(
    config_file: str | Path | None = None, overrides: Sequence[Override | str] = (), **defaults: Any
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
