"""docs/api.md is a notebook: its ```python blocks are executed in order, in one namespace."""

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def test_api_walkthrough_runs(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 5
    namespace: dict = {}
    for i, block in enumerate(blocks):
        exec(compile(block, f"docs/api.md block {i + 1}", "exec"), namespace)
    assert namespace["search"].best_score_ > 0
    assert (namespace["out"] / "training_curves.png").is_file()
