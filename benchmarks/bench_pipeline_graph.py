"""Speed of the whole-pipeline ONNX graph (not a test): one ``session.run`` against its parts run apart.

A re-ranking model (QILCM over LambdaMART, ``rerank.top_k`` 100) is trained, exported with
``ctxrank export --format onnx`` (one graph: LightGBM's trees, the top-k cut, the re-ranker, the merge;
``ctxrank.export.pipeline``) and timed one query at a time, on the CPU, against the reference of the
same work done by the parts alone, in the same process:

* **graph**: the exported file's ``session.run`` on the query's raw rows ``(1, L, F)``;
* **reference**: LightGBM's ``Booster.predict`` on the rows (the initial scores) plus ``session.run``
  of the re-ranker's own ONNX graph (``serving_model`` of the saved re-ranker, exported alone) on the
  query's kept top-k rows with their extra features, prepared beforehand (untimed).

Cases: ``mq2008``: MQ2008 fold 1 (embedded, ``load_fold``), trained on its train/valid splits, timed
on its test queries (6 to 119 items); ``1000``: MSLR-shaped synthetic lists (46 features), trained on
100-item lists (LambdaMART: 300 rounds, early stopping off, the best round on validation kept),
timed on 1,000-item lists; ``tied-mq2008`` and ``tied-1000``: the same lists under a LambdaMART of
:data:`TIED_TREES` trees of two leaves (at most 2^3 distinct initial scores: nearly every item shares
its score with others, so the tie rule's feature hash runs over nearly every item; the report gives
the share of tied items). Each round runs every query through both rows,
interleaved, so that a drift of the machine's load reaches both alike; reported per case: the mean
time per query of each row (the median over rounds) and the ratio graph / reference (target: at most
1.5, :data:`TARGET_GRAPH_OVER_REFERENCE`). ``values_max_abs_diff``: the graph's scores against
``load_model(dir).predict`` on the timed queries (``-rank``: 0 when the orders agree).

    .venv/bin/python benchmarks/bench_pipeline_graph.py [--threads 2] [--rounds 5]
        [--cases mq2008 1000 tied-mq2008 tied-1000] [--json FILE] [--quick]
    .venv/bin/python benchmarks/bench_pipeline_graph.py --from-json FILE | --publish
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import add_common_args, synthetic_ranking_data
from _report import (
    add_stored_args,
    answer_stored_args,
    code_of_tree,
    emit_json,
    machine_info,
    machine_line,
    markdown_table,
    stored_blocks,
)

CASES = ("mq2008", "1000", "tied-mq2008", "tied-1000")
REQUIRED_CASES = ("mq2008", "1000")  # a run without the tied cases (as the first stored ones) is evidence
TIED_TREES = 3  # the tied cases' LambdaMART: this many trees of 2 leaves
TARGET_GRAPH_OVER_REFERENCE = 1.5  # the whole graph within 1.5x of LightGBM's predict + the re-ranker's graph
RERANKER = ["model=qilcm", "rerank.initial=lambdamart", "rerank.top_k=100", "rerank.rank_feature=true"]


def _splits(case: str, quick: bool):
    """(train, valid, timed test lists) of a case."""
    case = case.removeprefix("tied-")
    if case == "mq2008":
        from ctxrank.data import load_fold

        fold = load_fold("mq2008", 1)
        test = fold.test.subset(np.arange(min(fold.test.n_queries, 10 if quick else fold.test.n_queries)))
        return fold.train, fold.valid, test
    n_train, items = (20, 40) if quick else (200, 100)
    train = synthetic_ranking_data(n_train, items, 46, seed=0)
    valid = synthetic_ranking_data(n_train // 4, items, 46, seed=1)
    test = synthetic_ranking_data(3 if quick else 20, 120 if quick else 1000, 46, seed=2)
    return train, valid, test


def _session(proto_bytes: bytes, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(proto_bytes, options, providers=["CPUExecutionProvider"])


def _reranker_graph(predictor, n_extra_features: int) -> bytes:
    """The saved re-ranker's serving model alone as ONNX (dynamic B and L), with the pipeline's own
    rewrite of ``Elu`` (so both rows run the same re-ranker nodes)."""
    import onnx
    import torch

    from ctxrank.export.wrappers import serving_model
    from ctxrank.export.write import _elu_as_exp

    serving = serving_model(predictor).eval()
    x = torch.rand(2, 7, serving.n_features)
    mask = torch.ones(2, 7, dtype=torch.bool)
    buffer = io.BytesIO()
    names = ["features", "mask"]
    torch.onnx.export(serving, (x, mask), buffer, input_names=names, output_names=["scores"],
                      dynamic_axes={n: {0: "B", 1: "L"} for n in [*names, "scores"]}, opset_version=17,
                      dynamo=False)  # fmt: skip
    proto = onnx.load_from_string(buffer.getvalue())
    _elu_as_exp(proto.graph, onnx)
    return proto.SerializeToString()


def run_case(case: str, args) -> dict:
    """Train, export, check the values and time one case (see the module docstring)."""
    from ctxrank.config import resolve_config
    from ctxrank.export import export_model
    from ctxrank.training.checkpoint import load_model
    from ctxrank.training.run import run_training

    train, valid, test = _splits(case, args.quick)
    with tempfile.TemporaryDirectory() as tmp:
        sets = [*RERANKER, f"train.max_epochs={1 if args.quick else 3}", f"train.threads={args.threads}"]
        if case.startswith("tied-"):
            sets += [f"rerank.initial_params.n_estimators={TIED_TREES}", "rerank.initial_params.num_leaves=2"]
            sets += [f"rerank.initial_params.early_stopping_rounds={TIED_TREES + 1}"]
        elif args.quick:
            sets.append("rerank.initial_params.n_estimators=20")
        elif case == "1000":  # the synthetic labels stop LightGBM within a few trees: a fixed 300 instead
            sets += ["rerank.initial_params.n_estimators=300"]
            sets += ["rerank.initial_params.early_stopping_rounds=301"]
        run_training(resolve_config(None, sets), train, valid, out=Path(tmp) / "model", progress=False)
        export_model(Path(tmp) / "model", "onnx", Path(tmp) / "pipeline.onnx")
        graph = _session((Path(tmp) / "pipeline.onnx").read_bytes(), args.threads)
        predictor = load_model(Path(tmp) / "model")
    booster, trees = predictor.initial.booster_, int(predictor.initial.best_iteration_)
    reranker = _session(_reranker_graph(predictor, predictor.spec.n_extra_features), args.threads)
    split = predictor.prepare(test)
    top = np.asarray(split.top.features, dtype=np.float32)
    lists = []
    for q in range(test.n_queries):
        rows = slice(*test.query_offsets[q : q + 2])
        kept = slice(*split.top.query_offsets[q : q + 2])
        x = np.ascontiguousarray(test.features[rows])[None]
        top_mask = np.ones((1, kept.stop - kept.start), dtype=bool)
        lists.append((x, np.ones(x.shape[:2], dtype=bool), top[kept][None], top_mask))

    initial = booster.predict(test.features, num_iteration=trees)
    tied = sum(_tied_count(initial[slice(*test.query_offsets[q : q + 2])]) for q in range(test.n_queries))
    expected = predictor.predict(test)
    got = np.concatenate([graph.run(["scores"], {"features": x, "mask": m})[0][0] for x, m, _, _ in lists])
    diff = float(np.abs(got.astype(np.float64) - expected).max())

    def graph_row(x, m, _t, _tm):
        graph.run(["scores"], {"features": x, "mask": m})

    def reference_row(x, _m, t, tm):
        booster.predict(x[0], num_iteration=trees, num_threads=args.threads)
        reranker.run(["scores"], {"features": t, "mask": tm})

    rows = {"graph": graph_row, "reference": reference_row}
    for item in lists[: args.warmup]:  # warm-up, not recorded
        for run in rows.values():
            run(*item)
    per_round: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(args.rounds):
        spent = dict.fromkeys(rows, 0.0)
        for item in lists:
            for name, run in rows.items():
                t0 = time.perf_counter()
                run(*item)
                spent[name] += time.perf_counter() - t0
        for name in rows:
            per_round[name].append(spent[name] / len(lists))
    ms = {name: 1e3 * float(np.median(times)) for name, times in per_round.items()}
    return {
        "case": case,
        "queries": int(test.n_queries),
        "items_per_query": [int(test.query_lengths.min()), int(test.query_lengths.max())],
        "features": int(test.n_features),
        "trees": trees,
        "top_k": int(predictor.spec.top_k),
        "values_max_abs_diff": diff,
        "tied_items_share": tied / test.n_items,
        "ms_per_query": ms,
        "ms_per_query_rounds": {name: [1e3 * t for t in times] for name, times in per_round.items()},
        "ratio_graph_over_reference": ms["graph"] / ms["reference"],
    }


def _tied_count(scores: np.ndarray) -> int:
    """How many items of a list share their initial score with another item of the list."""
    _, counts = np.unique(scores, return_counts=True)
    return int(counts[counts > 1].sum())


LIST_NAMES = {"mq2008": "MQ2008 fold 1 test", "1000": "synthetic, 1,000 items"}


def _list_name(r: dict) -> str:
    """A result's lists, the share of tied items for the tied cases."""
    name = LIST_NAMES[r["case"].removeprefix("tied-")]
    if not r["case"].startswith("tied-"):
        return name
    trees = f"{r['trees']} tree{'s' if r['trees'] != 1 else ''}"
    return f"{name}, {trees} of 2 leaves ({100 * r['tied_items_share']:.0f}% of items tied)"


def report_text(blob: dict) -> str:
    """The table of a run (printed, and what a page's block shows)."""
    rows = []
    for r in blob["results"]:
        lo, hi = r["items_per_query"]
        rows.append([
            _list_name(r),
            r["queries"], f"{lo}-{hi}" if lo != hi else lo, r["trees"],
            f"{r['ms_per_query']['graph']:.3f}", f"{r['ms_per_query']['reference']:.3f}",
            f"{r['ratio_graph_over_reference']:.2f}x", f"{r['values_max_abs_diff']:g}",
        ])  # fmt: skip
    header = ["lists", "queries", "items", "trees", "graph ms/query", "LightGBM + re-ranker ms/query",
              "ratio", "max diff to predict"]  # fmt: skip
    head = f"{machine_line(blob['machine'])}\ncode {blob['code']}, {blob['threads']} threads, "
    head += f"median of {blob['rounds']} rounds\n"
    target = blob.get("target_graph_over_reference")
    verdicts = "".join(
        f"{r['case']}: graph / reference {r['ratio_graph_over_reference']:.2f}x (target <= {target}x: "
        f"{'met' if r['ratio_graph_over_reference'] <= target else 'NOT met'})\n"
        for r in blob["results"]
    ) if target is not None else ""
    return head + markdown_table(header, rows) + "\n" + ("\n" + verdicts if verdicts else "")


def evidence_problems(blob: dict) -> list[str]:
    """What a run lacks to be stored as evidence (empty: nothing): every case (a run of the script
    before the tied cases, whose results lack ``tied_items_share``: :data:`REQUIRED_CASES`), the target,
    values equal."""
    problems = []
    cases = [r["case"] for r in blob["results"]]
    expected = CASES if any("tied_items_share" in r for r in blob["results"]) else REQUIRED_CASES
    if cases != list(expected):
        problems.append(f"cases {cases}, expected {list(expected)}")
    if blob.get("target_graph_over_reference") is None:
        problems.append("no target recorded")
    problems += [f"{r['case']}: scores differ from predict by {r['values_max_abs_diff']:g}"
                 for r in blob["results"] if r["values_max_abs_diff"] > 1e-4]  # fmt: skip
    return problems


# A page states a stored run between ``<!-- bench-pipeline-graph: FILE -->`` and
# ``<!-- /bench-pipeline-graph -->`` (FILE: a ``--json`` file under evidence/bench/); ``--publish``
# rewrites each block from its file.
BLOCK, block_text = stored_blocks("bench-pipeline-graph", report_text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap, isolate=False)
    ap.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    ap.add_argument("--rounds", type=int, default=5, help="rounds over every query (default 5)")
    ap.add_argument("--warmup", type=int, default=5, help="queries run once before timing (default 5)")
    add_stored_args(ap, "bench-pipeline-graph")
    args = ap.parse_args(argv)
    if answer_stored_args(args, BLOCK, block_text, report_text):
        return 0
    if args.quick:
        args.rounds, args.warmup = 1, 1
    import torch

    torch.set_num_threads(args.threads)
    info = machine_info(args.threads, (("onnxruntime", "onnxruntime"), ("lightgbm", "lightgbm")), isa=True)
    print(machine_line(info), flush=True)
    blob = {
        "benchmark": "bench_pipeline_graph",
        "quick": args.quick,
        "code": code_of_tree(),
        "threads": args.threads,
        "rounds": args.rounds,
        "warmup": args.warmup,
        "machine": info,
        "reranker": RERANKER,
        "target_graph_over_reference": TARGET_GRAPH_OVER_REFERENCE,
        "results": [run_case(case, args) for case in args.cases],
    }
    print(report_text(blob), end="")
    emit_json(blob, args.json, echo=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
