"""docs/models.md, generated from the code so that it cannot drift: every model of
``ctxrank.registry.MODELS`` with every hyperparameter (its default from the config dataclass or the
baseline's constructor, its meaning from their docstrings) and its paper reference (the model module's
first docstring line), the training parameters (``TrainConfig``) and every loss of
``ctxrank.losses.LOSSES`` with its formula (the loss's docstring up to ``Args:``) and options.

``python -m ctxrank.api.models_doc`` rewrites docs/models.md; ``--check`` exits 1 when it is stale
(tests/test_models_doc.py runs the check).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

from ctxrank.api._params import param_spec
from ctxrank.api.estimators import ESTIMATOR_OF_MODEL
from ctxrank.config import RunConfig, TrainConfig, loss_options
from ctxrank.losses import LOSSES
from ctxrank.registry import MODELS, Baseline

__all__ = ["DOC_PATH", "describe", "render_models_md"]

DOC_PATH = Path(__file__).resolve().parents[3] / "docs" / "models.md"
_ENTRY = re.compile(r"^(\s*)(\w+(?:, \w+)*):(?:\s+(.*))?$")


def describe(doc: str | None) -> dict[str, str]:
    """``{name: meaning}`` from the ``name: meaning`` lines of a docstring (``Attributes:`` / ``Args:``;
    continuation lines indented deeper; ``a, b: meaning`` gives both names)."""
    out: dict[str, str] = {}
    lines = inspect.cleandoc(doc or "").splitlines()
    i = 0
    while i < len(lines):
        m = _ENTRY.match(lines[i])
        i += 1
        if m is None or m.group(2)[0].isupper():  # not an entry, or a section header (Args:)
            continue
        indent, names, text = len(m.group(1)), m.group(2), [m.group(3) or ""]
        while i < len(lines) and lines[i].strip() and len(lines[i]) - len(lines[i].lstrip()) > indent:
            text.append(lines[i].strip())
            i += 1
        for name in names.split(", "):
            out.setdefault(name, " ".join(t for t in text if t))
    return out


def _meanings(cls: type) -> dict[str, str]:
    out: dict[str, str] = {}
    for klass in cls.__mro__:
        for name, text in describe(klass.__doc__).items():
            out.setdefault(name, text)
    return out


def _value(v: Any) -> str:
    if isinstance(v, tuple):
        v = list(v)
    return f"`{v!r}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") or "(see the class docstring)"


def _model_section(name: str) -> list[str]:
    entry = MODELS[name]
    spec = param_spec(name)
    est = ESTIMATOR_OF_MODEL.get(name)
    est_text = f"`ctxrank.{est.__name__}`" if est is not None else f'`ctxrank.Ranker(model="{name}")`'
    if isinstance(entry, Baseline):
        cls, meanings = entry.cls, describe(entry.cls.__doc__)
        reference = inspect.getdoc(cls).splitlines()[0]
        objective = f"objective: {entry.trains}"
    else:
        cls, meanings = entry, _meanings(entry.config_class)
        reference = entry.summary or (inspect.getdoc(sys.modules[entry.__module__]) or "").splitlines()[0]
        loss = entry.own_objective or entry.default_loss
        objective = f"default loss: `{loss}`" + (" (its own objective)" if entry.own_objective else "")
        config = RunConfig(model=name)
        if config.fits_by_maximum_likelihood:  # no loss: its loss is for SGD (rerank.residual) only
            objective = (
                f"objective: {config.objective}; loss `{loss}` only when SGD trains it (rerank.residual)"
            )
        if entry.run_defaults:  # run-config values the model implies (e.g. DASALC's transform, noise)
            implied = ", ".join(f"`{k} = {v!r}`" for k, v in entry.run_defaults.items())
            objective += f"; unless the run sets them: {implied}"
    lines = [
        f"## `{name}`",
        "",
        reference,
        "",
        f"Estimator: {est_text}; {objective}; class `{cls.__name__}`.",
        "",
    ]
    lines += ["| parameter | default | meaning |", "|---|---|---|"]
    for key, default in spec.model.items():
        lines.append(f"| `{key}` | {_value(default)} | {_cell(meanings.get(key, ''))} |")
    return [*lines, ""]


def _train_section() -> list[str]:
    meanings = describe(TrainConfig.__doc__)
    lines = [
        "## Training parameters (neural models)",
        "",
        "`[train]` of a run config; estimator parameters of the same name (`seed` is `random_state`). "
        "Also: `loss` (default: the model's), `loss_params`, `normalizer` (the run config's `transform`, "
        "default `'minmax'`), `verbose`.",
        "",
        "| parameter | default | meaning |",
        "|---|---|---|",
    ]
    for f in dataclasses.fields(TrainConfig):
        lines.append(f"| `{f.name}` | {_value(f.default)} | {_cell(meanings.get(f.name, ''))} |")
    return [*lines, ""]


def _loss_section(name: str) -> list[str]:
    fn = LOSSES[name]
    doc = inspect.getdoc(fn) or ""
    formula = doc.split("\nArgs:")[0].strip()
    sig = inspect.signature(fn).parameters
    meanings = describe(doc)
    lines = [f"### `{name}`", "", formula, "", "| option | default | meaning |", "|---|---|---|"]
    for opt in loss_options(fn):
        lines.append(f"| `{opt}` | {_value(sig[opt].default)} | {_cell(meanings.get(opt, ''))} |")
    return [*lines, ""]


def render_models_md() -> str:
    """The text of docs/models.md."""
    lines = [
        "# Models and losses",
        "",
        "<!-- generated by `python -m ctxrank.api.models_doc` from the config dataclasses, the baselines'",
        "constructors and the loss registry; do not edit by hand (tests/test_models_doc.py checks it) -->",
        "",
        "Every model of `ctxrank.registry.MODELS` (`ctxrank train --model NAME`, "
        '`ctxrank.Ranker(model="NAME")`) with every hyperparameter (`[model_params]` of a run config, '
        "estimator parameters of the same name), then the training parameters and every loss.",
        "",
        "Which context model to choose, what each one reads and costs, and how each compares at the same "
        "tuning budget with tuned LightGBM LambdaMART (MQ2008 and OHSUMED, both protocols) and with the "
        "conditional logit (the four real choice datasets): [context-models.md](context-models.md).",
        "",
    ]
    for name in MODELS:
        lines += _model_section(name)
    lines += _train_section()
    lines += ["## Losses", "", "Every loss of `ctxrank.losses.LOSSES` (`--loss NAME`, `loss=`), with "
              "its formula; options go in `[loss_params]` / `loss_params=`.", ""]  # fmt: skip
    for name in sorted(LOSSES):
        lines += _loss_section(name)
    return textwrap.dedent("\n".join(lines)).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = render_models_md()
    if "--check" in argv:
        if not DOC_PATH.is_file() or DOC_PATH.read_text() != text:
            print(f"{DOC_PATH} is stale: run `python -m ctxrank.api.models_doc`", file=sys.stderr)
            return 1
        return 0
    DOC_PATH.write_text(text)
    print(f"wrote {DOC_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
