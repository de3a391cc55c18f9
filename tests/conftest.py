"""Shared test fixtures: every test gets its own parse cache, never the user's."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("CTXRANK_CACHE_DIR", str(tmp_path_factory.mktemp("ctxrank-cache")))
