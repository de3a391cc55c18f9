"""Dataset registry: specs, name lookup, fold composition (MQ2008 embedded, OHSUMED shared copy), layouts."""

from __future__ import annotations

import gzip
import hashlib
import re

import numpy as np
import pytest

from ctxrank.data import registry
from ctxrank.data.letor import read_letor
from ctxrank.data.registry import DATASETS, find_files, get_spec, load_fold, load_split
from tests.conftest import SHARED_DATA

# per-file sizes from src/ctxrank/datasets/mq2008/README.md: (queries, docs, uncompressed sha256)
MQ2008_FILES = {
    1: (157, 2933, "cbd42504549a2388f6c0aefdb506f22074225b574c7a5df10194174c9b00e4e0"),
    2: (157, 3635, "055ac792cb8f7d5a029090b8acbfb6c57323339d1371251bf2465ac182aa8605"),
    3: (157, 3062, "a03fe2b6e76479de60fecdb37d560a40a4e899b0cd685553d2da31ea205af1ab"),
    4: (157, 2707, "a239850bc6fe960ad08c2b7b0d99db90fe976dd93a15358e98036591b4e7a2ac"),
    5: (156, 2874, "c68c52feb1ecae7f17b64c8e2fda2098302681bbd4ea5fad8c73a1d32a1cf2b2"),
}
# fold tables of shared/data/README.md
MQ2008_FOLDS = {
    1: ([1, 2, 3], 4, 5),
    2: ([2, 3, 4], 5, 1),
    3: ([3, 4, 5], 1, 2),
    4: ([4, 5, 1], 2, 3),
    5: ([5, 1, 2], 3, 4),
}
OHSUMED_PARTS = {1: (22, 3383), 2: (21, 2570), 3: (21, 3076), 4: (21, 3573), 5: (21, 3538)}
OHSUMED_FOLDS = {
    1: ([2, 3, 4], 5, 1),
    2: ([3, 4, 5], 1, 2),
    3: ([4, 5, 1], 2, 3),
    4: ([5, 1, 2], 3, 4),
    5: ([1, 2, 3], 4, 5),
}
OHSUMED_DIR = SHARED_DATA / "ohsumed"
needs_ohsumed = pytest.mark.skipif(
    not (OHSUMED_DIR / "QueryLevelNorm").is_dir(),
    reason=f"shared OHSUMED copy not found at {OHSUMED_DIR} (only present in the development checkout)",
)


def _write(path, lines, gz=False):
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(line + "\n" for line in lines)
    if gz:
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    return path


def _query_lines(qid, labels, n_features=3):
    return [
        f"{y} qid:{qid} " + " ".join(f"{j}:{0.1 * (i + j)}" for j in range(1, n_features + 1))
        for i, y in enumerate(labels)
    ]


# ------------------------------------------------------------------------------------------ specs
@pytest.mark.parametrize("name", sorted(DATASETS))
def test_spec_invariants(name):
    spec = DATASETS[name]
    assert spec.name == name == name.lower()
    assert get_spec(name) is spec
    assert get_spec(name.upper()) is spec
    assert get_spec(spec.display_name) is spec
    for alias in spec.aliases:
        assert get_spec(alias.upper()) is spec
    assert spec.n_features > 0 and spec.label_levels == tuple(sorted(spec.label_levels))
    assert len(spec.fold_table()) == spec.n_folds
    assert spec.citation and spec.homepage.startswith("http")
    if spec.sha256 is not None:  # only digests with a stated source are recorded
        assert re.fullmatch(r"[0-9a-f]{64}", spec.sha256)
        assert spec.url is not None and "pytorchltr" in spec.sha256_source
    if spec.url is None:
        assert spec.sha256 is None


def test_registry_contents():
    expected = {
        "mq2007": (46, (0, 1, 2), 5),
        "mq2008": (46, (0, 1, 2), 5),
        "ohsumed": (45, (0, 1, 2), 5),
        "mslr-web10k": (136, (0, 1, 2, 3, 4), 5),
        "mslr-web30k": (136, (0, 1, 2, 3, 4), 5),
        "istella-s": (220, (0, 1, 2, 3, 4), 1),
        "yahoo-set1": (700, (0, 1, 2, 3, 4), 1),
        "airline": (17, (0, 1), 1),
        # the real choice datasets (embedded; folds = random splits by decision maker)
        "modecanada": (7, (0, 1), 5),
        "swissmetro": (10, (0, 1), 5),
        "car": (12, (0, 1), 5),
        "electricity": (6, (0, 1), 5),
    }
    got = {k: (s.n_features, s.label_levels, s.n_folds) for k, s in DATASETS.items()}
    assert got == expected


@pytest.mark.parametrize(
    "alias, key",
    [
        ("web30k", "mslr-web30k"),
        ("MSLR-WEB30K", "mslr-web30k"),
        ("mslr-web10k", "mslr-web10k"),
        ("Web10K", "mslr-web10k"),
        ("MQ2008", "mq2008"),
        ("yahoo", "yahoo-set1"),
        ("Istella-S", "istella-s"),
        ("Airline Itinerary", "airline"),
        ("airline-itinerary", "airline"),
    ],
)
def test_aliases(alias, key):
    assert get_spec(alias).name == key


def test_unknown_name_lists_valid_names():
    with pytest.raises(ValueError, match="unknown dataset 'nope'") as exc:
        get_spec("nope")
    for name in DATASETS:
        assert name in str(exc.value)
    with pytest.raises(ValueError, match="known datasets"):
        load_fold("mq2009")


def test_bad_fold_split_variant():
    with pytest.raises(ValueError, match=r"folds 1\.\.5, got fold 6"):
        load_fold("mq2008", 6)
    with pytest.raises(ValueError, match="fold must be an integer"):
        load_fold("mq2008", "x")
    with pytest.raises(ValueError, match="single published split"):
        find_files("istella-s", 2)
    with pytest.raises(ValueError, match="unknown split"):
        load_split("mq2008", "dev")
    with pytest.raises(ValueError, match="no variants"):
        load_fold("mq2008", variant="Feature-min")
    with pytest.raises(ValueError, match="unknown variant"):
        find_files("ohsumed", 1, root=OHSUMED_DIR, variant="raw")


def test_airline_itinerary_entry_says_what_is_known_and_what_is_not(tmp_path):
    """QILCM paper (AAAI 2019), footnote 5 and Table 1: public, 33,951 queries, 17 features, binary."""
    spec = get_spec("airline")
    assert spec.homepage == "https://www.dropbox.com/s/qzyt0xwn4u2a1ed/data_full_anonym.zip"
    assert spec.url is None and spec.sha256 is None  # a share link, not a verified direct download
    assert spec.archive_name == "data_full_anonym.zip" and spec.layout == "unknown"
    assert "33,951 queries" in spec.size and "Mottini" in spec.citation and "AAAI 2019" in spec.citation
    for known in ("33,951", "17 features", "60/20/20", "P@1"):
        assert known in spec.notes
    assert spec.fold_table() == [(1, "unknown file layout (no loader)", "-", "-")]
    (tmp_path / "airline").mkdir()
    for call in (
        lambda: find_files("airline", root=tmp_path),
        lambda: load_fold("airline-itinerary", root=tmp_path),
        lambda: load_split("airline", "test", root=tmp_path),
    ):
        with pytest.raises(ValueError, match="Airline Itinerary cannot be loaded by ctxrank") as exc:
            call()
        assert "no loader" in str(exc.value) and "columns" in str(exc.value)
    assert registry.is_available("airline", root=tmp_path) is False
    with pytest.raises(ValueError, match="no direct download address is recorded for Airline Itinerary"):
        from ctxrank.data.download import download_dataset

        download_dataset("airline", root=tmp_path, progress=False)
    with pytest.raises(ValueError, match="single published split"):
        find_files("airline", 2)


def test_null_fill_passes_through_the_loaders(tmp_path):
    """OHSUMED Feature-null partitions (NULL tokens): load_fold / load_split hand null_fill to read_letor."""
    base = tmp_path / "ohsumed" / "Feature-null"
    for k in range(1, 6):  # query k: f1 NULL on the first item, f1 = 2 and 5 on the others
        lines = [
            f"{y} qid:{k} 1:{v} " + " ".join(f"{j}:-{j}" for j in range(2, 46))
            for y, v in ((1, "NULL"), (0, "2"), (2, "5"))
        ]
        _write(base / f"Fold{k}_test.txt", lines)
    default = load_fold("ohsumed", 1, root=tmp_path, variant="Feature-null")
    assert default.test.features[0, 0] == 2  # query_min
    letor = load_fold("ohsumed", 1, root=tmp_path, variant="Feature-null", null_fill="letor_min")
    assert letor.test.features[0, 0] == 0 and letor.train.info["null_filled"] == 3  # P2+P3+P4
    split = load_split("ohsumed", "all", root=tmp_path, variant="Feature-null", null_fill=-1.0)
    assert (split.features[:, 0] == -1).sum() == 5


# ---------------------------------------------------------------------------------- MQ2008 embedded
def test_embedded_mq2008_checksums():
    for k, (_, _, sha) in MQ2008_FILES.items():
        with gzip.open(registry.embedded_dir() / f"S{k}.txt.gz", "rb") as fh:
            assert hashlib.sha256(fh.read()).hexdigest() == sha, f"S{k}"
    readme = (registry.embedded_dir() / "README.md").read_text()
    assert "arXiv:1306.2597" in readme and "meta-toolkit/meta" in readme


@pytest.mark.parametrize("fold", [1, 2, 3, 4, 5])
def test_mq2008_fold_composition(fold):
    train, valid, test = MQ2008_FOLDS[fold]
    files = find_files("mq2008", fold)
    assert [p.name for p in files["train"]] == [f"S{i}.txt.gz" for i in train]
    assert [p.name for p in files["valid"]] == [f"S{valid}.txt.gz"]
    assert [p.name for p in files["test"]] == [f"S{test}.txt.gz"]

    f = load_fold("mq2008", fold)
    assert f.fold == fold and f.dataset == "mq2008"
    assert f.train.n_queries == sum(MQ2008_FILES[i][0] for i in train)
    assert f.train.n_items == sum(MQ2008_FILES[i][1] for i in train)
    assert (f.valid.n_queries, f.valid.n_items) == MQ2008_FILES[valid][:2]
    assert (f.test.n_queries, f.test.n_items) == MQ2008_FILES[test][:2]
    assert f.train.n_features == f.valid.n_features == f.test.n_features == 46
    ids = [set(f.train.query_ids), set(f.valid.query_ids), set(f.test.query_ids)]
    assert not (ids[0] & ids[1]) and not (ids[0] & ids[2]) and not (ids[1] & ids[2])
    assert sum(len(s) for s in ids) == 784
    assert f.train.source == f"MQ2008 Fold{fold} train (" + "+".join(f"S{i}" for i in train) + ")"
    # the train split is the S-files in table order: its first query is the first query of S(train[0])
    first = read_letor(files["train"][0])
    assert f.train.query_ids[0] == first.query_ids[0]


def test_mq2008_whole_dataset_and_split_aliases():
    data = load_split("mq2008", "all")
    assert (data.n_queries, data.n_items, data.n_features) == (784, 15211, 46)
    assert data.queries_without_relevant() == 220
    assert data.label_histogram() == {0.0: 12279, 1.0: 2001, 2.0: 931}
    vali = load_split("MQ2008", "vali", 2)
    assert (vali.n_queries, vali.n_items) == MQ2008_FILES[5][:2]
    fold = load_fold("mq2008", 1)
    whole = fold.split("all")
    assert whole.n_items == 15211
    np.testing.assert_array_equal(whole.labels, data.labels)


def test_mq2008_root_overrides_embedded(tmp_path):
    with pytest.raises(ValueError) as exc:
        load_fold("mq2008", root=tmp_path)
    msg = str(exc.value)
    assert str(tmp_path) in msg and "S1.txt..S5.txt" in msg and "embedded" in msg


# ------------------------------------------------------------------------------------ OHSUMED
@needs_ohsumed
@pytest.mark.parametrize("variant, suffix", [("QueryLevelNorm", "test"), ("Feature-min", "testset")])
@pytest.mark.parametrize("root", [SHARED_DATA, OHSUMED_DIR])
def test_ohsumed_partition_folds(variant, suffix, root):
    for fold, (train, valid, test) in OHSUMED_FOLDS.items():
        files = find_files("ohsumed", fold, root=root, variant=variant)
        assert [p.name for p in files["train"]] == [f"Fold{i}_{suffix}.txt.gz" for i in train]
        assert [p.name for p in files["valid"]] == [f"Fold{valid}_{suffix}.txt.gz"]
        assert [p.name for p in files["test"]] == [f"Fold{test}_{suffix}.txt.gz"]
        assert all(p.parent.name == variant for s in files.values() for p in s)


@needs_ohsumed
def test_ohsumed_variant_directory_as_root():
    files = find_files("ohsumed", 2, root=OHSUMED_DIR / "Feature-min", variant="Feature-min")
    assert files["test"][0].name == "Fold2_testset.txt.gz"
    with pytest.raises(ValueError, match="OHSUMED fold 1 not found"):  # not the other variant's files
        find_files("ohsumed", 1, root=OHSUMED_DIR / "QueryLevelNorm", variant="Feature-min")


@needs_ohsumed
def test_ohsumed_load_fold_sizes():
    totals = []
    for fold, (train, valid, test) in OHSUMED_FOLDS.items():
        f = load_fold("ohsumed", fold, root=SHARED_DATA)
        assert f.variant == "QueryLevelNorm"
        assert f.train.n_queries == sum(OHSUMED_PARTS[i][0] for i in train)
        assert f.train.n_items == sum(OHSUMED_PARTS[i][1] for i in train)
        assert (f.valid.n_queries, f.valid.n_items) == OHSUMED_PARTS[valid]
        assert (f.test.n_queries, f.test.n_items) == OHSUMED_PARTS[test]
        assert f.test.n_features == 45
        totals.append(f.split("all").n_items)
    assert totals == [16140] * 5
    whole = load_split("ohsumed", "all", root=OHSUMED_DIR, variant="feature-min")
    assert (whole.n_queries, whole.n_items) == (106, 16140)
    assert whole.queries_without_relevant() == 1


# ------------------------------------------------------------------------- layouts on tiny files
def test_letor3_fold_directories(tmp_path):
    base = tmp_path / "OHSUMED" / "Feature-min" / "Fold3"
    _write(base / "trainingset.txt", _query_lines(1, [0, 1, 2], 45) + _query_lines(2, [1, 0], 45))
    _write(base / "validationset.txt", _query_lines(3, [0, 2], 45))
    _write(base / "testset.txt.gz", _query_lines(4, [2, 0, 0, 1], 45), gz=True)
    f = load_fold("ohsumed", 3, root=tmp_path, variant="feature-min")
    assert (f.train.n_queries, f.valid.n_queries, f.test.n_items) == (2, 1, 4)
    assert f.train.n_features == 45  # fixed to the dataset's feature count
    with pytest.raises(ValueError, match="OHSUMED fold 1 not found"):
        load_fold("ohsumed", 1, root=tmp_path, variant="Feature-min")


def test_folds_layout_with_env_root(tmp_path, monkeypatch):
    base = tmp_path / "mslr-web10k" / "Fold2"
    _write(base / "train.txt", _query_lines(1, [0, 4, 3], 136))
    _write(base / "vali.txt", _query_lines(2, [1, 0], 136))
    _write(base / "test.txt", _query_lines(3, [2, 2, 0], 136))
    monkeypatch.setenv("CTXRANK_DATA", str(tmp_path))
    assert registry.dataset_root("web10k") == tmp_path / "mslr-web10k"
    f = load_fold("MSLR-WEB10K", 2)
    assert f.train.n_features == 136 and f.train.label_histogram() == {0.0: 1, 3.0: 1, 4.0: 1}
    assert f.test.source == "MSLR-WEB10K Fold2 test (test)"
    # an explicit root pointing at the parent or at the dataset directory both work
    assert load_fold("web10k", 2, root=tmp_path / "mslr-web10k").valid.n_items == 2
    assert load_fold("web10k", 2, root=tmp_path).valid.n_items == 2
    assert registry.is_available("web10k") is False  # fold 1 is missing


def test_single_layout(tmp_path):
    _write(tmp_path / "ltrc_yahoo" / "set1.train.txt", _query_lines(1, [0, 4]))
    _write(tmp_path / "ltrc_yahoo" / "set1.valid.txt", _query_lines(2, [1, 0]))
    _write(tmp_path / "ltrc_yahoo" / "set1.test.txt", _query_lines(3, [2, 1]))
    f = load_fold("yahoo", root=tmp_path)
    assert f.train.n_features == 700 and f.test.source == "Yahoo! LTR set 1 test (set1.test)"
    assert registry.is_available("yahoo-set1", root=tmp_path)


def test_rotation_fallback_to_fold_directories(tmp_path):
    for s in ("train", "vali", "test"):
        _write(tmp_path / "MQ2007" / "Fold4" / f"{s}.txt", _query_lines(s, [0, 1, 2], 46))
    files = find_files("mq2007", 4, root=tmp_path)
    assert [p.parent.name for s in files.values() for p in s] == ["Fold4"] * 3


def test_rotation_s_files_in_archive_directory(tmp_path):
    for k in range(1, 6):
        _write(tmp_path / "MQ2007" / f"S{k}.txt", _query_lines(k, [0, k % 3], 46))
    f = load_fold("mq2007", 3, root=tmp_path)
    assert list(f.train.query_ids) == ["3", "4", "5"]
    assert list(f.valid.query_ids) == ["1"] and list(f.test.query_ids) == ["2"]


@pytest.mark.parametrize(
    "name, hint",
    [
        ("mslr-web30k", "ctxrank datasets download mslr-web30k"),
        ("istella-s", "ctxrank datasets download istella-s"),
        ("yahoo-set1", "webscope"),
        ("mq2007", "unrar"),
        ("ohsumed", "Fold1_test.txt"),
    ],
)
def test_missing_files_message(tmp_path, name, hint):
    with pytest.raises(ValueError) as exc:
        load_fold(name, root=tmp_path)
    msg = str(exc.value)
    assert "not found: looked in" in msg and str(tmp_path) in msg
    assert hint.lower() in msg.lower()
    assert "--data-root" in msg
