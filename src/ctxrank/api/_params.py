"""The parameters of an estimator, derived from the registry (so they cannot drift from the CLI's run
config): a neural model's config dataclass fields, its loss, normalizer and ``TrainConfig`` fields
(``seed`` is ``random_state``, the progress bar ``verbose``: ``"auto"`` (default), True or False); a
baseline's own constructor parameters (``seed`` is ``random_state``, ``num_threads`` is ``threads``) and
the ``TrainConfig`` fields it reads besides (LambdaMART: ``debias`` and its propensities).

The run config's ``transform`` (the feature normalizer) is the estimator parameter ``normalizer``:
scikit-learn takes an estimator with a ``transform`` attribute for a transformer."""

from __future__ import annotations

import dataclasses
import inspect
import sys
from dataclasses import dataclass
from typing import Any

from ctxrank._checks import build_dataclass
from ctxrank._declare import field_default
from ctxrank.config import RunConfig, TrainConfig, model_run_defaults
from ctxrank.registry import get_model

__all__ = ["ParamSpec", "param_spec", "run_config", "shows_progress"]

#: ``verbose``'s default: a progress bar where a person watches (a terminal or a notebook)
AUTO_VERBOSE = "auto"

#: RunConfig field -> estimator parameter, where the names differ
_RUN_RENAMES = {"transform": "normalizer"}
#: the RunConfig fields that are parameters of a neural estimator (besides the model's and TrainConfig's)
_RUN = ("loss", "loss_params", "transform")
#: TrainConfig field -> estimator parameter, where the names differ
_TRAIN_RENAMES = {"seed": "random_state"}
#: a baseline constructor parameter -> the estimator parameter that carries it
_BASELINE_RENAMES = {"seed": "random_state", "num_threads": "threads"}


@dataclass(frozen=True)
class ParamSpec:
    """The estimator parameters of one registered model, in signature order, with their defaults.

    ``model``: the model's own parameters (``[model_params]``); ``run``: ``loss``, ``loss_params``,
    ``normalizer`` (neural models without their own objective); ``train``: ``TrainConfig`` fields under
    their estimator names; ``verbose`` always."""

    name: str
    model: dict[str, Any]
    run: dict[str, Any]
    train: dict[str, Any]

    @property
    def defaults(self) -> dict[str, Any]:
        return {**self.model, **self.run, **self.train, "verbose": AUTO_VERBOSE}


def param_spec(name: str) -> ParamSpec:
    """The :class:`ParamSpec` of the registered model ``name`` (ValueError for an unknown one)."""
    entry = get_model(name)
    if not entry.config_params:  # its class's constructor's parameters
        sig = inspect.signature(entry.cls.__init__).parameters
        own = {
            k: p.default
            for k, p in sig.items()
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
            and k != "self"
            and k not in _BASELINE_RENAMES
            and k not in entry.debias_args
        }
        own.update({k: default for k, (default, _) in entry.fixed.items()})  # adarank-map: metric="map"
        own.pop("verbose", None)  # the estimator's own verbose is passed on
        train = {_BASELINE_RENAMES[k]: sig[k].default for k in (entry.seed, entry.threads) if k}
        if "threads" in train:
            train["threads"] = None  # None = one thread, as in ``ctxrank train``
        debias = entry.debias_train_keys
        train.update({f.name: field_default(f) for f in dataclasses.fields(TrainConfig) if f.name in debias})
        return ParamSpec(name, own, {}, train)
    model = {f.name: field_default(f) for f in dataclasses.fields(entry.config_class)}
    defaults = {f.name: field_default(f) for f in dataclasses.fields(RunConfig)}
    run = {_RUN_RENAMES.get(k, k): defaults[k] for k in _RUN}
    run["loss_params"] = None  # an estimator parameter is not a mutable default
    if entry.traits.own_objective:  # no loss to choose
        run = {"normalizer": run["normalizer"]}
    train = {_TRAIN_RENAMES.get(f.name, f.name): field_default(f) for f in dataclasses.fields(TrainConfig)}
    for key, value in model_run_defaults(name).items():  # e.g. DASALC's transform and input noise
        if key == "transform":
            run["normalizer"] = value
        else:
            field_name = key.removeprefix("train.")
            train[_TRAIN_RENAMES.get(field_name, field_name)] = value
    clash = set(model) & (set(run) | set(train) | {"verbose"})
    assert not clash, f"{name}: model parameters {clash} clash with run parameters"
    return ParamSpec(name, model, run, train)


def run_config(name: str, params: dict[str, Any]) -> RunConfig:
    """The :class:`RunConfig` that ``ctxrank train`` would resolve for model ``name`` with the estimator
    parameters ``params`` (missing ones take their defaults).

    Raises:
        ValueError: an unknown parameter (listing the valid ones) or a bad value (naming it).
    """
    spec = param_spec(name)
    unknown = sorted(set(params) - set(spec.defaults))
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {unknown} for model {name!r}; valid: {', '.join(spec.defaults)}"
        )
    values = {**spec.defaults, **params}
    model_params = {k: values[k] for k in spec.model}
    verbose = _check_verbose(values["verbose"])
    run: dict[str, Any] = {}
    if not get_model(name).config_params:
        if "verbose" in inspect.signature(get_model(name).cls.__init__).parameters:
            model_params["verbose"] = verbose is True  # a baseline's log lines: asked for only
        train = {"seed": values.get("random_state", 0), "threads": values.get("threads")}
        train.update({k: values[k] for k in get_model(name).debias_train_keys})
    else:
        train = {f.name: values[_TRAIN_RENAMES.get(f.name, f.name)] for f in dataclasses.fields(TrainConfig)}
        run = {k: values[_RUN_RENAMES.get(k, k)] for k in _RUN if _RUN_RENAMES.get(k, k) in spec.run}
        run["loss_params"] = dict(run.get("loss_params") or {})  # ARSM's ``loss`` is its own parameter
    try:
        return RunConfig(
            model=name, model_params=model_params, train=build_dataclass(TrainConfig, train, "train"), **run
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(_estimator_names(str(exc))) from None


def _estimator_names(message: str) -> str:
    """A config error in the estimator's parameter names (``train.seed`` -> ``random_state``)."""
    for key, name in _TRAIN_RENAMES.items():
        message = message.replace(f"train.{key}", name)
    return message.replace("model_params.", "").replace("train.", "")


def _check_verbose(value: Any) -> bool | str:
    """``verbose``: True, False or ``"auto"``."""
    if value is True or value is False or value == AUTO_VERBOSE:
        return value
    raise ValueError(f"verbose must be True, False or {AUTO_VERBOSE!r}, got {value!r}")


def shows_progress(verbose: Any) -> bool:
    """Whether a fit with ``verbose`` shows its progress bar (tqdm's, over the epochs, as ``ctxrank
    train``): ``True`` / ``False`` as given; ``"auto"`` where a person watches: standard error is a
    terminal, or the fit runs in a Jupyter notebook (a widget, through ``tqdm.auto``); not in a script
    whose output goes to a file or a pipe, nor under pytest, which captures it."""
    if _check_verbose(verbose) != AUTO_VERBOSE:
        return bool(verbose)
    if _in_notebook():
        return True
    stderr = sys.stderr
    return stderr is not None and hasattr(stderr, "isatty") and stderr.isatty()


def _in_notebook() -> bool:
    """A Jupyter kernel's shell (IPython's ZMQInteractiveShell) runs this process."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    return type(shell).__name__ == "ZMQInteractiveShell"
