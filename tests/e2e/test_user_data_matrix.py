"""Every entrance x every kind of user data x every model family x every way out, on tiny data.

The matrix is generated from four registries, so a new entry joins it by construction:

* model families, from ``ctxrank.registry.MODELS``: a neural model belongs to the family of the most
  basic registered class it derives from (``listnet`` -> ``mlp``, ``qilcm-variant2`` -> ``qilcm``), a
  baseline to the first registered name of its class (``adarank-ndcg`` -> ``adarank-map``); one
  representative a family is trained, plus the re-ranking pipeline (LambdaMART's top k re-ranked by
  QILCM);
* ``DATA_KINDS``: what a user's data looks like (a LETOR file; CSV and Parquet tables with named
  columns; missing cells; categorical columns; rows not grouped by query; ids with odd characters,
  with spaces, duplicate docids);
* ``ENTRANCES``: how the data comes in (``ctxrank train``, an estimator given NumPy arrays, an
  estimator given a DataFrame, an experiment spec);
* ``WAYS_OUT``: what the user does next (predict, evaluate, a TREC run, ONNX and TorchScript export,
  serving over HTTP, tracking).

A model is trained once per (entrance, data kind, family) (one epoch, ``train.threads = 1``), cached for
the module, and every way out runs on it. Each cell either works, checked against something
independent (scores finite, one per row in the input's row order, invariant to the order of the
queries' rows in the file; ONNX / TorchScript / the server equal to ``predict`` within the documented
tolerance; the TREC run parses back to the data's ids; evaluate equal to the metrics of the predicted
scores; the same data through two entrances gives the same scores), or refuses in one line (a
``ValueError`` / ``ctxrank: error:`` with exit status 2) whose fragment ``REFUSALS`` lists: a cell that
starts refusing, or stops refusing, fails. ``KNOWN_BROKEN`` lists the cells that fail today because of
known defects (strict expected failures: delete an entry when its fix lands).

The ways out that export or serve run on a covering subset (``_runs_everywhere``): every family on the
base data (CSV) and every data kind on the anchor families (LambdaMART, the MLP, QILCM, the
re-ranker), through every entrance, so every pair of axes is crossed while the module stays fast.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from ctxrank.cli import main
from ctxrank.config import train_keys_read
from ctxrank.registry import MODELS, Baseline

pytestmark = pytest.mark.filterwarnings("ignore")

# ----------------------------------------------------------------------------------------- families


def _family(name: str) -> str:
    """The registry name of ``name``'s family (see the module docstring)."""
    entry = MODELS[name]
    if isinstance(entry, Baseline):
        return next(n for n, e in MODELS.items() if isinstance(e, Baseline) and e.cls is entry.cls)
    registered = {e.cls: n for n, e in MODELS.items() if not isinstance(e, Baseline)}
    return next(registered[cls] for cls in reversed(entry.cls.__mro__) if cls in registered)


FAMILIES: dict[str, list[str]] = {}
for _name in MODELS:
    FAMILIES.setdefault(_family(_name), []).append(_name)


@dataclass(frozen=True)
class Trainee:
    """What is trained: a registry model, or a re-ranker of an initial ranker's top ``top_k``."""

    model: str
    initial: str = ""
    top_k: int = 5

    @property
    def is_baseline(self) -> bool:
        return isinstance(MODELS[self.model], Baseline) and not self.initial

    def reads(self, key: str) -> bool:
        """The run config's ``train.<key>`` is read by this model."""
        keys = train_keys_read(self.model)
        return keys is None or key in keys


#: narrow layers, for speed only (a family without an entry trains with its defaults)
SMALL: dict[str, dict[str, Any]] = {
    "dlcm": {"encoder_widths": [8, 8], "gru_hidden": 8},
    "arsm": {"hidden": [8], "n_levels": 5},
    "dcm": {"hidden": 8, "embed": 8},
    "mlp": {"hidden": [8]},
    "dasalc": {"hidden": [8], "attention_layers": 2, "head_size": 4},
    "gsf": {"hidden": [8]},
    "attn": {"d_fc": 8, "heads": 2, "d_ff": 8, "blocks": 2},
    "setrank": {"d_model": 8, "heads": 2, "d_ff": 8, "blocks": 2},
    "qilcm": {"encoder_width": 8, "att_hidden": [8], "rank_hidden": [8]},
}
RERANKER = "qilcm"  # the papers' protocol: QILCM re-ranks LambdaMART's top k
TRAINEES: dict[str, Trainee] = {family: Trainee(family) for family in FAMILIES}
TRAINEES["rerank"] = Trainee(RERANKER, initial="lambdamart")
#: the anchor families every data kind and entrance is crossed with for the costly ways out
ANCHORS = ("lambdamart", "mlp", "qilcm", "rerank")


def test_every_registered_model_has_a_family_in_the_matrix():
    assert sorted(n for names in FAMILIES.values() for n in names) == sorted(MODELS)
    assert set(FAMILIES) <= set(TRAINEES) and set(ANCHORS) <= set(TRAINEES)
    assert _family("listnet") == "mlp" and _family("qilcm-variant3") == "qilcm"
    assert _family("adarank-ndcg") == "adarank-map"


# ---------------------------------------------------------------------------------------- data kinds
N_QUERIES = 20
#: the feature columns in the model's order (``--numeric``); the file holds them in FILE_ORDER, so a
#: column taken by position instead of by name shows; a LETOR file has no names (f1..f4, in this order)
FEATURES = ("price", "duration", "stops", "hour")
FILE_ORDER = ("stops", "price", "hour", "duration")
LETOR_FEATURES = ("f1", "f2", "f3", "f4")
CATEGORIES = {"airline": ("AF", "BA", "LH"), "cabin": ("eco", "biz")}


def _base_frame(seed: int = 0) -> pd.DataFrame:
    """20 queries of 5-8 items: ids ``q00``..., docids ``d0-0``..., labels 0-2 from the features and
    two categorical columns (read as features only by the kinds that name them)."""
    rng = np.random.default_rng(seed)
    parts = []
    for q in range(N_QUERIES):
        n = int(rng.integers(5, 9))
        x = rng.normal(size=(n, len(FEATURES)))
        cats = {c: rng.choice(values, n) for c, values in CATEGORIES.items()}
        utility = x @ [-1.0, 0.5, -0.3, 0.0] + (cats["airline"] == "LH") + 0.3 * rng.normal(size=n)
        part = pd.DataFrame(x, columns=list(FEATURES))
        part.insert(0, "label", np.digitize(utility, [0.0, 1.0]))
        part.insert(0, "docid", [f"d{q}-{i}" for i in range(n)])
        part.insert(0, "qid", f"q{q:02d}")
        parts.append(part.assign(**cats))
    return pd.concat(parts, ignore_index=True)


def _numbered_ids(frame: pd.DataFrame) -> pd.DataFrame:
    """LETOR query ids are numbers: ``q07`` -> ``8``."""
    codes = {q: str(i + 1) for i, q in enumerate(pd.unique(frame["qid"]))}
    return frame.assign(qid=frame["qid"].map(codes))


def _with_missing(frame: pd.DataFrame) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    out = frame.copy()
    for column in FEATURES[1:3]:
        out.loc[rng.random(len(out)) < 0.15, column] = np.nan
    return out


def _shuffled(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.iloc[np.random.default_rng(2).permutation(len(frame))].reset_index(drop=True)


ODD = ("ünï-cødé✓", "a,b", 'say"hi"', "007", "x" * 300, "back\\slash/;|")


def _odd_ids(frame: pd.DataFrame) -> pd.DataFrame:
    """Query ids and docids with unicode, commas, quotes, leading zeros, 300 characters, punctuation."""
    queries = {q: f"{ODD[i % len(ODD)]}{i:02d}" for i, q in enumerate(pd.unique(frame["qid"]))}
    docs = [f"{ODD[i % len(ODD)]}-{d}" for i, d in enumerate(frame["docid"])]
    return frame.assign(qid=frame["qid"].map(queries), docid=docs)


def _ids_with_spaces(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.assign(qid="query " + frame["qid"], docid="doc " + frame["docid"])


def _duplicate_docids(frame: pd.DataFrame) -> pd.DataFrame:
    """The first two items of every query share a docid."""
    docids = frame["docid"].copy()
    first = frame.groupby("qid").head(2).index
    docids[first] = frame.loc[first, "qid"] + "-dup"
    return frame.assign(docid=docids)


@dataclass(frozen=True)
class DataKind:
    """A kind of user data: the frame it holds and the file it is written as."""

    make: Callable[[pd.DataFrame], pd.DataFrame] = lambda f: f
    suffix: str = ".csv"
    categorical: tuple[str, ...] = ()
    #: neural models train with ``train.missing = "indicator"`` (their documented way to read NaN)
    indicator: bool = False
    #: every family trains on it through the command line (False: the anchor families only, for kinds
    #: about the file or the ids rather than the values a model reads)
    every_family: bool = True

    @property
    def is_table(self) -> bool:
        return self.suffix != ".txt"

    @property
    def columns(self) -> list[str]:
        return ["qid", "docid", "label", *FILE_ORDER, *self.categorical]

    @property
    def features(self) -> tuple[str, ...]:
        """The feature columns of the frame read from the file, in the model's order."""
        return FEATURES if self.is_table else LETOR_FEATURES


DATA_KINDS: dict[str, DataKind] = {
    "letor": DataKind(_numbered_ids, suffix=".txt"),
    "csv": DataKind(),
    "parquet": DataKind(suffix=".parquet", every_family=False),
    "missing": DataKind(_with_missing),
    "missing-indicator": DataKind(_with_missing, indicator=True),
    "categorical": DataKind(categorical=tuple(CATEGORIES)),
    "shuffled": DataKind(_shuffled),
    "odd-ids": DataKind(_odd_ids, every_family=False),
    "ids-with-spaces": DataKind(_ids_with_spaces, every_family=False),
    "duplicate-docids": DataKind(_duplicate_docids, every_family=False),
}
BASE_KIND = "csv"


def _write_letor(frame: pd.DataFrame, path: Path) -> None:
    names = FEATURES if FEATURES[0] in frame else LETOR_FEATURES  # generated, or read back from LETOR
    lines = [
        f"{row.label} qid:{row.qid} "
        + " ".join(f"{j}:{getattr(row, f)!r}" for j, f in enumerate(names, 1))
        + f" # docid = {row.docid}"
        for row in frame.itertuples()
    ]
    path.write_text("\n".join(lines) + "\n")


def _write(kind: DataKind, frame: pd.DataFrame, path: Path) -> Path:
    if kind.suffix == ".txt":
        _write_letor(frame, path)
    elif kind.suffix == ".parquet":
        frame.to_parquet(path, index=False)
    else:
        frame.to_csv(path, index=False)
    return path


def _read_user_frame(kind: DataKind, path: Path) -> pd.DataFrame:
    """The frame as a user gets it from the file: pandas for a table (ids as text), ctxrank's LETOR
    reader for a LETOR file (``RankingData.to_frame``)."""
    if kind.suffix == ".txt":
        from ctxrank.data.letor import read_letor

        return read_letor(path, cache=False).to_frame()
    if kind.suffix == ".parquet":
        return pd.read_parquet(path)
    return pd.read_csv(path, dtype={"qid": str, "docid": str}, keep_default_na=True)


def _within_query_permutation(frame: pd.DataFrame, contiguous: bool) -> np.ndarray:
    """A permutation of the rows that moves the queries around (``contiguous``: whole queries, as a
    LETOR file must keep them; else their rows interleaved) and keeps each query's rows in their order,
    so every model, those that read row order included, must give each row the same score."""
    rng = np.random.default_rng(5)
    qid = frame["qid"].to_numpy()
    if contiguous:
        rank = pd.Series(rng.random(len(pd.unique(qid))), index=pd.unique(qid))
        return np.lexsort((np.arange(len(qid)), pd.Series(qid).map(rank).to_numpy()))
    keys = pd.Series(rng.random(len(qid))).groupby(qid).transform(lambda s: np.sort(s.to_numpy()))
    return np.argsort(keys.to_numpy(), kind="stable")


# ------------------------------------------------------------------------------------------ outcomes
class Refused(Exception):
    """The product refused the cell: a one-line message."""


@dataclass
class Cell:
    entrance: str
    kind: str
    trainee: str
    way: str

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.entrance, self.kind, self.trainee, self.way)


def _matches(pattern: tuple, key: tuple) -> bool:
    return all(
        p == "*" or k == p or (isinstance(p, frozenset) and k in p) for p, k in zip(pattern, key, strict=True)
    )


BASELINES = frozenset(t for t, tr in TRAINEES.items() if tr.is_baseline)
NEURAL = frozenset(TRAINEES) - BASELINES - {"rerank"}
ESTIMATORS = frozenset({"numpy", "frame"})
TABLES = frozenset(k for k, kind in DATA_KINDS.items() if kind.is_table)
FILE_WAYS = frozenset({"trec", "onnx", "torchscript", "serve"})

#: (entrance, data kind, trainee, way) -> fragment of the one-line refusal; "*" = any, a frozenset = one
#: of; way "train" is training itself. The first matching row wins.
#: the baselines that read NaN / categorical columns themselves (LightGBM's LambdaMART), from the registry
READ_NAN = frozenset(t for t in BASELINES if MODELS[TRAINEES[t].model].traits.reads_missing)
READ_CATEGORICAL = frozenset(t for t in BASELINES if MODELS[TRAINEES[t].model].traits.reads_categorical)

REFUSALS: list[tuple[tuple, str]] = [
    # NaN is read by LambdaMART (LightGBM) and by a neural model with train.missing = "indicator" only
    (("*", frozenset({"missing"}), NEURAL | {"rerank"}, "train"), r"NaN|missing"),
    (("*", frozenset({"missing", "missing-indicator"}), BASELINES - READ_NAN, "train"), r"NaN|missing"),
    # RankSVM and AdaRank read no categorical columns (LambdaMART does, natively); they say so
    (("*", "categorical", BASELINES - READ_CATEGORICAL, "train"), r"categorical"),
    # baselines are not torch models: LambdaMART's model.txt is LightGBM's own serving format
    (("*", "*", BASELINES, frozenset({"onnx", "torchscript"})), r"baseline"),
    # TorchScript cannot hold LightGBM's trees: the re-ranking pipeline exports to ONNX only
    (("*", "*", "rerank", "torchscript"), r"ONNX|onnx"),
    # a TREC run is whitespace-separated: ids with whitespace, and a docid twice in a query, cannot be written
    (("*", "ids-with-spaces", "*", "trec"), r"whitespace|space"),
    (("*", "duplicate-docids", "*", "trec"), r"duplicate|twice|more than once"),
]

#: cells that fail today because of known defects (strict: each must fail). Delete an entry with its
#: fix; the first matching row gives the reason.
KNOWN_BROKEN: list[tuple[tuple, str]] = []  # none today


def _refusal(cell: Cell) -> str | None:
    return next((fragment for pattern, fragment in REFUSALS if _matches(pattern, cell.key)), None)


def _known_broken(cell: Cell) -> str | None:
    return next((reason for pattern, reason in KNOWN_BROKEN if _matches(pattern, cell.key)), None)


def _one_line(message: str) -> str:
    message = message.strip()
    assert message and "\n" not in message, f"a refusal must be one line, got {message!r}"
    return message


# ------------------------------------------------------------------------------------------ running
@dataclass
class Trained:
    """A model trained through one entrance on one data kind (or the refusal of training it)."""

    entrance: str
    kind: str
    trainee: str
    path: Path  # the data file
    frame: pd.DataFrame  # what the user holds (read from the file)
    workdir: Path
    refused: str | None = None
    model_dir: Path | None = None
    estimator: Any = None
    experiment: Path | None = None
    cache: dict[str, Any] = field(default_factory=dict)


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def _cli_ok(*argv: str) -> str:
    """stdout of a command that works; Refused with its one-line error for exit status 2."""
    rc, out, err = _cli(*argv)
    if rc == 2:
        lines = [line for line in err.splitlines() if line.startswith("ctxrank: error:")]
        assert len(lines) == 1, f"exit 2 without one error line: {err!r}"
        assert "Traceback" not in err, err
        raise Refused(_one_line(lines[0]))
    assert rc == 0, f"{argv}: exit {rc}: {err[-2000:]}"
    return out


def _table_options(kind: DataKind, *, labels: bool = True) -> list[str]:
    if not kind.is_table:
        return []
    out = ["--query-col", "qid", "--docid-col", "docid", "--numeric", ",".join(kind.features)]
    if labels:
        out += ["--label-col", "label"]
    if kind.categorical:
        out += ["--categorical", ",".join(kind.categorical)]
    return out


def _run_options(trainee: Trainee, kind: DataKind) -> dict[str, Any]:
    """train.* settings of the run: one epoch where epochs are read, one thread, the seed, and
    ``missing = "indicator"`` for the kinds that ask it of neural models."""
    out: dict[str, Any] = {"seed": 0, "threads": 1}
    if trainee.reads("max_epochs"):
        out["max_epochs"] = 1
    if kind.indicator and not trainee.is_baseline and trainee.reads("missing"):
        out["missing"] = "indicator"
    return out


def _cli_sets(trainee: Trainee, kind: DataKind) -> list[str]:
    train = [f"train.{k}={v}" for k, v in _run_options(trainee, kind).items() if k not in ("seed", "threads")]
    params = [f"model_params.{k}={json.dumps(v)}" for k, v in SMALL.get(trainee.model, {}).items()]
    return [a for kv in (*train, *params) for a in ("--set", kv)]


def _train_cli(t: Trained, trainee: Trainee, kind: DataKind) -> None:
    out = t.workdir / "model"
    sets = _cli_sets(trainee, kind)
    rerank = ["--initial", trainee.initial, "--top-k", str(trainee.top_k)] if trainee.initial else []
    _cli_ok(
        "train", "--model", trainee.model, *rerank, "--train", t.path, "--valid", t.path,
        *_table_options(kind), "--out", out, "--seed", "0", "--threads", "1", "--no-progress", *sets,
    )  # fmt: skip
    t.model_dir = out


def _estimator(trainee: Trainee, kind: DataKind) -> Any:
    from ctxrank import api

    def one(tr: Trainee, cls: Any = None) -> Any:
        params = {**_run_options(tr, kind), **SMALL.get(tr.model, {})}
        entry = MODELS[tr.model]
        seed, threads = params.pop("seed"), params.pop("threads")
        if not isinstance(entry, Baseline) or entry.seed:  # the estimators' names of train.seed / threads
            params["random_state"] = seed
        if not isinstance(entry, Baseline) or entry.threads:
            params["threads"] = threads
        return cls(**params) if cls is not None else api.Ranker(model=tr.model, **params)

    if trainee.initial:
        assert trainee.initial == "lambdamart", "RerankPipeline's initial ranker is a LambdaMARTRanker"
        return api.RerankPipeline(
            initial=one(Trainee(trainee.initial), api.LambdaMARTRanker),
            reranker=one(Trainee(trainee.model)),
            top_k=trainee.top_k,
        )
    return one(trainee)


def _estimator_inputs(entrance: str, kind: DataKind, frame: pd.DataFrame) -> tuple[Any, Any, Any]:
    """``X, y, qid`` as the entrance passes them: a DataFrame of the feature columns (categories as
    text), or a NumPy float array."""
    X = frame[[*kind.features, *kind.categorical]]
    if entrance == "numpy":
        return X.to_numpy(dtype=np.float64), frame["label"].to_numpy(), frame["qid"].to_numpy()
    return X, frame["label"], frame["qid"]


def _call(f: Callable[[], Any]) -> Any:
    """``f()``, its ValueError a refusal."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return f()
    except ValueError as exc:
        raise Refused(_one_line(str(exc))) from None


def _train_estimator(t: Trained, trainee: Trainee, kind: DataKind) -> None:
    X, y, qid = _estimator_inputs(t.entrance, kind, t.frame)
    est = _estimator(trainee, kind)
    _call(lambda: est.fit(X, y, qid=qid))
    t.estimator = est


def _spec_text(t: Trained, trainee: Trainee, kind: DataKind, models: dict[str, Trainee]) -> str:
    data = [f"file = {json.dumps(str(t.path))}"]
    if kind.is_table:
        data += ['query_col = "qid"', 'label_col = "label"', f"numeric = {json.dumps(list(kind.features))}"]
        if kind.categorical:
            data.append(f"categorical = {json.dumps(list(kind.categorical))}")
    tables = []
    for name, tr in models.items():
        train = ", ".join(
            f"{k} = {json.dumps(v)}" for k, v in _run_options(tr, kind).items() if k != "threads"
        )
        rerank = f'\nrerank = {{ initial = "{tr.initial}", top_k = {tr.top_k} }}' if tr.initial else ""
        small = ", ".join(f"{k} = {json.dumps(v)}" for k, v in SMALL.get(tr.model, {}).items())
        tables.append(
            f'[models.{json.dumps(name)}]\nmodel = "{tr.model}"\ntrain = {{ {train} }}\n'
            f"model_params = {{ {small} }}{rerank}\n"
        )
    return (
        f'name = "matrix"\n[data]\n{chr(10).join(data)}\n[runs]\ncount = 1\nthreads = 1\n'
        f'[report]\nmetrics = ["ndcg@10", "map"]\ntarget = {json.dumps(next(iter(models)))}\n\n'
        + "\n".join(tables)
    )


def _train_spec(t: Trained, trainee: Trainee, kind: DataKind, track: str = "") -> Path:
    spec = t.workdir / ("track.toml" if track else "spec.toml")
    # a report compares two models: the trainee twice (the same run config under a second name)
    spec.write_text(_spec_text(t, trainee, kind, {t.trainee: trainee, f"{t.trainee}-again": trainee}))
    out = t.workdir / ("experiment-tracked" if track else "experiment")
    _cli_ok("experiment", spec, "--out", out, "--no-progress", *(["--track", track] if track else []))
    return out


ENTRANCES: dict[str, Callable[[Trained, Trainee, DataKind], None]] = {
    "cli": _train_cli,
    "numpy": _train_estimator,
    "frame": _train_estimator,
    "spec": lambda t, trainee, kind: setattr(t, "experiment", _train_spec(t, trainee, kind)),
}


def _applies(entrance: str, kind: DataKind) -> str | None:
    """Why an entrance cannot take a data kind at all (None: it can)."""
    if entrance == "numpy" and kind.categorical:
        return "a NumPy float array holds no categories"
    return None


_TRAINED: dict[tuple[str, str, str], Trained] = {}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("matrix")
    base = _base_frame()
    files = {}
    for name, kind in DATA_KINDS.items():
        frame = kind.make(base)[DataKind(categorical=kind.categorical).columns]
        files[name] = _write(kind, frame, root / f"{name}{kind.suffix}")
    yield root, files
    _TRAINED.clear()


def _trained(workspace, entrance: str, kind_name: str, trainee_name: str) -> Trained:
    """The model of (entrance, kind, trainee), trained on first use and cached for the module."""
    key = (entrance, kind_name, trainee_name)
    if key not in _TRAINED:
        root, files = workspace
        kind = DATA_KINDS[kind_name]
        workdir = root / "-".join(key)
        workdir.mkdir()
        t = Trained(
            entrance,
            kind_name,
            trainee_name,
            files[kind_name],
            _read_user_frame(kind, files[kind_name]),
            workdir,
        )
        try:
            ENTRANCES[entrance](t, TRAINEES[trainee_name], kind)
        except Refused as exc:
            t.refused = str(exc)
        _TRAINED[key] = t
    return _TRAINED[key]


# ------------------------------------------------------------------------------------------ ways out
def _model_dir(t: Trained) -> Path:
    """The model directory of a CLI run or a saved estimator."""
    if t.model_dir is None:
        path = t.workdir / "saved"
        _call(lambda: t.estimator.save(path))
        t.model_dir = path
    return t.model_dir


def _predict_file(t: Trained, path: Path, kind: DataKind, fmt: str = "scores") -> Path:
    """``ctxrank predict`` of ``path`` with the model directory (a model saved without a table spec,
    from NumPy arrays, is told the columns)."""
    model = _model_dir(t)
    out = t.workdir / f"predict-{len(list(t.workdir.glob('predict-*')))}.{fmt}"
    meta = json.loads((model / "ctxrank.json").read_text())
    columns = [] if meta.get("table") else _table_options(kind, labels=False)
    if meta.get("table") and kind.is_table:
        columns = ["--docid-col", "docid"]  # the user's item ids, for the TREC run (never a feature)
    _cli_ok(
        "predict",
        "--model",
        model,
        "--data",
        path,
        *columns,
        "--output",
        out,
        "--format",
        fmt,
        "--threads",
        "1",
    )
    return out


def _scores(t: Trained, frame: pd.DataFrame, path: Path) -> np.ndarray:
    """The entrance's own scores of the rows of ``frame`` (written as ``path``), in their order."""
    kind = DATA_KINDS[t.kind]
    if t.estimator is not None:
        X, _, qid = _estimator_inputs(t.entrance, kind, frame)
        return np.asarray(_call(lambda: t.estimator.predict(X, qid=qid)), dtype=np.float64)
    return np.loadtxt(_predict_file(t, path, kind), dtype=np.float64, ndmin=1)


def _reference_scores(t: Trained) -> np.ndarray:
    if "scores" not in t.cache:
        scores = _scores(t, t.frame, t.path)
        assert scores.shape == (len(t.frame),), f"{len(scores)} scores for {len(t.frame)} rows"
        assert np.isfinite(scores).all()
        t.cache["scores"] = scores
    return t.cache["scores"]


def _close(got: np.ndarray, want: np.ndarray, what: str, rel: float = 1e-4) -> None:
    """Equal within ``rel * (1 + max |want|)`` (the export check's tolerance, docs/export.md)."""
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    tol = rel * (1.0 + float(np.abs(want).max()))
    worst = float(np.abs(got - want).max())
    assert worst <= tol, f"{what}: differs from predict by {worst:.3g} (tolerance {tol:.3g})"


def way_predict(t: Trained) -> None:
    """One finite score a row in the input's row order: moving the queries around in the file (each
    query's rows kept in their order) moves the scores with them."""
    scores = _reference_scores(t)
    kind = DATA_KINDS[t.kind]
    perm = _within_query_permutation(t.frame, contiguous=not kind.is_table)
    moved = t.frame.iloc[perm].reset_index(drop=True)
    path = _write(kind, moved, t.workdir / f"moved{kind.suffix}")
    _close(_scores(t, _read_user_frame(kind, path), path), scores[perm], "scores of the reordered file")


def _evaluate_json(*argv: str) -> dict[str, Any]:
    return json.loads(_cli_ok("evaluate", *argv, "--metrics", "ndcg@10,map", "--json"))


def way_evaluate(t: Trained) -> None:
    """The entrance's evaluation equals ``ctxrank evaluate --scores`` of its own predicted scores
    (written in the file's row order) against the file's labels."""
    kind = DATA_KINDS[t.kind]
    if t.experiment is not None:
        run = json.loads((t.experiment / "runs" / t.trainee / "seed0-fold0.json").read_text())
        ids = [str(q) for q in run["query_ids"]]
        assert ids and set(ids) <= set(t.frame["qid"].astype(str)), "the run's query ids are not the data's"
        assert set(run["metrics"]) == {"ndcg@10", "map"}
        for values in run["metrics"].values():
            assert len(values) == len(ids) and np.isfinite(values).all()
        return
    scores = t.workdir / "scores.txt"
    np.savetxt(scores, _reference_scores(t))
    columns = ["--query-col", "qid", "--label-col", "label"] if kind.is_table else []
    want = _evaluate_json("--scores", scores, "--data", t.path, *columns)["metrics"]
    if t.estimator is not None:
        X, y, qid = _estimator_inputs(t.entrance, kind, t.frame)
        got = {m: _call(lambda m=m: t.estimator.score(X, y, qid=qid, metric=m)) for m in want}
    else:
        got = _evaluate_json("--model", t.model_dir, "--data", t.path)["metrics"]
    assert got == pytest.approx(want, abs=1e-6)


def way_trec(t: Trained) -> None:
    """``ctxrank predict --format trec`` parses back: six fields a line, the data's (qid, docid) pairs
    once each, ranks 1.. by score, the scores those of predict."""
    kind = DATA_KINDS[t.kind]
    lines = _predict_file(t, t.path, kind, fmt="trec").read_text(encoding="utf-8").splitlines()
    fields = [line.split() for line in lines]
    assert all(len(f) == 6 for f in fields), "a TREC line has six whitespace-separated fields"
    got = {(f[0], f[2]): float(f[4]) for f in fields}
    pairs = list(zip(t.frame["qid"].astype(str), t.frame["docid"].astype(str), strict=True))
    assert len(fields) == len(pairs) and set(got) == set(pairs), "the run's ids are not the data's"
    scores = _reference_scores(t)
    _close(np.array([got[p] for p in pairs]), scores, "TREC scores", rel=1e-5)
    for q in {f[0] for f in fields}:
        mine = [f for f in fields if f[0] == q]
        assert [int(f[3]) for f in mine] == list(range(1, len(mine) + 1))
        assert [float(f[4]) for f in mine] == sorted((float(f[4]) for f in mine), reverse=True)


def _codes(vocab: dict[str, list[str]], names: tuple[str, ...], frame: pd.DataFrame) -> np.ndarray | None:
    if not names:
        return None
    return np.stack(
        [
            frame[c].map({v: i + 1 for i, v in enumerate(vocab[c])}).fillna(0).to_numpy(np.int64)
            for c in names
        ],
        axis=1,
    )


def _export(t: Trained, fmt: str) -> Path:
    from ctxrank.export import export_model

    path = t.workdir / f"model.{fmt}"
    if t.entrance == "cli":
        _cli_ok("export", "--model", _model_dir(t), "--format", fmt, "--out", path)
    else:
        _call(lambda: export_model(_model_dir(t), fmt, path))
    return path


def way_onnx(t: Trained) -> None:
    """The exported ONNX graph, run by onnxruntime, scores the file's rows as predict does."""
    from ctxrank.serving.onnx_ranker import OnnxRanker

    ranker = OnnxRanker(_export(t, "onnx"))
    X = t.frame[list(DATA_KINDS[t.kind].features)].to_numpy(np.float32)
    codes = _codes(ranker.categorical_vocab, ranker.categorical_names, t.frame)
    got = _call(lambda: ranker.predict(X, t.frame["qid"].to_numpy(), codes))
    _close(got, _reference_scores(t), "ONNX scores")


def way_torchscript(t: Trained) -> None:
    """The TorchScript file, on padded lists, scores the file's rows as predict does."""
    import torch

    from ctxrank.serving.padding import pad_rows, unpad_scores

    extra = {"ctxrank.json": ""}
    module = torch.jit.load(str(_export(t, "torchscript")), _extra_files=extra)
    info = json.loads(extra["ctxrank.json"])
    names = tuple(info.get("categorical_names") or ())
    codes = _codes(info.get("categorical_vocab") or {}, names, t.frame)
    lists = pad_rows(
        t.frame[list(DATA_KINDS[t.kind].features)].to_numpy(np.float32), t.frame["qid"].to_numpy(), codes
    )
    inputs = [torch.from_numpy(lists.features), torch.from_numpy(lists.mask)]
    if names:
        inputs.append(torch.from_numpy(lists.categorical))
    with torch.no_grad():
        got = unpad_scores(module(*inputs).numpy(), lists.rows)
    _close(got, _reference_scores(t), "TorchScript scores")


def way_serve(t: Trained) -> None:
    """``ctxrank serve`` of the model directory (in process, FastAPI's test client): the rows posted by
    name (missing cells as null, categories as text) get predict's scores."""
    from fastapi.testclient import TestClient

    from ctxrank.serving.server import ServeOptions, create_app, load_ranker

    kind = DATA_KINDS[t.kind]
    ranker = _call(lambda: load_ranker(_model_dir(t)))
    columns = [*kind.features, *kind.categorical]
    values = [
        [None if isinstance(v, float) and np.isnan(v) else v for v in row]
        for row in t.frame[columns].astype(object).itertuples(index=False)
    ]
    # by name where the model's feature names are the file's (not a model fitted on a NumPy array), else
    # by position
    by_name = tuple(ranker.feature_names) == kind.features
    rows = [dict(zip(columns, row, strict=True)) for row in values] if by_name else values
    with TestClient(create_app(ranker, ServeOptions(log_level="error"))) as client:
        answer = client.post("/rank", json={"qid": t.frame["qid"].astype(str).tolist(), "rows": rows})
    if answer.status_code == 422:
        raise Refused(_one_line(answer.json()["error"]))
    assert answer.status_code == 200, answer.text
    _close(np.array(answer.json()["scores"]), _reference_scores(t), "served scores", rel=1e-5)


def way_track(t: Trained) -> None:
    """The same training logged to TensorBoard: event files with the epochs' metrics."""
    trainee, kind = TRAINEES[t.trainee], DATA_KINDS[t.kind]
    logs = t.workdir / "tb"
    track = f"tensorboard:{logs}"
    if t.entrance == "spec":
        _train_spec(t, trainee, kind, track=track)
    elif t.entrance == "cli":
        again = Trained(**{**t.__dict__, "workdir": t.workdir / "tracked", "cache": {}})
        again.workdir.mkdir()
        _cli_ok(
            "train", "--model", trainee.model,
            *(["--initial", trainee.initial, "--top-k", str(trainee.top_k)] if trainee.initial else []),
            "--train", t.path, "--valid", t.path, *_table_options(kind), "--out", again.workdir / "model",
            "--seed", "0", "--threads", "1", "--no-progress", "--track", track,
            *_cli_sets(trainee, kind),
        )  # fmt: skip
    else:
        X, y, qid = _estimator_inputs(t.entrance, kind, t.frame)
        _call(lambda: _estimator(trainee, kind).fit(X, y, qid=qid, tracking=track))
    events = list(logs.rglob("events.out.tfevents.*"))
    assert events and all(e.stat().st_size > 0 for e in events), f"no event file under {logs}"


WAYS_OUT: dict[str, Callable[[Trained], None]] = {
    "predict": way_predict,
    "evaluate": way_evaluate,
    "trec": way_trec,
    "onnx": way_onnx,
    "torchscript": way_torchscript,
    "serve": way_serve,
    "track": way_track,
}
#: what an experiment gives back: its report of every run (no model directory)
SPEC_WAYS = ("evaluate", "track")
COSTLY_WAYS = frozenset({"onnx", "torchscript", "serve", "track"})


def _trains(entrance: str, kind: str, trainee: str) -> bool:
    """The trainings of the covering subset: every family on every data kind through the command line,
    every entrance on every data kind for the anchor families (and the baselines, which train fast),
    every entrance and family on the base data."""
    if trainee in ANCHORS or kind == BASE_KIND:
        return True
    # every family through the command line; the baselines (fast) through every entrance
    return DATA_KINDS[kind].every_family and (entrance == "cli" or trainee in BASELINES)


def _runs_everywhere(entrance: str, kind: str, trainee: str, way: str) -> bool:
    """The covering subset: the costly ways out on the base data for every family, and on every data
    kind for the anchor families."""
    if not _trains(entrance, kind, trainee):
        return False
    if way == "track":  # what is logged does not depend on the data's kind
        return kind == BASE_KIND
    return way not in COSTLY_WAYS or kind == BASE_KIND or trainee in ANCHORS


def _cells() -> list[Any]:
    params = []
    for entrance in ENTRANCES:
        for kind_name, kind in DATA_KINDS.items():
            if _applies(entrance, kind):
                continue
            for trainee in TRAINEES:
                ways = SPEC_WAYS if entrance == "spec" else tuple(WAYS_OUT)
                for way in ("train", *ways):
                    if not _runs_everywhere(entrance, kind_name, trainee, way):
                        continue
                    cell = Cell(entrance, kind_name, trainee, way)
                    marks = []
                    reason = _known_broken(cell)
                    if reason:
                        marks.append(pytest.mark.xfail(strict=True, reason=reason))
                    params.append(pytest.param(cell, id="/".join(cell.key), marks=marks))
    return params


@pytest.mark.parametrize("cell", _cells())
def test_cell(cell: Cell, workspace):
    """The cell works (its way out's checks pass) or refuses with its fragment of ``REFUSALS``."""
    t = _trained(workspace, cell.entrance, cell.kind, cell.trainee)
    expected = _refusal(cell)
    train_refusal = _refusal(Cell(cell.entrance, cell.kind, cell.trainee, "train"))
    if cell.way != "train" and (t.refused or train_refusal):
        if t.refused and train_refusal and re.search(train_refusal, t.refused):
            pytest.skip(f"training refuses as expected: {t.refused}")
        pytest.fail(f"training: expected refusal {train_refusal!r}, got {t.refused!r}")
    try:
        if cell.way == "train":
            if t.refused:
                raise Refused(t.refused)
        else:
            WAYS_OUT[cell.way](t)
    except Refused as exc:
        message = str(exc)
        assert expected is not None, f"refused: {message}"
        assert re.search(expected, message), (
            f"refused with {message!r}, expected a refusal matching {expected!r}"
        )
        return
    assert expected is None, f"worked, but the matrix expects a refusal matching {expected!r}"


# -------------------------------------------------------------------------------- same data, same model
def _marked(key: tuple[str, str, str, str]) -> Any:
    reason = _known_broken(Cell(*key))
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(key[1], key[2], id=f"{key[1]}/{key[2]}", marks=marks)


@pytest.mark.parametrize(
    ("kind", "trainee"),
    [
        _marked(("two-entrances", k, t, "same-model"))
        for k in DATA_KINDS
        for t in TRAINEES
        if _trains("numpy", k, t)
    ],
)
def test_the_same_data_through_two_entrances_gives_the_same_model(workspace, kind, trainee):
    """``ctxrank train`` on the file and the estimators on the arrays / the DataFrame read from it, with
    the same seed: the same scores for every row."""
    made = [
        _trained(workspace, e, kind, trainee)
        for e in ("cli", "frame", "numpy")
        if not _applies(e, DATA_KINDS[kind])
    ]
    worked = [t for t in made if not t.refused]
    if len(worked) < 2:
        pytest.skip(f"fewer than two entrances train it: {[t.refused for t in made]}")
    first = _reference_scores(worked[0])
    for other in worked[1:]:
        _close(_reference_scores(other), first, f"{other.entrance} vs {worked[0].entrance}", rel=1e-5)


def _orderless(trainee: str) -> bool:
    entry = MODELS[TRAINEES[trainee].model]
    return isinstance(entry, Baseline) or not entry.traits.reads_order


@pytest.mark.parametrize(
    ("kind", "trainee"), [_marked(("cli", BASE_KIND, t, "row-order")) for t in TRAINEES if _orderless(t)]
)
def test_an_orderless_model_gives_an_item_the_same_score_wherever_it_is_in_its_list(workspace, kind, trainee):
    """A model that reads no row order (``reads_order`` False, every baseline): reversing the rows of
    every query in the file moves each row's score with it."""
    t = _trained(workspace, "cli", kind, trainee)
    assert t.refused is None, t.refused
    order = np.lexsort((-np.arange(len(t.frame)), pd.factorize(t.frame["qid"])[0]))
    reversed_rows = t.frame.iloc[order].reset_index(drop=True)
    path = _write(DATA_KINDS[kind], reversed_rows, t.workdir / f"reversed{DATA_KINDS[kind].suffix}")
    _close(_scores(t, reversed_rows, path), _reference_scores(t)[order], "scores of the reversed lists")


@pytest.mark.parametrize(
    ("kind", "trainee"), [_marked(("two-entrances", BASE_KIND, t, "same-split")) for t in ANCHORS]
)
def test_an_experiment_and_train_data_split_and_train_alike(workspace, kind, trainee):
    """An experiment's run (seed 0, one random split of the file) and ``ctxrank train --data FILE --seed
    0``: the same test queries and the same per-query metrics."""
    spec = _trained(workspace, "spec", kind, trainee)
    assert spec.refused is None, spec.refused
    tr, data_kind = TRAINEES[trainee], DATA_KINDS[kind]
    out = spec.workdir / "train-data"
    rerank = ["--initial", tr.initial, "--top-k", str(tr.top_k)] if tr.initial else []
    _cli_ok(
        "train", "--model", tr.model, *rerank, "--data", spec.path, *_table_options(data_kind), "--out", out,
        "--seed", "0", "--threads", "1", "--no-progress", *_cli_sets(tr, data_kind),
    )  # fmt: skip
    cli = json.loads((out / "test_metrics.json").read_text())
    run = json.loads((spec.experiment / "runs" / trainee / "seed0-fold0.json").read_text())
    assert [str(q) for q in run["query_ids"]] == [str(q) for q in cli["query_ids"]]
    for metric in ("ndcg@10", "map"):
        assert run["metrics"][metric] == pytest.approx(cli["per_query"][metric], abs=1e-6), metric
