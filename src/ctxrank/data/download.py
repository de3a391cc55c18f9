"""Downloading and unpacking dataset archives (standard library only, plus tqdm for progress).

``download`` streams a URL to a temporary file next to the destination, hashes it on the way, checks
the length announced by the server and the sha256 when one is given, and only then renames it into
place: an interrupted or corrupt download never leaves a file under the destination name.
``extract`` unpacks ``.zip`` and ``.tar``/``.tar.gz``/``.tgz``/``.tar.bz2``/``.tar.xz`` archives with the
standard library, member by member: only regular files and directories, inside the target directory,
within a cap on the member count and the decompressed size. RAR archives (the
format of the LETOR 4.0 releases) have no standard-library reader and are refused with instructions.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from tqdm.auto import tqdm

from ctxrank._checks import OptionError, check_bytes, check_int
from ctxrank._declare import BYTE_COUNT, POSITIVE_INT, option
from ctxrank._io import sha256_file, writing
from ctxrank.data import registry

__all__ = [
    "DownloadError",
    "DownloadOptions",
    "archive_format",
    "download",
    "download_dataset",
    "extract",
    "sha256_file",
]

CHUNK_BYTES = 1 << 20
USER_AGENT = "ctxrank-downloader (Python urllib)"


# Bounds of an archive's content (``extract``'s defaults; ``ctxrank datasets download`` options). The
# largest registered dataset (MSLR-WEB30K) unpacks to about 13 GB in 15 files.
MAX_EXTRACT_BYTES = 64 * 2**30
MAX_MEMBERS = 100_000


class DownloadError(ValueError):
    """A download failed (HTTP error, unreachable host, truncated transfer, checksum mismatch).

    A subclass of ``ValueError`` so that the CLI reports it as a plain error message.
    """


class _ChecksumError(DownloadError, OptionError):
    """A checksum mismatch: its message names the ``sha256`` option, which overrides the registry's."""


@dataclass(frozen=True)
class DownloadOptions:
    """The options of :func:`download_dataset` that ``ctxrank datasets download`` takes as flags."""

    sha256: str | None = option(
        None, "--sha256", "expected sha256 of the archive (overrides the registry)", metavar="HEX"
    )
    url: str | None = option(None, "--url", "download address (overrides the registry's)", metavar="URL")
    max_extract_bytes: int = option(
        MAX_EXTRACT_BYTES,
        "--max-extract-bytes",
        "refuse an archive that decompresses to more than N bytes (default 64 GiB)",
        parse=BYTE_COUNT,
        metavar="N",
    )
    max_members: int = option(
        MAX_MEMBERS, "--max-members", "refuse an archive of more than N members (default 100,000)",
        parse=POSITIVE_INT, metavar="N",
    )  # fmt: skip


def _normalize_sha256(sha256: str | None) -> str | None:
    if sha256 is None:
        return None
    value = sha256.strip().lower()
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise ValueError(f"sha256 must be 64 hexadecimal digits, got {sha256!r}")
    return value


def _filename_from_url(url: str) -> str:
    name = Path(urllib.parse.unquote(urllib.parse.urlparse(url).path)).name
    return name or "download"


def download(
    url: str,
    dest: str | os.PathLike,
    *,
    sha256: str | None = None,
    progress: bool = True,
    timeout: float = 60.0,
) -> Path:
    """Download ``url`` to ``dest`` atomically and return the final path.

    Args:
        url: ``http(s)://`` (or ``file://``) address. Redirects are followed.
        dest: target file; when it is an existing directory, the file name is taken from the URL.
            Missing parent directories are created.
        sha256: expected hex digest of the downloaded bytes. When given, a mismatch raises and
            removes the partial file; when None nothing is verified (the digest is not known).
        progress: show a tqdm progress bar on stderr (total from ``Content-Length`` when sent).
        timeout: socket timeout in seconds for connecting and for each read.

    Returns:
        The path of the complete, verified file.

    Raises:
        DownloadError: HTTP error (e.g. 404), unreachable host, a transfer shorter than the announced
            ``Content-Length``, or a sha256 mismatch. No file is left under ``dest`` in any of these
            cases, and a pre-existing file at ``dest`` is left untouched.
        ValueError: a malformed ``sha256``.
    """
    expected = _normalize_sha256(sha256)
    dest = Path(dest)
    if dest.is_dir():
        dest = dest / _filename_from_url(url)
    dest.parent.mkdir(parents=True, exist_ok=True)

    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        with writing(dest, tmp), os.fdopen(fd, "wb") as out:  # a full disk names dest
            with _open(url, timeout) as response:
                length = response.headers.get("Content-Length")
                total = int(length) if length and length.isdigit() else None
                received, digest = _copy(response, out, url, total=total, desc=dest.name, progress=progress)
            out.flush()
            os.fsync(out.fileno())
        if total is not None and received != total:
            raise DownloadError(
                f"download of {url} is incomplete: received {received} of {total} bytes "
                "(connection closed early); nothing was saved, please retry"
            )
        if expected is not None and digest != expected:
            raise _ChecksumError(
                "sha256 mismatch for {url}: expected {expected}, got {digest}; the partial file was removed "
                "(if the publisher changed the archive, check it and pass the new {sha256})",
                url=url,
                expected=expected,
                digest=digest,
            )
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return dest


def _open(url: str, timeout: float) -> Any:
    """The HTTP response of ``url`` (a context manager); a failure is a :class:`DownloadError`."""
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    try:
        return urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        raise DownloadError(f"download of {url} failed: HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise DownloadError(f"download of {url} failed: {reason}") from exc


def _copy(
    response: Any, out: BinaryIO, url: str, *, total: int | None, desc: str, progress: bool
) -> tuple[int, str]:
    """Copy ``response`` to ``out`` in blocks; returns (bytes copied, their SHA-256 hex digest)."""
    h = hashlib.sha256()
    received = 0
    bytes_bar = {"unit": "B", "unit_scale": True, "unit_divisor": 1024, "leave": False}
    with tqdm(total=total, desc=desc, disable=not progress, **bytes_bar) as bar:
        while True:
            try:
                block = response.read(CHUNK_BYTES)
            except Exception as exc:  # IncompleteRead, reset connection, timeout
                raise DownloadError(
                    f"download of {url} was interrupted after {received} bytes: {exc!r}"
                ) from exc
            if not block:
                return received, h.hexdigest()
            out.write(block)
            h.update(block)
            received += len(block)
            bar.update(len(block))


def archive_format(path: str | os.PathLike) -> str | None:
    """``"zip"``, ``"tar"`` or ``"rar"`` from the file name, None for anything else."""
    name = Path(path).name.lower()
    if name.endswith(".zip"):
        return "zip"
    if name.endswith((".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")):
        return "tar"
    if name.endswith(".rar"):
        return "rar"
    return None


def _member_path(root: Path, name: str, archive: Path) -> Path:
    """``root / name`` after checking that it stays inside ``root`` (``root`` holds no links)."""
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if not parts or name.startswith(("/", "\\")) or ".." in parts or ":" in parts[0]:
        raise ValueError(
            f"{archive}: member {name!r} (absolute, or with '..') would be written outside the target "
            "directory; refusing to extract"
        )
    target = (root / Path(*parts)).resolve()
    if not target.is_relative_to(root):
        raise ValueError(f"{archive}: member {name!r} would be written outside {root}; refusing to extract")
    return target


def _refuse_kind(archive: Path, name: str, kind: str) -> None:
    raise ValueError(
        f"{archive}: member {name!r} is a {kind}; dataset archives hold only regular files and "
        "directories, so links, devices and FIFOs are refused"
    )


class _Budget:
    """Counts members and decompressed bytes against the caps; raises when one is exceeded."""

    def __init__(self, archive: Path, max_bytes: int, max_members: int) -> None:
        self.archive, self.max_bytes, self.max_members = archive, max_bytes, max_members
        self.bytes = self.members = 0

    def member(self) -> None:
        self.members += 1
        if self.members > self.max_members:
            raise OptionError(
                "{archive}: more than {most:,} members; refusing to extract (raise the limit with "
                "{max_members:N})",
                archive=self.archive,
                most=self.max_members,
            )

    def copy(self, src, target: Path) -> None:
        """Stream ``src`` into a new file ``target``, counting the bytes as they are decompressed."""
        with writing(target):
            self._copy(src, target)

    def _copy(self, src, target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("wb") as dst:
            while chunk := src.read(CHUNK_BYTES):
                self.bytes += len(chunk)
                if self.bytes > self.max_bytes:
                    raise OptionError(
                        "{archive}: decompresses to more than {most:,} bytes; refusing to extract (raise "
                        "the limit with {max_extract_bytes:N})",
                        archive=self.archive,
                        most=self.max_bytes,
                    )
                dst.write(chunk)


def _extract_zip(archive: Path, root: Path, budget: _Budget) -> None:
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        for info in infos:
            budget.member()
            target = _member_path(root, info.filename, archive)
            kind = stat.S_IFMT(info.external_attr >> 16)  # 0: no Unix type recorded (a plain file)
            if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
                _refuse_kind(archive, info.filename, "link or special file")
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            with zf.open(info) as src:
                budget.copy(src, target)


def _extract_tar(archive: Path, root: Path, budget: _Budget) -> None:
    with tarfile.open(archive) as tf:
        for member in tf:  # streaming: members are read one at a time, never all listed first
            budget.member()
            target = _member_path(root, member.name, archive)
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif member.isreg():
                src = tf.extractfile(member)
                assert src is not None  # a regular member always has data
                with src:
                    budget.copy(src, target)
            else:
                kind = (
                    "symbolic link"
                    if member.issym()
                    else "hard link"
                    if member.islnk()
                    else (
                        "device file" if member.isdev() else "FIFO" if member.isfifo() else "special member"
                    )
                )
                _refuse_kind(archive, member.name, kind)


def _merge_into(src: Path, dst: Path) -> None:
    """Move the tree ``src`` into ``dst``; files replace files of the same name, nothing else is removed.

    A link already in ``dst`` is replaced, never followed, so the merge cannot write outside ``dst``.
    """
    dst.mkdir(parents=True, exist_ok=True)
    for entry in src.iterdir():
        target = dst / entry.name
        if target.is_symlink():
            target.unlink()
        if entry.is_dir():
            if target.exists() and not target.is_dir():
                target.unlink()
            if target.exists():
                _merge_into(entry, target)
            else:
                os.replace(entry, target)
        else:
            if target.is_dir():
                shutil.rmtree(target)
            os.replace(entry, target)


def extract(
    archive: str | os.PathLike,
    dest_dir: str | os.PathLike,
    *,
    max_bytes: int = MAX_EXTRACT_BYTES,
    max_members: int = MAX_MEMBERS,
) -> list[Path]:
    """Unpack ``archive`` into ``dest_dir`` and return the paths of the extracted files.

    The archive is unpacked member by member (never with ``extractall``) into a temporary directory
    inside ``dest_dir`` and then moved into place, so an archive that fails half-way leaves ``dest_dir``
    as it was. Only regular files and directories are extracted: symbolic and hard links, devices and
    FIFOs are refused outright (dataset archives need none; link chains defeat ``tarfile``'s data filter
    on some Python versions, CVE-2025-4517), every member's resolved path must stay inside the target,
    and at most ``max_members`` members and ``max_bytes`` decompressed bytes (counted while
    decompressing, not taken from the headers) are accepted.

    Raises:
        ValueError: unsupported format (``.rar``: extract with ``unrar x`` or ``7z x``), a corrupt
            archive, an unsafe member, or an archive over a cap.
    """
    archive = Path(archive)
    dest_dir = Path(dest_dir)
    fmt = archive_format(archive)
    if fmt == "rar":
        raise ValueError(
            f"{archive}: RAR archives are not supported (the Python standard library cannot read them); "
            f"extract it yourself, e.g. `unrar x {archive} {dest_dir}/` or `7z x {archive} -o{dest_dir}`"
        )
    if fmt is None:
        raise ValueError(f"{archive}: not a supported archive (expected .zip, .tar, .tar.gz, .tgz, ...)")
    check_bytes("max_bytes", max_bytes)
    check_int("max_members", max_members)
    dest_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".extract-", dir=dest_dir))
    budget = _Budget(archive, max_bytes, max_members)
    try:
        try:
            (_extract_zip if fmt == "zip" else _extract_tar)(archive, staging.resolve(), budget)
        except (zipfile.BadZipFile, tarfile.TarError, EOFError, zlib.error) as exc:
            raise ValueError(f"{archive}: corrupt {fmt} archive ({exc})") from exc
        extracted = sorted(p.relative_to(staging) for p in staging.rglob("*") if p.is_file())
        _merge_into(staging, dest_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [dest_dir / p for p in extracted]


def download_dataset(
    name: str,
    *,
    root: str | os.PathLike | None = None,
    url: str | None = None,
    sha256: str | None = None,
    progress: bool = True,
    keep_archive: bool = False,
    max_extract_bytes: int = MAX_EXTRACT_BYTES,
    max_members: int = MAX_MEMBERS,
) -> Path:
    """Download a registered dataset's archive, verify it, unpack it and check the fold layout.

    Args:
        name: dataset name or alias (see :data:`ctxrank.data.registry.DATASETS`).
        root: target directory (default :func:`ctxrank.data.registry.dataset_root`).
        url: download address overriding the registry's (needed where none is recorded).
        sha256: expected archive digest; default the registry's, when known and ``url`` is the
            registry's. Without either, the archive is not verified.
        progress: tqdm progress bar.
        keep_archive: keep the archive after unpacking (default: removed once unpacked).
        max_extract_bytes, max_members: caps on the unpacked archive (:func:`extract`).

    Returns:
        The directory holding the dataset (pass it as ``root`` / ``--data-root``).

    Raises:
        ValueError: unknown dataset; no download address; a RAR archive (downloaded, but it must be
            unpacked by hand: the message says how); an unpacked archive without the expected files.
        DownloadError: HTTP error, interrupted transfer, checksum mismatch.
    """
    spec = registry.get_spec(name)
    if url is None:
        url = spec.url
        if url is None:
            raise OptionError(
                "no direct download address is recorded for {name}: {notes} Homepage: {homepage}. If you "
                "have an address of the archive, pass {url:URL}.",
                name=spec.display_name,
                notes=spec.notes,
                homepage=spec.homepage,
            )
        expected = spec.sha256 if sha256 is None else sha256  # "" is refused, not the registry's
        filename = spec.archive_name or _filename_from_url(url)
    else:
        expected = sha256
        filename = _filename_from_url(url)
    dest_dir = registry.dataset_root(spec, root)
    archive = download(url, dest_dir / filename, sha256=expected, progress=progress)
    fmt = archive_format(archive)
    if fmt == "rar":
        raise OptionError(
            "downloaded {archive}, but RAR archives are not supported by the Python standard library: "
            "run `unrar x {archive} {dest_dir}/` (or `7z x {archive} -o{dest_dir}`), then use "
            "{data_root} {dest_dir}",
            archive=archive,
            dest_dir=dest_dir,
        )
    if fmt is not None:
        extract(archive, dest_dir, max_bytes=max_extract_bytes, max_members=max_members)
        if not keep_archive:
            archive.unlink(missing_ok=True)
    if spec.layout == "unknown":
        raise ValueError(f"downloaded {url} into {dest_dir}, but ctxrank cannot load it: {spec.notes}")
    try:
        registry.find_files(spec, 1, root=dest_dir)
    except ValueError as exc:
        raise ValueError(
            f"downloaded {url} into {dest_dir}, but the expected files are missing: {exc}"
        ) from exc
    return dest_dir
