"""CLI options that bound untrusted input: reader limits, --regroup, ERR's --max-label, archive caps,
warnings."""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from ctxrank.cli import main


def _letor(path, rows):
    path.write_text("".join(f"{y} qid:{q} 1:{a} 2:{b}\n" for y, q, a, b in rows))
    return path


SCATTERED = [(2, 1, 0.9, 0.1), (0, 2, 0.1, 0.5), (1, 1, 0.3, 0.2), (1, 2, 0.8, 0.7), (0, 1, 0.2, 0.9)]


def test_regroup_is_an_option_and_scores_map_back_to_file_order(tmp_path, capsys):
    data = _letor(tmp_path / "scattered.txt", SCATTERED)
    assert main(["data-info", str(data)]) == 2
    assert "--regroup" in capsys.readouterr().err
    assert main(["data-info", str(data), "--regroup", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["queries"] == 2
    # scores in the file's row order: the label itself ranks perfectly, whatever the regrouping
    scores = tmp_path / "scores.txt"
    scores.write_text("".join(f"{y}\n" for y, *_ in SCATTERED))
    args = ["evaluate", "--data", str(data), "--scores", str(scores), "--regroup", "--json"]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["metrics"]["ndcg@10"] == pytest.approx(1.0)
    # the reversed scores rank worst: if the rows were not mapped back, some query would not be 0-ranked
    scores.write_text("".join(f"{-y}\n" for y, *_ in SCATTERED))
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["metrics"]["ndcg@10"] < 0.7


def test_reader_limits_are_options(tmp_path, capsys):
    wide = tmp_path / "wide.txt"
    wide.write_text("0 qid:1 1:1 300000:1\n1 qid:1 1:0\n")
    assert main(["data-info", str(wide), "--max-dense-bytes", "100000"]) == 2
    assert "--max-dense-bytes" in capsys.readouterr().err
    assert main(["data-info", str(wide), "--max-line-bytes", "10"]) == 2
    assert "line" in capsys.readouterr().err
    assert main(["data-info", str(wide), "--max-dense-bytes", "0"]) == 2  # a positive integer
    assert main(["data-info", str(wide), "--json"]) == 0


def test_err_needs_a_maximum_grade(tmp_path, capsys):
    data = _letor(
        tmp_path / "d.txt", [(2, 1, 0.9, 0.1), (0, 1, 0.1, 0.5), (1, 2, 0.3, 0.2), (0, 2, 0.8, 0.7)]
    )
    scores = tmp_path / "s.txt"
    scores.write_text("1\n0\n1\n0\n")
    base = ["evaluate", "--data", str(data), "--scores", str(scores), "--metrics", "err@10", "--json"]
    assert main(base) == 2
    assert "--max-label" in capsys.readouterr().err
    assert main([*base, "--max-label", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["conventions"]["max_label"] == 2
    # query 2's ERR (max label 1 in it) does not depend on query 1: grade 1 of 2 stops with prob 1/4
    assert out["per_query"]["err@10"][1] == pytest.approx(0.25)


def test_err_on_a_registered_dataset_takes_its_grade_scale(tmp_path, capsys):
    from ctxrank.data.registry import load_split

    test = load_split("mq2008", "test", 1)
    scores = tmp_path / "s.txt"
    scores.write_text("".join(f"{v!r}\n" for v in test.features[:, 0].tolist()))
    args = [
        "evaluate",
        "--dataset",
        "mq2008",
        "--split",
        "test",
        "--scores",
        str(scores),
        "--metrics",
        "err@10",
    ]
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["conventions"]["max_label"] == 2
    assert main(args) == 0
    assert "ERR maximum grade   2" in capsys.readouterr().out


def test_ctxrank_warnings_are_one_line(tmp_path, capsys):
    cut = tmp_path / "cut.txt"
    cut.write_text("0 qid:1 1:0.5 2:1\n1 qid:1 1:0.2 2:0")
    assert main(["data-info", str(cut)]) == 0
    err = capsys.readouterr().err
    assert err == f"ctxrank: warning: {cut}:2: the file does not end with a newline (cut short?)\n"


def test_download_caps_are_options(tmp_path, capsys):
    archive = tmp_path / "a.tar"
    with tarfile.open(archive, "w") as tf:
        for i in range(3):
            info = tarfile.TarInfo(f"f{i}.txt")
            info.size = 1
            tf.addfile(info, io.BytesIO(b"x"))
    url = archive.as_uri()
    root = tmp_path / "root"
    args = ["datasets", "download", "web10k", "--url", url, "--root", str(root), "--no-progress"]
    assert main([*args, "--max-members", "2"]) == 2
    assert "--max-members" in capsys.readouterr().err
    assert main([*args, "--max-extract-bytes", "2"]) == 2
    assert "--max-extract-bytes" in capsys.readouterr().err
    assert not any(p.is_file() for p in root.rglob("f*.txt"))
    assert main([*args, "--max-members", "0"]) == 2


def test_missing_group_file_error_names_every_accepted_name(tmp_path, capsys):
    import gzip

    data = tmp_path / "rank.test.gz"
    data.write_bytes(gzip.compress(b"0 1:0.5\n1 1:0.2\n"))
    assert main(["data-info", str(data)]) == 2
    err = capsys.readouterr().err
    for name in ("rank.test.gz.query", "rank.test.gz.group", "rank.test.query", "rank.test.group"):
        assert name in err
    (tmp_path / "rank.test.query").write_text("2\n")
    assert main(["data-info", str(data), "--json"]) == 0


# ----------------------------------------------------------------------------------------- out of memory
_CLI_CAPPED = """
import resource, sys
import numpy, pandas
import ctxrank.cli, ctxrank.cli.data, ctxrank.data.letor, ctxrank.data.summary
vm = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize:")).split()[1]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + (256 << 20), vm + (256 << 20)))
sys.exit(ctxrank.cli.main(sys.argv[1:]))
"""


def test_out_of_memory_below_the_limit_is_an_error_line_not_a_traceback(tmp_path):
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    if not sys.platform.startswith("linux"):
        pytest.skip("the memory cap reads /proc/self/status")
    wide = tmp_path / "wide.txt"  # 21 rows x feature 9,999,999: 801 MiB, under --max-dense-bytes' 2 GiB
    wide.write_text("".join(f"1 qid:{i // 4} 3:1 9999999:1\n" for i in range(21)))
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-c", _CLI_CAPPED, "data-info", str(wide), "--no-cache"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(
        f"ctxrank: error: out of memory: {wide}: cannot allocate a 21 x 9,999,999 float32 array (801.1 MiB)"
    ), proc.stderr
    assert "--max-dense-bytes N" in proc.stderr and proc.stderr.count("\n") == 1


def test_any_memory_error_is_one_error_line(tmp_path, capsys, monkeypatch):
    from ctxrank.data import sources as _source

    def exhausted(*args, **kwargs):
        raise MemoryError  # as Python raises it: no message

    data = _letor(tmp_path / "d.txt", SCATTERED)
    monkeypatch.setattr(_source, "read_letor", exhausted)
    assert main(["data-info", str(data)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ctxrank: error: out of memory: the command needed more memory"), err
    assert "--debug" in err
    with pytest.raises(MemoryError):
        main(["data-info", str(data), "--debug"])


# ------------------------------------------------------------------------------------ integer ranges
def _integer_options():
    """(argv before the option, option string) of every integer option of every command."""
    import argparse

    from ctxrank.cli import build_parser

    found = []

    def walk(parser, prefix):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*prefix, name])
            elif action.option_strings and (action.type is int or action.type in INT_TYPES):
                found.append((tuple(prefix), action.option_strings[-1], action.type))

    walk(build_parser(), [])
    return found


from ctxrank.cli._options import INT_TYPES  # noqa: E402

INTEGER_OPTIONS = _integer_options()


def test_every_integer_option_is_range_checked():
    """No integer flag is a bare ``int``: each one's type bounds it (a huge value would reach NumPy,
    torch or LightGBM and end in an OverflowError after the data was read)."""
    assert len(INTEGER_OPTIONS) > 20
    bare = [f"{' '.join(p)} {flag}" for p, flag, kind in INTEGER_OPTIONS if kind is int]
    assert not bare, f"integer options without a range: {bare}"


@pytest.mark.parametrize(
    ("prefix", "flag", "kind"), INTEGER_OPTIONS, ids=[" ".join((*p, f)) for p, f, _ in INTEGER_OPTIONS]
)
@pytest.mark.parametrize("value", ["99999999999999999999999", "-5", "1e3"])
def test_integer_options_out_of_range_fail_before_any_work(prefix, flag, kind, value, capsys):
    """``--seed 99999999999999999999`` failed after loading the data ('Overflow when unpacking long
    long'): now every integer flag's value is checked while the command line is parsed, before anything
    else (no other option is needed to see the error)."""
    assert main([*prefix, f"{flag}={value}"]) == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: expected" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["evaluate", "--data", "/nonexistent/d.txt", "--scores", "/nonexistent/s.txt", "--metrics"],
        ["train", "--model", "mlp", "--data", "/nonexistent/d.txt", "--out", "/nonexistent/o", "--set"],
    ],
)
@pytest.mark.parametrize("metric", ["ndcg@99999999999999999999999", "p@-3", "ndcg@1_0"])
def test_metric_cutoffs_out_of_range_fail_before_any_work(argv, metric, capsys):
    value = metric if argv[0] == "evaluate" else f"train.metric={metric}"
    assert main([*argv, value]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ctxrank: error:") and "cutoff" in err and len(err.splitlines()) == 1
    assert "nonexistent" not in err


# ------------------------------------------------------------------- synthetic files: room and memory
def test_synth_letor_refuses_a_file_beyond_the_free_disk_space_before_writing(tmp_path, capsys):
    """100 million queries of 1,000 rows began to fill the disk at 1.7 GB a minute."""
    out = tmp_path / "big.txt"
    argv = ["synth", "letor", "--queries", "100000000", "--items", "1000", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ctxrank: error: 100,000,000,000 rows of 136 features take about ")
    assert f"{tmp_path.resolve()} has " in err and " free: ask for fewer" in err
    assert ".tmp" not in err and not any(tmp_path.iterdir())


def test_synth_letor_refuses_a_query_beyond_the_memory_before_allocating(tmp_path, capsys, monkeypatch):
    from ctxrank.data import synth

    monkeypatch.setattr(synth, "available_bytes", lambda device: (2**30, "test's figure"))
    argv = ["synth", "letor", "--queries", "2", "--items", "1000000", "--out", str(tmp_path / "x.txt")]
    assert main(argv) == 2  # one query of 1e6 x 136 float64: 2 GiB for the block, twice
    err = capsys.readouterr().err
    assert "a block of 1,000,000 rows x 136 features needs about 2.03 GiB of memory" in err
    assert "can give 1.00 GiB (the test's figure)" in err and not any(tmp_path.iterdir())


def test_synth_letor_blocks_bound_the_rows_in_memory_and_keep_every_file_as_before(monkeypatch):
    import numpy as np

    from ctxrank.data import synth

    sizes = np.array([5, 5, 5, 20, 1, 1])
    monkeypatch.setattr(synth, "BLOCK_ROWS", 10)
    # at most 2 queries (block_queries) and 10 rows a block, a longer query alone
    assert list(synth._blocks(sizes, 2)) == [(0, 2), (2, 3), (3, 4), (4, 6)]
    monkeypatch.undo()
    # 200 queries of up to BLOCK_ROWS / 200 items: one block each, as the writer always cut them
    full = np.full(450, synth.BLOCK_ROWS // 200)
    assert list(synth._blocks(full, 200)) == [(0, 200), (200, 400), (400, 450)]


def test_synth_letor_compresses_gz_at_the_fast_level_with_the_same_text_inside(tmp_path):
    """Python's default gzip level 9 made a 136-feature .gz about 7 times slower to write than its text
    (8.8 s against 1.0 s for 20,000 rows); level 1 costs about 14% in size."""
    import gzip

    from ctxrank.data.synth import write_synthetic_letor

    kw = dict(n_queries=30, list_size=20, n_features=12, seed=4)
    text = write_synthetic_letor(tmp_path / "s.txt", **kw).read_bytes()
    packed = write_synthetic_letor(tmp_path / "s.gz", **kw).read_bytes()
    assert gzip.decompress(packed) == text
    assert packed[8] == 4  # the header's XFL byte: 4 = the fastest level, 2 = the slowest (Python's default)


def test_sigterm_ends_a_command_as_ctrl_c_does_after_its_cleanup(tmp_path):
    """`timeout` or a scheduler's SIGTERM ended the process on the spot: `synth letor` left its
    half-written temporary file (1.7 GB after a minute) behind. Now exit status 143 and no file."""
    import signal
    import time

    argv = ["synth", "letor", "--queries", "100000", "--features", "8", "--no-progress"]
    proc = _ctxrank([*argv, "--out", str(tmp_path / "s.txt")])
    deadline = time.monotonic() + 60
    while not any(p.stat().st_size for p in tmp_path.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)  # until the temporary file has rows
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and err == "ctxrank: terminated\n", err
    assert not any(tmp_path.iterdir())


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (Linux /proc)."""
    from pathlib import Path

    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _slow_spec(tmp_path, count):
    """A spec of ``count`` runs whose ``listnet`` is quick and whose ``mlp`` would train for hours."""
    from ctxrank.data.synth import write_synthetic_letor

    data = write_synthetic_letor(tmp_path / "d.txt", n_queries=40, list_size=8, n_features=4, seed=0)
    spec = tmp_path / "s.toml"
    spec.write_text(
        f'name = "s"\n[data]\nfile = "{data}"\n[runs]\ncount = {count}\nthreads = 1\n'
        '[models.listnet]\nmodel = "listnet"\ntrain = { max_epochs = 1 }\n'
        '[models.mlp]\nmodel = "mlp"\ntrain = { max_epochs = 100000, patience = 100000 }\n'
    )
    return spec


def _ctxrank(argv):
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "ctxrank", *argv], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def test_sigterm_keeps_the_evidence_of_an_experiments_stored_runs(tmp_path):
    import signal
    import time

    from ctxrank.experiments.evidence import read_evidence

    argv = ["experiment", str(_slow_spec(tmp_path, 1)), "--out", str(tmp_path / "e"), "--no-progress"]
    proc = _ctxrank([*argv, "--evidence", str(tmp_path / "evidence")])
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "e" / "runs" / "listnet").is_dir() and time.monotonic() < deadline:
            time.sleep(0.2)  # listnet stored; mlp training
        time.sleep(1)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143 and err.endswith("ctxrank: terminated\n"), err
    _, runs, _ = read_evidence(tmp_path / "evidence")
    assert [run["model"] for run in runs] == ["listnet"]


def test_sigterm_stops_an_experiments_worker_processes_with_it(tmp_path):
    """With SIGTERM raised as an interrupt, `experiment --jobs 2` waited in its process pool for the
    units the workers had started (a tuned run can take an hour); the workers now stop with it."""
    import contextlib
    import os
    import signal
    import sys
    import time

    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc")
    argv = ["experiment", str(_slow_spec(tmp_path, 2)), "--jobs", "2", "--no-progress"]
    proc = _ctxrank([*argv, "--out", str(tmp_path / "e")])
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while len(workers := _children(proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(workers) >= 2, "the workers did not start"
        time.sleep(3)  # inside their runs
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 143 and err.endswith("ctxrank: terminated\n"), err
        deadline = time.monotonic() + 10
        while any(os.path.exists(f"/proc/{w}") for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(os.path.exists(f"/proc/{w}") for w in workers)
    finally:  # a failure leaves no process behind
        if proc.poll() is None:
            proc.kill()
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
