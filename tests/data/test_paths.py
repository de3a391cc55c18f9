"""data.paths: what a data path is (file, stream, missing with near names, directory, device, socket),
and every reader's answer to each: LETOR text read from a FIFO, a pipe or standard input, the rest
refused with a message saying what the path is."""

from __future__ import annotations

import gzip
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterable
from contextlib import contextmanager
from itertools import repeat

import numpy as np
import pytest

from ctxrank.data.letor import read_group_sizes, read_letor
from ctxrank.data.paths import FILE, STREAM, input_kind, near_names
from ctxrank.data.scores import read_scores
from ctxrank.data.table import read_table, table_columns
from tests.conftest import REPO

TINY = "2 qid:10 1:0.5 2:1.5 3:-1 #docid = A\n0 qid:10 1:0.25 3:2 #docid = B\n1 qid:7 2:3e-2 #docid = C\n"
pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs (POSIX)")


@contextmanager
def fifo(path, pieces: bytes | Iterable[bytes]):
    """A FIFO at ``path`` fed ``pieces`` by a writer thread (which stops when the reader goes away)."""
    os.mkfifo(path)
    pieces = [pieces] if isinstance(pieces, bytes) else pieces

    def write() -> None:
        try:
            with open(path, "wb") as fh:
                for piece in pieces:
                    fh.write(piece)
        except (BrokenPipeError, OSError):
            pass  # the reader stopped (an error, or a refusal before reading)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        yield path
    finally:
        # a reader that never opened the FIFO leaves the writer blocked in open(): open it, let the
        # writer finish (or fill the pipe), then close, which ends an endless writer (EPIPE)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        writer.join(timeout=1)
        os.close(fd)
        writer.join(timeout=10)
        assert not writer.is_alive()


# ------------------------------------------------------------------------------------ near names
def test_a_missing_file_offers_its_near_names_in_every_reader(tmp_path):
    (tmp_path / "S1.txt.gz").write_bytes(gzip.compress(TINY.encode()))
    (tmp_path / "train.csv").write_text("q,y,x\n1,0,1\n")
    (tmp_path / "x.txt.query").write_text("3\n")
    (tmp_path / "scores.txt").write_text("1\n")
    near = "no such file; did you mean .*/"
    for call, message in [
        (
            lambda: read_letor(tmp_path / "S1.txt"),
            rf"S1\.txt: no such file; did you mean {tmp_path}/S1\.txt\.gz\?",
        ),
        (lambda: read_letor(tmp_path / "s1.TXT.GZ"), near + r"S1\.txt\.gz\?"),
        (lambda: read_letor(tmp_path / "S1.txt.gz.gz"), near + r"S1\.txt\.gz\?"),
        (lambda: read_table(tmp_path / "train.csv.gz", query="q", label="y"), near + r"train\.csv\?"),
        (lambda: table_columns(tmp_path / "trian.csv"), r"trian\.csv: " + near + r"train\.csv\?"),
        (
            lambda: read_group_sizes(tmp_path / "x.txt.qeury"),
            r"no such group file; did you mean .*/x\.txt\.query",
        ),
        (lambda: read_scores(tmp_path / "score.txt"), r"no such scores file; did you mean .*/scores\.txt\?"),
    ]:
        with pytest.raises(ValueError, match=message):
            call()
    from ctxrank.data.choice import choice_frame

    (tmp_path / "swissmetro.csv").touch()
    with pytest.raises(ValueError, match=r"metro\.csv\.gz: no such file; did you mean .*/swissmetro\.csv\?"):
        choice_frame("swissmetro", root=tmp_path)
    with pytest.raises(ValueError, match=r"x\.qry: no such group file"):
        read_letor(tmp_path / "S1.txt.gz", query_file=tmp_path / "x.qry", cache=False)
    with pytest.raises(ValueError, match=r"no such file \(no directory .*/nodir\)"):
        read_letor(tmp_path / "nodir" / "S1.txt")
    with pytest.raises(ValueError, match=r"absent\.txt: no such file$"):  # nothing near: no hint
        read_letor(tmp_path / "absent.txt")


def test_near_names_are_bounded_ordered_and_spelled_as_given(tmp_path, monkeypatch):
    for name in ["f.txt.gz", "F.TXT", "f.txx", *(f"f{i}.txt" for i in range(20))]:
        (tmp_path / name).touch()
    near = near_names(tmp_path / "f.txt")
    assert near[:2] == [str(tmp_path / "f.txt.gz"), str(tmp_path / "F.TXT")] and len(near) == 5
    monkeypatch.chdir(tmp_path)
    assert near_names("f.txt")[0] == "f.txt.gz"  # a relative path stays relative, without "./"


def test_the_cli_offers_the_compressed_name(tmp_path, capsys):
    from ctxrank.cli import main

    (tmp_path / "S1.txt.gz").write_bytes(gzip.compress(TINY.encode()))
    assert main(["data-info", str(tmp_path / "S1.txt")]) == 2
    assert f"did you mean {tmp_path}/S1.txt.gz?" in capsys.readouterr().err
    missing = str(tmp_path / "S1.txt")
    assert (
        main(
            ["train", "--model", "mlp", "--train", missing, "--valid", missing, "--out", str(tmp_path / "m")]
        )
        == 2
    )
    assert f"S1.txt: no such file; did you mean {tmp_path}/S1.txt.gz?" in capsys.readouterr().err


# ------------------------------------------------------------------------------ what a path is
def test_directories_devices_and_sockets_say_what_they_are(tmp_path):
    with pytest.raises(ValueError, match=r"is a directory, not a data file"):
        read_letor(tmp_path)
    with pytest.raises(ValueError, match=r"^/dev/zero is a character device, not a data file$"):
        read_letor("/dev/zero")
    os.symlink("/dev/null", tmp_path / "d.csv")
    with pytest.raises(ValueError, match=r"d\.csv is a character device, not a table"):
        read_table(tmp_path / "d.csv", query="q", label="y")
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tmp_path / "s.sock"))
        with pytest.raises(ValueError, match=r"s\.sock is a socket, not a data file"):
            read_letor(tmp_path / "s.sock")
    finally:
        sock.close()


# ------------------------------------------------------------------------------------ streams
@pytest.mark.parametrize("compress", [False, True])
def test_letor_from_a_fifo_equals_the_file_and_is_not_cached(tmp_path, compress):
    text = "".join(f"{i % 3} qid:{i // 7} 1:{i / 8} 3:{-i} #docid = d{i}\n" for i in range(200_000)).encode()
    data = gzip.compress(text, compresslevel=1) if compress else text
    ref = read_letor(_write(tmp_path / "ref.txt", text), cache=False)
    assert input_kind(tmp_path / "ref.txt") == FILE
    with fifo(tmp_path / "pipe", (data[i : i + 65536] for i in range(0, len(data), 65536))) as path:
        assert input_kind(path, streams=True) == STREAM
        got = read_letor(path, cache_dir=tmp_path / "cache", chunk_bytes=1 << 20)
    for name in ("features", "labels", "query_ids", "query_offsets", "docids"):
        np.testing.assert_array_equal(getattr(got, name), getattr(ref, name))
    assert got.source == str(tmp_path / "pipe")
    assert not (tmp_path / "cache").exists()  # a stream is never cached


def test_a_group_file_from_a_fifo(tmp_path):
    data = _write(tmp_path / "x.txt", b"1 1:0.5\n0 2:1\n2 1:3\n")
    with fifo(tmp_path / "sizes", b"2\n1\n") as sizes:
        assert read_letor(data, query_file=sizes).query_offsets.tolist() == [0, 2, 3]
    with fifo(tmp_path / "endless", repeat(b"1\n")) as sizes:  # ends at the data's rows
        with pytest.raises(ValueError, match=r"endless:4: group sizes sum to 4 by this line, but .* 3 rows"):
            read_letor(data, query_file=sizes)


def test_endless_or_huge_streams_stop_at_the_limits(tmp_path):
    with fifo(tmp_path / "zeros", repeat(bytes(1 << 16))) as path:  # <(cat /dev/zero): no newline ever
        with pytest.raises(ValueError, match=r"zeros:1: line longer than max_line_bytes = 1,048,576"):
            read_letor(path)
    with fifo(tmp_path / "lines", repeat(b"0 qid:1 1:1 2:1\n" * 4096)) as path:  # `yes`: endless rows
        message = r"lines:\d+: line [\d,]+ of the stream makes the dense .* above max_dense_bytes = 1,000,000"
        with pytest.raises(ValueError, match=message):
            read_letor(path, max_dense_bytes=1_000_000, chunk_bytes=1 << 16)
    with fifo(tmp_path / "wide", b"0 qid:1 1:1\n" * 100 + b"1 qid:1 9999999:1\n") as path:
        with pytest.raises(ValueError, match=r"wide:101: feature index 9999999 makes the dense .* 101 rows"):
            read_letor(path)
    long_line = b"0 qid:1 " + b" ".join(b"%d:1" % i for i in range(1, 300_001)) + b"\n"  # 2.6 MB
    with fifo(tmp_path / "long", b"0 qid:1 1:1\n" + long_line + b"0 qid:1 1:1\n") as path:  # in one chunk
        with pytest.raises(ValueError, match=r"long:2: line longer than max_line_bytes"):
            read_letor(path)


def test_a_table_or_scores_from_a_fifo_is_refused_without_blocking(tmp_path):
    with fifo(tmp_path / "t.csv", b"q,y,x\n1,0,1\n") as path:
        message = r"t\.csv is a FIFO \(a pipe or process substitution\): a table must be a regular file"
        with pytest.raises(ValueError, match=message):
            read_table(path, query="q", label="y")
        with pytest.raises(ValueError, match=r"LETOR / SVMlight text can come from a pipe"):
            table_columns(path)
    with fifo(tmp_path / "s.txt", b"1\n") as path:
        with pytest.raises(ValueError, match=r"s\.txt is a FIFO .*: a scores file must be a regular file"):
            read_scores(path)


def test_the_cli_reads_letor_from_stdin_a_pipe_and_a_process_substitution(tmp_path):
    data = _write(tmp_path / "d.txt.gz", gzip.compress(TINY.encode()))
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "CTXRANK_CACHE_DIR": str(tmp_path / "cache")}
    cli = f"{sys.executable} -m ctxrank data-info"
    for shell in (f"{cli} - --json < {data}", f"cat {data} | {cli} - --json", f"{cli} <(zcat {data}) --json"):
        proc = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, (shell, proc.stderr)
        assert '"queries": 2' in proc.stdout and '"items": 3' in proc.stdout, proc.stdout
    proc = subprocess.run(["bash", "-c", f"{cli} /dev/zero"], capture_output=True, text=True, env=env)
    assert proc.returncode == 2
    assert proc.stderr == "ctxrank: error: /dev/zero is a character device, not a data file\n"


def _write(path, data: bytes):
    path.write_bytes(data)
    return path
