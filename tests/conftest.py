"""Shared test fixtures: every test gets its own parse cache, never the user's, and the same global random
state; each test file runs in one worker of ``pytest -n`` (:func:`pytest_collection_modifyitems`)."""

import os
import random
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# the project's real data (absent in CI: tests that read it skip); CTXRANK_SHARED_DATA points elsewhere,
# e.g. from a git worktree whose parent directory is not the project's
SHARED_DATA = Path(os.environ.get("CTXRANK_SHARED_DATA") or REPO.parent / "shared" / "data")


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("CTXRANK_CACHE_DIR", str(tmp_path_factory.mktemp("ctxrank-cache")))


@pytest.fixture(autouse=True)
def _seeded_global_rngs():
    """Every test starts from the same global random state (Python's, and NumPy's and torch's once
    imported), whatever ran before it in its process: no result depends on the order of the tests or
    on the ``pytest -n`` worker that runs it."""
    random.seed(0)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(0)
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(0)


def make_ranking_data(n_queries=40, max_len=12, n_features=5, seed=0, min_len=1):
    """A small learnable dataset: labels 0-2 from a noisy linear function of the features."""
    import numpy as np

    from ctxrank.data.ranking_data import RankingData

    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_len, max_len + 1, size=n_queries)
    n = int(lengths.sum())
    x = rng.normal(size=(n, n_features)).astype(np.float32)
    w = np.linspace(1.0, -0.5, n_features)
    utility = x @ w + 0.3 * rng.normal(size=n)
    labels = np.digitize(utility, [0.5, 1.5]).astype(np.float32)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return RankingData(
        features=x,
        labels=labels,
        query_ids=np.array([f"q{i}" for i in range(n_queries)]),
        query_offsets=offsets,
        feature_names=tuple(f"f{i + 1}" for i in range(n_features)),
        source=f"synthetic(seed={seed})",
    )


def rows_sorted_by(data, column):
    """``data`` with the rows of every query sorted by feature ``column`` (ascending)."""
    import numpy as np

    rows = np.concatenate([
        data.query_slice(q).start + np.argsort(data.features[data.query_slice(q), column])
        for q in range(data.n_queries)
    ])  # fmt: skip
    return type(data)(**{**data.__dict__, "features": data.features[rows], "labels": data.labels[rows]})


#: test files that start a local Ray instance: run by one worker of ``pytest -n`` (one instance at a time)
RAY_FILES = ("experiments/test_executors.py", "e2e/test_docs_commands.py")


def pytest_collection_modifyitems(config, items):
    """Each test file runs whole, in its order, in one worker of ``make test``'s ``pytest -n 2 --dist
    loadgroup`` (the documented commands share workspaces; the Ray files share a group); tests marked
    ``gpu`` need CUDA: skipped (with the reason) on a machine without it."""
    for item in items:
        name = item.path.relative_to(Path(__file__).parent).as_posix()
        item.add_marker(pytest.mark.xdist_group("ray" if name in RAY_FILES else name))
    gpu = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False here)")
    for item in gpu:
        item.add_marker(skip)
