"""The report of an experiment: results.json, Markdown and CSV tables, PNG figures.

Statistics (QILCM paper, Table 2): mean +- sample std over runs; the target model's improvement (%,
relative to the baseline's absolute value) over the best baseline per metric (the baseline with the
highest mean on that metric); a paired test of the target against each baseline, the one
``[report] test`` names (``ctxrank.experiments.stats``: by default blocked by fold for published folds,
the corrected resampled t-test over runs for random splits; the paper's plain t-test over runs only
as ``runs-plain``), with a 95% CI of the mean difference; optionally Holm-adjusted over all the
table's comparisons. Every caption names the test, its unit and its n, and results.json records them
with each comparison's CI.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from ctxrank._io import atomic_write, write_json
from ctxrank.experiments import stats
from ctxrank.experiments.anomaly import bucket_gaps, method_text
from ctxrank.experiments.provenance import environment
from ctxrank.experiments.spec import REFERENCE, ExperimentSpec, err_max_label, split_protocol
from ctxrank.experiments.stats import CORRECTIONS, adjust, mean_std
from ctxrank.experiments.store import RunStore
from ctxrank.metrics import metric_convention

__all__ = [
    "build_report",
    "collect",
    "fmt_ci",
    "fmt_improvement",
    "improvement_pct",
    "query_means",
    "run_means",
]


def collect(spec: ExperimentSpec, store: RunStore) -> tuple[list[tuple[int, int]], dict[str, list[dict]]]:
    """The runs every model has finished (in run order) and each model's records for them."""
    names = spec.run_names()
    keys = [k for k in spec.run_keys() if all(store.has_run(m, *k) for m in names)]
    metrics = tuple(spec.report.metrics)
    return keys, {m: [store.load_run(m, *k, metrics=metrics) for k in keys] for m in names}


def run_means(records: list[dict], metric: str) -> np.ndarray:
    """One value per run: the mean of ``metric`` over that run's test queries (NaN entries skipped)."""
    return np.array([np.nanmean(np.asarray(r["metrics"][metric], dtype=float)) for r in records])


def query_means(records: list[dict], metric: str) -> dict[str, float]:
    """Query id -> the query's ``metric`` averaged over the runs in which it was a test query."""
    sums: dict[str, list[float]] = {}
    for r in records:
        for q, v in zip(r["query_ids"], r["metrics"][metric], strict=True):
            sums.setdefault(q, []).append(v)
    return {q: float(np.nanmean(v)) if np.isfinite(v).any() else float("nan") for q, v in sums.items()}


def test_train_ratio(records: list[dict]) -> float:
    """n_test / n_train of the corrected resampled t-test: the runs' mean test queries over their mean
    queries outside the test split (training + validation: all the data a run learned from)."""
    q = [r["split"]["queries"] for r in records]
    return float(np.mean([x["test"] for x in q]) / np.mean([x["train"] + x["valid"] for x in q]))


def _pair(a: list[dict], b: list[dict], metric: str, spec: ExperimentSpec) -> dict[str, Any]:
    """The target-vs-baseline test ``[report] test`` names (a dict of ``ctxrank.experiments.stats``)."""
    rep = spec.report
    test = rep.test
    if stats.UNITS[test] == "queries":
        qa, qb = query_means(a, metric), query_means(b, metric)
        common = sorted(set(qa) & set(qb))
        x, y = np.array([qa[q] for q in common]), np.array([qb[q] for q in common])
        if test == "queries":
            return stats.query_ttest(x, y, n_resamples=rep.resamples, seed=rep.stats_seed)
        return stats.permutation_test(x, y, n_resamples=rep.resamples, seed=rep.stats_seed)
    ra, rb = run_means(a, metric), run_means(b, metric)
    if test == "folds":
        return stats.fold_test(ra, rb, [r["fold"] for r in a])
    if test == "corrected-resampled":
        return stats.corrected_resampled_test(ra, rb, test_train_ratio=test_train_ratio(a))
    return stats.runs_plain_test(ra, rb)


def _fmt_p(p: float | None) -> str:
    if p is None or not np.isfinite(p):
        return "no test"
    return f"{p:.2g}" if p >= 1e-4 else f"{p:.1e}"


def _fmt_num(x: float | None, fmt: str) -> str:
    return "" if x is None else format(x, fmt)


def fmt_improvement(pct: float) -> str:
    """An improvement (:func:`improvement_pct`) as every table prints it: ``+1.23%``."""
    return f"{pct:+.2f}%"


def fmt_ci(ci: Any) -> str:
    """A confidence interval of a difference as every table prints it: ``[-0.0026, +0.0028]``; ``""``
    without one."""
    return "" if ci is None else f"[{ci[0]:+.4f}, {ci[1]:+.4f}]"


_ZERO_WIDTH = {
    "t interval (every difference equal: zero width)",
    "every difference 0",
    "every difference equal: zero width",
}


def _test_info(spec: ExperimentSpec, comparisons: list[dict], n_runs: int) -> dict[str, Any]:
    """What results.json records about the test (name, unit, n, CI method, ...) and the caption's text."""
    rep = spec.report
    name, unit = rep.test, stats.UNITS[rep.test]
    ns = sorted({c["n"] for c in comparisons})
    n_text = str(ns[0]) if len(ns) == 1 else f"{ns[0]}-{ns[-1]} (NaN values excluded)"
    reasons = sorted({c["reason"] for c in comparisons if c["reason"]})
    # the CI methods used (the zero-width CI of a constant difference is not a method of its own)
    ci_methods = sorted({c["ci_method"] for c in comparisons if c["ci_method"]} - _ZERO_WIDTH) or sorted(
        {c["ci_method"] for c in comparisons if c["ci_method"]}
    )
    info: dict[str, Any] = {
        "name": name,
        "unit": unit,
        "description": stats.TESTS[name],
        "protocol": split_protocol(spec),
        "default": stats.DEFAULT_TEST[split_protocol(spec)] == name,
        "n": ns[0] if len(ns) == 1 else ns,
        "runs": n_runs,
        "alternative": "two-sided",
        "confidence": stats.CONFIDENCE,
        "ci_method": ci_methods,
        "correction": rep.correction,
        "family": _family_text(spec, len(comparisons)),
        "reason": reasons[0] if reasons else None,
    }
    if unit == "queries":
        info.update(resamples=rep.resamples, seed=rep.stats_seed)
    if "test_train_ratio" in comparisons[0]:
        info["test_train_ratio"] = comparisons[0]["test_train_ratio"]
    caption = f"{stats.TESTS[name]}, two-sided; unit: {unit}, n = {n_text}"
    if "test_train_ratio" in info:
        caption += f", n_test/n_train = {info['test_train_ratio']:.3f}"
    if unit == "queries" and n_runs < stats.MIN_RUNS:
        caption += f" (only {n_runs} run(s) per model: the test is over these trained models' queries)"
    if unit == "queries":
        caption += (
            ". What this p means: whether these trained models differ on these test queries; the runs "
            "share their test queries, so the variation between training runs and between data splits is "
            "not in it, and it does not say that the methods differ on other data (a test over runs or "
            "folds does)"
        )
    if ci_methods:
        caption += f"; {stats.CONFIDENCE:.0%} CI of the mean difference: {', '.join(ci_methods)}"
        if rep.correction != "none":  # a CI per comparison, at the level of one comparison
            caption += f", unadjusted (each comparison's own {stats.CONFIDENCE:.0%}, not the family's)"
    if rep.correction != "none":
        caption += f"; p corrected over the family ({info['family']}): {CORRECTIONS[rep.correction]}"
    else:
        caption += f"; p not corrected for the {len(comparisons)} comparisons"
    if reasons:
        caption += f". No p-value: {'; '.join(reasons)}"
    info["caption"] = caption
    return info


#: what :func:`_compute` collects from the runs' contexts
COMPUTE_KEYS = ("threads", "device", "cpu", "cpu_capability")
#: the packages whose versions the runs were computed with that :func:`_compute` collects
PACKAGES = ("torch", "numpy", "scipy", "lightgbm")


def _compute(records: dict[str, list[dict]]) -> dict[str, list]:
    """The thread counts, devices, CPU models, PyTorch CPU instruction sets and package versions
    (``packages``: ``"torch 2.13.0"``, ...) the stored runs were computed with (``"unrecorded"`` for runs
    stored before runs recorded them)."""
    contexts = [r.get("context") or {} for recs in records.values() for r in recs]
    compute = {key: sorted({str(c.get(key, "unrecorded")) for c in contexts}) for key in COMPUTE_KEYS}
    versions = [c.get("versions") or {} for c in contexts]
    compute["packages"] = sorted({f"{pkg} {v.get(pkg, 'unrecorded')}" for v in versions for pkg in PACKAGES})
    return compute


def _family_text(spec: ExperimentSpec, n: int) -> str:
    """The family a table's correction runs over, in words."""
    rep = spec.report
    return (
        f"the {n} comparisons of {rep.target} with {', '.join(rep.baselines)} on "
        f"{', '.join(rep.metrics)}"
    )


def _p_text(c: dict[str, Any], correction: str) -> str:
    """A comparison's p-value for a table: the corrected one, with the raw one beside it."""
    if correction == "none":
        return _fmt_p(c["p"])
    return f"{_fmt_p(c['p_adjusted'])} (raw {_fmt_p(c['p'])})" if c["p"] is not None else _fmt_p(None)


#: the definition of the improvement, stated in every table's legend (and docs/metrics.md)
IMPROVEMENT_TEXT = (
    "Improvement = (target - baseline) / |baseline| of the two means, in % (positive: the target is higher)."
)


def improvement_pct(target: float, base: float) -> float:
    """``(target - base) / |base|`` in %: positive when the target is higher (= better for every
    metric, the log-likelihood included, which is negative); NaN when ``base`` is 0."""
    return (target - base) / abs(base) * 100 if base else float("nan")


def build_report(spec: ExperimentSpec, store: RunStore, out: str | Path | None = None) -> dict[str, Any]:
    """Write ``results.json``, ``table.md``, ``table.csv`` and the figures to ``out`` (default: the store's
    directory); returns the results dict. Uses the runs that every model has finished.

    Raises:
        ValueError: no run has been finished by every model yet.
    """
    out = Path(out) if out is not None else store.root
    keys, records = collect(spec, store)
    if not keys:
        raise ValueError(f"{store.root}: no run is finished by every model yet; nothing to report")
    rep = spec.report
    metrics = list(rep.metrics)
    table = {
        m: {k: dict(zip(("mean", "std"), mean_std(run_means(recs, k)), strict=True)) for k in metrics}
        for m, recs in records.items()
    }
    for m, recs in records.items():
        for k in metrics:
            table[m][k]["runs"] = run_means(recs, k).tolist()
    target = rep.target
    comparisons = []
    for b in rep.baselines:
        for k in metrics:
            t = _pair(records[target], records[b], k, spec)
            base = table[b][k]["mean"]
            imp = improvement_pct(table[target][k]["mean"], base)
            comparisons.append({"target": target, "baseline": b, "metric": k, "improvement_pct": imp, **t})
    for c, p in zip(comparisons, adjust([c["p"] for c in comparisons], rep.correction), strict=True):
        c["p_adjusted"] = float(p) if np.isfinite(p) else None
    best = {k: max(rep.baselines, key=lambda b, k=k: table[b][k]["mean"]) for k in metrics}
    test_info = _test_info(spec, comparisons, len(keys))
    test_text = test_info["caption"]
    env = environment()
    run_code = {json.dumps(r.get("code"), sort_keys=True) for recs in records.values() for r in recs}
    results = {
        "name": spec.name,
        "title": spec.title,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "spec": spec.to_dict(),
        "fingerprint": spec.fingerprint(),
        "runs": [{"seed": s, "fold": f} for s, f in keys],
        "runs_planned": spec.runs,
        "metric_convention": metric_convention(
            rep.convention, no_relevant=rep.no_relevant, max_label=err_max_label(spec)
        ).to_dict(),
        "test": test_info,
        "table": table,
        "trained_models": {m: spec.models[m]["model"] for m in records if m in spec.models},
        "best_baseline": best,
        "comparisons": comparisons,
        "splits": [r.get("split") for r in records[next(iter(spec.models))]],
        "seconds": {m: float(sum(r.get("seconds", 0.0) for r in recs)) for m, recs in records.items()},
        "compute": _compute(records),
        # the code each stored run was produced with (runs can come from several sessions); the
        # git_sha / versions below are those of the code that wrote this report
        "run_code": [json.loads(c) for c in sorted(run_code)],
        **env,
    }
    if spec.grids:
        results["grid"] = _grid_results(spec, keys, records)
    if spec.anomaly is not None:
        results["anomaly"] = _anomaly(spec, store, keys, records)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "results.json", results)
    md = _markdown(spec, results, test_text)
    atomic_write(out / "table.md", lambda tmp: tmp.write_text(md))
    text = _csv(results, metrics)
    atomic_write(out / "table.csv", lambda tmp: tmp.write_text(text))
    _figures(spec, results, out)
    return results


def _grid_results(spec: ExperimentSpec, keys: list[tuple[int, int]], records: dict[str, list[dict]]) -> dict:
    """Per model with a grid: every point's validation score in every run and the point chosen."""
    out = {}
    for m in spec.grids:
        runs = [r["grid"] for r in records[m]]
        points = [p["values"] for p in runs[0]["points"]]
        valid = np.array(
            [[p["valid"] for p in g["points"]] for g in runs], dtype=np.float64
        )  # (runs, points)
        chosen = [g["chosen"] for g in runs]
        out[m] = {
            "metric": runs[0]["metric"],
            "axes": runs[0]["axes"],
            "points": points,
            "valid_mean": [
                float(c[np.isfinite(c)].mean()) if np.isfinite(c).any() else None for c in valid.T
            ],
            "times_chosen": [chosen.count(i) for i in range(len(points))],
            "runs": [
                {"seed": s, "fold": f, "chosen": c, "chosen_values": g["chosen_values"]}
                for (s, f), c, g in zip(keys, chosen, runs, strict=True)
            ],
        }
    return out


def _grid_lines(res: dict[str, Any]) -> list[str]:
    """Markdown: for each model with a grid, every point's mean validation score and how often it won."""
    lines: list[str] = []
    for m, g in res.get("grid", {}).items():
        lines += [
            "",
            f"{m}: hyperparameters chosen per run on the validation split ({g['metric']}; the test split is "
            "evaluated once, for the chosen point).",
            "",
            "| grid point | mean validation " + g["metric"] + " | chosen in runs |",
            "|---|---:|---:|",
        ]
        for point, v, n in zip(g["points"], g["valid_mean"], g["times_chosen"], strict=True):
            label = ", ".join(f"{k} = {json.dumps(x)}" for k, x in point.items())
            lines.append(f"| {label} | {_fmt_num(v, '.4f')} | {n} of {len(g['runs'])} |")
    return lines


def _anomaly(spec, store, keys, records) -> dict[str, Any]:
    """The anomaly analysis with the query as the unit: a test query seen in several runs enters once,
    its anomaly score and both models' metrics averaged over those runs (:func:`query_means`)."""
    a_name, b_name = spec.anomaly.models
    units = []
    for i, (s, f) in enumerate(keys):
        unit = store.load_unit(s, f)
        if not (unit["query_ids"] == records[a_name][i]["query_ids"] == records[b_name][i]["query_ids"]):
            raise ValueError(f"run seed {s} fold {f}: the models' test queries differ from the unit's")
        units.append({"query_ids": unit["query_ids"], "metrics": {"anomaly": unit["anomaly_score"]}})
    score = query_means(units, "anomaly")
    ids = sorted(score)

    def per_query(name: str) -> dict[str, np.ndarray]:
        means = {k: query_means(records[name], k) for k in spec.anomaly.metrics}
        return {k: np.array([m[q] for q in ids]) for k, m in means.items()}

    anomaly = np.array([score[q] for q in ids])
    res = bucket_gaps(anomaly, per_query(a_name), per_query(b_name), spec.anomaly.buckets)
    res.update(
        models=[a_name, b_name],
        method=method_text(spec.anomaly.top, spec.anomaly.n_estimators),
        pairs=sum(len(u["query_ids"]) for u in units),
        queries=len(ids),
    )
    return res


def _model_label(spec: ExperimentSpec, name: str) -> str:
    """A table row's name, with the model it trains when the two differ (``dcm-crossfit (dcm)``)."""
    model = spec.models[name]["model"]
    return name if model == name else f"{name} ({model})"


def _what_ran(spec: ExperimentSpec, res: dict[str, Any]) -> str:
    """The report's first line: the data, the runs, the metric convention and what the runs were
    computed with (threads, device, CPU, PyTorch's CPU instruction set)."""
    rep, compute = spec.report, res["compute"]
    return (
        f"{spec.describe_data()}; {len(res['runs'])} runs (seed, fold: "
        + ", ".join(f"{r['seed']},{r['fold']}" for r in res["runs"][:12])
        + (" ..." if len(res["runs"]) > 12 else "")
        + f"); metrics under the `{rep.convention}` convention, no-relevant = {rep.no_relevant}; "
        + f"computed with {'/'.join(compute['threads'])} CPU thread(s) a run on "
        + f"{'/'.join(compute['device'])} (CPU: {'/'.join(compute['cpu'])}, PyTorch's "
        + f"instruction set {'/'.join(compute['cpu_capability'])})."
    )


def _markdown(spec: ExperimentSpec, res: dict[str, Any], test_text: str) -> str:
    rep = spec.report
    metrics = list(rep.metrics)
    t = res["table"]
    lines = [f"# {spec.name}" + (f": {spec.title}" if spec.title else ""), "", _what_ran(spec, res)]
    legend = f"Mean ± std over runs. * = best model on the metric. {IMPROVEMENT_TEXT} Test: {test_text}."
    lines += ["", legend, ""]
    lines.append("| model | " + " | ".join(metrics) + " |")
    lines.append("|---|" + "---:|" * len(metrics))
    ranked = [m for m in t if m != REFERENCE or m in spec.models]
    top = {k: max(ranked, key=lambda m, k=k: t[m][k]["mean"]) for k in metrics}
    for m in t:
        label = f"{m} (reference: the synthetic chooser)" if m not in spec.models else _model_label(spec, m)
        cells = [
            f"{t[m][k]['mean']:.4f} ± {t[m][k]['std']:.4f}" + ("*" if top[k] == m else "") for k in metrics
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    comp = {(c["baseline"], c["metric"]): c for c in res["comparisons"]}
    target = rep.target
    corr = rep.correction
    p_head = "p-value" if corr == "none" else f"p-value ({corr.capitalize() if corr == 'holm' else 'BH'})"
    lines.append(
        f"| {target} vs best baseline, improvement | "
        + " | ".join(
            f"{fmt_improvement(comp[res['best_baseline'][k], k]['improvement_pct'])} "
            f"({res['best_baseline'][k]})"
            for k in metrics
        )
        + " |"
    )
    lines.append(
        f"| {p_head} | "
        + " | ".join(_p_text(comp[res["best_baseline"][k], k], corr) for k in metrics)
        + " |"
    )
    cis = [comp[res["best_baseline"][k], k]["ci"] for k in metrics]
    unadjusted = "" if corr == "none" else " (unadjusted)"
    lines.append(
        f"| {res['test']['confidence']:.0%} CI of the difference{unadjusted} | "
        + " | ".join(fmt_ci(ci) for ci in cis)
        + " |"
    )
    lines += [
        "",
        f"{target} against every baseline: improvement % ({p_head}). Family of the correction: "
        f"{res['test']['family']}.",
        "",
    ]
    lines.append("| baseline | " + " | ".join(metrics) + " |")
    lines.append("|---|" + "---:|" * len(metrics))
    for b in rep.baselines:
        cells = [
            f"{fmt_improvement(comp[b, k]['improvement_pct'])} ({_p_text(comp[b, k], corr)})" for k in metrics
        ]
        lines.append(f"| {b} | " + " | ".join(cells) + " |")
    if "anomaly" in res:
        an = res["anomaly"]
        a_name, b_name = an["models"]
        lines += [
            "",
            f"Anomalous queries: per-query gap {a_name} - {b_name} by anomaly bucket (1 = least anomalous; "
            f"{an['queries']} test queries, each averaged over its runs ({an['pairs']} (run, query) pairs): "
            "the query is the unit; ± = 95% CI; p: paired t-test over the bucket's queries).",
            f"Method: {an['method']}.",
            "",
            "| bucket | queries | " + " | ".join(spec.anomaly.metrics) + " |",
            "|---:|---:|" + "---:|" * len(spec.anomaly.metrics),
        ]
        for row in an["buckets"]:
            cells = [
                f"{row[k]['gap']:+.4f} ± {row[k]['ci95']:.4f} (p={_fmt_p(row[k]['p'])})"
                for k in spec.anomaly.metrics
            ]
            lines.append(f"| {row['bucket']} | {row['n']} | " + " | ".join(cells) + " |")
    return "\n".join(lines + _grid_lines(res)) + "\n"


def _csv(res: dict[str, Any], metrics: list[str]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["row", "model", *(f"{k}_{s}" for k in metrics for s in ("mean", "std"))])
    for m, per in res["table"].items():
        w.writerow(["model", m, *(f"{per[k][s]:.6f}" for k in metrics for s in ("mean", "std"))])
    w.writerow([])
    head = ["row", "target", "baseline", "metric", "improvement_pct", "diff", "ci_low", "ci_high"]
    w.writerow([*head, "test", "unit", "statistic", "p", "p_adjusted", "correction", "n"])
    for c in res["comparisons"]:
        ci = c["ci"] or (None, None)
        w.writerow(
            [
                "comparison",
                c["target"],
                c["baseline"],
                c["metric"],
                f"{c['improvement_pct']:.4f}",
                f"{c['diff']:.6f}",
                _fmt_num(ci[0], ".6f"),
                _fmt_num(ci[1], ".6f"),
                c["test"],
                c["unit"],
                _fmt_num(c["statistic"], ".4f"),
                _fmt_num(c["p"], ".6g"),
                _fmt_num(c["p_adjusted"], ".6g"),
                res["test"]["correction"],
                c["n"],
            ]
        )
    return buf.getvalue()


def _figures(spec: ExperimentSpec, res: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = list(spec.report.metrics)
    models = list(res["table"])
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(metrics), 3.6))
    width = 0.8 / len(models)
    x = np.arange(len(metrics))
    for i, m in enumerate(models):
        means = [res["table"][m][k]["mean"] for k in metrics]
        stds = [res["table"][m][k]["std"] for k in metrics]
        ax.bar(x + (i - (len(models) - 1) / 2) * width, means, width, yerr=stds, capsize=2, label=m)
    ax.set_xticks(x, metrics)
    ax.set_ylabel(f"test metric ({spec.report.convention})")
    ax.set_title(f"{spec.name}: mean ± std over {len(res['runs'])} runs", fontsize=10)
    ax.legend(fontsize=8, ncol=min(len(models), 5), loc="upper left")
    lo = min(res["table"][m][k]["mean"] for m in models for k in metrics)
    ax.set_ylim(max(0.0, lo - 0.1), None)
    _save(plt, fig, out / "metrics.png")
    if "anomaly" in res:
        an = res["anomaly"]
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        xs = np.array([r["bucket"] for r in an["buckets"]])
        for j, k in enumerate(spec.anomaly.metrics):
            ax.errorbar(
                xs + 0.06 * (j - (len(spec.anomaly.metrics) - 1) / 2),
                [r[k]["gap"] for r in an["buckets"]],
                yerr=[r[k]["ci95"] for r in an["buckets"]],
                marker="o",
                capsize=3,
                label=k,
            )
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.set_xticks(xs)
        ax.set_xlabel("anomaly bucket (1 = least anomalous, equal counts)")
        ax.set_ylabel(f"{an['models'][0]} - {an['models'][1]}")
        ax.set_title(f"{spec.name}: gap by query anomaly (95% CI)", fontsize=10)
        ax.legend(fontsize=8)
        _save(plt, fig, out / "anomaly.png")


def _save(plt: Any, fig: Any, path: Path) -> None:
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=120))
    plt.close(fig)
