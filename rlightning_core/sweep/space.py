"""Sweep search spaces: a YAML file naming dotted config keys and the distribution each is drawn from.

Shape (``examples/sweeps/cartpole_ppo_space.yaml``)::

    params:
      policy.params.lr: {type: log_uniform, low: 1.0e-4, high: 1.0e-2}
      policy.params.epochs: {type: int, low: 1, high: 8}
      policy.params.minibatch_size: {type: categorical, choices: [64, 128, 256]}
      policy.params.gamma: {type: uniform, low: 0.95, high: 0.999}
    pruner: {type: median, n_startup_trials: 4, n_warmup_steps: 0}
    sampler: {n_startup_trials: 4}

Every key is checked against the base config (plus the sweep's overrides) by loading it with the lowest and the
highest value of every parameter, so an unknown key gets the config loader's own did-you-mean message and a
value the schema refuses is reported before any trial starts.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from rlightning_core.config.loading import load_config, read_config_file
from rlightning_core.errors import ConfigError

__all__ = ["KINDS", "Param", "SweepSpace", "load_space", "override", "validate_space"]

#: Distribution kinds and the fields each takes (required, optional).
KINDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "log_uniform": (("low", "high"), ()),
    "uniform": (("low", "high"), ("step",)),
    "int": (("low", "high"), ("step", "log")),
    "categorical": (("choices",), ()),
}

_SCALARS = (bool, int, float, str)


@attrs.frozen
class Param:
    """One swept key: ``key`` (dotted, as in ``train`` overrides), its distribution ``kind`` and bounds."""

    key: str
    kind: str
    low: float | int | None = None
    high: float | int | None = None
    step: float | int | None = None
    log: bool = False
    choices: tuple[Any, ...] = ()

    def extremes(self) -> tuple[Any, Any]:
        """The lowest and highest value this parameter can take (first and last choice for categorical)."""
        if self.kind == "categorical":
            return self.choices[0], self.choices[-1]
        return self.low, self.high


@attrs.frozen
class SweepSpace:
    """A parsed space file: the parameters plus the pruner and sampler settings."""

    params: tuple[Param, ...]
    pruner: str = "median"
    pruner_startup_trials: int = 4
    pruner_warmup_steps: int = 0
    sampler_startup_trials: int = 4
    source: str | None = None


def override(key: str, value: Any) -> str:
    """``key=value`` as a ``train`` override (the value written as JSON, which the override parser reads)."""
    return f"{key}={json.dumps(value)}"


def _number(value: Any, where: str, problems: list[str], *, integer: bool = False) -> Any:
    ok = isinstance(value, int) if integer else isinstance(value, int | float)
    if isinstance(value, bool) or not ok or (isinstance(value, float) and not math.isfinite(value)):
        problems.append(f"{where}: expected {'an integer' if integer else 'a finite number'}, got {value!r}")
        return None
    return value


def _param(key: str, spec: Any, problems: list[str]) -> Param | None:
    where = f"params.{key}"
    if not isinstance(spec, Mapping):
        problems.append(f"{where}: expected a mapping such as {{type: uniform, low: 0.9, high: 0.99}}, got {spec!r}")
        return None
    kind = spec.get("type")
    if kind not in KINDS:
        problems.append(f"{where}.type: expected one of {', '.join(KINDS)}, got {kind!r}")
        return None
    required, optional = KINDS[kind]
    for extra in sorted(set(spec) - {"type", *required, *optional}):
        allowed = ", ".join(("type", *required, *optional))
        problems.append(f"{where}.{extra}: unknown key for a {kind} distribution; allowed keys: {allowed}")
    missing = [f for f in required if f not in spec]
    if missing:
        problems.append(f"{where}: a {kind} distribution needs {', '.join(missing)}")
        return None
    before = len(problems)
    if kind == "categorical":
        choices = spec["choices"]
        if not isinstance(choices, list) or not choices:
            problems.append(f"{where}.choices: expected a non-empty list, got {choices!r}")
            return None
        bad = [c for c in choices if c is not None and not isinstance(c, _SCALARS)]
        if bad:
            problems.append(f"{where}.choices: each choice must be a number, string, bool or null, got {bad[0]!r}")
            return None
        return Param(key, kind, choices=tuple(choices))
    integer = kind == "int"
    low = _number(spec["low"], f"{where}.low", problems, integer=integer)
    high = _number(spec["high"], f"{where}.high", problems, integer=integer)
    step = _number(spec["step"], f"{where}.step", problems, integer=integer) if "step" in spec else None
    log = spec.get("log", False)
    if not isinstance(log, bool):
        problems.append(f"{where}.log: expected true or false, got {log!r}")
    if len(problems) > before:
        return None
    if low >= high:
        problems.append(f"{where}: low ({low}) must be below high ({high})")
    if kind == "log_uniform" and low <= 0:
        problems.append(f"{where}.low: a log_uniform distribution needs low > 0, got {low}")
    if step is not None and step <= 0:
        problems.append(f"{where}.step: must be positive, got {step}")
    if log and (low <= 0 or step not in (None, 1)):
        problems.append(f"{where}.log: a log int distribution needs low >= 1 and no step")
    if len(problems) > before:
        return None
    if kind == "log_uniform":
        return Param(key, kind, low=float(low), high=float(high), log=True)
    if kind == "uniform":
        return Param(key, kind, low=float(low), high=float(high), step=step)
    return Param(key, kind, low=low, high=high, step=step, log=log)


def _int_setting(section: Mapping[str, Any], name: str, default: int, where: str, problems: list[str]) -> int:
    value = section.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        problems.append(f"{where}.{name}: expected a non-negative integer, got {value!r}")
        return default
    return value


def parse_space(data: Mapping[str, Any], source: str | None = None) -> SweepSpace:
    """A :class:`SweepSpace` from the raw mapping of a space file; every problem at once in a ConfigError."""
    problems: list[str] = []
    for extra in sorted(set(data) - {"params", "pruner", "sampler"}):
        problems.append(f"{extra}: unknown key; allowed keys: params, pruner, sampler")
    raw = data.get("params")
    if not isinstance(raw, Mapping) or not raw:
        problems.append("params: expected a non-empty mapping of dotted config keys to distributions")
        raise ConfigError(problems, source=source)
    params = [p for key, spec in raw.items() if (p := _param(str(key), spec, problems)) is not None]
    pruner = data.get("pruner") or {}
    sampler = data.get("sampler") or {}
    for name, section in (("pruner", pruner), ("sampler", sampler)):
        if not isinstance(section, Mapping):
            problems.append(f"{name}: expected a mapping, got {section!r}")
    if problems:
        raise ConfigError(problems, source=source)
    kind = pruner.get("type", "median")
    if kind not in ("median", "none"):
        problems.append(f"pruner.type: expected median or none, got {kind!r}")
    for extra in sorted(set(pruner) - {"type", "n_startup_trials", "n_warmup_steps"}):
        problems.append(f"pruner.{extra}: unknown key; allowed keys: type, n_startup_trials, n_warmup_steps")
    for extra in sorted(set(sampler) - {"n_startup_trials"}):
        problems.append(f"sampler.{extra}: unknown key; allowed keys: n_startup_trials")
    space = SweepSpace(
        params=tuple(params),
        pruner=kind,
        pruner_startup_trials=_int_setting(pruner, "n_startup_trials", 4, "pruner", problems),
        pruner_warmup_steps=_int_setting(pruner, "n_warmup_steps", 0, "pruner", problems),
        sampler_startup_trials=_int_setting(sampler, "n_startup_trials", 4, "sampler", problems),
        source=source,
    )
    if problems:
        raise ConfigError(problems, source=source)
    return space


def load_space(path: str | Path) -> SweepSpace:
    """Read and parse a space file (YAML, TOML or JSON)."""
    return parse_space(read_config_file(path), source=str(path))


def validate_space(space: SweepSpace, config_file: str | Path, overrides: Sequence[str] = ()) -> None:
    """Check every swept key against the base config: load it with each parameter's lowest, then highest value.

    Raises a :class:`ConfigError` naming the space file, whose lines are the config loader's (an unknown key
    says ``did you mean ...``).
    """
    for pick in (0, 1):
        sampled = [override(p.key, p.extremes()[pick]) for p in space.params]
        try:
            load_config(config_file, [*overrides, *sampled])
        except ConfigError as exc:
            keys = {p.key for p in space.params}
            lines = [f"{line} (swept by {space.source})" if line.split(":", 1)[0] in keys
                     or any(line.startswith(f"override {k!r}") or line.startswith(k) for k in keys) else line
                     for line in exc.problems]
            raise ConfigError(lines, source=exc.source) from None
