"""docs/api.md is a notebook: its ```python blocks are executed in order, in one namespace; so is the
README's Python quick start."""

import re
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "api.md"


def test_api_walkthrough_runs(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 5
    namespace: dict = {}
    one_list = 0
    for i, block in enumerate(blocks):
        exec(compile(block, f"docs/api.md block {i + 1}", "exec"), namespace)
        if "model.predict(X[one]" in block:  # the DataFrame example scores one session's rows as one list
            ns, one_list = namespace, one_list + 1
            scores = ns["model"].predict(ns["X"][ns["one"]], qid=ns["sessions"].session[ns["one"]])
            assert len(set(np.round(scores, 6))) == int(ns["one"].sum()) > 1  # a score per row, not one
    assert one_list == 1
    assert namespace["search"].best_score_ > 0
    assert (namespace["out"] / "training_curves.png").is_file()


def test_readme_python_quick_start_runs(monkeypatch, tmp_path):
    """The README's ten lines, at one epoch instead of its 20 (the only change), in a fresh directory."""
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), flags=re.S)
    assert len(blocks) == 1, "the README has one Python block: its quick start"
    code = blocks[0]
    assert len(code.strip().splitlines()) <= 10 and code.count("max_epochs=20") == 1
    namespace: dict = {}
    exec(compile(code.replace("max_epochs=20", "max_epochs=1"), "README.md python", "exec"), namespace)
    assert len(namespace["scores"]) == namespace["test"].n_items
    assert (tmp_path / "runs" / "qilcm-api" / "ctxrank.json").is_file()
