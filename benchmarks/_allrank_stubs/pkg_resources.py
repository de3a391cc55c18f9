"""Stand-in for setuptools' ``pkg_resources`` (allRank's ``utils/file_utils.py`` imports ``Requirement``
and ``resource_filename`` to find its packaged config files, which benchmarks/bench_attn_step.py never
uses; see README.md). Calling either is an error."""

from __future__ import annotations


class Requirement:
    @classmethod
    def parse(cls, text):
        raise NotImplementedError("pkg_resources stub (benchmarks/_allrank_stubs): not for use")


def resource_filename(package, name):
    raise NotImplementedError("pkg_resources stub (benchmarks/_allrank_stubs): not for use")
