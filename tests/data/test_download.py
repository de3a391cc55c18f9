"""download / extract / download_dataset against a local http.server on 127.0.0.1 (never the internet)."""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from ctxrank._checks import OptionError
from ctxrank.cli import flag_text, main
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


def _letor(qid: int, labels: list[int], n_features: int = 2) -> str:
    """LETOR lines listing every one of ``n_features`` features (registry datasets refuse short rows)."""
    feats = lambda i: " ".join(f"{k}:{0.5 + i if k == 1 else i}" for k in range(1, n_features + 1))  # noqa: E731
    return "".join(f"{y} qid:{qid} {feats(i)}\n" for i, y in enumerate(labels))


MSLR_ZIP = _zip_bytes(
    {
        f"Fold{k}/{split}.txt": _letor(10 * k + j, [0, 1, 4, 2], n_features=136)
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
    assert exc.value.fields == ("sha256",) and str(exc.value).endswith("pass the new sha256)")
    assert flag_text(exc.value.text).endswith("pass the new --sha256)")
    assert dest.read_bytes() == b"previous"
    assert _leftovers(tmp_path) == ["good.bin"]


def test_a_full_disk_names_the_download_and_the_member_being_written(server, tmp_path, monkeypatch):
    """ENOSPC while a download or an archive member is written: an OSError naming that file and where
    room is needed; an older download is kept, no partial file is left."""
    import errno
    import os

    import ctxrank.data.download as dl

    def full(*_args, **_kw):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    dest = tmp_path / "good.bin"
    dest.write_bytes(b"previous")
    with monkeypatch.context() as m:
        m.setattr(os, "fsync", full)
        full_disk = rf"^cannot write {dest}: the disk is full .* free space where {tmp_path}"
        with pytest.raises(OSError, match=full_disk):
            download(f"{server}/good.bin", dest, progress=False)
    assert dest.read_bytes() == b"previous" and _leftovers(tmp_path) == ["good.bin"]
    z = tmp_path / "a.zip"
    z.write_bytes(_zip_bytes({"d/one.txt": "1"}))
    monkeypatch.setattr(dl._Budget, "_copy", full)
    with pytest.raises(OSError, match=rf"^cannot write {tmp_path / 'out'}.*one.txt: the disk is full"):
        extract(z, tmp_path / "out")


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


def test_download_dataset_without_a_loader(server, tmp_path):
    """Airline Itinerary: no recorded address; with --url the archive is fetched and unpacked, then the
    error says ctxrank cannot load it (its layout is unknown), not that files are missing."""
    with pytest.raises(
        OptionError, match=r"no direct download address is recorded for Airline Itinerary"
    ) as info:
        download_dataset("airline", root=tmp_path, progress=False)
    assert str(info.value).endswith("pass url.") and flag_text(info.value.text).endswith("pass --url URL.")
    with pytest.raises(ValueError, match=r"into .*, but ctxrank cannot load it: .*no loader") as exc:
        download_dataset("airline", root=tmp_path / "a", url=f"{server}/data.tar.gz", progress=False)
    assert "expected files are missing" not in str(exc.value)
    assert (tmp_path / "a" / "sample" / "train.txt").is_file()  # unpacked where the user asked


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


# ----------------------------------------------------------------------------- hostile archives
def _tar_with(tmp_path, name: str, add) -> object:
    """A .tar at ``tmp_path/name`` whose members are written by ``add(tarfile)``."""
    path = tmp_path / name
    with tarfile.open(path, "w") as tf:
        add(tf)
    return path


def _file_member(tf, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))


def _link_member(tf, name: str, target: str, kind=tarfile.SYMTYPE) -> None:
    """A member without data: a link to ``target``, or a directory, FIFO or device by ``kind``."""
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    tf.addfile(info)


def _symlink_chain(tf) -> None:
    """CVE-2025-4517's archive: a chain of symlinks whose expansion exceeds PATH_MAX, so that
    ``os.path.realpath`` stops resolving and ``tarfile``'s ``filter="data"`` (Python 3.11.7 here) accepts
    a link leading out of the target; a hard link through it then overwrites ``victim`` one level above
    the target directory (checked by hand: ``extractall(filter="data")`` overwrote it)."""
    comp, steps, path = "d" * 247, "abcdefghijklmnop", ""
    for step in steps:
        _link_member(tf, f"{path}{comp}", "", tarfile.DIRTYPE)
        _link_member(tf, f"{path}{step}", comp)
        path += comp + "/"
    long_link = "/".join(steps) + "/" + "l" * 254
    _link_member(tf, long_link, "../" * len(steps))
    _link_member(tf, "escape", long_link + "/../")
    _link_member(tf, "flaglink", "escape/victim", tarfile.LNKTYPE)
    _file_member(tf, "flaglink", b"overwritten")


@pytest.mark.parametrize(
    ("name", "add", "kind"),
    [
        ("chain.tar", _symlink_chain, "symbolic link"),
        ("sym.tar", lambda tf: _link_member(tf, "a", "/etc/passwd"), "symbolic link"),
        ("inner.tar", lambda tf: _link_member(tf, "a", "b"), "symbolic link"),
        ("hard.tar", lambda tf: _link_member(tf, "a", "b", tarfile.LNKTYPE), "hard link"),
        ("fifo.tar", lambda tf: _link_member(tf, "p", "", tarfile.FIFOTYPE), "FIFO"),
        ("dev.tar", lambda tf: _link_member(tf, "c", "", tarfile.CHRTYPE), "device file"),
        ("abs.tar", lambda tf: _file_member(tf, "/tmp/abs.txt", b"x"), "outside"),
        ("dots.tar", lambda tf: _file_member(tf, "a/../../up.txt", b"x"), "outside"),
    ],
)
def test_extract_refuses_links_special_members_and_escapes(tmp_path, name, add, kind):
    victim = tmp_path / "victim"
    victim.write_text("original")
    archive = _tar_with(tmp_path, name, add)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=kind):
        extract(archive, out)
    assert victim.read_text() == "original"
    assert _leftovers(out) == []  # nothing written, no staging directory left
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, "out", "victim"])


def test_zip_symlink_member_is_refused(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        info = zipfile.ZipInfo("link")
        info.external_attr = (0o120777) << 16  # S_IFLNK
        zf.writestr(info, "/etc/passwd")
    (tmp_path / "l.zip").write_bytes(buf.getvalue())
    with pytest.raises(ValueError, match="link"):
        extract(tmp_path / "l.zip", tmp_path / "out")
    assert _leftovers(tmp_path / "out") == []


def test_extract_caps_members_and_decompressed_bytes(tmp_path):
    many = _tar_with(tmp_path, "many.tar", lambda tf: [_file_member(tf, f"f{i}", b"x") for i in range(5)])
    with pytest.raises(OptionError, match=r"more than 4 members.*with max_members\)") as info:
        extract(many, tmp_path / "out", max_members=4)
    assert flag_text(info.value.text).endswith("(raise the limit with --max-members N)")
    assert len(extract(many, tmp_path / "ok", max_members=5)) == 5
    assert len(extract(many, tmp_path / "np", max_members=np.int64(5))) == 5  # a NumPy integer too
    for name, bad in (("max_members", True), ("max_bytes", 2**70), ("max_members", 0)):
        with pytest.raises(ValueError, match=f"{name} must be"):
            extract(many, tmp_path / "bad", **{name: bad})
    # a zip bomb in miniature: 1 MB of zeros deflates to about 1 KB; the cap counts decompressed bytes
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("zeros.bin", b"\0" * 1_000_000)
    bomb = tmp_path / "bomb.zip"
    bomb.write_bytes(buf.getvalue())
    assert bomb.stat().st_size < 5_000
    with pytest.raises(OptionError, match=r"more than 100,000 bytes.*with max_extract_bytes\)") as info:
        extract(bomb, tmp_path / "out2", max_bytes=100_000)
    assert flag_text(info.value.text).endswith("(raise the limit with --max-extract-bytes N)")
    assert _leftovers(tmp_path / "out2") == []
    with pytest.raises(ValueError, match="positive integer"):
        extract(bomb, tmp_path / "out3", max_bytes=0)


def test_extract_does_not_follow_links_already_in_the_target(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "d").symlink_to(outside, target_is_directory=True)
    archive = _tar_with(tmp_path, "d.tar", lambda tf: _file_member(tf, "d/f.txt", b"data"))
    extract(archive, out)
    assert list(outside.iterdir()) == []
    assert (out / "d" / "f.txt").read_text() == "data" and not (out / "d").is_symlink()


def test_an_empty_sha256_is_refused_not_replaced_by_the_registrys(tmp_path, monkeypatch):
    """``sha256=""`` is a mistake, not "the registry's digest" (no ``x or default``)."""
    import ctxrank.data.download as dl

    def no_network(*args, **kwargs):
        raise AssertionError("nothing may be fetched")

    monkeypatch.setattr(dl.urllib.request, "urlopen", no_network)
    with pytest.raises(ValueError, match="sha256 must be 64 hexadecimal digits, got ''"):
        dl.download_dataset("mslr-web10k", root=tmp_path, sha256="", progress=False)
