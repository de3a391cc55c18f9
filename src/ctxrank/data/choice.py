"""Real discrete-choice datasets as ranking data: one choice situation = one query, its available
alternatives = the items, the chosen alternative = label 1 (the others 0).

Four classic public datasets ship inside the package (``ctxrank/datasets/choice``, citations and
sha256 in its README.md; the digest of each file is checked every time it is read):

========== =========================================== ======= =============================================
name       situations (decision makers)                items   layout of the published file
========== =========================================== ======= =============================================
modecanada 4,324 trips (one traveller each)            2-4     long, one row per (case, mode)
swissmetro 10,719 answers of 1,192 respondents (9 each) 2-3     wide, availability flags ``*_AV``
car        4,654 respondents (one answer each)          6       wide, categorical type / fuel per vehicle
electricity 4,308 situations of 361 customers (<= 12)   4       long, one row per (situation, contract)
========== =========================================== ======= =============================================

Every loader builds the same long table (:func:`choice_frame`): ``situation`` (the query id),
``person`` (the decision maker: the group id, ``RankingData.group_ids``), ``alt`` (the alternative's
label, also the docid and the first categorical column, so a model can learn alternative-specific
constants), ``chosen`` (0/1), then the numeric features and the other categorical columns
(:data:`LAYOUTS` names them per dataset). Id columns (row numbers, respondent ids, survey codes) are
never features. Unavailable alternatives are dropped (SwissMetro's ``*_AV = 0``; ModeCanada's file
holds only the available modes); situations whose choice is unknown (SwissMetro ``CHOICE = 0``, 9
answers) are dropped and counted in ``info["dropped_situations"]``.

:func:`load_choice` returns the whole dataset; ``ctxrank.data.registry.load_fold(name, k)`` gives fold
``k`` = a random 60/20/20 split *by decision maker* drawn from seed ``k - 1``
(:func:`ctxrank.data.split.split_queries` with ``by_group=True``), the categorical vocabulary re-fitted
on the training split.

Order of alternatives: rows keep the published order inside each situation (ModeCanada: train, car,
bus, air; SwissMetro: train, Swissmetro, car; Car and Electricity: card positions 1..6 / 1..4). A model
that reads the order (DCM, DLCM) can learn it; :func:`sorted_feature_columns` finds columns the rows
are sorted by, and :func:`shuffle_within_queries` removes the order (``train.shuffle_items``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ctxrank._io import sha256_file
from ctxrank.data.categorical import CategoricalEncoder
from ctxrank.data.paths import missing_file_error
from ctxrank.data.ranking_data import RankingData

if TYPE_CHECKING:  # pandas is imported when a dataset is read, not with the registry
    import pandas as pd

__all__ = [
    "LAYOUTS",
    "ChoiceLayout",
    "check_sha256",
    "choice_dir",
    "choice_frame",
    "frame_to_ranking",
    "load_choice",
    "shuffle_within_queries",
    "sorted_feature_columns",
]


@dataclass(frozen=True)
class ChoiceLayout:
    """How one dataset's long table maps onto ranking data.

    Attributes:
        file: the file name inside the dataset directory.
        sha256: its digest (checked on every read).
        numeric: numeric feature columns, in order.
        categorical: categorical columns (``alt`` first).
        ids: id columns of the published file that are not features (documentation and tests).
    """

    file: str
    sha256: str
    numeric: tuple[str, ...]
    categorical: tuple[str, ...]
    ids: tuple[str, ...]


SWISS_PERSON = ("FIRST", "LUGGAGE", "AGE", "MALE", "INCOME", "GA")
CAR_ATTRS = ("price", "range", "acc", "speed", "pollution", "size", "space", "cost", "station")

LAYOUTS: dict[str, ChoiceLayout] = {
    "modecanada": ChoiceLayout(
        file="ModeCanada.csv.gz",
        sha256="8097d95e8a86d4b5f03c114b34383efef020046f1350749e52027e44589015e8",
        numeric=("cost", "ivt", "ovt", "freq", "dist", "income", "urban"),
        categorical=("alt",),
        ids=("(row number)", "case", "noalt"),
    ),
    "swissmetro": ChoiceLayout(
        file="swissmetro.csv.gz",
        sha256="bd54e4e431a0cbee89a66a0fad9eb2b2783f7e70ac11f0a2e83d2e42fe24191c",
        numeric=("tt", "cost", "headway", "seats", *SWISS_PERSON),
        categorical=("alt", "PURPOSE", "TICKET", "WHO", "ORIGIN", "DEST"),
        ids=("GROUP", "SURVEY", "SP", "ID", "CHOICE"),
    ),
    "car": ChoiceLayout(
        file="car.csv.gz",
        sha256="cbdab01357dab84e19f70c2761a6b6421f73bde530987007a4dbdfb642f0a554",
        numeric=(*CAR_ATTRS, "college", "hsg2", "coml5"),
        categorical=("alt", "type", "fuel"),
        ids=("rownames", "choice"),
    ),
    "electricity": ChoiceLayout(
        file="electricity.csv.gz",
        sha256="3ee7da1c82fe7e732d652b9927c83c56dafd6bcfaa5f5082fafd9cb85eeec994",
        numeric=("pf", "cl", "loc", "wk", "tod", "seas"),
        categorical=("alt",),
        ids=("id", "chid", "choice"),
    ),
}


def choice_dir() -> Path:
    """The directory of the choice datasets shipped inside the package."""
    return Path(str(resources.files("ctxrank").joinpath("datasets", "choice")))


def _layout(name: str) -> ChoiceLayout:
    try:
        return LAYOUTS[name]
    except KeyError:
        raise ValueError(f"unknown choice dataset {name!r}; known: {', '.join(LAYOUTS)}") from None


def check_sha256(path: str | os.PathLike, expected: str) -> None:
    """Raise ValueError when the file's sha256 is not ``expected`` (a damaged or substituted copy)."""
    digest = sha256_file(path)
    if digest != expected:
        raise ValueError(
            f"{path}: sha256 {digest} does not match the registry's {expected}; the file is damaged or "
            "not the published one (see ctxrank/datasets/choice/README.md)"
        )


# ------------------------------------------------------------------------------ per-dataset tables
def _modecanada(raw: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd

    df = pd.DataFrame({"situation": raw["case"].astype(str), "person": raw["case"].astype(str)})
    df["alt"] = raw["alt"].astype(str)
    df["chosen"] = raw["choice"].astype(int)
    for c in LAYOUTS["modecanada"].numeric:
        df[c] = raw[c].astype(float)
    return df


_SWISS_ALTS = (  # label, CHOICE code, availability, time, cost, headway
    ("train", 1, "TRAIN_AV", "TRAIN_TT", "TRAIN_CO", "TRAIN_HE"),
    ("swissmetro", 2, "SM_AV", "SM_TT", "SM_CO", "SM_HE"),
    ("car", 3, "CAR_AV", "CAR_TT", "CAR_CO", None),
)


def _swissmetro(raw: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd

    raw = raw.reset_index(drop=True)
    parts = []
    for k, (label, code, av, tt, co, he) in enumerate(_SWISS_ALTS):
        part = pd.DataFrame({"situation": raw.index.astype(str), "person": raw["ID"].astype(str)})
        part["alt"], part["chosen"] = label, (raw["CHOICE"] == code).astype(int)
        part["_av"], part["_k"] = raw[av], k
        part["tt"], part["cost"] = raw[tt].astype(float), raw[co].astype(float)
        part["headway"] = raw[he].astype(float) if he else 0.0
        part["seats"] = raw["SM_SEATS"].astype(float) if label == "swissmetro" else 0.0
        for c in (*SWISS_PERSON, "PURPOSE", "TICKET", "WHO", "ORIGIN", "DEST"):
            part[c] = raw[c] if c in SWISS_PERSON else raw[c].astype(str)
        part["_row"] = raw.index
        parts.append(part)
    df = pd.concat(parts).sort_values(["_row", "_k"], kind="stable")
    df = df[(df["_av"] == 1) & (raw.loc[df["_row"], "CHOICE"].to_numpy() != 0)]
    df = df.drop(columns=["_av", "_k", "_row"]).reset_index(drop=True)
    df.attrs["dropped_situations"] = int((raw["CHOICE"] == 0).sum())  # the choice is unknown
    return df


def _car(raw: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd

    raw = raw.reset_index(drop=True)
    chosen = raw["choice"].str.removeprefix("choice").astype(int)
    parts = []
    for k in range(1, 7):
        part = pd.DataFrame({"situation": raw["rownames"].astype(str), "person": raw["rownames"].astype(str)})
        part["alt"], part["chosen"], part["_row"] = str(k), (chosen == k).astype(int), raw.index
        for c in CAR_ATTRS:
            part[c] = raw[f"{c}{k}"].astype(float)
        for c in ("college", "hsg2", "coml5"):
            part[c] = raw[c].astype(float)
        part["type"], part["fuel"] = raw[f"type{k}"].astype(str), raw[f"fuel{k}"].astype(str)
        parts.append(part)
    df = pd.concat(parts).sort_values(["_row", "alt"], kind="stable")
    return df.drop(columns=["_row"]).reset_index(drop=True)


def _electricity(raw: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd

    df = pd.DataFrame({"situation": raw["chid"].astype(str), "person": raw["id"].astype(str)})
    df["alt"] = raw["alt"].astype(str)
    df["chosen"] = raw["choice"].astype(str).str.upper().eq("TRUE").astype(int)
    for c in LAYOUTS["electricity"].numeric:
        df[c] = raw[c].astype(float)
    return df


_BUILDERS = {"modecanada": _modecanada, "swissmetro": _swissmetro, "car": _car, "electricity": _electricity}


def choice_frame(name: str, root: str | os.PathLike | None = None) -> pd.DataFrame:
    """The long table of a choice dataset: ``situation, person, alt, chosen``, numeric, categorical.

    ``root``: a directory holding the published file (default: the copy inside the package). The file's
    sha256 is checked first. Rows of a situation are contiguous, in the published order.
    """
    layout = _layout(name)
    path = (Path(root) if root is not None else choice_dir()) / layout.file
    if not path.is_file():
        missing = missing_file_error(path)
        raise ValueError(f"{missing} (the {name} choice data; see ctxrank/datasets/choice)")
    check_sha256(path, layout.sha256)
    import pandas as pd

    df = _BUILDERS[name](pd.read_csv(path))
    cols = ["situation", "person", "chosen", *layout.numeric, *layout.categorical]
    out = df[cols].reset_index(drop=True)
    out.attrs["dropped_situations"] = df.attrs.get("dropped_situations", 0)
    return out


def frame_to_ranking(
    df: pd.DataFrame, numeric: tuple[str, ...], categorical: tuple[str, ...], source: str
) -> RankingData:
    """A long choice table (contiguous situations) -> RankingData with group ids, docids = ``alt``
    and categorical codes (vocabulary fitted on ``df``; re-fit on a training split with
    ``ctxrank.data.table.refit_categorical``)."""
    sit = df["situation"].to_numpy(dtype=object)
    starts = np.flatnonzero(np.r_[True, sit[1:] != sit[:-1]])
    if len(np.unique(sit[starts])) != starts.size:
        raise ValueError(f"{source}: the rows of a situation must be contiguous")
    offsets = np.r_[starts, len(df)].astype(np.int64)
    info: dict = {"missing_filled": 0, "regrouped": 0}
    codes, names, cards = None, (), ()
    if categorical:
        enc = CategoricalEncoder().fit({c: df[c] for c in categorical})
        codes = enc.transform({c: df[c] for c in categorical})
        names, cards = enc.columns_, enc.cardinalities_
        info.update(categorical_unknown=0, categorical_missing=0, categorical_encoder=enc.to_dict())
    return RankingData(
        features=df[list(numeric)].to_numpy(dtype=np.float32),
        labels=df["chosen"].to_numpy(dtype=np.float32),
        query_ids=sit[starts].astype(str),
        query_offsets=offsets,
        docids=df["alt"].astype(str).to_numpy() if "alt" in df else None,
        categorical=codes,
        feature_names=tuple(numeric),
        categorical_names=tuple(names),
        categorical_cardinalities=tuple(cards),
        source=source,
        info=info,
        group_ids=df["person"].to_numpy(dtype=object)[starts].astype(str),
    )


def load_choice(name: str, root: str | os.PathLike | None = None) -> RankingData:
    """The whole choice dataset ``name`` (see the module docstring) as RankingData."""
    layout = _layout(name)
    df = choice_frame(name, root)
    data = frame_to_ranking(df, layout.numeric, layout.categorical, source=f"{name} (choice)")
    data.info["dropped_situations"] = df.attrs["dropped_situations"]
    return data


# ------------------------------------------------------------------------------ order of the rows
def sorted_feature_columns(data: RankingData, min_queries: int = 10) -> list[str]:
    """Names of the feature columns whose values are sorted (ascending or descending) inside every
    query with at least 3 items that are not all equal (and at least ``min_queries`` such queries):
    the displayed order then carries that feature, which an order-reading model (DCM, DLCM) learns."""
    lengths = data.query_lengths
    found = []
    same_query = np.diff(data.query_index) == 0  # (N - 1,) row i and row i + 1 share a query
    starts = data.query_offsets[:-1]
    for j in range(data.n_features):
        x = data.features[:, j].astype(np.float64)
        d = np.diff(x)
        falls = np.add.reduceat(np.r_[same_query & (d < 0), False], starts)  # breaks of ascending
        rises = np.add.reduceat(np.r_[same_query & (d > 0), False], starts)  # breaks of descending
        spread = np.maximum.reduceat(x, starts) > np.minimum.reduceat(x, starts)
        judged = (lengths >= 3) & spread
        if judged.sum() < min_queries:
            continue
        if np.all(falls[judged] == 0) or np.all(rises[judged] == 0):
            found.append(data.feature_names[j] if data.feature_names else f"f{j + 1}")
    return found


def shuffle_within_queries(data: RankingData, seed: int) -> RankingData:
    """The same queries with each query's rows in a random order (``numpy.random.default_rng(seed)``),
    queries in place: removes whatever the displayed order says."""
    rng = np.random.default_rng(seed)
    keys = rng.random(data.n_items) + data.query_index  # sorts within each query only
    rows = np.argsort(keys, kind="stable")
    return replace(data, features=data.features[rows], **data.row_fields(rows))
