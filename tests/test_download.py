"""download / extract / download_dataset against a local http.server on 127.0.0.1 (never the internet)."""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ctxrank.cli import main
from ctxrank.data.download import DownloadError, download, download_dataset, extract, sha256_file
from ctxrank.data.registry import load_fold

PAYLOAD = bytes(range(256)) * 400  # 100 KiB, several read chunks for the progress bar


def _zip_bytes(members: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, text in members.items():
            zf.writestr(name, text)
    return buf.getvalue()


def _tar_bytes(members: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _letor(qid: int, labels: list[int]) -> str:
    return "".join(f"{y} qid:{qid} 1:{0.5 + i} 2:{i}\n" for i, y in enumerate(labels))


MSLR_ZIP = _zip_bytes(
    {
        f"Fold{k}/{split}.txt": _letor(10 * k + j, [0, 1, 4, 2])
        for k in range(1, 6)
        for j, split in enumerate(("train", "vali", "test"))
    }
)
FILES = {
    "/good.bin": PAYLOAD,
    "/MSLR.zip": MSLR_ZIP,
    "/data.tar.gz": _tar_bytes({"sample/train.txt": _letor(1, [0, 1]), "sample/vali.txt": _letor(2, [1])}),
}


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/partial":  # announces 1000 bytes, sends 300, then hangs up
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b"x" * 300)
            self.wfile.flush()
            self.close_connection = True
            return
        body = FILES.get(self.path)
        if body is None:
            self.send_error(404, "Not Found")
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # keep test output clean
        pass


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


def _leftovers(directory):
    return sorted(p.name for p in directory.iterdir())


# ----------------------------------------------------------------------------------- download
def test_good_checksum(server, tmp_path, capsys):
    sha = hashlib.sha256(PAYLOAD).hexdigest()
    path = download(f"{server}/good.bin", tmp_path / "sub" / "good.bin", sha256=sha.upper(), progress=True)
    assert path.read_bytes() == PAYLOAD
    assert sha256_file(path) == sha
    assert _leftovers(path.parent) == ["good.bin"]  # no temporary file left behind


def test_destination_directory_takes_url_name(server, tmp_path):
    path = download(f"{server}/good.bin", tmp_path, progress=False)
    assert path == tmp_path / "good.bin" and path.stat().st_size == len(PAYLOAD)


def test_bad_checksum_removes_partial_and_keeps_old_file(server, tmp_path):
    dest = tmp_path / "good.bin"
    dest.write_bytes(b"previous")
    with pytest.raises(DownloadError, match="sha256 mismatch") as exc:
        download(f"{server}/good.bin", dest, sha256="0" * 64, progress=False)
    assert isinstance(exc.value, ValueError)
    assert hashlib.sha256(PAYLOAD).hexdigest() in str(exc.value)
    assert dest.read_bytes() == b"previous"
    assert _leftovers(tmp_path) == ["good.bin"]


def test_404_is_a_clear_error(server, tmp_path):
    with pytest.raises(DownloadError, match=r"HTTP 404") as exc:
        download(f"{server}/missing.zip", tmp_path / "missing.zip", progress=False)
    assert "/missing.zip" in str(exc.value)
    assert _leftovers(tmp_path) == []


def test_interrupted_download_leaves_no_file(server, tmp_path):
    with pytest.raises(DownloadError, match=r"interrupted|incomplete"):
        download(f"{server}/partial", tmp_path / "partial.bin", progress=False)
    assert _leftovers(tmp_path) == []


def test_unreachable_host(tmp_path):
    import socket

    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(DownloadError, match="failed"):
        download(f"http://127.0.0.1:{port}/x.zip", tmp_path / "x.zip", progress=False, timeout=5)
    assert _leftovers(tmp_path) == []


def test_malformed_sha256(tmp_path):
    with pytest.raises(ValueError, match="64 hexadecimal"):
        download("http://127.0.0.1:9/x", tmp_path / "x", sha256="abc")


# ------------------------------------------------------------------------------------ extract
def test_extract_zip_and_tar(tmp_path):
    z = tmp_path / "a.zip"
    z.write_bytes(_zip_bytes({"d/one.txt": "1", "two.txt": "2"}))
    files = extract(z, tmp_path / "out")
    assert sorted(p.relative_to(tmp_path / "out").as_posix() for p in files) == ["d/one.txt", "two.txt"]
    t = tmp_path / "b.tar.gz"
    t.write_bytes(_tar_bytes({"d/three.txt": "3"}))
    extract(t, tmp_path / "out")  # merges into the existing tree
    assert (tmp_path / "out" / "d" / "one.txt").read_text() == "1"
    assert (tmp_path / "out" / "d" / "three.txt").read_text() == "3"
    assert _leftovers(tmp_path / "out") == ["d", "two.txt"]  # no staging directory left


def test_extract_refuses_unsafe_members_and_rar(tmp_path):
    z = tmp_path / "evil.zip"
    z.write_bytes(_zip_bytes({"../evil.txt": "x"}))
    with pytest.raises(ValueError, match="outside"):
        extract(z, tmp_path / "out")
    assert not (tmp_path / "evil.txt").exists()
    assert _leftovers(tmp_path / "out") == []
    r = tmp_path / "MQ2007.rar"
    r.write_bytes(b"Rar!\x1a\x07\x00")
    with pytest.raises(ValueError, match="unrar x"):
        extract(r, tmp_path / "out")
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="corrupt zip"):
        extract(bad, tmp_path / "out")


# ---------------------------------------------------------------------------- download_dataset
def test_download_dataset_end_to_end(server, tmp_path):
    sha = hashlib.sha256(MSLR_ZIP).hexdigest()
    root = download_dataset("web10k", root=tmp_path, url=f"{server}/MSLR.zip", sha256=sha, progress=False)
    assert root == tmp_path
    assert not (tmp_path / "MSLR.zip").exists()  # archive removed once unpacked
    fold = load_fold("mslr-web10k", 3, root=tmp_path)
    assert (fold.train.n_queries, fold.valid.n_queries, fold.test.n_queries) == (1, 1, 1)
    assert fold.test.n_features == 136


def test_download_dataset_errors(server, tmp_path):
    with pytest.raises(ValueError, match=r"no direct download address.*Webscope"):
        download_dataset("yahoo", root=tmp_path)
    with pytest.raises(ValueError, match="expected files are missing"):
        download_dataset("istella-s", root=tmp_path / "i", url=f"{server}/data.tar.gz", progress=False)


def test_cli_download(server, tmp_path, capsys):
    sha = hashlib.sha256(MSLR_ZIP).hexdigest()
    rc = main(
        [
            "datasets",
            "download",
            "mslr-web30k",
            "--root",
            str(tmp_path),
            "--url",
            f"{server}/MSLR.zip",
            "--sha256",
            sha,
            "--no-progress",
            "--keep-archive",
        ]
    )
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert f"MSLR-WEB30K is ready in {tmp_path}" in out.out
    assert (tmp_path / "MSLR.zip").exists()
    assert main(["datasets", "--data-root", str(tmp_path)]) == 0
    table = capsys.readouterr().out
    assert re.search(r"mslr-web30k\s+136\s+0-4\s+5\s+yes", table)

    rc = main(
        [
            "datasets",
            "download",
            "web30k",
            "--root",
            str(tmp_path / "x"),
            "--url",
            f"{server}/MSLR.zip",
            "--sha256",
            "1" * 64,
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("ctxrank: error: sha256 mismatch") and "Traceback" not in err
    rc = main(
        ["datasets", "download", "web30k", "--root", str(tmp_path / "y"), "--url", f"{server}/nope.zip"]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "HTTP 404" in err
