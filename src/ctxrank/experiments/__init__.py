"""Experiments: models x folds x seeds, stored run by run, reported with significance tests.

``ctxrank experiment CONFIG.toml`` = :func:`load_spec` -> :func:`run_experiment` -> :func:`build_report`.
"""

from ctxrank.experiments.report import build_report
from ctxrank.experiments.runner import run_experiment
from ctxrank.experiments.spec import ExperimentSpec, builtin_names, load_spec
from ctxrank.experiments.stats import holm, paired_test
from ctxrank.experiments.store import RunStore

__all__ = [
    "ExperimentSpec",
    "RunStore",
    "build_report",
    "builtin_names",
    "holm",
    "load_spec",
    "paired_test",
    "run_experiment",
]
