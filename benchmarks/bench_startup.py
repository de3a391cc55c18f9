"""Start-up benchmark (not a test): `python -m ctxrank --version` and `--help` against `python -c pass`,
`ctxrank predict` on an exported ONNX file, and the estimators' import against its floor.

References, measured in the same run with the same Python and environment: the bare interpreter,
``python -c pass``, for ``--version`` and ``--help`` (target: under 0.3 s above it; neither command
imports torch, pandas, SciPy, LightGBM or scikit-learn: ``tests/cli/test_main.py``); ``import torch,
sklearn.base`` for ``from ctxrank import QILCMRanker`` (target: within 1.2x). ``ctxrank predict --model
m.onnx`` on a 3-row LETOR file (a small MLP exported by ``ctxrank export``; onnxruntime, no torch:
``tests/serving/test_onnx_predict.py``) has an absolute target: under 1 s on an idle machine.
Each command runs ``--repeats`` times in a fresh subprocess (interleaved: pass, --version, --help, ...,
pass, ...), after one unrecorded warm-up round that fills the file-system cache; the median wall time of
each is reported, with the difference and the ratio to its reference.

    .venv/bin/python benchmarks/bench_startup.py [--repeats 20] [--json FILE]
    .venv/bin/python benchmarks/bench_startup.py --from-json FILE | --publish
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import add_common_args, summarize
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

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 0.3  # --version and --help: seconds above the bare interpreter
PREDICT_TARGET_S = 1.0  # predict on an ONNX file: seconds of wall time (an idle machine)
IMPORT_TARGET_RATIO = 1.2  # the estimators' import: ratio to import torch, sklearn.base
BARE, FLOOR = "python -c pass (reference)", "import torch, sklearn.base (reference)"
PREDICT, ESTIMATORS = "ctxrank predict --model m.onnx (3 rows)", "from ctxrank import QILCMRanker"


def commands(work: Path) -> dict[str, tuple[list[str], str]]:
    """name -> (the interpreter's arguments, the name of its reference)."""
    predict = ["-m", "ctxrank", "predict", "--model", str(work / "m.onnx"), "--data", str(work / "three.txt")]
    return {
        BARE: (["-c", "pass"], BARE),
        "python -m ctxrank --version": (["-m", "ctxrank", "--version"], BARE),
        "python -m ctxrank --help": (["-m", "ctxrank", "--help"], BARE),
        PREDICT: ([*predict, "-o", str(work / "scores.txt"), "--overwrite"], BARE),
        FLOOR: (["-c", "import torch, sklearn.base"], FLOOR),
        ESTIMATORS: (["-c", "from ctxrank import QILCMRanker"], FLOOR),
    }


def write_onnx_model(work: Path) -> None:
    """A small MLP saved, exported to ``work/m.onnx``, and a 3-row LETOR file ``work/three.txt``."""
    import numpy as np
    import torch

    from ctxrank.config import resolve_config
    from ctxrank.data.ranking_data import RankingData
    from ctxrank.data.transforms import make_transform
    from ctxrank.export import export_model
    from ctxrank.registry import make_model
    from ctxrank.training.checkpoint import save_checkpoint

    rng = np.random.default_rng(0)
    x = rng.random((30, 5)).astype(np.float32)
    train = RankingData.from_arrays(x, rng.integers(0, 3, 30), group=[10, 10, 10])
    torch.manual_seed(0)
    model = make_model("mlp", 5, {"hidden": [8]}).eval()
    config = resolve_config(None, ["model=mlp", "model_params.hidden=[8]"])
    save_checkpoint(work / "mlp", model, config, make_transform("minmax").fit(train), train_data=train)
    export_model(work / "mlp", "onnx", work / "m.onnx")
    rows = ("0 qid:1 " + " ".join(f"{j + 1}:{v!r}" for j, v in enumerate(r)) for r in x[:3].tolist())
    (work / "three.txt").write_text("\n".join(rows) + "\n")


def _env() -> dict[str, str]:
    """This environment, with the repository's src/ first on PYTHONPATH (the ctxrank measured)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    return env


def _time_once(args: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, *args], env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return time.perf_counter() - t0


def measure(repeats: int, work: Path) -> dict[str, dict]:
    """Median (and spread) wall time of each command, ``repeats`` interleaved rounds after a warm-up,
    with the difference and ratio to its reference."""
    env = _env()
    todo = commands(work)
    times: dict[str, list[float]] = {name: [] for name in todo}
    for args, _ in todo.values():  # warm-up, not recorded
        _time_once(args, env)
    for _ in range(repeats):
        for name, (args, _) in todo.items():
            times[name].append(_time_once(args, env))
    results = {name: {**summarize(t), "times_s": t, "reference": todo[name][1]} for name, t in times.items()}
    for r in results.values():
        ref = results[r["reference"]]["median_s"]
        r["over_reference_s"] = r["median_s"] - ref
        r["ratio_to_reference"] = r["median_s"] / ref
    return results


def verdicts_of(results: dict[str, dict]) -> dict[str, tuple[bool, str]]:
    """name -> (within its target, the target in words) for the commands that have one."""
    targets = {
        name: (results[name]["over_reference_s"] < TARGET_S, f"{TARGET_S} s above the bare interpreter")
        for name in ("python -m ctxrank --version", "python -m ctxrank --help")
    }
    predict_s = results[PREDICT]["median_s"]
    targets[PREDICT] = (predict_s < PREDICT_TARGET_S, f"{PREDICT_TARGET_S} s (idle machine)")
    ratio = results[ESTIMATORS]["ratio_to_reference"]
    targets[ESTIMATORS] = (ratio <= IMPORT_TARGET_RATIO, f"{IMPORT_TARGET_RATIO}x the floor")
    return targets


def report_text(blob: dict) -> str:
    """The table and verdicts of a run, from its JSON ``blob`` (also a stored one: :func:`block_text`)."""
    results = blob["results"]
    rows = [
        [name, f"{r['median_s']:.3f}", f"{r['min_s']:.3f}", r["reference"].removesuffix(" (reference)"),
         f"{r['over_reference_s']:+.3f}", f"{r['ratio_to_reference']:.2f}x"]
        for name, r in results.items()
    ]  # fmt: skip
    lines = [machine_line(blob["machine"]) + (f"; code {blob['code']}" if blob.get("code") else "")]
    lines.append(f"wall time of a fresh process, median of {blob['repeats']} runs each (interleaved)")
    header = ["command", "median s", "min s", "reference", "minus reference s", "ratio"]
    lines += ["", markdown_table(header, rows), ""]
    for name, (ok, target) in verdicts_of(results).items():
        lines.append(f"{name}: {'within' if ok else 'OVER'} the target of {target}")
    return "\n".join(lines) + "\n"


# A page states a stored run between ``<!-- bench-startup: FILE -->`` and ``<!-- /bench-startup -->``;
# ``--publish`` rewrites each block from its file (tests/test_bench_evidence.py checks them).
BLOCK, block_text = stored_blocks("bench-startup", report_text)


def evidence_problems(blob: dict) -> list[str]:
    """What a run lacks to be stored as evidence (empty: nothing): every command, 10 runs or more."""
    problems = []
    if list(blob["results"]) != list(commands(Path("."))):
        problems.append(f"commands {list(blob['results'])}, expected {list(commands(Path('.')))}")
    if blob["repeats"] < 10:
        problems.append(f"{blob['repeats']} runs of each command, at least 10 expected")
    if not blob.get("code"):
        problems.append("no code recorded")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap, threads=False, isolate=False)
    ap.add_argument("--repeats", type=int, default=20, help="runs of each command (median kept; default 20)")
    add_stored_args(ap, "bench-startup")
    args = ap.parse_args(argv)
    if answer_stored_args(args, BLOCK, block_text, report_text):
        return 0
    repeats = 3 if args.quick else args.repeats
    info = machine_info(extra=(("onnxruntime", "onnxruntime"),))
    print(machine_line(info), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        write_onnx_model(Path(tmp))
        results = measure(repeats, Path(tmp))
    blob = {
        "benchmark": "bench_startup",
        "quick": args.quick,
        "code": code_of_tree(),
        "repeats": repeats,
        "machine": info,
        "target_over_reference_s": TARGET_S,
        "target_predict_s": PREDICT_TARGET_S,
        "target_import_ratio": IMPORT_TARGET_RATIO,
        "results": results,
        "within_target": {name: ok for name, (ok, _) in verdicts_of(results).items()},
    }
    print()
    print(report_text(blob), end="")
    emit_json(blob, args.json, echo=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
