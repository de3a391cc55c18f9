"""Experiment specifications: what ``ctxrank experiment CONFIG.toml`` runs.

An experiment is ``models x runs`` where a run is one ``(seed, fold)`` pair. A TOML file::

    name = "qilcm-table2"
    title = "QILCM vs DCM vs DLCM vs LambdaMART, re-ranking LambdaMART's top 100"

    [data]
    dataset = "mq2008"     # a registry name (its folds are used) ...
    folds = []             # ... [] = every fold
    # protocol = "random-splits"  (a registry dataset's queries pooled, one random 60/20/20 split per
    # run from its seed: the QILCM paper's protocol; default "folds" for a dataset)
    # file = "sessions.csv"  (a table or LETOR file without folds: random 60/20/20 split per run,
    # query_col = "session", label_col = "chosen", categorical = ["airline"], numeric = [...],
    # docid_col = "item": an item id column, not a feature,
    # group_col = "person": split by this column's groups (decision makers) instead of by query)
    # null_fill = "letor_min"  (what a missing feature value becomes: "query_min" (LETOR's default),
    # "letor_min", "keep" (NaN: tables' default) or a number; see ctxrank.data.letor.read_letor)
    # synth = "choice", sessions = 2000, synth_seed = 0   (ctxrank.data.synth_choice, SYNTHETIC)
    # synth = "letor", letor = { queries = 300, items = 20, features = 10, context = "relative" }: the lists
    # of `ctxrank synth letor` (ctxrank.data.synth.LetorShape: queries, items, features, max_label, lengths,
    # labels, context; its --seed is synth_seed), generated in memory once per process, split per run

    [runs]
    count = 20             # runs in seed-major order: seed 0 on every fold, then seed 1, ...
    threads = 2

    [protocol]
    initial = "lambdamart" # neural models re-rank LambdaMART's top_k; "" = whole lists
    top_k = 100

    [report]
    metrics = ["ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map"]
    target = "qilcm"       # the model compared with every baseline (improvement %, t-test)
    baselines = []         # [] = every other model
    # test: "queries" (default with published folds), "queries-permutation", "folds", "corrected-resampled"
    # (default with random splits) or "runs-plain" (the paper's test; see ctxrank.experiments.stats)
    test = "queries"
    resamples = 9999       # bootstrap CI and permutation test: resamples and their seed
    stats_seed = 0
    correction = "holm"    # of the table's family of comparisons: holm (default), bh or none

    [defaults]             # run-config keys shared by every model (a model's own table wins)
    train = { max_epochs = 100 }

    [models.qilcm]         # name -> a run config (as `ctxrank train --config`: model, model_params, ...)
    model = "qilcm"
    # config = "runs/tune/best.toml"   # or a run-config file's (e.g. `ctxrank tune`'s best.toml),
    #                                    relative to this file; the table's other keys win

With ``[tune]`` every model, baselines included, is first tuned on each run's training and validation
splits with the same budget (``ctxrank.tune``; the study and its report in ``OUT/tune/MODEL/seedS-foldF``),
then the chosen configuration is trained and tested once::

    [tune]
    trials = 20            # trials per model per run (seed, fold)
    seed = 0               # the sampler's seed
    prune = true           # prune neural trials on their per-epoch validation metric
    ensemble = 1           # k > 1: the chosen configuration is tested as a seed ensemble of k models

A key a model's table (or ``[defaults]``) sets is fixed, not searched.

    [models.qilcm.grid]    # optional: candidates chosen per run on the validation split (GridSpec)
    model_params.confusion_weight = [1e-5, 1e-4, 1e-3]
    widths = [{ model_params.att_hidden = [256, 256], model_params.rank_hidden = [256, 256] },
              { model_params.att_hidden = [128, 128], model_params.rank_hidden = [128, 128] }]

With ``[analysis.anomaly]`` the QILCM paper's anomalous-query analysis (Figure 2) is added
(``ctxrank.experiments.anomaly``). A relative ``[data] file`` written in a TOML file is relative to that
file; one given on the command line (``--set data.file=...``, also with a built-in spec) is relative to
the current directory.
Built-in specifications live in ``ctxrank/experiments/configs/`` and are named without ``.toml``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from ctxrank._checks import (
    DEFAULT_NULL_FILL,
    DEFAULT_TABLE_NULL_FILL,
    OptionError,
    check_bool,
    check_choice,
    check_fractions,
    check_int,
    check_names,
    check_no_relevant,
    check_null_fill,
    check_seed,
    resolve_threads,
)
from ctxrank._overrides import Override, parse_override
from ctxrank.clicks.click_models import click_model
from ctxrank.clicks.simulate import check_fraction, check_options
from ctxrank.config import (
    RerankConfig,
    RunConfig,
    TrainConfig,
    apply_overrides,
    load_toml,
    with_read_train_keys,
)
from ctxrank.data.registry import get_spec
from ctxrank.data.sources import Columns, DataSource, ReadOptions, is_table_path, tabular
from ctxrank.data.split import DEFAULT_FRACTIONS
from ctxrank.data.synth import LetorShape
from ctxrank.experiments.stats import CORRECTIONS, DEFAULT_CORRECTION, DEFAULT_TEST, UNITS, check_test
from ctxrank.metrics import CHOICE_METRICS, CONVENTIONS, parse_metric
from ctxrank.registry import MODELS
from ctxrank.training.run import check_reads_categorical

__all__ = [
    "AnomalySpec",
    "ClicksSpec",
    "ExperimentSpec",
    "GridSpec",
    "ReportSpec",
    "TuneSpec",
    "builtin_names",
    "correction_override",
    "data_from_record",
    "in_spec_terms",
    "load_spec",
    "settings_from_record",
    "split_protocol",
]

#: ``[data] protocol`` values (:attr:`ExperimentSpec.protocol`)
PROTOCOLS = ("folds", "random-splits")
DEFAULT_METRICS = ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map")
#: experiment and model names become directory names under the output directory: no separators, no
#: "..", no leading dot, so a spec can never make ctxrank write outside ``--out``
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,99}")  # whole name: use fullmatch
#: the most runs of one experiment (``runs.count``): each trains every model once, so more would never
#: finish, and the runs' keys are listed before the first run (a count of 10^9 would exhaust memory)
MAX_RUNS = 100_000


def _safe_name(section: str, what: str, name: Any) -> str:
    if not isinstance(name, str) or not SAFE_NAME.fullmatch(name) or ".." in name:
        raise _fail(
            section,
            f"{what} {name!r} must be 1-100 letters, digits, '_', '-', '+' or '.', starting with a letter or "
            "digit and without '..' (it names a directory in the output)",
        )
    return name


def _table(d: Mapping[str, Any], section: str, what: str = "") -> dict[str, Any]:
    """The table ``[section]`` of a spec (absent: empty); any other value is refused, not read as empty."""
    value = d.get(section, {})
    if not isinstance(value, Mapping):
        described = f" ({what})" if what else ""
        raise _fail(section, f"must be a table{described}, got {type(value).__name__} {value!r}")
    return dict(value)


def _fail(section: str, msg: str) -> ValueError:
    return ValueError(f"[{section}] {msg}")


def _known(section: str, d: Mapping[str, Any], names: Sequence[str]) -> None:
    unknown = sorted(set(d) - set(names))
    if unknown:
        raise _fail(section, f"unknown key(s) {unknown}; valid keys: {sorted(names)}")


_T = TypeVar("_T")


def _check(section: str, check: Callable[..., _T], name: str, value: Any, *args: Any) -> _T:
    """``check(name, value, *args)``, a validator of ``ctxrank._checks`` (the one set: the spec has no
    validator of its own), its error prefixed with ``[section]``: the one place a spec's messages get
    their section."""
    try:
        return check(name, value, *args)
    except ValueError as exc:
        raise _fail(section, str(exc)) from None


#: the synthetic data a spec can generate (``[data] synth``): choice sessions
#: (``ctxrank.data.synth_choice``, ``sessions``) or LETOR lists (``ctxrank.data.synth``, ``letor``)
SYNTHETIC = ("choice", "letor")

#: The run name of the synthetic chooser's own scores (a reference row of the report, not a model).
REFERENCE = "chooser"


#: ``[data]`` keys, in the order a record writes them (:meth:`ExperimentSpec.to_dict`), with their
#: defaults. The keys of :data:`SOURCE_KEYS` make the experiment's :class:`DataSource`; the others,
#: :data:`RUN_DATA_KEYS`, are fields of :class:`ExperimentSpec`.
DATA_DEFAULTS: dict[str, Any] = {
    "dataset": "", "folds": (), "variant": None, "root": None, "file": "", "query_col": "qid",
    "label_col": "label", "categorical": (), "numeric": None, "synth": "", "sessions": 2000,
    "letor": None, "synth_seed": 0, "split": DEFAULT_FRACTIONS, "group_col": "", "protocol": None,
    "null_fill": None, "docid_col": None, "position_col": None,
}  # fmt: skip
#: a ``[data]`` key -> the :class:`DataSource` field it sets (``columns.X`` / ``read.X``: a field of its
#: ``Columns`` / ``ReadOptions``): the one map between a spec's names (docs/experiments.md) and the source's
SOURCE_KEYS = {
    "dataset": "dataset", "variant": "variant", "root": "data_root", "file": "data_file",
    "split": "split_fractions", "group_col": "group_col", "query_col": "columns.query_col",
    "label_col": "columns.label_col", "categorical": "columns.categorical", "numeric": "columns.numeric",
    "docid_col": "columns.docid_col", "null_fill": "read.null_fill", "position_col": "columns.position_col",
}  # fmt: skip
#: the ``[data]`` keys of the runs rather than of one source (:class:`ExperimentSpec` fields): the
#: registry folds, the protocol (``"folds"`` or ``"random-splits"``), the synthetic sessions or lists
RUN_DATA_KEYS = ("folds", "protocol", "synth", "sessions", "letor", "synth_seed")


def _data(d: Mapping[str, Any], base: Path | None) -> dict[str, Any]:
    """``[data]`` checked, as :class:`ExperimentSpec` fields: ``data`` (the :class:`DataSource`) and
    :data:`RUN_DATA_KEYS`. A relative ``file`` is relative to ``base``."""
    _known("data", d, list(DATA_DEFAULTS))
    sources = [k for k in ("dataset", "file", "synth") if d.get(k)]
    if len(sources) != 1:
        raise _fail("data", f"give exactly one of dataset, file, synth (got {sources or 'none'})")
    kw = {**DATA_DEFAULTS, **d}
    if kw["dataset"]:  # the registry's name for an alias or any case: one fingerprint per dataset
        kw["dataset"] = get_spec(kw["dataset"]).name
    if kw["file"] and base is not None and not Path(kw["file"]).is_absolute():
        kw["file"] = str((base / kw["file"]).resolve())
    kw["folds"] = tuple(_check("data", check_int, "folds", f) for f in kw["folds"])
    kw["protocol"] = _protocol(kw)
    for name in ("categorical", "numeric"):
        if kw[name] is not None:
            kw[name] = _check("data", check_names, name, kw[name])
    kw["split"] = _check("data", check_fractions, "split", kw["split"])
    if kw["group_col"] and not kw["file"]:
        raise _fail("data", "group_col applies to a file (a registered choice dataset's folds are by person)")
    if kw["synth"]:
        _check("data", check_choice, "synth", kw["synth"], SYNTHETIC)
    if kw["synth"] == "letor":
        kw["letor"] = _letor(kw["letor"])
    _check("data", check_int, "sessions", kw["sessions"], 10)
    _check("data", check_seed, "synth_seed", kw["synth_seed"])
    if kw["null_fill"] is not None:
        kw["null_fill"] = _null_fill(kw)
    kw["docid_col"] = _id_col(kw, "docid_col", "item id")
    kw["position_col"] = _id_col(kw, "position_col", "shown-position")
    return {"data": _source(kw), **{k: kw[k] for k in RUN_DATA_KEYS}}


def _source(kw: Mapping[str, Any]) -> DataSource:
    """The :class:`DataSource` of checked ``[data]`` keys (:data:`SOURCE_KEYS`). A key this source does
    not read is an error unless it has its default (a record writes every key)."""
    table = bool(kw["file"]) and is_table_path(kw["file"])
    random, synth = kw["protocol"] == "random-splits", kw["synth"]
    applies = (  # keys, what they apply to, whether this source is one
        (("query_col", "label_col", "categorical", "numeric", "group_col"), "a table file", table),
        (("variant", "root"), "a registered dataset", bool(kw["dataset"])),
        (("split",), "random splits (a file, synthetic data, protocol 'random-splits')", random),
        (("sessions", "synth_seed"), "synthetic data", bool(kw["synth"])),
        (("sessions",), "synth = 'choice' (synth = 'letor' lists are shaped by letor)", synth != "letor"),
        (("letor",), "synth = 'letor'", synth == "letor"),
    )
    for keys, what, read in applies:
        given = [k for k in keys if not read and kw[k] != DATA_DEFAULTS[k]]
        if given:
            raise _fail("data", f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to {what}")
    always = (("query_col", "label_col") if table else ()) + (("split",) if random else ())
    fields: dict[str, dict[str, Any]] = {"": {}, "columns": {}, "read": {}}
    for key, target in SOURCE_KEYS.items():
        part, _, name = target.rpartition(".")
        if key in always or kw[key] != DATA_DEFAULTS[key]:
            fields[part][name] = kw[key]
    return DataSource(**fields[""], columns=Columns(**fields["columns"]), read=ReadOptions(**fields["read"]))


def _letor(table: Any) -> LetorShape:
    """``[data] letor`` of ``synth = "letor"``: the :class:`~ctxrank.data.synth.LetorShape` of its keys
    (absent: every default), errors naming them ``letor.KEY``."""
    try:
        return LetorShape.from_dict({} if table is None else table)
    except OptionError as exc:
        raise _fail("data", exc.text.render(lambda f: f"letor.{f.name}")) from None
    except ValueError as exc:
        raise _fail("data", f"letor: {exc}") from None


def in_spec_terms(exc: ValueError) -> ValueError:
    """An error of the spec's :class:`DataSource` in the spec's words: each option an
    :class:`~ctxrank._checks.OptionError` names written as its ``[data]`` key (``group_col`` ->
    ``data.group_col``, ``columns.categorical`` -> ``data.categorical``); other errors as they are."""
    if not isinstance(exc, OptionError):
        return exc
    keys = {target.rpartition(".")[2]: key for key, target in SOURCE_KEYS.items()}
    return ValueError(exc.text.render(lambda field: f"data.{keys.get(field.name, field.name)}"))


def data_from_record(d: Any) -> dict[str, Any]:
    """``[data]`` of a stored record (``ExperimentSpec.to_dict``) as :class:`ExperimentSpec` fields: a
    record writes the default ``null_fill`` also where it has no effect (synthetic sessions, a choice
    dataset), where a spec file may not set it, and an old record may hold ``protocol = ""`` (its
    source's default)."""
    if isinstance(d, Mapping):
        unset = ("null_fill",) if not _can_miss_values(d.get("synth"), d.get("dataset")) else ()
        d = {k: v for k, v in d.items() if k not in unset and (k, v) != ("protocol", "")}
    return _data(d, None)


def _can_miss_values(synth: Any, dataset: Any) -> bool:
    """The data may hold missing feature values (a LETOR dataset, a file); synthetic sessions and
    registered choice datasets hold none."""
    return not synth and (not dataset or tabular(None, dataset) is None)


def _null_fill(d: Mapping[str, Any]) -> str | float:
    """``[data] null_fill``: a rule of ``ctxrank.data.letor.NULL_FILL_RULES`` or a finite number (a
    float, so ``0`` and ``0.0`` are one experiment), for a LETOR dataset or a file (a synthetic or
    registered choice dataset has no missing feature value)."""
    value = _check("data", check_null_fill, "null_fill", d["null_fill"])
    if d.get("synth"):
        what = "lists" if d["synth"] == "letor" else "sessions"
        raise _fail("data", f"null_fill: synthetic {what} have no missing feature value to fill")
    if not d.get("file"):
        table = tabular(None, d.get("dataset"))
        if table is not None:
            raise _fail("data", f"null_fill: {table} has no missing feature value to fill")
    return value


def _id_col(d: Mapping[str, Any], key: str, what: str) -> str | None:
    """``[data] docid_col`` / ``position_col``: a column name of a table ``file``, not its query or
    label column (``what``: the column's role, for messages)."""
    value = d[key]
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise _fail("data", f"{key} must be a column name (a non-empty string), got {value!r}")
    if not d.get("file") or not is_table_path(d["file"]):
        raise _fail("data", f'{key} applies to a table file (file = "....csv" or .parquet)')
    roles = {"query_col": d.get("query_col", "qid"), "label_col": d.get("label_col", "label")}
    clash = [name for name, column in roles.items() if column == value]
    if clash:
        raise _fail("data", f"{key} {value!r} is also the {clash[0]}; give the {what} column")
    return value


def _protocol(d: Mapping[str, Any]) -> str:
    """``[data] protocol``: given, else ``"folds"`` for a registry dataset and ``"random-splits"``
    otherwise; checked against the source and ``folds``."""
    protocol = d["protocol"]
    if protocol is None:  # not given
        protocol = "folds" if d["dataset"] else "random-splits"
    _check("data", check_choice, "protocol", protocol, PROTOCOLS)
    if protocol == "folds" and not d.get("dataset"):
        raise _fail("data", "protocol 'folds' needs a registry dataset; files and synthetic data are split")
    if protocol == "random-splits" and d.get("folds"):
        raise _fail("data", "folds apply to protocol 'folds'; random splits pool every query")
    return protocol


def _split_text(split: Sequence[float]) -> str:
    return "/".join(f"{x * 100:g}" for x in split)


def split_protocol(spec: ExperimentSpec) -> str:
    """``"folds"`` (a registry dataset's published folds) or ``"random-splits"`` (one random query split
    per run: files, synthetic data, or a dataset with ``[data] protocol = "random-splits"``); it decides
    the report's default test (``ctxrank.experiments.stats.DEFAULT_TEST``)."""
    return "folds" if spec.has_folds else "random-splits"


#: at most this many grid points per model (each is a full training per run)
MAX_GRID_POINTS = 64


@dataclass(frozen=True)
class GridSpec:
    """A model's ``[models.NAME.grid]``: hyperparameters chosen on the validation split, per run.

    Each axis is a dotted run-config key with a list of candidate values
    (``model_params.confusion_weight = [1e-5, 1e-4, 1e-3]``), or a name with a list of tables of dotted
    keys that change together (``widths = [{ model_params.att_hidden = [256, 256], ... }, ...]``). The
    points are the Cartesian product of the axes, in order (the last axis varies fastest). In every run
    each point is trained on the training split and scored on the validation split with its
    ``train.metric`` (the early-stopping metric, ``train.no_relevant`` for queries without a relevant
    item, full queries); the best point (the first one on ties) is kept and evaluated on the test split
    once (``ctxrank.experiments.runner``).
    """

    axes: tuple[tuple[str, tuple[Mapping[str, Any], ...]], ...] = ()

    def points(self) -> list[dict[str, Any]]:
        """Every combination: ``{dotted key: value}`` overrides of the model's run config."""
        out: list[dict[str, Any]] = [{}]
        for _, candidates in self.axes:
            out = [{**p, **c} for p in out for c in candidates]
        return out


def _flat_keys(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        out.update(_flat_keys(v, key + ".") if isinstance(v, Mapping) else {key: v})
    return out


def _grid(section: str, d: Any) -> GridSpec:
    """Parse a ``[models.NAME.grid]`` table (see :class:`GridSpec`)."""
    if not isinstance(d, Mapping):
        raise _fail(section, f"must be a table of candidate lists, got {d!r}")
    axes = []
    for name, values in _flat_keys(d).items():
        if not isinstance(values, list) or not values:
            raise _fail(section, f"{name} must be a non-empty list of candidates, got {values!r}")
        tables = [isinstance(v, Mapping) for v in values]
        if any(tables) and not all(tables):
            raise _fail(section, f"{name}: candidates must be all values or all tables of dotted keys")
        candidates = tuple(_flat_keys(v) if t else {name: v} for v, t in zip(values, tables, strict=True))
        axes.append((name, candidates))
    grid = GridSpec(axes=tuple(axes))
    if len(grid.points()) > MAX_GRID_POINTS:
        raise _fail(section, f"{len(grid.points())} grid points; at most {MAX_GRID_POINTS}")
    return grid


@dataclass(frozen=True)
class ReportSpec:
    metrics: tuple[str, ...] = DEFAULT_METRICS
    convention: str = "standard"
    no_relevant: float | str = 0.0
    target: str = ""
    baselines: tuple[str, ...] = ()
    #: a name of ``ctxrank.experiments.stats.TESTS``; a loaded spec has its protocol's default here
    test: str = "queries"
    #: multiple-comparison correction over the table's family (``stats.CORRECTIONS``)
    correction: str = "holm"
    resamples: int = 9999
    stats_seed: int = 0


@dataclass(frozen=True)
class AnomalySpec:
    """The QILCM paper's anomalous-query analysis (Figure 2): see ``ctxrank.experiments.anomaly``."""

    models: tuple[str, str] = ("qilcm", "dlcm")
    top: int = 10
    buckets: int = 5
    metrics: tuple[str, ...] = ("ndcg@1", "ndcg@10")
    n_estimators: int = 100


@dataclass(frozen=True)
class TuneSpec:
    """``[tune]``: the trial budget per model per run, the sampler's seed, pruning (``ctxrank.tune``),
    and ``ensemble``: k > 1 trains each model's chosen configuration as a seed ensemble of k models for
    the test (trials train single models, so the search costs the same; the recipe of docs/training.md);
    a maximum-likelihood fit (``mnl``) does not depend on the seed and stays one model."""

    trials: int = 20
    seed: int = 0
    prune: bool = True
    ensemble: int = 1

    @classmethod
    def from_dict(cls, d: Any) -> TuneSpec:
        if not isinstance(d, Mapping):
            raise _fail("tune", "must be a table (trials, seed, prune, ensemble)")
        _known("tune", d, [f.name for f in dataclasses.fields(cls)])
        return cls(
            trials=_check("tune", check_int, "trials", d.get("trials", 20)),
            seed=_check("tune", check_seed, "seed", d.get("seed", 0)),
            prune=_check("tune", check_bool, "prune", d.get("prune", True)),
            ensemble=_check("tune", check_int, "ensemble", d.get("ensemble", 1)),
        )

    def fingerprint_key(self) -> dict[str, Any]:
        key = dataclasses.asdict(self)
        if key["ensemble"] == 1:
            del key["ensemble"]  # the default: fingerprints of tuned experiments before the key stay
        return key


@dataclass(frozen=True)
class ClicksSpec:
    """``[clicks]``: each run's training and validation splits become click logs simulated from them.

    The standard semi-synthetic protocol (Joachims, Swaminathan & Schnabel 2017, "Unbiased
    learning-to-rank with biased feedback"; Ai et al. 2018, "Unbiased learning to rank with unbiased
    propensity estimation"), by :mod:`ctxrank.clicks.simulate`: a logging LambdaMART trained on
    ``logging_fraction`` of the run's training queries ranks the training and validation queries;
    ``sessions`` sessions (the validation log: as many per query) each show a query's top ``top_k``
    (``randomize``: :data:`ctxrank.clicks.simulate.RANDOMIZATIONS`), clicked by ``click_model`` with
    ``params`` (:func:`ctxrank.clicks.click_models.click_model`). Sessions without a click are dropped.
    The test split keeps its true labels. ``skyline``: the models trained on the true labels of the
    training and validation splits instead (the full-information runs).
    """

    click_model: str = "pbm"
    params: Mapping[str, Any] = field(default_factory=dict)
    sessions: int = 10_000
    top_k: int = 10
    logging_fraction: float = 0.01
    randomize: str = "none"
    shuffle_n: int | None = None
    relevance: str = "exponential"
    seed: int = 0
    skyline: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, d: Any, models: Sequence[str]) -> ClicksSpec:
        """``[clicks]`` checked: unknown keys, click models and parameters are errors listing the valid
        ones; ``skyline`` must name models of the spec."""
        if not isinstance(d, Mapping):
            raise _fail("clicks", f"must be a table of simulation settings, got {d!r}")
        _known("clicks", d, [f.name for f in dataclasses.fields(cls)])
        params = d.get("params", {})
        if not isinstance(params, Mapping):
            raise _fail("clicks", f"params must be a table of the click model's parameters, got {params!r}")
        kw = {**{f.name: f.default for f in dataclasses.fields(cls) if f.name != "params"}, **d}
        kw["params"] = dict(params)
        kw["skyline"] = _check("clicks", check_names, "skyline", kw["skyline"])
        kw["seed"] = _check("clicks", check_seed, "seed", kw["seed"])
        try:
            options = {k: kw[k] for k in ("sessions", "top_k", "randomize", "shuffle_n", "relevance")}
            check_options(**options)
            check_fraction(kw["logging_fraction"])
            spec = cls(**kw)
            spec.model()
        except (TypeError, ValueError) as exc:
            raise _fail("clicks", str(exc)) from None
        unknown = [m for m in spec.skyline if m not in models]
        if unknown:
            raise _fail("clicks", f"skyline {unknown}: not models of the spec {list(models)}")
        return spec

    def model(self) -> Any:
        """The click model (:func:`ctxrank.clicks.click_models.click_model`)."""
        if not isinstance(self.click_model, str):
            raise ValueError(f"click_model must be a click model's name, got {self.click_model!r}")
        return click_model(self.click_model, **self.params)

    def labels(self, model: str) -> str:
        """What ``model`` trains on: ``"true"`` (a skyline) or ``"clicks"``."""
        return "true" if model in self.skyline else "clicks"

    @staticmethod
    def method(skyline: bool, debias: str) -> str:
        """How a run learns: ``"skyline"`` (true labels, whatever its ``train.debias``), ``"naive"``
        (clicks, ``debias = "none"``) or its ``train.debias`` method."""
        return "skyline" if skyline else ("naive" if debias == "none" else debias)

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(dataclasses.asdict(self)))


@dataclass(frozen=True)
class ExperimentSpec:
    """A validated experiment (see the module docstring for the TOML form)."""

    name: str
    #: the ``[data]`` source (each run sets its fold, or splits it: :mod:`ctxrank.experiments.runner`)
    data: DataSource
    models: Mapping[str, Mapping[str, Any]]
    runs: int = 5
    #: what every run config of the spec takes from it (:func:`_run_settings`): ``[runs] threads`` as
    #: ``train.threads`` (resolved: never None), ``[protocol]`` as the re-rankers' ``rerank.initial`` and
    #: ``rerank.top_k``
    train: TrainConfig = field(kw_only=True)
    rerank: RerankConfig = field(kw_only=True)
    title: str = ""
    report: ReportSpec = field(default_factory=ReportSpec)
    anomaly: AnomalySpec | None = None
    source: str = ""
    grids: Mapping[str, GridSpec] = field(default_factory=dict)
    tune: TuneSpec | None = None
    #: ``[clicks]``: train on click logs simulated from the training and validation splits
    clicks: ClicksSpec | None = None
    #: the ``[data]`` keys of the runs (:data:`RUN_DATA_KEYS`)
    folds: tuple[int, ...] = field(kw_only=True)
    #: ``"folds"`` (a registry dataset's published folds, its default) or ``"random-splits"`` (every
    #: query pooled, one random query-level split per run drawn from the run's seed; the only protocol
    #: of files and synthetic data)
    protocol: str = field(kw_only=True)
    synth: str = field(kw_only=True)
    sessions: int = field(kw_only=True)
    #: ``synth = "letor"``: the shape of the lists (None otherwise)
    letor: LetorShape | None = field(default=None, kw_only=True)
    synth_seed: int = field(kw_only=True)

    def __post_init__(self) -> None:
        # the names become directories under --out: checked however the spec was made (a TOML file, or a
        # stored record such as an evidence directory's spec.json, which is not trusted)
        _safe_name("top", "name", self.name)
        for m in self.models:
            _safe_name(f"models.{m}", "model name", m)
        _check("runs", functools.partial(check_int, maximum=MAX_RUNS), "count", self.runs)

    # ------------------------------------------------------------------ data
    @property
    def can_miss_values(self) -> bool:
        """The data may hold missing feature values (a LETOR dataset, a file)."""
        return _can_miss_values(self.synth, self.data.dataset)

    def default_null_fill(self) -> str | float:
        """What a missing feature value becomes when ``null_fill`` is not given: the reader's default."""
        table = self.synth or tabular(self.data.data_file, self.data.dataset) is not None
        return DEFAULT_TABLE_NULL_FILL if table else DEFAULT_NULL_FILL

    @property
    def registry_folds(self) -> bool:
        """The runs use the registry's folds of ``dataset`` (``protocol = "random-splits"`` instead pools
        every query and draws one split per run)."""
        return self.protocol == "folds"  # a registry dataset's (checked by the parse)

    @property
    def has_folds(self) -> bool:
        """The runs use a registry dataset's published folds (a choice dataset's registry folds are
        random splits by person, so they do not count)."""
        return self.registry_folds and get_spec(self.data.dataset).layout != "choice"

    @property
    def is_choice(self) -> bool:
        """Choice data (one chosen alternative per situation): synthetic sessions or a choice dataset;
        the report's default metrics are then ``ctxrank.metrics.CHOICE_METRICS``."""
        dataset = self.data.dataset
        return self.synth == "choice" or (dataset is not None and get_spec(dataset).layout == "choice")

    def resolved_folds(self) -> tuple[int, ...]:
        """The folds the runs cycle through (``(0,)`` = one random split per run, no folds)."""
        if not self.registry_folds:
            if self.data.dataset:
                get_spec(self.data.dataset)  # an unknown dataset fails now
            return (0,)

        n = get_spec(self.data.dataset).n_folds
        folds = self.folds or tuple(range(1, n + 1))
        bad = [f for f in folds if f > n]
        if bad:
            raise _fail("data", f"{self.data.dataset} has folds 1..{n}, got {bad}")
        return folds

    def describe_data(self) -> str:
        d, nulls = self.data, ""
        if d.read.null_fill not in (None, self.default_null_fill()):
            kept = d.read.null_fill == "keep"
            nulls = ", missing cells kept (NaN)" if kept else f", missing cells filled by {d.read.null_fill}"
        if d.dataset:
            split = "" if self.registry_folds else _split_text(d.split_fractions)
            pooled = f", every query pooled, random {split} splits" if split else ""
            return f"{d.dataset}" + (f" ({d.variant})" if d.variant else "") + pooled + nulls
        if self.letor is not None:
            return f"SYNTHETIC letor lists ({self.letor.describe()}, data seed {self.synth_seed})"
        if self.synth:
            return f"SYNTHETIC {self.synth} sessions (n={self.sessions}, data seed {self.synth_seed})"
        return f"{d.data_file}{nulls}"

    def data_record(self) -> dict[str, Any]:
        """``[data]`` as a record holds it: every key of :data:`DATA_DEFAULTS`, in its order."""
        record = {}
        for key, default in DATA_DEFAULTS.items():
            path = () if key in RUN_DATA_KEYS else SOURCE_KEYS[key].split(".")
            value = functools.reduce(getattr, path, self.data) if path else getattr(self, key)
            if isinstance(value, LetorShape):
                value = dataclasses.asdict(value)
            record[key] = default if value is None else value
        return record

    # ------------------------------------------------------------------ runs
    def run_keys(self) -> list[tuple[int, int]]:
        """``(seed, fold)`` of every run in order: seed-major (seed 0 on every fold, then seed 1, ...)."""
        folds = self.resolved_folds()
        n_seeds = -(-self.runs // len(folds))
        return [(s, f) for s in range(n_seeds) for f in folds][: self.runs]

    def run_names(self) -> list[str]:
        """The names whose runs are stored: the models, plus the :data:`REFERENCE` chooser (the
        generator's own choice probabilities) on synthetic choice data."""
        return [*self.models, *([REFERENCE] if self.synth == "choice" else [])]

    def run_config(self, model: str, seed: int, point: Mapping[str, Any] | None = None) -> RunConfig:
        """The model's run config for one seed: its table, a grid ``point`` (dotted overrides, see
        :class:`GridSpec`), the protocol, ``train.seed`` and threads."""
        return RunConfig.from_dict(self.run_dict(model, seed, point))

    def run_dict(self, model: str, seed: int, point: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """:meth:`run_config` as the dict it is built from (the base of a ``[tune]`` search)."""
        settings = [*(point or {}).items(), ("train.seed", seed), ("train.threads", self.train.threads)]

        entry = MODELS.get(self.models[model]["model"])  # an unknown name: RunConfig's own error
        if self.rerank.initial and (entry is None or entry.reranks):
            settings += [("rerank.initial", self.rerank.initial), ("rerank.top_k", self.rerank.top_k)]
        return apply_overrides(self.models[model], settings)

    def fingerprint(self) -> str:
        """Hash of what determines each run's result (not ``runs``, threads or the report)."""
        data = self.data_record()
        if data["protocol"] in ("", "folds" if self.data.dataset else "random-splits"):
            del data["protocol"]  # the source's default: fingerprints of earlier experiments are unchanged
        if data["null_fill"] in (None, self.default_null_fill()) or not self.can_miss_values:
            del data["null_fill"]  # the reader's default, or no effect: earlier fingerprints are unchanged
        for key in ("docid_col", "position_col", "letor"):
            if data[key] is None:
                del data[key]  # not an input of the runs' numbers when absent: fingerprints unchanged
        key = {
            "data": data,
            "models": self.models,
            "initial": self.rerank.initial,
            "top_k": self.rerank.top_k,
        }
        if self.grids:  # only when there are grids: fingerprints of experiments without one are unchanged
            key["grids"] = {m: dataclasses.asdict(g) for m, g in self.grids.items()}
        if self.tune is not None:  # absent without [tune]: the fingerprints of earlier specs stay
            key["tune"] = self.tune.fingerprint_key()
        if self.clicks is not None:  # absent without [clicks]: the fingerprints of earlier specs stay
            key["clicks"] = self.clicks.to_dict()
        return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def matches_record(self, record: Any) -> bool:
        """Whether a stored ``{"fingerprint", "spec"}`` record (a run store's or evidence's) is this
        experiment. Records written before a maximum-likelihood model (``mnl``) stopped taking the
        ``[defaults]`` ``[train]`` keys it does not read (2026-11-28) hold those keys in its table: such
        a record matches when its models less those keys are this spec's, and its fingerprint is this
        spec's over its models as stored."""
        if not isinstance(record, Mapping):
            return False
        if record.get("fingerprint") == self.fingerprint():
            return True
        stored = record.get("spec", {}).get("models") if isinstance(record.get("spec"), Mapping) else None
        if not isinstance(stored, Mapping) or set(stored) != set(self.models):
            return False
        unread = {m: with_read_train_keys(t)[0] if isinstance(t, Mapping) else t for m, t in stored.items()}
        if unread != self.to_dict()["models"]:
            return False
        return dataclasses.replace(self, models=stored).fingerprint() == record.get("fingerprint")

    def to_dict(self) -> dict[str, Any]:
        rest = dataclasses.asdict(self)
        for key in ("name", "data", "train", "rerank", *RUN_DATA_KEYS):
            del rest[key]
        settings = {"threads": self.train.threads, "initial": self.rerank.initial, "top_k": self.rerank.top_k}
        rest = {"models": rest.pop("models"), "runs": rest.pop("runs"), **settings, **rest}  # records' order
        data = self.data_record()  # the data's rule written out, as records written before it could be None
        if data["null_fill"] is None:
            data["null_fill"] = self.default_null_fill() if self.can_miss_values else DEFAULT_NULL_FILL
        for key in ("docid_col", "position_col", "letor"):
            if data[key] is None:
                del data[key]  # absent from records written before the key: they stay byte-identical
        if self.clicks is None:
            del rest["clicks"]  # absent from records written before the key: they stay byte-identical
        return json.loads(json.dumps({"name": self.name, "data": data, **rest}, default=str))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, base: Path | None = None, source: str = "") -> ExperimentSpec:
        _known(
            "top",
            d,
            [
                "name",
                "title",
                "data",
                "runs",
                "protocol",
                "report",
                "defaults",
                "models",
                "analysis",
                "tune",
                "clicks",
            ],
        )
        tune = TuneSpec.from_dict(d["tune"]) if "tune" in d else None
        name = d["name"] if "name" in d else (Path(source).stem if source else "")
        if not isinstance(name, str) or not name:
            raise _fail("top", "name is required")
        _safe_name("top", "name", name)
        data = _data(_table(d, "data"), base)
        runs = _table(d, "runs")
        _known("runs", runs, ["count", "threads"])
        settings = _run_settings(runs.get("threads"), _table(d, "protocol"))
        models, grids = _models(d, data, settings["rerank"].initial, tune, base)
        analysis = _table(d, "analysis")
        _known("analysis", analysis, ["anomaly"])
        anomaly = _anomaly(analysis["anomaly"], list(models)) if "anomaly" in analysis else None
        clicks = ClicksSpec.from_dict(d["clicks"], list(models)) if "clicks" in d else None
        _check_clicks(clicks, data, settings["rerank"].initial, anomaly)
        spec = cls(
            name=name,
            title=str(d.get("title", "")),
            **data,
            models=models,
            runs=_check("runs", check_int, "count", runs.get("count", 5)),
            **settings,
            anomaly=anomaly,
            source=source,
            grids=grids,
            tune=tune,
            clicks=clicks,
        )
        spec.resolved_folds()  # unknown dataset or fold -> error now, not after an hour
        _check_estimates(spec)
        report = _report(_table(d, "report"), list(models), split_protocol(spec), spec.is_choice)
        return dataclasses.replace(spec, report=report)


def _check_clicks(
    clicks: ClicksSpec | None, data: Mapping[str, Any], initial: str, anomaly: AnomalySpec | None
) -> None:
    """``[clicks]`` simulates from labelled data, and every model ranks whole lists: a re-ranker's
    initial LambdaMART, and the anomaly analysis's, would be fitted on the click log."""
    if clicks is None:
        return
    if anomaly is not None:
        raise _fail("clicks", "[analysis.anomaly] reads a LambdaMART fitted on labels; not with click logs")
    if data["data"].columns.position_col is not None:
        raise _fail("clicks", "simulates a log from labelled data; data.position_col makes the data a log")
    if data["synth"] == "choice":
        raise _fail(
            "clicks",
            "simulates from graded relevance labels; synthetic choice sessions have choices (synthetic "
            "graded lists: synth = 'letor')",
        )
    if initial:
        raise _fail("clicks", f'every model ranks whole lists: set [protocol] initial = "" (got {initial!r})')


def _check_estimates(spec: ExperimentSpec) -> None:
    """A click-trained model with ``train.propensity = "estimate:randomized"`` needs ``[clicks]`` to
    shuffle every training list whole (``ctxrank.clicks.estimate``): refused now, not in each run."""
    c = spec.clicks
    if c is None or (c.randomize == "shuffle_top" and c.shuffle_n is not None and c.shuffle_n >= c.top_k):
        return
    for model in spec.models:
        if (
            c.labels(model) == "clicks"
            and spec.run_config(model, 0).train.propensity == "estimate:randomized"
        ):
            raise _fail(
                f"models.{model}",
                "train.propensity = 'estimate:randomized' compares positions whose items were shuffled: "
                f"set [clicks] randomize = 'shuffle_top' with shuffle_n >= top_k = {c.top_k} (got randomize "
                f"= {c.randomize!r}, shuffle_n = {c.shuffle_n!r}), or use 'estimate:regression-em'",
            )


def _run_settings(threads: Any, protocol: Mapping[str, Any]) -> dict[str, Any]:
    """``[runs] threads`` and the ``[protocol]`` table as the :class:`ExperimentSpec` fields ``train``
    and ``rerank``: the ``train.threads`` of every run (``resolve_threads``: unset is 1) and the
    re-rankers' ``rerank.initial`` and ``rerank.top_k`` (a :class:`RerankConfig`: its defaults, its
    checks), errors named by the spec's keys (``[protocol] top_k``, not ``rerank.top_k``)."""
    threads = _check("runs", lambda name, value: resolve_threads(value, name), "threads", threads)
    _known("protocol", protocol, ["initial", "top_k"])
    try:
        rerank = RerankConfig(**protocol)
    except OptionError as exc:  # the keys it names are the table's: [protocol]'s own names
        raise _fail("protocol", exc.text.render(key_of=lambda key: key.name)) from None
    return {"train": TrainConfig(threads=threads), "rerank": rerank}


def settings_from_record(d: Mapping[str, Any]) -> dict[str, Any]:
    """``threads``, ``initial`` and ``top_k`` of a stored record (:meth:`ExperimentSpec.to_dict`) as the
    :class:`ExperimentSpec` fields ``train`` and ``rerank``, checked as a spec file's."""
    return _run_settings(d["threads"], {"initial": d["initial"], "top_k": d["top_k"]})


def _models(
    d: Mapping[str, Any], data: Mapping[str, Any], initial: str, tune: TuneSpec | None, base: Path | None
) -> tuple[dict[str, dict[str, Any]], dict[str, GridSpec]]:
    """``[models.NAME]`` with ``[defaults]``, checked against the data (``data``: :func:`_data`'s
    fields) and ``[tune]``: the run-config tables and the grids (:func:`_model_tables`)."""
    models = _table(d, "models")
    if not models:
        raise _fail("models", "at least one [models.NAME] table is required")
    defaults = _table(d, "defaults", "run-config keys shared by every model")
    gridded = [m for m, t in models.items() if isinstance(t, Mapping) and t.get("grid")]
    if tune is not None and gridded:
        raise _fail(
            "tune",
            "[tune] and a model's validation grid ([models.NAME.grid]) are exclusive; models with a "
            f"grid: {gridded} (drop one: models.NAME.grid = {{}})",
        )
    if data["synth"] == "choice" and "chooser" in models:
        raise _fail("models", "'chooser' is reserved for the synthetic data's own chooser")
    if "grid" in defaults:
        raise _fail("defaults", "grid: grids are per model ([models.NAME.grid])")
    if "model" in defaults:
        raise _fail("defaults", "model: each [models.NAME] table names its own model (model = NAME)")
    tables, grids = _model_tables(models, defaults, base, initial, tune)
    categorical = data["data"].columns.categorical or ()
    for m, table in tables.items():  # a baseline would drop the categorical columns at run time
        try:
            check_reads_categorical(table["model"], categorical)
        except ValueError as exc:
            raise _fail(f"models.{m}", str(exc)) from None
    return {m: dict(t) for m, t in tables.items()}, grids


def _model_tables(
    models: Mapping[str, Any],
    defaults: Mapping[str, Any],
    base: Path | None,
    initial: str,
    tune: TuneSpec | None,
) -> tuple[dict[str, Any], dict[str, GridSpec]]:
    """Each ``[models.NAME]`` table resolved (``config = FILE``, ``[defaults]``) and validated as a run
    config at every grid point; the tables and the grids of the models that have one."""
    tables: dict[str, Any] = dict(models)
    grids: dict[str, GridSpec] = {}
    for m, table in list(models.items()):
        _safe_name(f"models.{m}", "model name", m)
        if not isinstance(table, Mapping):
            raise _fail(f"models.{m}", "must be a table (a run config)")
        table = _named_model(m, _with_config_file(m, table, base))
        table = _deep_merge(_defaults_for(defaults, table), table)
        grid = _grid(f"models.{m}.grid", table.pop("grid")) if "grid" in table else GridSpec()
        tables[m] = table
        check = table  # a re-ranker's own rerank keys are checked with the protocol's initial ranker
        if initial and isinstance(table.get("rerank"), Mapping) and "initial" not in table["rerank"]:
            check = _deep_merge(table, {"rerank": {"initial": initial}})
        for point in grid.points():
            try:
                RunConfig.from_dict(apply_overrides(check, point.items()))
            except ValueError as exc:
                where = f"models.{m}" + (f" (grid point {point})" if point else "")
                raise _fail(where, str(exc)) from None
        if grid.axes:
            grids[m] = grid
        if tune is not None and tune.ensemble > 1 and table.get("ensemble", 1) != 1:
            raise _fail(
                f"models.{m}",
                f"ensemble = {table['ensemble']} and [tune] ensemble = {tune.ensemble}: set the seed "
                "ensemble in one place ([tune] ensemble trains only the chosen configuration as one)",
            )
    return tables, grids


def _named_model(name: str, table: Mapping[str, Any]) -> Mapping[str, Any]:
    """The table with its ``model`` key: given, or the table's name when that is a registered model
    (``[models.qilcm]`` trains QILCM); any other name without ``model = ...`` is an error, never the run
    config's default model under another name."""
    if "model" in table:
        return table

    if name not in MODELS:
        raise _fail(
            f"models.{name}",
            f"model = NAME is required: {name!r} is not a registered model, so the table must say which "
            f"model it trains (registered: {', '.join(MODELS)})",
        )
    return {"model": name, **table}


def _with_config_file(model: str, table: Mapping[str, Any], base: Path | None) -> Mapping[str, Any]:
    """``config = "FILE"`` in a model's table: the run config of a TOML file (e.g. the ``best.toml`` of
    ``ctxrank tune``; relative to the spec), under the table's other keys."""
    if "config" not in table:
        return table
    path = table["config"]
    if not isinstance(path, str) or not path:
        raise _fail(f"models.{model}", f"config must be the path of a TOML run config, got {path!r}")
    path = Path(path) if base is None or Path(path).is_absolute() else base / path
    rest = {k: v for k, v in table.items() if k != "config"}
    return _deep_merge(load_toml(path), rest)


def _check_new_models(d: Mapping[str, Any], overrides: Sequence[Override], path: Path) -> None:
    """``--set models.NAME.KEY=V`` for a NAME the spec does not have is a typo, unless the overrides
    add that model explicitly (``models.NAME.model=M`` or ``models.NAME={...}``)."""
    models = d.get("models")
    names = list(models) if isinstance(models, Mapping) else []
    added: dict[str, list[str]] = {}
    for key, _ in overrides:
        parts = key.split(".")
        if len(parts) >= 2 and parts[0] == "models" and parts[1] not in names:
            added.setdefault(parts[1], []).append(".".join(parts[2:]))
    for name, keys in added.items():
        if "model" not in keys and "" not in keys:
            raise OptionError(
                "{path}: {overrides} models.{name}.{key}: the spec has no model {name!r} (its models: "
                "{names}); to add one, also set models.{name}.model=MODEL",
                path=path, name=name, key=keys[0], names=", ".join(names),
            )  # fmt: skip


def _defaults_for(defaults: Mapping[str, Any], table: Mapping[str, Any]) -> Mapping[str, Any]:
    """``[defaults]`` for one model: a baseline or a maximum-likelihood fit takes only the ``[train]``
    keys it reads (``ctxrank.config.train_keys_read``); set in the model's own table, others are errors."""
    train, model = defaults.get("train"), table["model"]
    if not isinstance(train, Mapping) or not isinstance(model, str):
        return defaults
    rerank = {**_mapping(defaults.get("rerank")), **_mapping(table.get("rerank"))}
    read, reads = with_read_train_keys({"model": model, "rerank": rerank, "train": train})
    return defaults if reads is None else {**defaults, "train": read["train"]}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else v
    return out


def _report(d: dict[str, Any], models: list[str], protocol: str, choice: bool = False) -> ReportSpec:
    _known("report", d, [*(f.name for f in dataclasses.fields(ReportSpec)), "holm"])
    default_metrics = CHOICE_METRICS if choice else DEFAULT_METRICS
    metrics = _check("report", check_names, "metrics", d.get("metrics", default_metrics))
    for m in metrics:
        try:
            parse_metric(m)
        except ValueError as exc:
            raise _fail("report", f"metrics: {exc}") from None
    target = d["target"] if "target" in d else ("qilcm" if "qilcm" in models else models[-1])
    if target not in models:
        raise _fail("report", f"target {target!r} is not one of the models {models}")
    baselines = _check("report", check_names, "baselines", d.get("baselines", ())) or tuple(
        m for m in models if m != target
    )
    unknown = [b for b in baselines if b not in models or b == target]
    if unknown:
        raise _fail("report", f"baselines {unknown} must be models other than the target {target!r}")
    if not baselines:
        raise _fail(
            "report",
            f"the report compares the target {target!r} with at least one other model, and the spec has "
            f'only {models}: add a model (e.g. [models.lambdamart] model = "lambdamart"), or train one '
            "model with `ctxrank train`",
        )
    test = d.get("test", DEFAULT_TEST[protocol])
    try:
        check_test(test)
    except ValueError as exc:
        raise _fail("report", f"test: {exc}") from None
    if UNITS[test] == "folds" and protocol != "folds":
        raise _fail("report", f"test 'folds' needs published folds; these runs are {protocol}")
    if test == "corrected-resampled" and protocol != "random-splits":
        raise _fail("report", f"test 'corrected-resampled' is for random splits; these runs are {protocol}")
    convention = _check("report", check_choice, "convention", d.get("convention", "standard"), CONVENTIONS)
    correction = _correction(d)
    return ReportSpec(
        metrics=metrics,
        convention=convention,
        no_relevant=_check("report", check_no_relevant, "no_relevant", d.get("no_relevant", 0.0)),
        target=target,
        baselines=baselines,
        test=test,
        correction=correction,
        resamples=_check("report", check_int, "resamples", d.get("resamples", 9999), 99),
        stats_seed=_check("report", check_seed, "stats_seed", d.get("stats_seed", 0)),
    )


def _correction(d: Mapping[str, Any]) -> str:
    """``report.correction`` (default Holm), or the earlier spelling ``holm = true | false``."""
    if "holm" in d:
        if "correction" in d:
            raise _fail("report", "correction and holm (its old true/false spelling) are both given")
        return "holm" if _check("report", check_bool, "holm", d["holm"]) else "none"
    return _check("report", check_choice, "correction", d.get("correction", DEFAULT_CORRECTION), CORRECTIONS)


def correction_override(correction: str | None) -> list[Override]:
    """``--correction`` as the typed override of ``report.correction`` (none when not given): the one
    form of the option, for a spec file (``ctxrank experiment``: :func:`load_spec`) and a stored spec
    (``ctxrank report``: ``ctxrank.experiments.evidence.spec_from_record``) alike."""
    return [] if correction is None else [("report.correction", correction)]


def _file_holm(d: dict[str, Any], overrides: Sequence[Override]) -> dict[str, Any]:
    """``d`` with its ``[report] holm = true | false`` (the old spelling) read as ``correction``, so
    that a correction given on the command line replaces the file's, as for a file that spells it
    ``correction``; unchanged when an override sets ``report.holm`` itself (or the value is no bool:
    :func:`_correction` names the error)."""
    report = d.get("report")
    if not isinstance(report, Mapping) or not isinstance(report.get("holm"), bool) or "correction" in report:
        return d
    if any(key == "report.holm" for key, _ in overrides):
        return d
    rest = {k: v for k, v in report.items() if k != "holm"}
    return {**d, "report": {**rest, "correction": _correction(report)}}


def _anomaly(d: Mapping[str, Any], models: list[str]) -> AnomalySpec:
    _known("analysis.anomaly", d, [f.name for f in dataclasses.fields(AnomalySpec)])
    pair = _check("analysis.anomaly", check_names, "models", d.get("models", ("qilcm", "dlcm")))
    if len(pair) != 2 or any(m not in models for m in pair):
        raise _fail("analysis.anomaly", f"models must name two of {models}, got {list(pair)}")
    return AnomalySpec(
        models=(pair[0], pair[1]),
        top=_check("analysis.anomaly", check_int, "top", d.get("top", 10)),
        buckets=_check("analysis.anomaly", check_int, "buckets", d.get("buckets", 5), 2),
        metrics=_check("analysis.anomaly", check_names, "metrics", d.get("metrics", ("ndcg@1", "ndcg@10"))),
        n_estimators=_check("analysis.anomaly", check_int, "n_estimators", d.get("n_estimators", 100)),
    )


def builtin_names() -> list[str]:
    """Names of the specifications shipped in ``ctxrank/experiments/configs``."""
    root = resources.files("ctxrank.experiments") / "configs"
    return sorted(p.name[: -len(".toml")] for p in root.iterdir() if p.name.endswith(".toml"))


def load_spec(name_or_path: str | Path, overrides: Sequence[Override | str] = ()) -> ExperimentSpec:
    """Read a specification from a TOML path or a built-in name, apply the overrides, validate.

    Overrides are typed ``(dotted key, value)`` pairs, or ``--set`` text: ``runs.count=3``,
    ``data.dataset=ohsumed``,
    ``models.qilcm.model_params.confusion_weight=0``.
    """
    path = Path(name_or_path)
    builtin = False
    if not path.suffix and not path.is_file():  # a directory of that name (e.g. its results) is no spec
        names = builtin_names()
        if str(name_or_path) not in names:
            raise ValueError(
                f"{name_or_path}: neither a TOML file nor a built-in experiment ({', '.join(names)})"
            )
        path = Path(str(resources.files("ctxrank.experiments") / "configs" / f"{name_or_path}.toml"))
        builtin = True
    d = load_toml(path)
    overrides = [parse_override(o) if isinstance(o, str) else o for o in overrides]
    _check_new_models(d, overrides, path)
    if not builtin:  # paths written in a spec file are relative to it
        d = _relative_to(d, path.parent)
    d = _file_holm(d, overrides)
    d = apply_overrides(d, overrides)  # a path given here is relative to the current directory
    # a built-in spec is named by its place in the package: the evidence names no path of this machine
    source = f"ctxrank/experiments/configs/{path.name}" if builtin else str(path)
    try:
        return ExperimentSpec.from_dict(d, base=Path.cwd(), source=source)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _relative_to(d: dict[str, Any], base: Path) -> dict[str, Any]:
    """``d`` with the relative paths written in it (``data.file``, a model's ``config``) made absolute
    against ``base``, the spec file's directory."""
    data = d.get("data")
    file = data.get("file") if isinstance(data, Mapping) else None
    if isinstance(file, str) and file and not Path(file).is_absolute():
        d = {**d, "data": {**data, "file": str((base / file).resolve())}}
    models = d.get("models")
    if isinstance(models, Mapping):
        fixed = {}
        for name, table in models.items():
            config = table.get("config") if isinstance(table, Mapping) else None
            if isinstance(config, str) and config and not Path(config).is_absolute():
                table = {**table, "config": str((base / config).resolve())}
            fixed[name] = table
        d = {**d, "models": fixed}
    return d


def err_max_label(spec: ExperimentSpec) -> int | None:
    """ERR's maximum grade for the spec's data: the registered dataset's label scale or the synthetic
    lists' ``max_label``, else None (then a report asking for ERR is an error naming ``max_label``)."""
    if spec.letor is not None:
        return spec.letor.max_label
    if not spec.data.dataset:
        return None

    return get_spec(spec.data.dataset).max_label
