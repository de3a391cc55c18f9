"""Every ``ctxrank`` command shown in README.md and docs/*.md is executed.

Which commands count (``documented_steps`` below implements exactly this):

* Fenced code blocks (```` ``` ```` or ``~~~``, also indented inside list items) in README.md and
  docs/*.md.
* In a ``bash``, ``sh``, ``shell`` or ``zsh`` block (a script, no prompt) every line is a command.
  In any other block (``console``, ``text``, ...) only a line that starts with the prompt ``$ `` is a
  command; the lines after it, up to the next prompt, are its documented output. So ``text`` blocks
  without a prompt -- usage synopses such as ``ctxrank train --model M [--set k=v]``, error messages,
  layouts -- are not commands, and neither are ``python``/``toml`` blocks (the ``my.toml`` spec of
  docs/experiments.md is used as a fixture by the command that reads it).
* A line ending with ``\\`` continues on the next. ``# comments`` are dropped. A line is split into
  shell segments at ``;``, ``&&``, ``||``, ``|`` and ``&`` (a background ``&`` runs in the foreground
  here, in order). A segment is a *documented command* when its program, after leading
  ``NAME=value`` environment assignments, is ``ctxrank``, or when it runs ``-m ctxrank`` (``python -m
  ctxrank``, ``torchrun ... -m ctxrank``). Other segments are shell steps: ``mkdir`` and ``cp`` are
  executed in order (later documented commands rely on them), the rest (``make``, ``pip``, ``wait``) are
  not.

Every documented command must be a key of ``COMMANDS`` (the command as printed: environment
assignments, ``ctxrank`` and its arguments joined by ``shlex.join``, comments dropped), mapped to how it
is executed:

* ``Run(...)``: in-process through ``ctxrank.cli.main(argv)`` with the working directory set to a
  temporary *workspace*, as printed plus the ``extra`` arguments appended (argparse: a repeated option
  is the last one given, ``--set`` accumulates). ``extra`` holds only tiny-size overrides that the docs
  state next to the command (``--set train.max_epochs=1``; ``--runs 1 --threads 1 --set
  defaults.train.max_epochs=1`` for experiments; ``--sessions 300``), so that all of them together take
  a minute or two on 2 CPU cores. The ``train`` killed "in epoch 7" is killed after epoch 1 (a patched
  ``StateDir.save``) and must exit with 130, so that ``train --resume`` has a run to continue. Files a
  command reads but no earlier documented command writes (``test.txt``, ``new_sessions.csv``, the
  OHSUMED files under ``../shared/data``) are fixtures this test writes under the names printed:
  MQ2008 Fold1 from the embedded copy, synthetic sessions, a synthetic LETOR-3.0-shaped OHSUMED.
* ``Elsewhere("tests/test_x.py::test_name")``: run by another test (the ``torchrun`` line needs
  several processes; tests/training/test_distributed.py starts them).
* ``Run(background=True)``: a long-running ``ctxrank serve`` (docs/serving.md): started as a process
  (``python -m ctxrank``) in the workspace with ``--port 0``, the documented ``127.0.0.1:PORT`` then
  standing for the port it printed; at the end it must stop on SIGTERM with exit status 0. The
  ``curl`` lines after it are executed against it (each a test case, ``test_documented_request``):
  a documented JSON answer with ``scores`` must match in its shape (the same keys, queries and number
  of scores: the scores are the model's), any other documented answer exactly. The page's Python
  blocks run last, against the same servers (``test_serving_python_blocks``).

A documented command missing from ``COMMANDS`` fails (the message says how to add it), and so does an
entry of ``COMMANDS`` that no document shows any more. One test case per occurrence (``FILE:LINE``).

Workspaces: the commands of one document share a directory (``Run.ws`` names another one) and run in
document order, README first, then docs/*.md by name, so that ``predict --model runs/x`` finds the
model an earlier ``train`` wrote. A test case first runs the earlier steps of its workspace that have
not run yet, so any single case can be selected alone (``-k``). The ``experiments`` workspace is
shared by docs/cli.md's ``ctxrank demo``, docs/experiments.md and docs/reproduction.md: an experiment
that one of them ran with the same overrides is reused from its run store, not trained again.

Each case checks the exit status, that the files the command says it writes exist, and the output:
the documented output lines where they are deterministic (``data-info --dataset mq2008``, ``evaluate``
on ``tiny.txt``, the ``datasets`` table except its location column, ``export``'s input table).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pytest

from ctxrank.cli import main
from tests.cli.test_main import NULLS, SCORES, TINY
from tests.conftest import REPO

DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SCRIPT_LANGS = {"bash", "sh", "shell", "zsh"}
SHELL_STEPS = {"mkdir", "cp", "curl"}  # non-ctxrank commands the harness executes


# ------------------------------------------------------------------------------ extraction
@dataclass(frozen=True)
class Step:
    """One documented shell segment: a ctxrank command or another command of the same block."""

    doc: str  # path relative to the repository, e.g. "docs/training.md"
    line: int  # 1-based line of the command in the document
    env: tuple[tuple[str, str], ...]
    argv: tuple[str, ...]  # after the program (ctxrank's arguments), or the whole segment
    is_ctxrank: bool
    output: tuple[str, ...] = ()  # documented output lines (prompt blocks only)

    @property
    def key(self) -> str:
        if not self.is_ctxrank:
            return shlex.join(self.argv)
        return shlex.join([*(f"{k}={v}" for k, v in self.env), *self.argv])

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def _fences(text: str) -> Iterator[tuple[str, int, list[str]]]:
    """(info string, 1-based line of the first body line, body lines with the fence's indent removed)."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(`{3,}|~{3,})\s*([^\s`]*)", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = len(m.group(1)), m.group(2), m.group(3).lower()
        body, start = [], i + 2
        i += 1
        while i < len(lines) and not re.match(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[i]):
            line = lines[i]
            body.append(line[indent:] if line[:indent].strip() == "" else line.lstrip())
            i += 1
        i += 1
        yield lang, start, body


def _segments(command: str) -> list[list[str]]:
    lex = shlex.shlex(command, posix=True, punctuation_chars=";&|")
    lex.whitespace_split = True
    segments: list[list[str]] = [[]]
    for tok in lex:
        if tok and set(tok) <= set(";&|"):
            segments.append([])
        else:
            segments[-1].append(tok)
    return [s for s in segments if s]


def _split_env(tokens: list[str]) -> tuple[tuple[tuple[str, str], ...], list[str]]:
    env = []
    while tokens and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", tokens[0]):
        k, _, v = tokens[0].partition("=")
        env.append((k, v))
        tokens = tokens[1:]
    return tuple(env), tokens


def _block_steps(doc: str, lang: str, start: int, body: list[str]) -> list[Step]:
    script = lang in SCRIPT_LANGS
    # (line number, command text, output lines)
    commands: list[tuple[int, str, list[str]]] = []
    i = 0
    while i < len(body):
        raw = body[i]
        lineno = start + i
        if script:
            text = raw.strip()
            if not text or text.startswith("#"):
                i += 1
                continue
        elif raw.startswith("$ "):
            text = raw[2:].strip()
        else:
            if commands:
                commands[-1][2].append(raw.rstrip())
            i += 1
            continue
        while text.endswith("\\") and i + 1 < len(body):
            i += 1
            text = text[:-1].rstrip() + " " + body[i].strip()
        commands.append((lineno, text, []))
        i += 1
    steps = []
    for lineno, text, output in commands:
        while output and not output[-1].strip():
            output.pop()
        for tokens in _segments(text):
            env, tokens = _split_env(tokens)
            if tokens and tokens[0] == "ctxrank":
                steps.append(Step(doc, lineno, env, tuple(tokens), True, tuple(output)))
            elif (
                "-m" in tokens
                and tokens.index("-m") + 1 < len(tokens)
                and tokens[tokens.index("-m") + 1] == "ctxrank"
            ):
                steps.append(Step(doc, lineno, env, tuple(tokens), True, tuple(output)))
            elif tokens:
                steps.append(Step(doc, lineno, env, tuple(tokens), False, tuple(output)))
    return steps


def documented_steps() -> list[Step]:
    steps = []
    for path in DOC_FILES:
        doc = path.relative_to(REPO).as_posix()
        for lang, start, body in _fences(path.read_text(encoding="utf-8")):
            if lang in ("python", "toml", "json"):
                continue
            steps.extend(_block_steps(doc, lang, start, body))
    return steps


def documented_commands() -> list[Step]:
    return [s for s in documented_steps() if s.is_ctxrank]


# ------------------------------------------------------------------------------ fixtures (files)
def _mq2008(name: str) -> bytes:
    return gzip.decompress((resources.files("ctxrank.datasets") / "mq2008" / f"{name}.txt.gz").read_bytes())


def _quiet(*argv: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        rc = main(list(argv))
    assert rc == 0, f"fixture `ctxrank {shlex.join(argv)}` failed: {err.getvalue()}"


def _sessions(name: str, n: int, seed: int) -> Callable[[Path], None]:
    def write(ws: Path) -> None:
        _quiet("synth", "choice", "--sessions", str(n), "--seed", str(seed), "--out", str(ws / name))

    return write


def _write_mq2008_fold1(ws: Path) -> None:
    """train.txt / vali.txt / test.txt: MQ2008 Fold1 (S1+S2+S3 / S4 / S5) from the embedded copy."""
    (ws / "train.txt").write_bytes(b"".join(_mq2008(s) for s in ("S1", "S2", "S3")))
    (ws / "vali.txt").write_bytes(_mq2008("S4"))
    (ws / "test.txt").write_bytes(_mq2008("S5"))


def _write_tiny(ws: Path) -> None:
    """tiny.txt and scores.txt: the two files printed in docs/cli.md (``ctxrank evaluate``)."""
    text = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    shown = ["\n".join(b) + "\n" for lang, _, b in _fences(text) if lang == "text"]
    assert TINY in shown and SCORES in shown, "docs/cli.md: its tiny.txt or scores.txt changed"
    (ws / "tiny.txt").write_text(TINY)
    (ws / "scores.txt").write_text(SCORES)


def _write_nulls(ws: Path) -> None:
    """nulls.txt: the LETOR file with NULL cells printed in docs/data.md ("NULL fill rules")."""
    text = (REPO / "docs" / "data.md").read_text(encoding="utf-8")
    shown = [b for lang, _, b in _fences(text) if lang == "text" and "2 qid:1 1:0.5 2:NULL 3:1" in b]
    assert len(shown) == 1 and "\n".join(shown[0]) + "\n" == NULLS, "docs/data.md: its nulls.txt changed"
    (ws / "nulls.txt").write_text(NULLS)


def _write_qilcm_models(ws: Path) -> None:
    """runs/q and runs/qilcm: a QILCM trained 1 epoch on a synthetic 5-feature LETOR file."""
    from ctxrank.data.synth import write_synthetic_letor

    write_synthetic_letor(ws / "five.txt", n_queries=40, list_size=8, n_features=5, max_label=2, seed=0)
    _quiet(
        "train",
        "--model",
        "qilcm",
        "--data",
        "five.txt",
        "--out",
        "runs/q",
        "--no-progress",
        "--set",
        "train.max_epochs=1",
    )
    shutil.copytree(ws / "runs" / "q", ws / "runs" / "qilcm")


def _write_my_spec(ws: Path) -> None:
    """my.toml: the spec printed in docs/experiments.md ("Writing a spec"), and its sessions.parquet."""
    text = (REPO / "docs" / "experiments.md").read_text(encoding="utf-8")
    specs = [b for lang, _, b in _fences(text) if lang == "toml" and 'name = "my-study"' in "\n".join(b)]
    assert len(specs) == 1, "docs/experiments.md: the `my-study` spec block is gone"
    (ws / "my.toml").write_text("\n".join(specs[0]) + "\n")
    _sessions("sessions.parquet", 300, 0)(ws)


def _write_ohsumed(shared: Path) -> None:
    """A SYNTHETIC stand-in for OHSUMED in LETOR 3.0's layout: the five QueryLevelNorm partitions
    Fold{k}_test.txt, 45 features, labels 0-2, 12 queries of 15 items each, query ids unique."""
    from ctxrank.data.synth import write_synthetic_letor

    d = shared / "ohsumed" / "QueryLevelNorm"
    d.mkdir(parents=True)
    for k in range(1, 6):
        path = write_synthetic_letor(
            d / f"Fold{k}_test.txt", n_queries=12, list_size=15, n_features=45, max_label=2, seed=k
        )
        text = re.sub(r"qid:(\d+)", lambda m, k=k: f"qid:{k * 100 + int(m.group(1))}", path.read_text())
        path.write_text(text)


FIXTURES: dict[str, Callable[[Path], None]] = {
    "mq2008-fold1": _write_mq2008_fold1,
    "tiny": _write_tiny,
    "nulls": _write_nulls,
    "qilcm-models": _write_qilcm_models,
    "my.toml": _write_my_spec,
    "new_sessions.parquet": _sessions("new_sessions.parquet", 300, 1),
    "new_sessions.csv": _sessions("new_sessions.csv", 300, 1),
    "test.csv": _sessions("test.csv", 300, 2),
    "tr.parquet": _sessions("tr.parquet", 300, 3),
    "va.parquet": _sessions("va.parquet", 100, 4),
    "te.parquet": _sessions("te.parquet", 100, 5),
}


# ------------------------------------------------------------------------------ the table
@dataclass(frozen=True)
class Run:
    extra: tuple[str, ...] = ()  # appended to the documented argv: the docs' tiny-size overrides
    files: tuple[str, ...] = ()  # FIXTURES written into the workspace first
    check: Callable[[str, Path, Step], None] | None = None  # (stdout, workspace, step) -> asserts
    ws: str | None = None  # workspace name; default: the document's
    status: int = 0
    patch: Callable[[pytest.MonkeyPatch], None] | None = None  # e.g. a simulated kill
    background: bool = False  # a server: started as a process, stopped at the end (docs/serving.md)


@dataclass(frozen=True)
class Elsewhere:
    test: str  # "tests/test_x.py::test_name"


#: the 1/6-WEB30K click experiment: its spec built, a tiny one's click logs simulated
MSLR_CLICKS = (
    "tests/experiments/test_synth_letor_spec.py::test_the_documented_click_experiment_on_mslr_shaped_lists"
)
#: the click experiments docs/clicks.md shows beside clicks-mq2008: specs built, equal to their evidence's
CLICK_CONDITIONS = (
    "tests/experiments/test_clicks_spec.py"
    "::test_each_documented_click_condition_is_the_spec_its_evidence_stores"
)
EPOCH1 = ("--set", "train.max_epochs=1")
FOLD1 = ("mq2008-fold1",)  # the fixture writing train.txt, vali.txt, test.txt
#: any built-in spec whose models do not set their own train.max_epochs (docs/experiments.md)
SMOKE = ("--runs", "1", "--threads", "1", "--set", "defaults.train.max_epochs=1")


def no_grids(spec: str) -> tuple[str, ...]:
    """``--set models.M.grid={}`` for every model of a built-in spec with a validation grid (a smoke run
    trains one point, not the grid: the documented override in docs/experiments.md)."""
    from importlib import resources

    from ctxrank.config import load_toml

    path = resources.files("ctxrank.experiments") / "configs" / f"{spec}.toml"
    models = load_toml(Path(str(path))).get("models", {})
    return tuple(a for m, t in models.items() if "grid" in t for a in ("--set", f"models.{m}.grid={{}}"))


def smoke(spec: str) -> tuple[str, ...]:
    return (*SMOKE, *no_grids(spec))


#: the demo spec sets max_epochs for DLCM and QILCM itself: a model's own table wins over [defaults]
DEMO = (
    *("--runs", "1", "--threads", "1"),
    *("--set", "models.listnet.train.max_epochs=1"),
    *("--set", "models.dlcm.train.max_epochs=1"),
    *("--set", "models.qilcm.train.max_epochs=1"),
)


#: docs/tuning.md: two trials of one epoch each
TUNE = ("--trials", "2", "--set", "train.max_epochs=1")
#: arsm-table2-3's models set their own max_epochs: one epoch each, one grid point
ARSM_SMOKE = (
    *SMOKE[:4],
    *("--set", "models.listnet.train.max_epochs=1", "--set", "models.arsm.train.max_epochs=1"),
    *no_grids("arsm-table2-3"),
)


def same_as_documented(out: str, ws: Path, step: Step) -> None:
    assert step.output, f"{step.where}: no documented output to compare with"
    assert out.rstrip("\n").split("\n") == [x.rstrip() for x in step.output]


def datasets_table(out: str, ws: Path, step: Step) -> None:
    """Every column but `location` (the machine's paths) as documented."""

    def cut(lines):
        lines = [x.rstrip() for x in lines]
        at = lines[0].index("location")
        table = lines.index("", 1) if "" in lines else len(lines)
        return [x[:at] for x in lines[:table]] + lines[table:]

    assert cut(out.rstrip("\n").split("\n")) == cut(step.output)


def ohsumed_json(out: str, ws: Path, step: Step) -> None:
    info = json.loads(out)
    documented = dict(re.findall(r'^\s*"(\w+)": "(.*)",?$', "\n".join(step.output), re.M))
    assert info["source"] == documented["source"]  # the fold layout: train = partitions 2, 3, 4
    assert info["features"] == 45 and info["queries"] == 36 and info["items"] == 36 * 15


def same_answer(out: str, step: Step) -> None:
    """A server's answer as documented: a ``/rank`` answer in its shape (keys, queries, rows ranked,
    number of scores; the scores are the model's), any other answer exactly."""
    documented, got = json.loads("\n".join(step.output)), json.loads(out)
    if isinstance(documented, dict) and "scores" in documented:
        assert set(got) == set(documented) and len(got["scores"]) == len(documented["scores"]), out
        shape = [(r["qid"], sorted(r["rows"])) for r in documented["rankings"]]
        assert [(r["qid"], sorted(r["rows"])) for r in got["rankings"]] == shape, out
    else:
        assert got == documented, out


def export_table(out: str, ws: Path, step: Step) -> None:
    """As documented, numbers masked in the `wrote` (file size) and `checked` (max difference) lines."""

    def mask(lines):
        return [re.sub(r"\d[\d.e+-]*", "N", x) if x.startswith(("wrote", "checked")) else x for x in lines]

    assert mask(out.rstrip("\n").split("\n")) == mask([x.rstrip() for x in step.output])


def contains(*needles: str) -> Callable[[str, Path, Step], None]:
    def check(out: str, ws: Path, step: Step) -> None:
        missing = [n for n in needles if n not in out]
        assert not missing, f"not in the output: {missing}"

    return check


def tuned_smoke(*needles: str) -> Run:
    """A ``[tune]`` experiment's smoke run (one run, one epoch, one trial a model); the report names
    QILCM and the ``needles``."""
    return Run((*SMOKE, "--set", "tune.trials=1"), check=contains("| qilcm |", *needles))


def killed_after_first_epoch(mp: pytest.MonkeyPatch) -> None:
    """Kill `ctxrank train` (KeyboardInterrupt, exit status 130) once the state of epoch 1 is saved."""
    from ctxrank.training.resume import StateDir

    save = StateDir.save

    def save_then_die(self, state):
        save(self, state)
        raise KeyboardInterrupt

    mp.setattr(StateDir, "save", save_then_die)


def slurm_array_task(task: int, count: int) -> Callable[[pytest.MonkeyPatch], None]:
    """The environment of task ``task`` of a Slurm job array ``--array=1-count``."""

    def patch(mp: pytest.MonkeyPatch) -> None:
        for k, v in {"ID": task, "COUNT": count, "MIN": 1, "MAX": count, "STEP": 1}.items():
            mp.setenv(f"SLURM_ARRAY_TASK_{k}", str(v))

    return patch


def tracked(directory: str) -> Callable[[str, Path, Step], None]:
    """``--track``: the tracker's directory holds a run (an MLflow experiment's run, a TensorBoard
    event file); tests/test_tracking.py reads what is in it."""

    def check(out: str, ws: Path, step: Step) -> None:
        found = list((ws / directory).glob("*/*/meta.yaml")) + list((ws / directory).glob("*/events.out.*"))
        assert found, f"nothing logged to {directory}"

    return check


def killed(out: str, ws: Path, step: Step) -> None:
    assert (ws / "runs/q/resume/state.json").is_file() and not (ws / "runs/q/ctxrank.json").exists()


RAY_SHARDS = (
    "tests/serving/test_onnx_predict.py::test_ray_batch_scoring_of_shards_equals_single_process_predict"
)
#: the columns of the click log `ctxrank synth clicks` writes (docs/clicks.md)
LOG = "--query-col session --label-col click --group-col query --docid-col item --position-col position"
COMMANDS: dict[str, Run | Elsewhere] = {
    # README.md (the command-line quick start; the README states the one-epoch smoke run)
    "ctxrank train --model qilcm --dataset mq2008 --fold 1 --out runs/qilcm-mq2008": Run(EPOCH1),
    "ctxrank evaluate --model runs/qilcm-mq2008 --dataset mq2008 --fold 1": Run(),
    "ctxrank export --model runs/qilcm-mq2008 --format torchscript --out qilcm.pt": Run(),
    # docs/cli.md
    "ctxrank data-info --dataset mq2008": Run(check=same_as_documented),
    "ctxrank synth clicks --dataset mq2008 --fold 1 --sessions 3000 --randomize shuffle_top --shuffle-n 10 "
    "--out randomized.csv": Run(("--sessions", "300")),
    "ctxrank synth clicks --dataset mq2008 --fold 1 --sessions 3000 --seed 1 --out clicks.csv": Run(
        ("--sessions", "300")
    ),
    "ctxrank clicks propensity randomized.csv "
    "--query-col session --label-col click --group-col query "
    "--docid-col item --position-col position "
    "--method randomized --out propensity.json": Run(),
    "ctxrank train --model lambdamart --data clicks.csv "
    "--query-col session --label-col click --group-col query "
    "--docid-col item --position-col position "
    "--debias ips --propensity propensity.json --out runs/clicks-ips": Run(),
    f"ctxrank train --model lambdamart --data randomized.csv {LOG} "
    "--debias ips --propensity estimate:randomized --out runs/clicks-estimated": Run(),
    "ctxrank clicks offline randomized.csv "
    "--query-col session --label-col click --group-col query "
    "--docid-col item --position-col position "
    "--model runs/clicks-ips --propensity propensity.json --metric clicks --k 10": Run(),
    # docs/clicks.md (the page states the tiny sizes: --sessions 300, one epoch)
    "ctxrank synth clicks --dataset mq2008 --fold 1 --split train --sessions 20000 --click-model pbm --eta 1 "
    "--out log.csv": Run(("--sessions", "300")),
    f"ctxrank data-info log.csv {LOG}": Run(check=contains("CTR at position 1")),
    f"ctxrank train --model qilcm --data log.csv {LOG} "
    "--debias ips --propensity-eta 1 --out runs/qilcm-ips": Run(EPOCH1),
    f"ctxrank train --model lambdamart --data log.csv {LOG} "
    "--debias ips --propensity-eta 1 --out runs/lambdamart-ips": Run(),
    "ctxrank evaluate --model runs/qilcm-ips --dataset mq2008 --fold 1 --split test": Run(),
    "ctxrank evaluate --model runs/lambdamart-ips --dataset mq2008 --fold 1 --split test": Run(),
    "ctxrank export --model runs/qilcm-ips --format onnx --out qilcm-ips.onnx": Run(),
    "ctxrank synth clicks --dataset mq2008 --fold 1 --split train --sessions 20000 --randomize shuffle_top "
    "--shuffle-n 10 --seed 2 --out randomized-train.csv": Run(("--sessions", "300")),
    f"ctxrank train --model lambdamart --data randomized-train.csv {LOG} "
    "--debias ips --propensity estimate:randomized --out runs/lambdamart-estimated": Run(),
    "ctxrank synth clicks --dataset mq2008 --fold 1 --split test --sessions 20000 --randomize shuffle_top "
    "--shuffle-n 10 --seed 1 --out randomized.csv": Run(("--sessions", "300")),
    f"ctxrank clicks propensity randomized.csv {LOG} --method randomized --out propensity.json": Run(),
    f"ctxrank clicks offline randomized.csv {LOG} --model runs/lambdamart-ips --propensity propensity.json "
    "--metric clicks --k 10": Run(),
    f"ctxrank clicks offline randomized.csv {LOG} --model runs/lambdamart-ips --propensity propensity.json "
    "--metric clicks --k 10 --clip 5": Run(check=contains("dr ")),
    "ctxrank clicks coverage --dataset mq2008 --fold 1 --logs 50 --out evidence/clicks-offline-coverage": Run(
        ("--logs", "2", "--sessions", "300", "--resamples", "100")
    ),
    # docs/arsm.md
    "ctxrank train --model arsm --dataset mq2008 --fold 1 --out runs/arsm": Run(EPOCH1),
    "ctxrank train --model arsm --dataset mq2008 --set model_params.loss=ap --set model_params.n_levels=10 "
    "--out runs/arsm-ap": Run(EPOCH1),
    # docs/baselines.md
    "ctxrank train --model ranksvm --dataset mq2008 --fold 1 --out runs/ranksvm-f1": Run(),
    "ctxrank train --model adarank-ndcg --dataset mq2008 --fold 1 --out runs/adarank-f1 "
    "--set model_params.patience=20": Run(),
    "ctxrank train --model adarank-map --dataset mq2008 --fold 1 --out runs/adarank-map-f1": Run(),
    "ctxrank evaluate --model runs/ranksvm-f1 --dataset mq2008 --fold 1 --split test": Run(),
    # docs/choice.md
    "ctxrank train --model mnl --dataset swissmetro --fold 1 --set model_params.alternative_specific=true "
    "--set transform=zscore --out runs/mnl": Run(),
    "ctxrank train --model qilcm --dataset electricity --fold 1 --set train.metric=loglik "
    "--out runs/q-elec": Run(EPOCH1),
    "ctxrank synth choice --sessions 2000 --seed 0 --out sessions.parquet": Run(("--sessions", "300")),
    "ctxrank train --model qilcm --data sessions.parquet --query-col session --label-col chosen "
    "--categorical airline,cabin --numeric price,duration,stops,dep_hour --set train.metric=mrr "
    "--set train.max_epochs=3 --out runs/q": Run(EPOCH1),
    "ctxrank evaluate --model runs/q --data new_sessions.parquet --metrics p@1,p@5,mrr,ndcg@10": Run(
        files=("new_sessions.parquet",)
    ),
    # docs/cli.md
    "ctxrank datasets": Run(check=datasets_table),
    "ctxrank data-info --dataset ohsumed --data-root ../shared/data --fold 1 --split train --json": Run(
        check=ohsumed_json
    ),
    "ctxrank evaluate --data tiny.txt --scores scores.txt --metrics ndcg@3,map": Run(
        files=("tiny",), check=same_as_documented
    ),
    "ctxrank demo": Run(DEMO, ws="experiments", check=contains("| model |", "| qilcm |")),
    # docs/data.md
    "ctxrank data-info nulls.txt --null-fill letor_min": Run(files=("nulls",), check=same_as_documented),
    "ctxrank synth letor --queries 20000 --items 100 --out big.txt": Run(("--queries", "60")),
    "ctxrank synth letor --queries 500 --items 100 --seed 1 --out valid.txt": Run(("--queries", "60")),
    "ctxrank synth letor --queries 500 --items 100 --seed 2 --out test.txt": Run(("--queries", "60")),
    "ctxrank data-shards big.txt --shards 8 --out shards": Run(
        check=contains("wrote 60 queries", "8 Parquet")
    ),
    "ctxrank train --model mlp --train-shards shards --valid valid.txt --test test.txt "
    "--out runs/streamed": Run(EPOCH1, check=contains("streaming 60 queries", "best epoch 1 of 1")),
    # docs/experiments.md
    "ctxrank experiment demo": Run(DEMO, check=contains("| model |", "| qilcm |")),
    "ctxrank experiment qilcm-table2 --runs 5": Run(smoke("qilcm-table2")),
    "ctxrank experiment qilcm-table2-splits": Run(smoke("qilcm-table2-splits")),
    "ctxrank experiment my.toml --out results/my": Run(SMOKE, files=("my.toml",)),
    "ctxrank experiment context-pays --threads 1": Run(smoke("context-pays")),
    # docs/clicks.md: the other click conditions (each spec's fingerprint is its stored evidence's)
    "ctxrank experiment clicks-mq2008 --set name=clicks-mq2008-cascade --set clicks.click_model=cascade "
    "--set 'clicks.params={eps_minus=0.1, eps_plus=1.0}' --set 'title=Learning from simulated clicks "
    "(cascade model, noise 0.1) on MQ2008: naive vs IPS vs DLA vs PAL vs LightGBM debiasing vs the "
    "skyline' --jobs 2": Elsewhere(CLICK_CONDITIONS),
    "ctxrank experiment clicks-mq2008 --dataset ohsumed --set name=clicks-ohsumed --set 'title=Learning "
    "from simulated clicks (PBM eta 1, noise 0.1) on OHSUMED: naive vs IPS vs DLA vs PAL vs LightGBM "
    "debiasing vs the skyline' --jobs 2": Elsewhere(CLICK_CONDITIONS),
    "ctxrank experiment clicks-mq2008 --set name=clicks-mq2008-eta0.5 --set clicks.params.eta=0.5 --set "
    "models.mlp-ips.train.propensity_eta=0.5 --set models.listnet-ips.train.propensity_eta=0.5 --set "
    "models.qilcm-ips.train.propensity_eta=0.5 --set models.dlcm-ips.train.propensity_eta=0.5 --set "
    "models.attn-ips.train.propensity_eta=0.5 --set models.lambdamart-ips.train.propensity_eta=0.5 --set "
    "'title=Learning from simulated clicks (PBM eta 0.5, noise 0.1) on MQ2008: naive vs IPS vs DLA vs PAL"
    " vs LightGBM debiasing vs the skyline' --jobs 2": Elsewhere(CLICK_CONDITIONS),
    "ctxrank experiment clicks-mq2008 --set name=clicks-mq2008-eta2 --set clicks.params.eta=2.0 --set "
    "models.mlp-ips.train.propensity_eta=2.0 --set models.listnet-ips.train.propensity_eta=2.0 --set "
    "models.qilcm-ips.train.propensity_eta=2.0 --set models.dlcm-ips.train.propensity_eta=2.0 --set "
    "models.attn-ips.train.propensity_eta=2.0 --set models.lambdamart-ips.train.propensity_eta=2.0 --set "
    "'title=Learning from simulated clicks (PBM eta 2, noise 0.1) on MQ2008: naive vs IPS vs DLA vs PAL "
    "vs LightGBM debiasing vs the skyline' --jobs 2": Elsewhere(CLICK_CONDITIONS),
    'ctxrank experiment clicks-mq2008 --set name=clicks-mq2008-estimated --set '
    '\'models.mlp-ips.train={debias="ips", propensity="estimate:regression-em"}\' --set '
    '\'models.listnet-ips.train={debias="ips", propensity="estimate:regression-em"}\' --set '
    '\'models.qilcm-ips.train={debias="ips", propensity="estimate:regression-em"}\' --set '
    '\'models.dlcm-ips.train={debias="ips", propensity="estimate:regression-em"}\' --set '
    '\'models.attn-ips.train={debias="ips", propensity="estimate:regression-em"}\' --set '
    '\'models.lambdamart-ips.train={debias="ips", propensity="estimate:regression-em"}\' --set '
    "'title=Learning from simulated clicks (PBM eta 1, noise 0.1) on MQ2008, IPS with propensities "
    "estimated by regression-EM: naive vs IPS vs DLA vs PAL vs LightGBM debiasing vs the skyline' "
    '--jobs 2': Elsewhere(CLICK_CONDITIONS),
    "ctxrank experiment clicks-mq2008 --set name=clicks-mslr-synth --set 'title=Learning from simulated "
    "clicks on MSLR-shaped SYNTHETIC lists (1/6 of WEB30K)' --set data.dataset= --set data.synth=letor "
    '--set \'data.letor={queries=5000, lengths="mslr", labels="mslr", '
    "features=136}'": Elsewhere(MSLR_CLICKS),
    "ctxrank experiment clicks-mq2008 --set name=clicks-mslr-synth --set 'title=Learning from simulated "
    "clicks on MSLR-shaped SYNTHETIC lists (1/6 of WEB30K)' --set data.dataset= --set data.synth=letor "
    '--set \'data.letor={queries=5000, lengths="mslr", labels="mslr", '
    "features=136}' --set runs.count=3 --jobs 2": Elsewhere(CLICK_CONDITIONS),
    "ctxrank experiment qilcm-table2 --dataset ohsumed --set data.root=../shared/data": Run(
        smoke("qilcm-table2")
    ),
    "ctxrank compare results/demo:qilcm results/demo:dlcm": Run(check=contains("ndcg@10")),
    "ctxrank experiment qilcm-table2 --threads 1 --shard 1/2": Run(smoke("qilcm-table2")),
    "ctxrank experiment qilcm-table2 --threads 1 --shard 2/2": Run(smoke("qilcm-table2")),
    "ctxrank experiment qilcm-table2 --report-only": Run(smoke("qilcm-table2")),
    "ctxrank experiment qilcm-table2 --report-only --evidence evidence/qilcm-table2": Run(
        smoke("qilcm-table2")
    ),
    "ctxrank experiment qilcm-table2 --out results/qilcm-table2-b --resume-from evidence/qilcm-table2 "
    "--evidence evidence/qilcm-table2": Run(smoke("qilcm-table2"), check=contains("resumed from")),
    "ctxrank experiment qilcm-table2 --threads 2 --shard auto --no-progress": Run(
        smoke("qilcm-table2"), patch=slurm_array_task(1, 10)
    ),
    # --address local: a new Ray instance on this machine, in place of the cluster's HEAD:6379 (the runs
    # are stored already in this workspace, so no instance starts; tests/experiments/test_executors.py runs on
    # Ray)
    "ctxrank experiment qilcm-table2 --threads 2 --executor ray --address HEAD:6379": Run(
        (*smoke("qilcm-table2"), "--address", "local")
    ),
    # docs/serving.md (the synth and train commands are docs/training.md's)
    "ctxrank export --model runs/q --format onnx --out sessions.onnx": Run(),
    "ctxrank serve --model sessions.onnx --port 8000": Run(background=True),
    "ctxrank serve --model runs/q --port 8001": Run(background=True),
    "ctxrank predict --model sessions.onnx --data sessions.csv --query-col session "
    "--output sessions.scores": Run(),
    # Ray Data over shards (a local Ray; no cluster is reachable from a test: the address is Ray's own)
    "ctxrank data-shards test.txt --shards 8 --out shards": Elsewhere(RAY_SHARDS),
    "ctxrank predict --model qilcm.onnx --shards shards --workers 2 -o scores": Elsewhere(RAY_SHARDS),
    "ctxrank predict --model /shared/qilcm.onnx --shards /shared/shards --workers 16 "
    "--address ray://head:10001 -o /shared/scores": Elsewhere(RAY_SHARDS),
    # docs/export.md
    "ctxrank export --model runs/qilcm --format onnx --out qilcm.onnx": Run(files=("qilcm-models",)),
    "ctxrank export --model runs/qilcm --format torchscript --out qilcm.pt": Run(files=("qilcm-models",)),
    "ctxrank export --model runs/q --format onnx --out q.onnx": Run(
        files=("qilcm-models",), check=export_table
    ),
    "ctxrank export --model runs/q --format onnx --triton-repo triton": Run(files=("qilcm-models",)),
    # docs/reproduction.md (workspace: experiments)
    "ctxrank experiment qilcm-table2": Run(smoke("qilcm-table2")),
    "ctxrank experiment qilcm-figure2": Run(smoke("qilcm-figure2")),
    "ctxrank experiment qilcm-table2 --threads 1": Run(smoke("qilcm-table2")),
    "ctxrank experiment qilcm-table2-splits --threads 1": Run(smoke("qilcm-table2-splits")),
    "ctxrank experiment qilcm-figure2 --threads 1": Run(smoke("qilcm-figure2")),
    "ctxrank experiment qilcm-tuned --threads 1 --set tune.ensemble=5 --overwrite "
    "--out results/qilcm-tuned-ens5": tuned_smoke("| lambdamart |"),
    "ctxrank experiment qilcm-tuned --threads 1 --set models.qilcm.rerank.residual=true "
    "--out results/qilcm-tuned-residual": tuned_smoke("| lambdamart |"),
    "ctxrank experiment qilcm-tuned --threads 1": tuned_smoke("| lambdamart |"),
    "ctxrank experiment qilcm-tuned --set data.protocol=random-splits --set 'data.split=[0.6,0.2,0.2]' "
    "--threads 1 --out results/qilcm-tuned-splits": tuned_smoke("random 60/20/20 splits"),
    "ctxrank experiment qilcm-tuned --dataset ohsumed --set data.root=../shared/data --threads 1 "
    "--set tune.trials=20": tuned_smoke("| lambdamart |"),
    "ctxrank experiment qilcm-tuned --dataset ohsumed --set data.root=../shared/data --set "
    "data.protocol=random-splits --set 'data.split=[0.6,0.2,0.2]' --threads 1 --set tune.trials=20 "
    "--out results/qilcm-tuned-ohsumed-splits": tuned_smoke("random 60/20/20 splits"),
    "ctxrank experiment choice-tuned --dataset electricity --threads 1": tuned_smoke(
        "| mnl |", "electricity"
    ),
    "ctxrank experiment choice-tuned --dataset modecanada --threads 1": tuned_smoke("| mnl |", "modecanada"),
    "ctxrank experiment choice-tuned --dataset car --threads 1": tuned_smoke("| mnl |", "car"),
    "ctxrank experiment choice-real --dataset electricity --threads 1": Run(
        (*SMOKE, "--dataset", "electricity"), check=contains("| mnl |", "| listnet |", "| qilcm |")
    ),
    "ctxrank experiment context-tuned-choice --dataset electricity --threads 1": Run(
        (*SMOKE, "--set", "tune.trials=1", "--dataset", "electricity"),
        check=contains("| mnl |", "| attn |", "| setrank |", "| dasalc |", "| gsf |"),
    ),
    "ctxrank experiment choice-tuned --threads 1": Run(
        (*SMOKE, "--set", "tune.trials=1", "--dataset", "electricity"), check=contains("| qilcm |", "| mnl |")
    ),
    "ctxrank experiment choice-tuned": Run(
        (*SMOKE, "--set", "tune.trials=1", "--dataset", "electricity"), check=contains("| qilcm |", "| mnl |")
    ),
    "ctxrank experiment qilcm-figure2 --dataset ohsumed --set data.root=../shared/data": Run(
        smoke("qilcm-figure2")
    ),
    "ctxrank experiment qilcm-table2-splits --dataset ohsumed --set data.root=../shared/data": Run(
        smoke("qilcm-table2-splits"), check=contains("random 60/20/20 splits")
    ),
    "ctxrank experiment qilcm-figure2 --dataset ohsumed --set data.root=../shared/data --set "
    "data.protocol=random-splits --set 'data.split=[0.6,0.2,0.2]' "
    "--out results/qilcm-figure2-splits-ohsumed": Run(
        smoke("qilcm-figure2"), check=contains("random 60/20/20 splits", "Anomalous queries")
    ),
    "ctxrank experiment qilcm-table3": Run(smoke("qilcm-table3")),
    "ctxrank experiment qilcm-figure2 --set data.protocol=random-splits --set 'data.split=[0.6,0.2,0.2]' "
    "--out results/qilcm-figure2-splits": Run(
        smoke("qilcm-figure2"), check=contains("random 60/20/20 splits", "Anomalous queries")
    ),
    "ctxrank experiment qilcm-table3-splits": Run(
        smoke("qilcm-table3-splits"), check=contains("random 60/20/20 splits", "| variant3 |")
    ),
    "ctxrank experiment qilcm-table3-splits --dataset ohsumed --set data.root=../shared/data": Run(
        smoke("qilcm-table3-splits"), check=contains("random 60/20/20 splits", "| variant3 |")
    ),
    "ctxrank experiment qilcm-table3 --dataset ohsumed --set data.root=../shared/data": Run(
        smoke("qilcm-table3")
    ),
    "CTXRANK_DATA=../shared/data ctxrank experiment arsm-table2-3 --set "
    "models.arsm.model_params.ties=position --out results/arsm-ties-position": Run(ARSM_SMOKE),
    "ctxrank compare results/arsm-table2-3:arsm results/arsm-ties-position:arsm": Run(
        check=contains("| ndcg@10 |", "p (queries)")
    ),
    "CTXRANK_DATA=../shared/data ctxrank experiment arsm-table2-3": Run(ARSM_SMOKE),
    "ctxrank experiment choice": Run((*SMOKE, "--set", "data.sessions=300")),
    "ctxrank experiment dcm-crossfit": Run(smoke("dcm-crossfit")),
    # docs/metrics.md
    "ctxrank train --model lambdamart --dataset mq2008 --fold 1 --out runs/lm-trec": Run(),
    "ctxrank predict --model runs/lm-trec --data test.txt --format trec --run-name lm --output lm.run": Run(
        files=FOLD1
    ),
    "ctxrank evaluate --run lm.run --data test.txt --metrics ndcg_cut_10,nDCG@5,map,recip_rank": Run(
        files=FOLD1
    ),
    # docs/reranking.md
    "ctxrank train --model dlcm --initial lambdamart --top-k 100 --crossfit 5 --dataset mq2008 --fold 1 "
    "--out runs/dlcm-f1": Run(EPOCH1),
    "ctxrank synth letor --queries 50 --items 20 --features 46 --max-label 2 --out test.txt": Run(),
    "ctxrank predict --model runs/dlcm-f1 --data test.txt --output scores.txt": Run(),
    "ctxrank evaluate --model runs/dlcm-f1 --data test.txt": Run(),
    "ctxrank train --model lambdamart --dataset mq2008 --fold 1 --out runs/lm-f1": Run(),
    # docs/training.md
    "ctxrank train --model listnet --dataset mq2008 --fold 1 --out runs/listnet-f1": Run(EPOCH1),
    "ctxrank train --model mlp --loss listmle --train train.txt --valid vali.txt --test test.txt "
    "--out runs/mlp --set 'model_params.hidden=[128,64]' --set train.lr=3e-4 --seed 1": Run(EPOCH1, FOLD1),
    "ctxrank predict --model runs/listnet-f1 --data test.txt --output scores.txt": Run(files=FOLD1),
    "ctxrank evaluate --model runs/listnet-f1 --data test.txt --metrics ndcg@1,ndcg@10,map": Run(files=FOLD1),
    "ctxrank train --model qilcm --dataset mq2008 --fold 1 --out runs/q": Run(
        ("--set", "train.max_epochs=2"), ws="resume", status=130, patch=killed_after_first_epoch, check=killed
    ),
    "ctxrank train --resume runs/q": Run(
        ws="resume",
        check=contains("resuming runs/q: epoch 1 was the last one saved", " of 2 (valid ndcg@10 "),
    ),
    "ctxrank synth choice --sessions 300 --seed 0 --out sessions.csv": Run(),
    "ctxrank train --model qilcm --data sessions.csv --query-col session --label-col chosen --docid-col item "
    "--categorical airline,cabin --numeric price,duration,stops,dep_hour --set train.max_epochs=3 "
    "--out runs/q": Run(EPOCH1),
    "ctxrank train --model dcm --train tr.parquet --valid va.parquet --test te.parquet --query-col session "
    "--label-col chosen --categorical airline,cabin --out runs/d": Run(
        EPOCH1, files=("tr.parquet", "va.parquet", "te.parquet")
    ),
    "ctxrank predict --model runs/q --data new_sessions.csv --output new_scores.txt": Run(
        files=("new_sessions.csv",)
    ),
    "ctxrank evaluate --model runs/q --data test.csv --metrics p@1,p@5,ndcg@10,mrr": Run(files=("test.csv",)),
    "ctxrank evaluate --scores new_scores.txt --data new_sessions.csv --query-col session "
    "--label-col chosen": Run(),
    "ctxrank train --model listnet --dataset mq2008 --fold 1 --out runs/listnet-tracked --track mlflow": Run(
        EPOCH1, check=tracked("mlruns"), ws="tracking"
    ),
    "ctxrank train --model listnet --dataset mq2008 --fold 1 --out runs/listnet-tb "
    "--track tensorboard:tb-logs": Run(EPOCH1, check=tracked("tb-logs"), ws="tracking"),
    "ctxrank tune --model listnet --dataset mq2008 --fold 1 --trials 20 --out runs/tune-tracked "
    "--track mlflow": Run(TUNE, check=tracked("mlruns"), ws="tracking"),
    # docs/tuning.md
    "ctxrank tune --model qilcm --dataset mq2008 --fold 1 --trials 50 --out runs/tune-qilcm": Run(TUNE),
    "ctxrank train --config runs/tune-qilcm/best.toml --dataset mq2008 --fold 1 --out runs/qilcm-tuned": Run(
        EPOCH1
    ),
    "ctxrank tune --model lambdamart --dataset mq2008 --fold 1 --trials 20 --out runs/tune-lm": Run(
        ("--trials", "2")  # a baseline takes no train.max_epochs
    ),
    "ctxrank tune --model qilcm --dataset mq2008 --fold 1 --trials 25 --storage sqlite:///runs/studies.db "
    "--study-name qilcm-f1 --out runs/tune-q": Run(TUNE),
    # --address local: a new Ray instance on this machine, in place of the cluster's HEAD:6379
    "ctxrank tune --model qilcm --dataset mq2008 --fold 1 --trials 64 --set train.threads=2 --executor ray "
    "--address HEAD:6379 --out runs/tune-qilcm-ray": Run(
        (*TUNE, "--set", "train.threads=1", "--address", "local")
    ),
    "torchrun --standalone --nproc-per-node 4 -m ctxrank train --model qilcm --dataset mq2008 "
    "--out run": Elsewhere(
        ""
        "tests/training/test_distributed.py::test_torchrun_two_gloo_processes_match_one_process_with_the_same_global_batch"
    ),
}
#: documents whose commands share one workspace (reuse of stored experiment runs)
DOC_WORKSPACE = {"docs/experiments.md": "experiments", "docs/reproduction.md": "experiments"}


# ------------------------------------------------------------------------------ default checks
def _opt(argv: tuple[str, ...], name: str, default: str | None = None) -> str | None:
    """The last value of option ``name`` (as argparse sees it)."""
    value = default
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif a.startswith(name + "="):
            value = a.split("=", 1)[1]
    return value


def _rows(path: Path) -> int:
    if path.suffix == ".parquet":
        import pandas as pd

        return len(pd.read_parquet(path))
    if path.suffix == ".csv":
        return len(path.read_text().splitlines()) - 1
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    return sum(1 for x in text.splitlines() if x.strip())


def default_checks(argv: tuple[str, ...], out: str, ws: Path) -> None:
    """What every command of its kind must leave behind (argv: after `ctxrank`, overrides included)."""
    command = argv[0]
    if command == "train":
        model_dir = ws / (_opt(argv, "--resume") or _opt(argv, "--out"))
        assert (model_dir / "ctxrank.json").is_file() and (model_dir / "test_metrics.json").is_file()
    elif command == "predict":
        lines = (ws / _opt(argv, "--output")).read_text().splitlines()
        if _opt(argv, "--format") == "trec":  # QUERY Q0 DOCID RANK SCORE RUN
            assert all(len(line.split()) == 6 and line.split()[1] == "Q0" for line in lines)
            lines = [line.split()[4] for line in lines]
        scores = [float(x) for x in lines]
        assert len(scores) == _rows(ws / _opt(argv, "--data")) and all(math.isfinite(s) for s in scores)
    elif command == "evaluate":
        # without --metrics: the choice metrics on the documents' choice sessions (a 0/1 `chosen` column)
        default = "p@1,recall@3,mrr,loglik" if _opt(argv, "--label-col") == "chosen" else "ndcg@1,ndcg@10,map"
        for metric in (_opt(argv, "--metrics") or default).split(","):
            assert re.search(rf"^{re.escape(metric)}\s+-?\d", out, re.M), f"no {metric} line in the output"
    elif command == "synth":
        path = ws / _opt(argv, "--out")
        assert path.is_file() and _rows(path) > 0
    elif command == "tune":
        for f in ("tune.json", "trials.csv", "best.toml"):
            assert (ws / _opt(argv, "--out") / f).is_file(), f"no {f}"
        assert "best: trial" in out
    elif command == "export" and _opt(argv, "--triton-repo"):  # the model folder of a Triton repository
        folder = ws / _opt(argv, "--triton-repo") / Path(_opt(argv, "--model")).name
        assert (folder / "1" / "model.onnx").stat().st_size > 0 and (folder / "config.pbtxt").is_file()
        assert out.startswith("wrote ")
    elif command == "export":
        assert (ws / _opt(argv, "--out")).stat().st_size > 0 and out.startswith("wrote ")
    elif command in ("experiment", "demo") and "--shard" not in argv:
        name = "demo" if command == "demo" else Path(argv[1]).stem
        default = f"results/{name}" + (f"-{_opt(argv, '--dataset')}" if _opt(argv, "--dataset") else "")
        report = ws / (_opt(argv, "--out") or default)
        for f in ("results.json", "table.md", "table.csv"):
            assert (report / f).is_file(), f"no {report / f}"
        if "--report-only" not in argv:
            assert "report: " in out


# ------------------------------------------------------------------------------ workspaces
class Workspaces:
    """One directory per workspace under a shared root, steps run once each, in document order."""

    def __init__(self, root: Path, steps: list[Step]) -> None:
        self.root = root
        self.steps = steps
        self.done: dict[tuple[str, int, str], str | None] = {}  # step -> None (ok) or the failure
        self.written: set[tuple[str, str]] = set()
        self.data_dir = root / "ctxrank-data-empty"  # $CTXRANK_DATA: nothing of the user's machine
        self.servers: dict[str, tuple[subprocess.Popen, str]] = {}  # documented host:port -> process, real
        self.data_dir.mkdir()
        _write_ohsumed(root / "shared" / "data")  # `../shared/data` from every workspace

    @staticmethod
    def name(step: Step) -> str:
        entry = COMMANDS.get(step.key)
        if isinstance(entry, Run) and entry.ws:
            return entry.ws
        return DOC_WORKSPACE.get(step.doc, Path(step.doc).stem)

    def path(self, name: str) -> Path:
        p = self.root / name
        p.mkdir(exist_ok=True)
        return p

    def run_before(self, target: Step) -> list[str]:
        """Run the earlier steps of the target's workspace; return the failures among them."""
        name = self.name(target)
        failures = []
        for step in self.steps:
            if step == target:
                break
            if self.name(step) != name:
                continue
            ident = (step.doc, step.line, step.key)
            if ident not in self.done:
                if step.is_ctxrank:
                    entry = COMMANDS.get(step.key)
                    if not isinstance(entry, Run):
                        self.done[ident] = None
                        continue
                    try:
                        self.execute(step, entry)
                        self.done[ident] = None
                    except BaseException as exc:
                        first = (str(exc).splitlines() or [type(exc).__name__])[0]
                        self.done[ident] = f"{step.where} `{step.key}`: {first}"
                else:
                    self.done[ident] = self.shell(step)
            if self.done[ident]:
                failures.append(self.done[ident])
        return failures

    def shell(self, step: Step) -> str | None:
        if step.argv[0] not in SHELL_STEPS:
            return None
        argv = [self.served(a) for a in step.argv] if step.argv[0] == "curl" else list(step.argv)
        ws = self.path(self.name(step))
        proc = subprocess.run(argv, cwd=ws, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            return f"{step.where} `{step.key}`: {proc.stderr.strip()}"
        if step.argv[0] == "curl" and step.output:
            try:
                same_answer(proc.stdout, step)
            except AssertionError as exc:
                return f"{step.where} `{step.key}`: {exc}"
        return None

    def served(self, text: str) -> str:
        """``text`` with each documented server address (``127.0.0.1:8000``) replaced by the real one."""
        for documented, (_, real) in self.servers.items():
            text = text.replace(f"//{documented}/", f"//{real}/").replace(f'"{documented}"', f'"{real}"')
        return text

    def start_server(self, step: Step, ws: Path) -> str:
        """Start the documented ``ctxrank serve`` in the background on a free port (``--port 0``)."""
        argv = list(step.argv[1:])
        documented = f"{_opt(tuple(argv), '--host', '127.0.0.1')}:{_opt(tuple(argv), '--port', '8000')}"
        env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "ctxrank", *argv, "--port", "0", "--log-level", "warning"],
            cwd=ws, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        line = proc.stdout.readline()
        found = re.search(r" on http://([\w.]+:\d+) \(POST /rank\)", line)
        if found is None:
            proc.kill()
            err = proc.stderr.read()[-3000:]
            raise AssertionError(f"`ctxrank {shlex.join(argv)}` did not start: {line}{err}")
        self.servers[documented] = (proc, found.group(1))
        return line

    def close(self) -> None:
        """Stop the servers: SIGTERM, each must exit with status 0 (a graceful shutdown)."""
        problems = []
        for documented, (proc, _) in self.servers.items():
            proc.send_signal(signal.SIGTERM)
            try:
                status = proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                status = proc.wait()
            if status != 0:
                err = proc.stderr.read()[-2000:]
                problems.append(f"the server documented on {documented} exited with {status}: {err}")
        self.servers.clear()
        assert not problems, "\n".join(problems)

    def execute(self, step: Step, entry: Run) -> str:
        ws = self.path(self.name(step))
        argv = (*step.argv[1:], *entry.extra)
        if entry.background:
            return self.start_server(step, ws)
        out, err = io.StringIO(), io.StringIO()
        with pytest.MonkeyPatch.context() as m:
            m.chdir(ws)
            m.setenv("CTXRANK_DATA", str(self.data_dir))
            m.setenv("CTXRANK_CACHE_DIR", str(self.root / "cache"))  # MQ2008 parsed once, not per case
            for f in entry.files:
                if (self.name(step), f) not in self.written:
                    FIXTURES[f](ws)
                    self.written.add((self.name(step), f))
            for k, v in step.env:
                m.setenv(k, v)
            if entry.patch is not None:
                entry.patch(m)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = main(list(argv))
        shown = (
            f"`ctxrank {shlex.join(argv)}` in {ws}\n"
            f"stdout:\n{out.getvalue()[-3000:]}\nstderr:\n{err.getvalue()[-3000:]}"
        )
        assert rc == entry.status, f"exit status {rc}, expected {entry.status}: {shown}"
        try:
            if entry.status == 0:
                default_checks(argv, out.getvalue(), ws)
            if entry.check is not None:
                entry.check(out.getvalue(), ws, step)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{shown}") from None
        return out.getvalue()


STEPS = documented_steps()
COMMAND_STEPS = [s for s in STEPS if s.is_ctxrank]


REQUEST_STEPS = [s for s in STEPS if not s.is_ctxrank and s.argv[0] == "curl"]


@pytest.fixture(scope="module")
def workspaces(tmp_path_factory):
    spaces = Workspaces(tmp_path_factory.mktemp("docs-commands"), STEPS)
    yield spaces
    spaces.close()


def _how_to_add(step: Step) -> str:
    return (
        f"{step.where}: documented command not covered by tests/e2e/test_docs_commands.py: `{step.key}`\n"
        f"Add to COMMANDS:  {step.key!r}: Run(),  with tiny-size overrides the docs state next to it in "
        "Run(extra=...), fixtures it reads in Run(files=...), or Elsewhere('tests/...::test') if another "
        "test runs it."
    )


# ------------------------------------------------------------------------------ tests
def test_the_extraction_finds_the_commands_of_every_kind_of_block():
    where = {(s.doc, s.key) for s in COMMAND_STEPS}
    assert ("docs/cli.md", "ctxrank data-info --dataset mq2008") in where  # console block with output
    assert ("README.md", "ctxrank evaluate --model runs/qilcm-mq2008 --dataset mq2008 --fold 1") in where
    bash = "ctxrank train --model arsm --dataset mq2008 --fold 1 --out runs/arsm"
    assert ("docs/arsm.md", bash) in where
    continued = "--dataset mq2008 --fold 1 --out runs/dlcm-f1"  # the second line of a `\` command
    assert any(s.doc == "docs/reranking.md" and s.key.endswith(continued) for s in COMMAND_STEPS)
    assert ("docs/experiments.md", "ctxrank experiment qilcm-table2 --report-only") in where  # after `wait;`
    assert ("docs/reproduction.md", "CTXRANK_DATA=../shared/data ctxrank experiment arsm-table2-3") in where
    shell = [s.key for s in STEPS if not s.is_ctxrank]
    assert "mkdir -p results/qilcm-figure2" in shell and "make demo" in shell
    synopses = [s.key for s in COMMAND_STEPS if re.search(r"\[--|\w\|\w|\.\.\.", s.key)]
    assert not synopses, f"a usage synopsis is not a command: put it in a ```text block: {synopses}"


def test_every_documented_command_is_in_the_table():
    missing = [_how_to_add(s) for s in COMMAND_STEPS if s.key not in COMMANDS]
    assert not missing, "\n\n".join(missing)


def test_every_table_entry_is_still_documented():
    shown = {s.key for s in COMMAND_STEPS}
    stale = [k for k in COMMANDS if k not in shown]
    assert not stale, (
        "COMMANDS in tests/e2e/test_docs_commands.py has entries no document shows any more (remove them, or "
        f"update them to the command as it is now printed): {stale}"
    )


def test_set_up_is_the_two_make_commands():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Set up\n", 1)[1].split("\n## ", 1)[0]
    blocks = list(_fences(section))
    assert len(blocks) == 1, "the README's set-up must be one block"
    commands = [line.split("#", 1)[0].strip() for line in blocks[0][2] if line.strip()]
    assert commands == ["make demo", "make test"]
    setup = ("make", "pip", "python", "python3")
    others = [s.key for s in STEPS if s.doc == "README.md" and s.argv[0] in setup]
    assert others == ["make demo", "make test"], f"the README sets up with the two make commands: {others}"
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    assert re.search(r"^\t\$\(BIN\)/ctxrank demo\s*$", recipe, re.M), "`make demo` must run `ctxrank demo`"
    # make changes no shell's PATH: the README names the command it installs and how to get a bare one
    assert re.search(r"^VENV := \.venv$", makefile, re.M) and "BIN := $(VENV)/bin" in makefile
    assert "`.venv/bin/ctxrank`" in section and "`source .venv/bin/activate`" in section


@pytest.mark.slow
@pytest.mark.parametrize(
    "step",
    COMMAND_STEPS,
    ids=lambda s: f"{s.where} {s.key[8:68] if s.key.startswith('ctxrank') else s.key[:60]}",
)
def test_documented_command(step, workspaces):
    entry = COMMANDS.get(step.key)
    if entry is None:
        pytest.fail(_how_to_add(step))
    if isinstance(entry, Elsewhere):
        path, _, name = entry.test.partition("::")
        assert re.search(rf"^def {re.escape(name)}\(", (REPO / path).read_text(), re.M), (
            f"{entry.test} is gone"
        )
        return
    earlier = workspaces.run_before(step)
    ident = (step.doc, step.line, step.key)
    try:
        workspaces.execute(step, entry)
    except Exception as exc:
        workspaces.done[ident] = f"{step.where} `{step.key}`: {(str(exc).splitlines() or [repr(exc)])[0]}"
        if earlier:
            raise AssertionError(
                f"{exc}\nearlier steps of this workspace failed:\n  " + "\n  ".join(earlier)
            ) from exc
        raise
    workspaces.done[ident] = None


@pytest.mark.slow
@pytest.mark.parametrize("step", REQUEST_STEPS, ids=lambda s: f"{s.where} {s.key[:60]}")
def test_documented_request(step, workspaces):
    """A documented ``curl`` call of a server an earlier step started (docs/serving.md)."""
    earlier = [f for f in workspaces.run_before(step) if f]
    assert not earlier, "earlier steps of this workspace failed:\n  " + "\n  ".join(earlier)
    problem = workspaces.shell(step)
    workspaces.done[(step.doc, step.line, step.key)] = problem
    assert problem is None, problem


@pytest.mark.slow
def test_serving_python_blocks(workspaces, monkeypatch):
    """docs/serving.md's Python blocks, in order, against the servers its commands started."""
    doc = REPO / "docs" / "serving.md"
    last = [s for s in STEPS if s.doc == "docs/serving.md"][-1]
    earlier = [f for f in workspaces.run_before(last) if f]
    assert not earlier, "earlier steps of docs/serving.md failed:\n  " + "\n  ".join(earlier)
    assert workspaces.servers, "docs/serving.md starts no server"
    monkeypatch.chdir(workspaces.path(Workspaces.name(last)))
    blocks = [b for lang, _, b in _fences(doc.read_text(encoding="utf-8")) if lang == "python"]
    assert len(blocks) >= 2
    namespace: dict = {}
    for i, block in enumerate(blocks):
        code = workspaces.served("\n".join(block))
        exec(compile(code, f"docs/serving.md python block {i + 1}", "exec"), namespace)
    assert namespace["answer"]["rankings"][0]["qid"] == "s0" and len(namespace["answer"]["scores"]) == 3
    np = pytest.importorskip("numpy")
    np.testing.assert_allclose(namespace["same"], namespace["scores"], rtol=1e-6)
    # the v2 route's scores of the same rows as padded lists (the Open Inference Protocol's block)
    np.testing.assert_allclose(
        namespace["v2_scores"][namespace["mask"]], namespace["scores"], rtol=1e-6, atol=1e-6
    )
