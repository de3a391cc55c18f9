"""A recomputed report against the stored evidence's: which cells of the table differ, by how much, and
what the two sets of runs were computed with differently (``ctxrank demo`` prints it).

On one machine the same code and seeds give bit-identical runs. Another CPU can change them: PyTorch
dispatches its CPU kernels on the instruction set (``AVX512``, ``AVX2``, ``DEFAULT``), whose float sums
differ in the last bits, and early stopping can turn that into another epoch. The differences are
reported at the precision the table prints (4 decimals for means, std and CI bounds, 2 for
improvements, the p-values as printed).
"""

from __future__ import annotations

from typing import Any

from ctxrank.experiments.report import _fmt_p, fmt_ci, fmt_improvement

__all__ = ["context_differences", "recomputed_text", "table_differences"]

#: what the runs were computed with, in ``results.json``'s ``compute`` (:func:`report._compute`)
_CONTEXT_WORDS = {
    "cpu_capability": "PyTorch's CPU instruction set",
    "cpu": "CPU",
    "threads": "threads a run",
    "device": "device",
    "packages": "packages",
}


def _cell(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def table_differences(stored: dict[str, Any], fresh: dict[str, Any]) -> list[str]:
    """One line per cell of the report's table that prints differently in ``fresh`` than in ``stored``
    (two ``results.json`` dicts of the same experiment): the means and std of every model and metric,
    then each comparison's improvement, raw and corrected p and CI bounds."""
    lines = []
    for model, row in stored["table"].items():
        for metric, cell in row.items():
            new = fresh["table"].get(model, {}).get(metric)
            if new is None:
                lines.append(f"{model} {metric}: in the stored table only")
                continue
            for stat in ("mean", "std"):
                a, b = _cell(cell[stat], ".4f"), _cell(new[stat], ".4f")
                if a != b:
                    by = new[stat] - cell[stat]
                    lines.append(f"{model} {metric} {stat}: {a} stored, {b} now ({by:+.4f})")
    fresh_comparisons = {(c["baseline"], c["metric"]): c for c in fresh["comparisons"]}
    for c in stored["comparisons"]:
        new = fresh_comparisons.get((c["baseline"], c["metric"]))
        name = f"{c['target']} vs {c['baseline']} {c['metric']}"
        if new is None:
            lines.append(f"{name}: in the stored table only")
            continue
        shown = {
            "improvement": (fmt_improvement(c["improvement_pct"]), fmt_improvement(new["improvement_pct"])),
            "raw p": (_fmt_p(c["p"]), _fmt_p(new["p"])),
            "corrected p": (_fmt_p(c.get("p_adjusted")), _fmt_p(new.get("p_adjusted"))),
            "CI": tuple(fmt_ci(ci) or "-" for ci in (c.get("ci"), new.get("ci"))),
        }
        lines += [f"{name} {what}: {a} stored, {b} now" for what, (a, b) in shown.items() if a != b]
    return lines


def context_differences(stored: dict[str, Any], fresh: dict[str, Any]) -> list[str]:
    """What the stored runs and the fresh ones were computed with differently (``compute``: PyTorch's
    CPU instruction set, CPU model, threads, device, package versions; ``run_code``: the code), one
    line each, both sides named; ``unrecorded`` where the stored runs predate the record."""
    lines = []
    a, b = stored.get("compute", {}), fresh.get("compute", {})
    for key, words in _CONTEXT_WORDS.items():
        was, now = a.get(key, ["unrecorded"]), b.get(key, ["unrecorded"])
        if was != now:
            lines.append(f"{words}: {', '.join(was)} (stored runs), {', '.join(now)} (these runs)")

    def code(results: dict[str, Any]) -> list[str]:
        runs = [c for c in results.get("run_code", []) if isinstance(c, dict)]
        dirty = " with uncommitted changes"
        return sorted((c.get("git_sha") or "no commit")[:7] + dirty * bool(c.get("git_dirty")) for c in runs)

    if code(stored) != code(fresh):
        lines.append(f"code: {', '.join(code(stored))} (stored runs), {', '.join(code(fresh))} (these runs)")
    return lines


def recomputed_text(stored: dict[str, Any], fresh: dict[str, Any], where: str) -> str:
    """What a user who recomputed the table of the evidence at ``where`` should know: that it is
    identical, or the cells that differ and what the runs were computed with differently."""
    if stored.get("fingerprint") != fresh.get("fingerprint"):
        return (
            f"not compared with the stored evidence {where}: it is of another specification (fingerprint "
            f"{stored.get('fingerprint')}, these runs {fresh.get('fingerprint')})"
        )
    cells, context = table_differences(stored, fresh), context_differences(stored, fresh)
    if not cells:
        same = "identical to the stored evidence" + f" {where}" + " (every cell as printed)"
        return same + ("" if not context else "; computed differently: " + "; ".join(context))
    lines = [f"differs from the stored evidence {where} in {len(cells)} cell(s):"]
    lines += [f"  {line}" for line in cells]
    if context:
        lines.append("computed differently (a likely cause; the runs are bit-identical on one machine):")
        lines += [f"  {line}" for line in context]
        isa = stored.get("compute", {}).get("cpu_capability", [])
        if any(line.startswith(_CONTEXT_WORDS["cpu_capability"]) for line in context):
            again = (
                f"; `ATEN_CPU_CAPABILITY={isa[0].lower()}` before the command makes PyTorch use the stored "
                "runs' instruction set where this CPU has it"
                if len(isa) == 1 and isa[0] != "unrecorded"
                else ""
            )
            lines.append(
                "  another CPU instruction set changes float sums in the last bits, and early stopping can "
                f"turn that into another epoch{again}"
            )
    else:
        lines.append(
            "computed with the same CPU instruction set, CPU, threads, packages and code: a difference "
            "not explained by what runs record"
        )
    return "\n".join(lines)
