"""glibc's allocator as the ``ctxrank`` command sets it (``ctxrank._allocator``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from ctxrank import _allocator

glibc = pytest.mark.skipif(
    _allocator._MALLOPT is None or not sys.platform.startswith("linux"), reason="glibc's mallopt (Linux)"
)

# A training step's pattern in small: one large block freed (glibc then raises its mmap threshold to
# that size), then 24 blocks of 5 MiB, each written, all freed but the last (the heap's top). The
# resident set's growth that stays is what the heap keeps of the freed blocks.
_KEPT_AFTER_FREE = textwrap.dedent(
    """
    import sys
    import numpy as np
    from ctxrank._allocator import limit_heap_growth
    if sys.argv[1] == "limit":
        assert limit_heap_growth()
    elif sys.argv[1] == "import":
        import ctxrank.api, ctxrank.training.loop, ctxrank.training.run  # noqa: F401
    def rss():
        return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS")) / 1024
    np.ones(2**21).sum()  # 16 MiB, mapped and freed: glibc's threshold rises to it
    before = rss()
    blocks = [np.ones(5 * 2**17) for _ in range(24)]  # 5 MiB each
    del blocks[:-1]
    print(rss() - before)
    """
)


def _kept_mib(mode: str) -> float:
    """The script's figure in a process without the user's glibc settings (they would stop the call)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    out = subprocess.run(
        [sys.executable, "-c", _KEPT_AFTER_FREE, mode], capture_output=True, text=True, check=True, env=env
    )
    return float(out.stdout)


@glibc
def test_a_fixed_mmap_threshold_gives_freed_large_blocks_back_where_glibcs_defaults_keep_them():
    """With glibc's defaults the 23 freed 5 MiB blocks stay in the process (about 115 MiB); with the
    command's setting each was mapped on its own and is gone (the live one, 5 MiB, stays)."""
    assert _kept_mib("system") > 80
    assert _kept_mib("limit") < 15


@glibc
@pytest.mark.parametrize(
    "env", [{"MALLOC_MMAP_THRESHOLD_": "65536"}, {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=65536"}]
)
def test_a_users_own_glibc_setting_is_kept(monkeypatch, env):
    calls = []
    monkeypatch.setattr(_allocator, "_MALLOPT", lambda *a: calls.append(a) or 1)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert _allocator.limit_heap_growth() is False
    assert calls == []


def test_nothing_is_set_without_glibc(monkeypatch):
    monkeypatch.setattr(_allocator, "_MALLOPT", None)
    assert _allocator.limit_heap_growth() is False


def test_the_threshold_and_trim_threshold_set(monkeypatch):
    calls = []
    for key in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.setattr(_allocator, "_MALLOPT", lambda *a: calls.append(a) or 1)
    assert _allocator.limit_heap_growth() is True
    assert calls == [(-3, 4 * 2**20), (-1, 8 * 2**20)]  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD (malloc.h)


def test_the_command_sets_it_in_its_own_process(monkeypatch):
    import ctxrank.cli as cli

    calls = []
    monkeypatch.setattr(cli, "limit_heap_growth", lambda: calls.append(1) or True)
    # a usage error: argparse stops before the command runs
    assert cli.main(["data-info", "--no-such-option"]) == 2
    assert calls == []
    assert cli.main(["data-info", "/nonexistent/file.txt"]) == 2  # the command runs (and reports the file)
    assert calls == [1]


@glibc
def test_importing_the_library_leaves_glibcs_defaults():
    """A notebook's allocator is its owner's: importing ctxrank's API and training loop sets nothing."""
    assert _kept_mib("import") > 80
