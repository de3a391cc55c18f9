"""ctxrank._io: atomic writes keep the umask's mode; the JSON encoder is strict."""

from __future__ import annotations

import errno
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


def _replacing_writer(tmp):
    """What ``safetensors.torch.save_file`` does: write another private file and rename it over ``tmp``."""
    other = tmp.with_name(tmp.name + ".own")
    fd = os.open(other, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"weights")
    os.close(fd)
    os.replace(other, tmp)


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600)])
def test_a_writer_that_replaces_the_temporary_file_still_gives_the_umask_mode(tmp_path, umask, mode):
    import safetensors.torch
    import torch

    old = os.umask(umask)
    try:
        atomic_write(tmp_path / "own.bin", _replacing_writer)
        weights = {"x": torch.ones(2)}
        atomic_write(tmp_path / "w.safetensors", lambda t: safetensors.torch.save_file(weights, t))
    finally:
        os.umask(old)
    for name in ("own.bin", "w.safetensors"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == mode, name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["own.bin", "w.safetensors"]


# ------------------------------------------------------------------------------ failed writes
def _fail_with(code):
    def fail(*_args, **_kw):
        raise OSError(code, os.strerror(code))

    return fail


@pytest.mark.parametrize("where", ["write", "fsync"])
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG])
def test_a_failed_write_names_the_file_and_keeps_the_old_one(tmp_path, monkeypatch, where, code):
    """A full disk (or quota, I/O error, file too large) while the data is written or flushed: an OSError
    naming the target (for a full disk: saying so and where), the old file intact, no temporary file."""
    target = tmp_path / "sub" / "scores.txt"
    target.parent.mkdir()
    target.write_text("old")
    if where == "fsync":
        monkeypatch.setattr(os, "fsync", _fail_with(code))
        write = lambda tmp: tmp.write_text("new")  # noqa: E731
    else:

        def write(tmp):
            with tmp.open("w") as fh:
                fh.write("half")
                raise OSError(code, os.strerror(code), str(tmp))  # what a full disk raises mid-write

    with pytest.raises(OSError) as info:
        atomic_write(target, write)
    msg = str(info.value)
    assert info.value.errno == code and msg.startswith(f"cannot write {target}: "), msg
    assert ".tmp" not in msg and "\n" not in msg, msg
    if code in (errno.ENOSPC, errno.EDQUOT):
        assert f"the disk is full ({os.strerror(code)}); free space where {target.parent} is" in msg, msg
    else:
        assert msg == f"cannot write {target}: {os.strerror(code)}", msg
    assert target.read_text() == "old" and sorted(p.name for p in target.parent.iterdir()) == ["scores.txt"]


@pytest.mark.parametrize("command", ["choice", "letor"])
def test_a_disk_full_error_reaches_the_command_line_as_one_line(tmp_path, monkeypatch, capsys, command):
    import ctxrank.cli.data
    from ctxrank.cli import main

    out = tmp_path / f"s.{'csv' if command == 'choice' else 'txt'}"
    monkeypatch.setattr(os, "fsync", _fail_with(errno.ENOSPC))  # the table's atomic write
    monkeypatch.setattr(ctxrank.cli.data, "write_synthetic_letor", _fail_with(errno.ENOSPC))  # LETOR's writer
    size = ["--sessions", "3"] if command == "choice" else ["--queries", "2"]
    assert main(["synth", command, "--out", str(out), *size]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"ctxrank: error: cannot write {out}: the disk is full (No space left on device); free space "
        f"where {tmp_path} is, or write to another disk"
    ], err
    assert list(tmp_path.iterdir()) == []


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


# ------------------------------------------------------------------------------- output directories
def test_a_second_writer_of_a_directory_is_refused_naming_the_holder(tmp_path):
    from ctxrank._io import LOCK_FILE, lock_directory

    d = tmp_path / "out"
    with lock_directory(d) as held:
        assert held.first and (d / LOCK_FILE).is_file()
        for key in (None, "spec-a"):
            with pytest.raises(ValueError, match=rf"{d} is locked: .*pid {os.getpid()}"):
                lock_directory(d, key=key)
    assert not d.exists()  # the lock made the directory and nothing was written: nothing is left
    lock_directory(d).release()  # free again


def test_processes_of_one_key_share_a_directory_and_another_key_is_refused(tmp_path):
    from ctxrank._io import LOCK_FILE, lock_directory

    first = lock_directory(tmp_path, key="spec-a")
    second = lock_directory(tmp_path, key="spec-a")  # another shard of the same experiment
    assert first.first and not second.first
    with pytest.raises(ValueError, match="different specification"):
        lock_directory(tmp_path, key="spec-b")
    with pytest.raises(ValueError, match="is locked"):
        lock_directory(tmp_path)
    first.release()
    with pytest.raises(ValueError, match="different specification"):
        lock_directory(tmp_path, key="spec-b")  # the second shard still holds it
    second.release()
    assert not (tmp_path / LOCK_FILE).exists()
    lock_directory(tmp_path, key="spec-b").release()


def test_a_lock_in_another_process_is_seen(tmp_path):
    import subprocess
    import sys

    from ctxrank._io import lock_directory

    code = (
        "import sys, time; from ctxrank._io import lock_directory; "
        "l = lock_directory(sys.argv[1]); print('ok', flush=True); time.sleep(60)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout.readline().strip() == "ok"
        with pytest.raises(ValueError, match=rf"pid {proc.pid}\b"):
            lock_directory(tmp_path)
    finally:
        proc.kill()
        proc.wait()
    lock_directory(tmp_path).release()  # a killed holder's lock is gone with it


def test_claim_output_dir_is_the_one_rule_of_what_an_output_directory_may_hold(tmp_path):
    from ctxrank._io import LOCK_FILE, claim_output_dir
    from tests.conftest import REPO

    kw = {"what": "thing", "ours": ("mark.json",), "keep": ("runs",)}
    assert claim_output_dir(tmp_path / "new", overwrite=False, **kw) is False
    assert not (tmp_path / "new").exists()  # checks only
    d = tmp_path / "d"
    (d / "runs").mkdir(parents=True)
    (d / LOCK_FILE).write_text("")
    (d / ".x.json.abcdefgh.tmp").write_text("")
    assert claim_output_dir(d, overwrite=False, **kw) is False  # ctxrank's own entries only
    (d / "mine.txt").write_text("x")
    with pytest.raises(ValueError) as info:
        claim_output_dir(d, overwrite=False, **kw)
    assert str(info.value) == (
        f"{d} holds files that ctxrank did not write (mine.txt); choose a new or empty directory for the "
        "thing, or give --overwrite to write there anyway (files of the names it writes are replaced, the "
        "others are kept)"
    )
    assert claim_output_dir(d, overwrite=True, **kw) is False and (d / "mine.txt").exists()
    (d / "mark.json").write_text("{}")
    assert claim_output_dir(d, overwrite=False, **kw) is True  # ctxrank's: the caller continues it
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="is a file; give a directory for the thing"):
        claim_output_dir(tmp_path / "f", overwrite=True, **kw)
    # one rule, written once: every writer of a directory calls it
    sources = [p.read_text() for p in (REPO / "src" / "ctxrank").rglob("*.py")]
    assert sum(s.count("did not write ({") for s in sources) == 1


def test_orphaned_temporary_files_are_removed_by_the_first_holder_only(tmp_path):
    from ctxrank._io import lock_directory

    (tmp_path / "runs" / "m").mkdir(parents=True)
    orphans = [
        tmp_path / ".results.json.ab_c1234.tmp",
        tmp_path / "runs" / "m" / ".seed0-fold1.json.zz99yy00.tmp",
    ]
    kept = [tmp_path / "notes.tmp", tmp_path / ".x.tmp", tmp_path / "a.json"]
    for p in [*orphans, *kept]:
        p.write_text("x")
    with lock_directory(tmp_path, key="k"):
        assert not any(p.exists() for p in orphans) and all(p.exists() for p in kept)
        late = tmp_path / ".table.md.abcdefgh.tmp"  # another shard's write in progress
        late.write_text("x")
        with lock_directory(tmp_path, key="k"):
            assert late.exists()


def test_releasing_a_lock_never_masks_the_error_that_ends_the_block(tmp_path, monkeypatch):
    """Out of memory inside ``with lock_directory(...)``: the release lists the directory, which fails
    with ENOMEM too, and that OSError replaced the real error (``ctxrank train`` blamed its output
    directory). The block's own error propagates; without one, a failed release still raises."""
    import errno
    from pathlib import Path

    from ctxrank._io import lock_directory

    def no_memory(self):
        raise OSError(errno.ENOMEM, "Cannot allocate memory", str(self))

    out = tmp_path / "out"
    with pytest.raises(MemoryError, match="the step"), lock_directory(out):
        monkeypatch.setattr(Path, "iterdir", no_memory)
        raise MemoryError("the step")
    monkeypatch.undo()
    with pytest.raises(OSError, match="Cannot allocate memory"), lock_directory(tmp_path / "other"):
        monkeypatch.setattr(Path, "iterdir", no_memory)
