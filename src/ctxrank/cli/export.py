"""``ctxrank export --model DIR --format torchscript|onnx --out FILE``: a saved neural ranker as one
file for serving (:mod:`ctxrank.export`); prints the inputs, the format version, the size and the check.
``--format onnx --triton-repo DIR`` writes the file as a model of a Triton model repository instead
(``DIR/NAME/1/model.onnx`` and ``DIR/NAME/config.pbtxt``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

from ctxrank.cli._options import add_model_dir, add_threads, out, table
from ctxrank.cli._outputs import check_output_file
from ctxrank.data.limits import size_text
from ctxrank.export import EXPORT_FORMATS, export_model
from ctxrank.export.write import TRITON_MAX_BATCH, check_triton_name, export_triton


def export(
    model: str,
    *,
    format: str,
    out_file: str | None,
    overwrite: bool = False,
    threads: int | None,
    triton_repo: str | None = None,
    triton_name: str | None = None,
) -> int:
    """Write the model saved in ``model`` as one ``format`` file at ``out_file`` (an existing file only
    with ``overwrite``), or as the model ``triton_name`` (default: the model directory's name) of the
    Triton model repository ``triton_repo``, checked; tracing and the check run with ``threads`` CPU
    threads (None: PyTorch's own count)."""
    if triton_repo is None:
        if triton_name is not None:
            raise ValueError("--triton-name names the model of a --triton-repo; give --triton-repo DIR")
        check_output_file(out_file, overwrite=overwrite, flag="--out")
    else:
        if format != "onnx" or overwrite:
            raise ValueError(
                "--triton-repo writes an ONNX file to a new model folder: --format onnx, no --overwrite"
            )
        triton_name = check_triton_name(
            triton_name if triton_name is not None else Path(model).resolve().name
        )
    if threads is not None:
        torch.set_num_threads(threads)

    if triton_repo is None:
        result = export_model(model, format, out_file)
    else:
        result = export_triton(model, triton_repo, triton_name)
    meta = result.meta
    out(
        f"wrote {result.path} ({result.version}, {size_text(result.size)}): {meta['model']} from "
        f"{model}, normalizer {meta['transform']!r} applied inside"
    )
    out()
    rows = [(name, dtype, shape, what) for name, shape, dtype, what in result.inputs]
    name, shape, dtype, what = meta["output"]
    rows.append((f"-> {name}", dtype, shape, what))
    out(table(("input", "dtype", "shape", "meaning"), rows))
    names = meta["feature_names"]
    if names:
        shown = ", ".join(names)
        if len(names) > 12:
            shown = f"{', '.join(names[:10])}, ..., {names[-1]} (all {len(names)} in the file's ctxrank.json)"
        out(f"\nfeatures, in this order: {shown}")
    if meta["categorical_names"]:
        cats = zip(meta["categorical_names"], meta["categorical_cardinalities"], strict=True)
        out("categorical columns: " + ", ".join(f"{c} ({k} codes, 0 = unknown)" for c, k in cats))
    shuffled = ", and with each list's rows shuffled" if result.checked_shuffled else ""
    out(
        f"checked: the file reproduces predict on a batch of another shape than the traced one{shuffled} "
        f"(max abs score difference {result.max_abs_diff:.2g})"
    )
    for text in result.notes:
        out(f"note: {text}")
    if triton_repo is not None:
        out(
            f"Triton: {result.path.parents[1] / 'config.pbtxt'} (backend onnxruntime, max_batch_size "
            f"{TRITON_MAX_BATCH}): tritonserver --model-repository {triton_repo}"
        )
    return 0


def add_export_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "export",
        parents=[common],
        help="write a saved neural model as a TorchScript or ONNX file for serving",
        description=(
            "Export a model saved by `ctxrank train` as one TorchScript (torch.jit.load) or ONNX "
            "(onnxruntime) file that scores RAW features: (features (B, L, F) "
            "float32, mask (B, L) bool[, categorical (B, L, C) int64]) -> scores (B, L); the saved "
            "normalizer runs inside the graph. The written file is loaded back and checked against the "
            "model. ONNX needs `pip install 'ctxrank[export]'`. A re-ranking model (--initial lambdamart) "
            "exports to ONNX as one graph of the whole pipeline (LightGBM's trees, the top-k cut, the "
            "re-ranker, the merge: scores = -rank, as `ctxrank predict`); baselines (LambdaMART: use its "
            "model.txt) are refused. See docs/export.md."
        ),
    )
    add_model_dir(p)
    p.add_argument("--format", required=True, choices=EXPORT_FORMATS, help="torchscript or onnx")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", metavar="FILE", help="file to write (e.g. model.pt, model.onnx)")
    where.add_argument(
        "--triton-repo",
        metavar="DIR",
        help="with --format onnx: write DIR/NAME/1/model.onnx and DIR/NAME/config.pbtxt, a model of a "
        "Triton model repository (ONNX Runtime backend; docs/export.md)",
    )
    p.add_argument(
        "--triton-name",
        metavar="NAME",
        help="the model's name (folder) in the --triton-repo (default: the model directory's name)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace the --out FILE if it exists")
    add_threads(p, "of tracing and the check; default: PyTorch's own")
    p.set_defaults(
        run=lambda a: export(
            a.model,
            format=a.format,
            out_file=a.out,
            overwrite=a.overwrite,
            threads=a.threads,
            triton_repo=a.triton_repo,
            triton_name=a.triton_name,
        )
    )
