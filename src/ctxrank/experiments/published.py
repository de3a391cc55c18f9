"""Published tables: blocks of README.md and docs/*.md regenerated from stored evidence.

A page states an experiment's numbers only inside a marked block::

    <!-- evidence: demo -->
    | model | ndcg@1 | ... |            (the headline table of the report's table.md, verbatim)
    ...
    <!-- /evidence -->

or another table of the report: ``<!-- evidence: NAME#baselines -->`` (the target against each other
model, corrected p) or ``<!-- evidence: NAME#anomaly -->`` (QILCM's Figure 2: the per-query gap by
anomaly bucket). ``NAME`` is the directory ``evidence/NAME`` of the repository. A summary over
several experiments, one row each (two models' means and the comparison of the first with the second
as each report tests and corrects it)::

    <!-- evidence summary: qilcm vs lambdamart on ndcg@10,map: NAME1 NAME2 ... -->

The debiasing table of click experiments (:mod:`ctxrank.experiments.debiasing`: each model's naive run,
debiased runs and skyline, the share of the gap each closes and its corrected test against the naive run)::

    <!-- evidence debiasing on ndcg@10: NAME1 NAME2 ... -->

A number in prose is an inline value of one report, printed as its table prints it::

    ... (raw p <!-- evidence value: qilcm-table3 p qilcm variant2 ndcg@1 -->0.037<!-- /evidence -->) ...

``KIND ARGS`` (:data:`VALUES`): ``mean MODEL METRIC`` (4 decimals), ``p TARGET BASELINE METRIC`` (the raw
p), ``p-corrected TARGET BASELINE METRIC`` (corrected over the report's family), ``improvement TARGET
BASELINE METRIC`` (``+1.23%``), ``ci TARGET BASELINE METRIC`` (the CI of the difference,
``[-0.0026, +0.0028]``), ``difference MODEL OTHER METRIC`` (``MODEL``'s mean minus ``OTHER``'s in the
same report, ``-0.0222``), ``relative MODEL OTHER METRIC`` (``MODEL``'s mean relative to ``OTHER``'s
in the same report, ``+4.94%``), ``change MODEL METRIC OTHER`` (``MODEL``'s mean in ``NAME`` minus its
mean in ``evidence/OTHER``, ``+0.0012``), ``gap-closed RUN METRIC`` (the share of the gap between its model's
naive run and skyline a click experiment's debiased ``RUN`` closes, ``74%``).

:func:`published_blocks` finds the blocks, :func:`headline` cuts the table (by default the headline:
means, the target's improvement, corrected p and CI) out of a regenerated ``table.md``,
:func:`summary_table` builds a summary from regenerated ``results.json`` dicts, and
``python -m ctxrank.experiments.published [--check]`` rewrites (or checks) every block;
``tests/experiments/test_evidence.py`` fails on any difference.

An evidence directory may hold, instead of an experiment, the record of ``ctxrank clicks coverage``
(``coverage.json``, :mod:`ctxrank.clicks.coverage`): its block ``<!-- evidence: NAME -->`` is the
coverage table recomputed from the record's rows, and its inline values are ``covered ESTIMATOR``
(``376/400``) and ``coverage ESTIMATOR`` (``94.0%``).
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from ctxrank.clicks.coverage import KIND as COVERAGE_KIND
from ctxrank.clicks.coverage import coverage_counts, coverage_table
from ctxrank.experiments.debiasing import debiasing_table, families, gap_closed
from ctxrank.experiments.evidence import rebuild_report
from ctxrank.experiments.report import _fmt_p, _p_text, fmt_ci, fmt_improvement

__all__ = [
    "VALUES",
    "Block",
    "headline",
    "inline_value",
    "published_blocks",
    "regenerate",
    "regenerated_report",
    "rewrite",
    "summary_table",
]

#: the first line of each kind of table a block can publish (``NAME`` or ``NAME#KIND``)
TABLE_HEADS = {"": "| model |", "anomaly": "| bucket |", "baselines": "| baseline |"}
_KINDS = "|".join(f"#{kind}" for kind in TABLE_HEADS if kind)
_BLOCK = re.compile(rf"<!-- evidence: ([A-Za-z0-9_.+-]+(?:{_KINDS})?) -->\n(.*?)<!-- /evidence -->", re.S)
_SUMMARY_HEAD = "summary: "
_DEBIASING_HEAD = "debiasing on "
_VALUE_HEAD = "value: "
_VALUE = re.compile(
    r"<!-- evidence (value: [A-Za-z0-9_.+-]+ [a-z-]+(?: [A-Za-z0-9_.@-]+)+) -->([^<\n]*)<!-- /evidence -->"
)
_WORD = r"[A-Za-z0-9_.@-]+"
_SUMMARY = re.compile(
    rf"<!-- evidence (summary: {_WORD} vs {_WORD} on [A-Za-z0-9_.@,-]+: [A-Za-z0-9_.+ -]+?) -->"
    r"\n(.*?)<!-- /evidence -->",
    re.S,
)
_DEBIASING = re.compile(
    rf"<!-- evidence (debiasing on {_WORD}: [A-Za-z0-9_.+ -]+?) -->\n(.*?)<!-- /evidence -->", re.S
)


class Block:
    """One marked block: the page, its name (``NAME``, ``NAME#KIND`` or ``summary: ...``), the text
    between the markers."""

    def __init__(self, page: Path, name: str, text: str) -> None:
        self.page, self.name, self.text = page, name, text

    @property
    def directories(self) -> list[str]:
        """The evidence directories the block is built from: ``NAME`` of ``NAME`` or ``NAME#KIND``, the
        listed ones of a summary."""
        if self.name.startswith(_SUMMARY_HEAD):
            return _summary_parts(self.name)[3]
        if self.name.startswith(_DEBIASING_HEAD):
            return self.name.partition(": ")[2].split()
        if self.name.startswith(_VALUE_HEAD):
            name, kind, *args = self.name[len(_VALUE_HEAD) :].split()
            return [name, args[-1]] if kind == "change" and args else [name]
        return [self.name.partition("#")[0]]


def published_blocks(root: Path) -> list[Block]:
    """Every evidence block of ``root``'s README.md and docs/*.md, in page order."""
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    found = []
    for page in filter(Path.is_file, pages):
        text = page.read_text()
        blocks = [m for kind in (_BLOCK, _SUMMARY, _DEBIASING, _VALUE) for m in kind.finditer(text)]
        matches = sorted(blocks, key=lambda m: m.start())
        found += [(page, m) for m in matches]
    return [Block(p, m.group(1), m.group(2)) for p, m in found]


def headline(table_md: str, head: str = TABLE_HEADS[""]) -> str:
    """A table of a report's ``table.md`` with its caption: the lines from the one starting with
    ``head`` (default: the headline table of means, the target's improvement, corrected p and CI) to
    the first blank line after it, and the paragraph before it (the test and what its p-value means;
    for the anomaly table, its unit and method)."""
    lines = table_md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(head))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    first = start - 1
    while first > 0 and lines[first - 1].strip():
        first -= 1
    return "\n".join([*lines[first : start - 1], "", *lines[start:end]]) + "\n"


#: the record of ``ctxrank clicks coverage`` an evidence directory may hold instead of an experiment
COVERAGE_RECORD = "coverage.json"


def regenerated_report(root: Path, directory: str) -> tuple[str, dict[str, Any]]:
    """``table.md`` and ``results.json`` of ``evidence/DIRECTORY``'s report, regenerated (nothing is
    trained); for a coverage record, its table recomputed from its rows and the record."""
    record = root / "evidence" / directory / COVERAGE_RECORD
    if record.is_file():
        loaded = json.loads(record.read_text(encoding="utf-8"))
        return coverage_table(loaded), loaded
    with tempfile.TemporaryDirectory(prefix="ctxrank-published-") as tmp:
        results = rebuild_report(root / "evidence" / directory, tmp)
        return (Path(tmp) / "table.md").read_text(), results


def summary_table(target: str, baseline: str, metrics: list[str], reports: dict[str, dict[str, Any]]) -> str:
    """One row per report (``reports``: evidence name -> its ``results.json`` dict): the dataset and
    protocol, the runs, ``baseline``'s and ``target``'s means of ``metrics`` and the comparison of
    ``target`` with ``baseline`` on each, with the report's own test and its p corrected over that
    report's family (raw p beside it)."""
    joined = " / ".join(metrics)
    lines = [
        f"Each row is the report of the evidence directory it names, regenerated: {target} against "
        f"{baseline}, improvement in % ((mean of {target} - mean of {baseline}) / |mean of {baseline}|) and "
        "the report's default test, p corrected over that report's family (its table says which), the raw "
        "p beside it; the instruction set PyTorch's CPU kernels used in its runs (unrecorded before runs "
        "recorded it).",
        "",
        f"| evidence | data | runs | {baseline} {joined} | {target} {joined} | {target} - {baseline} | "
        "p | test, correction | CPU instructions |",
        "|---|---|---:|---|---|---|---|---|---|",
    ]
    for name, res in reports.items():
        table, data = res["table"], res["spec"]["data"]
        if target not in table or baseline not in table:
            raise ValueError(f"evidence/{name} has no runs of both {target!r} and {baseline!r}")
        found = {
            c["metric"]: c for c in res["comparisons"] if c["target"] == target and c["baseline"] == baseline
        }
        missing = [m for m in metrics if m not in found]
        if missing:
            raise ValueError(f"evidence/{name}: no comparison of {target} with {baseline} on {missing}")
        mean = {m: " / ".join(f"{table[m][k]['mean']:.4f}" for k in metrics) for m in (baseline, target)}
        gain = " / ".join(fmt_improvement(found[k]["improvement_pct"]) for k in metrics)
        correction = res["test"]["correction"]
        p = " / ".join(_p_text(found[k], correction) for k in metrics)
        isa = "/".join(res["compute"].get("cpu_capability", ["unrecorded"]))
        lines.append(
            f"| `{name}` | {data['dataset']}, {data['protocol']} | {len(res['runs'])} | {mean[baseline]} | "
            f"{mean[target]} | {gain} | {p} | {res['test']['name']}, {correction} | {isa} |"
        )
    return "\n".join(lines) + "\n"


def _comparison(res: dict[str, Any], target: str, baseline: str, metric: str) -> dict[str, Any]:
    found = [
        c
        for c in res["comparisons"]
        if (c["target"], c["baseline"], c["metric"]) == (target, baseline, metric)
    ]
    if not found:
        raise ValueError(f"{res['name']}: no comparison of {target} with {baseline} on {metric}")
    return found[0]


def _relative(res: dict[str, Any], model: str, other: str, metric: str) -> float:
    """``MODEL``'s mean relative to ``OTHER``'s in the same report, in percent (``+4.94`` = 4.94% above)."""
    _mean(res, model, metric), _mean(res, other, metric)  # both present, or a clear error
    mean, reference = res["table"][model][metric]["mean"], res["table"][other][metric]["mean"]
    if reference == 0:
        raise ValueError(f"{res['name']}: the mean of {other} on {metric} is 0, no relative difference")
    return 100 * (mean / reference - 1)


def _ci(res: dict[str, Any], target: str, baseline: str, metric: str) -> str:
    ci = _comparison(res, target, baseline, metric)["ci"]
    if ci is None:
        raise ValueError(f"{res['name']}: no confidence interval of {target} against {baseline} on {metric}")
    return fmt_ci(ci)


def _mean(res: dict[str, Any], model: str, metric: str) -> str:
    if metric not in res["table"].get(model, {}):
        raise ValueError(f"{res['name']}: no mean of {model} on {metric} (models: {sorted(res['table'])})")
    return f"{res['table'][model][metric]['mean']:.4f}"


def _coverage(res: dict[str, Any], estimator: str) -> dict[str, int]:
    """The covered and checked intervals of ``estimator`` in a coverage record, from its rows."""
    if res.get("kind") != COVERAGE_KIND:
        raise ValueError(f"{res.get('name', 'the evidence')}: not an offline coverage record")
    counts = coverage_counts(res["rows"])
    if estimator not in counts:
        raise ValueError(f"the coverage record has no estimator {estimator!r} (estimators: {sorted(counts)})")
    return counts[estimator]


def _gap_closed(res: dict[str, Any], run: str, metric: str) -> str:
    """The share of its model's naive-to-skyline gap a click experiment's ``run`` closes
    (:func:`ctxrank.experiments.debiasing.gap_closed`), from the report's means."""
    family = next((f for f in families(res["spec"]) if run in f.methods.values()), None)
    if family is None:
        raise ValueError(f"{res['name']}: {run!r} is no debiased run of a model with a naive run")
    runs = [m for m in (run, family.naive, family.skyline) if m]
    for m in runs:
        _mean(res, m, metric)  # each present, or a clear error
    means = {m: res["table"][m][metric]["mean"] for m in runs}  # unrounded, as the debiasing table
    closed = gap_closed(means, family, run)
    if closed is None:
        raise ValueError(f"{res['name']}: {family.model} has no skyline above its naive run on {metric}")
    return f"{closed:.0f}%"


#: the kinds of inline value (``<!-- evidence value: NAME KIND ARGS -->``): KIND -> (its arguments, the
#: value of a report's ``results.json`` (a coverage record's, for ``covered`` and ``coverage``) as its
#: table prints it)
VALUES = {
    "mean": (("MODEL", "METRIC"), _mean),
    "p": (("TARGET", "BASELINE", "METRIC"), lambda res, *a: _fmt_p(_comparison(res, *a)["p"])),
    "p-corrected": (
        ("TARGET", "BASELINE", "METRIC"),
        lambda res, *a: _fmt_p(_comparison(res, *a)["p_adjusted"]),
    ),
    "improvement": (
        ("TARGET", "BASELINE", "METRIC"),
        lambda res, *a: fmt_improvement(_comparison(res, *a)["improvement_pct"]),
    ),
    "ci": (("TARGET", "BASELINE", "METRIC"), lambda res, *a: _ci(res, *a)),
    "difference": (
        ("MODEL", "OTHER", "METRIC"),
        lambda res, model, other, metric: (
            f"{float(_mean(res, model, metric)) - float(_mean(res, other, metric)):+.4f}"
        ),
    ),
    "relative": (
        ("MODEL", "OTHER", "METRIC"),
        lambda res, model, other, metric: f"{_relative(res, model, other, metric):+.2f}%",
    ),
    "covered": (
        ("ESTIMATOR",),
        lambda res, name: "{covered}/{checked}".format(**_coverage(res, name)),
    ),
    "coverage": (
        ("ESTIMATOR",),
        lambda res, name: f"{_coverage(res, name)['covered'] / _coverage(res, name)['checked']:.1%}",
    ),
    "gap-closed": (("RUN", "METRIC"), _gap_closed),
    "change": (
        ("MODEL", "METRIC", "OTHER"),
        lambda res, model, metric, other: (
            f"{float(_mean(res, model, metric)) - float(_mean(other, model, metric)):+.4f}"
        ),
    ),
}


def inline_value(name: str, reports: dict[str, dict[str, Any]]) -> str:
    """The text of the inline value ``value: NAME KIND ARGS`` (:data:`VALUES`) from ``reports``
    (evidence directory -> its regenerated ``results.json``; ``NAME``'s, and ``OTHER``'s for a change)."""
    directory, kind, *args = name[len(_VALUE_HEAD) :].split()
    if kind not in VALUES:
        raise ValueError(f"evidence value {name!r}: unknown kind {kind!r}; valid: {', '.join(VALUES)}")
    wanted, value = VALUES[kind]
    if len(args) != len(wanted):
        raise ValueError(f"evidence value {name!r}: {kind} takes {' '.join(wanted)}, got {' '.join(args)!r}")
    if kind == "change":
        args[-1] = reports[args[-1]]  # type: ignore[call-overload]
    return value(reports[directory], *args)


def _summary_parts(name: str) -> tuple[str, str, list[str], list[str]]:
    """``summary: T vs B on M1,M2: D1 D2`` -> ``(T, B, [M1, M2], [D1, D2])``."""
    head, _, directories = name[len(_SUMMARY_HEAD) :].rpartition(": ")
    pair, _, metrics = head.partition(" on ")
    target, _, baseline = pair.partition(" vs ")
    return target, baseline, metrics.split(","), directories.split()


def regenerate(root: Path, name: str, reports: dict[str, tuple[str, dict[str, Any]]] | None = None) -> str:
    """The table ``name`` (``NAME``, ``NAME#KIND`` or ``summary: ...``) publishes from its evidence
    (``reports``: directory -> :func:`regenerated_report`, the reports already regenerated; filled in)."""
    reports = {} if reports is None else reports
    directories = Block(Path(), name, "").directories
    for directory in directories:
        if directory not in reports:
            reports[directory] = regenerated_report(root, directory)
    if name.startswith(_VALUE_HEAD):
        return inline_value(name, {d: reports[d][1] for d in directories})
    if name.startswith(_DEBIASING_HEAD):
        return debiasing_table(root, directories, name[len(_DEBIASING_HEAD) :].partition(": ")[0])
    if name.startswith(_SUMMARY_HEAD):
        target, baseline, metrics, _ = _summary_parts(name)
        return summary_table(target, baseline, metrics, {d: reports[d][1] for d in directories})
    if reports[directories[0]][1].get("kind") == COVERAGE_KIND and "#" not in name:  # its whole table
        return reports[directories[0]][0]
    return headline(reports[directories[0]][0], TABLE_HEADS[name.partition("#")[2]])


def _marked(name: str, text: str) -> str:
    """The block ``name`` with ``text`` between its markers, as a page holds it (an inline value on its
    line, a table on the lines below its marker)."""
    if name.startswith(_VALUE_HEAD):
        return f"<!-- evidence {name} -->{text}<!-- /evidence -->"
    kind = "evidence " if name.startswith((_SUMMARY_HEAD, _DEBIASING_HEAD)) else "evidence: "
    return f"<!-- {kind}{name} -->\n{text}<!-- /evidence -->"


def rewrite(root: Path, *, check: bool = False) -> list[str]:
    """Rewrite every stale evidence block of ``root``'s README.md and docs/*.md (``check``: rewrite
    none); returns ``PAGE: evidence NAME`` for each stale block."""
    stale = []
    reports: dict[str, tuple[str, dict[str, Any]]] = {}  # one report a directory, however many blocks use it
    for block in published_blocks(root):
        fresh = regenerate(root, block.name, reports)
        if fresh != block.text:
            stale.append(f"{block.page.relative_to(root)}: evidence {block.name}")
            if not check:
                old, new = _marked(block.name, block.text), _marked(block.name, fresh)
                text = block.page.read_text()  # a block stated twice: both rewritten at its first
                assert old in text or new in text, old
                block.page.write_text(text.replace(old, new))
    return stale


def main(argv: list[str] | None = None) -> int:
    """Rewrite every evidence block of the repository (``--check``: exit 1 if any is stale)."""
    argv = sys.argv[1:] if argv is None else argv
    check = "--check" in argv
    stale = rewrite(Path(__file__).resolve().parents[3], check=check)
    for line in stale:
        print(("stale: " if check else "rewrote: ") + line)
    return 1 if stale and check else 0


if __name__ == "__main__":
    raise SystemExit(main())
