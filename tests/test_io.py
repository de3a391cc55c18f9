"""ctxrank._io: atomic writes keep the umask's mode; the JSON encoder is strict."""

from __future__ import annotations

import json
import math
import os
import stat

import numpy as np
import pytest

from ctxrank._io import atomic_write, dumps, write_json


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_atomic_write_gives_the_umask_mode(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        atomic_write(tmp_path / "f.txt", lambda tmp: tmp.write_text("x"))
        write_json(tmp_path / "f.json", {"a": 1})
        plain = tmp_path / "plain.txt"
        plain.write_text("x")  # what open() gives under this umask
    finally:
        os.umask(old)
    for name in ("f.txt", "f.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == mode == stat.S_IMODE(plain.stat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.json", "f.txt", "plain.txt"]  # no .tmp left


def test_atomic_write_failure_leaves_nothing(tmp_path):
    def fail(tmp):
        tmp.write_text("half")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        atomic_write(tmp_path / "f.txt", fail)
    assert list(tmp_path.iterdir()) == []


def test_dumps_is_strict_json():
    text = dumps({"nan": math.nan, "inf": -math.inf, "np": np.float32(0.5), "arr": np.array([1.0, np.nan]),
                  "tuple": (1, 2), "int": np.int64(3)})

    def refuse(name):
        raise AssertionError(f"non-standard JSON constant {name}")

    assert json.loads(text, parse_constant=refuse) == {
        "nan": None, "inf": None, "np": 0.5, "arr": [1.0, None], "tuple": [1, 2], "int": 3
    }
