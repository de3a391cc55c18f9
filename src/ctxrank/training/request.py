"""The training request as given: ``(DataSource, RunConfig)`` before the config is resolved.

A run records it flat (option name -> value, None where not given) in ``OUT/resume/run.json`` and the
model's ``ctxrank.json``, with the ``ctxrank train`` command line that repeats it; ``--resume`` reads it
back (older records too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ctxrank._checks import Field
from ctxrank._declare import declared, declared_as, declared_keys, flatten, from_namespace, option, unflatten
from ctxrank._io import override_text
from ctxrank._overrides import SET, Override, parse_override, with_flags
from ctxrank.config import RunConfig, resolve_config
from ctxrank.data.sources import DataSource

__all__ = ["FLAGS", "RUN_KEYS", "TrainRequest"]

#: the run-config options a request gives by name (declared on the config's fields): option name ->
#: dotted key (``seed`` -> ``train.seed``)
RUN_KEYS = declared_keys(RunConfig)


@dataclass(frozen=True)
class TrainRequest:
    """What a training run was given: ``config``, a TOML run config file; ``overrides``, typed
    ``(dotted key, value)`` pairs over it; ``data``, the data source; ``given``, the run-config options
    given by name (``(option name, value)``: ``("seed", 3)``, ``("top_k", 50)``). The run trains
    ``(data, run_config())``."""

    config: str | None = option(None, "--config", "TOML run config (see docs/training.md)", metavar="FILE",
                                path=True)  # fmt: skip
    overrides: tuple[Override, ...] = declared_as((), SET)
    data: DataSource = field(default_factory=DataSource)
    given: tuple[Override, ...] = ()

    @classmethod
    def of(cls, values: Mapping[str, Any] | Any) -> TrainRequest:
        """The request of parsed values by option name (an ``argparse.Namespace`` or a mapping); a
        run-config option that is None or absent was not given."""
        named = vars(values) if not isinstance(values, Mapping) else values
        given = tuple((name, named[name]) for name in RUN_KEYS if named.get(name) is not None)
        request = from_namespace(cls, named)
        return replace(request, overrides=tuple(request.overrides), given=given)

    def run_config(self) -> RunConfig:
        """The validated run config: defaults, the config file, the overrides, the options given."""
        return resolve_config(self.config, self.config_overrides())

    def config_overrides(self) -> list[Override]:
        """The typed overrides of the run config: ``overrides``, then the options given (an option and an
        override of the same key are refused: :func:`~ctxrank._overrides.with_flags`)."""
        given = [(Field(name), RUN_KEYS[name], value) for name, value in self.given]
        return with_flags(self.overrides, given)

    def to_record(self) -> dict[str, Any]:
        """JSON-ready flat dict (option name -> value, in :data:`FLAGS`' order), paths made absolute (so
        ``--resume`` works from any directory)."""
        given = dict(self.given)
        flat = {**{name: given.get(name) for name in RUN_KEYS}, **flatten(self)}
        flat.update({name: _absolute(flat[name]) for name in PATHS})
        flat["overrides"] = [[key, value] for key, value in self.overrides]
        return {k: list(v) if isinstance(v, tuple) else v for k, v in flat.items()}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> TrainRequest:
        """The request of :meth:`to_record` (``out``, which older records hold, is ignored; their
        ``overrides`` were ``KEY=VALUE`` text)."""
        flat = {k: v for k, v in record.items() if k != "out"}
        unknown = sorted(set(flat) - set(FLAGS))
        if unknown:
            raise ValueError(f"unknown recorded option(s) {unknown}; valid: {list(FLAGS)}")
        run = {name: flat.pop(name, None) for name in RUN_KEYS}
        request = unflatten(cls, flat, _recorded, what="recorded option")
        return replace(request, given=tuple((k, v) for k, v in run.items() if v is not None))

    def command_line(self, out_dir: str | Path, launcher: Sequence[str] = ()) -> list[str]:
        """A ``ctxrank train`` argv that repeats this request (paths as recorded: absolute);
        ``launcher``: the torchrun command (and options) that started the processes of the run."""
        argv = [*launcher, "-m", "ctxrank", "train"] if launcher else ["ctxrank", "train"]
        record, defaults = self.to_record(), TrainRequest().to_record()
        for name, flag in FLAGS.items():
            value = record[name]
            if value == defaults[name]:
                continue
            if isinstance(value, bool):
                argv.append(flag)
            elif name == "overrides":
                for key, v in value:
                    argv += [flag, override_text(key, v)]
            elif isinstance(value, list):
                argv += [flag, ",".join(str(v) for v in value)]
            else:
                argv += [flag, str(value)]
        return [*argv, "--out", str(Path(out_dir).absolute())]


def _absolute(path: str | None) -> str | None:
    return None if path is None else str(Path(path).absolute())


def _recorded(name: str, value: Any) -> Any:
    """A recorded value as the request holds it: JSON lists as tuples, each override a pair."""
    if name == "overrides":
        return tuple(parse_override(o) if isinstance(o, str) else (o[0], o[1]) for o in value)
    return tuple(value) if isinstance(value, list) else value


#: each recorded option's flag, in the record's order: the run config's options, then the request's own
#: (``--config``, ``--set``, the data source's)
FLAGS = {name: opt.flag for cls in (RunConfig, TrainRequest) for name, opt in declared(cls)}
#: the recorded options that are paths (recorded absolute)
PATHS = tuple(name for name, opt in declared(TrainRequest) if opt.path)
