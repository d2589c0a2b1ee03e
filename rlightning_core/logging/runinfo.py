"""What experiment-tracker loggers record about a run besides its metrics: its name and its config.

A logger is built with ``(params, run_dir=...)`` after the run directory holds ``config.yaml`` (the resolved
config, defaults included), so trackers such as W&B or MLflow read the run's configuration from there instead
of needing it passed in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["flat_run_config", "read_run_config"]

Scalar = str | int | float | bool | None


def read_run_config(run_dir: str | Path) -> dict[str, Any]:
    """The resolved config saved as ``RUN_DIR/config.yaml``, as plain data (``{}`` when there is none)."""
    import yaml

    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def flat_run_config(run_dir: str | Path) -> dict[str, Scalar]:
    """The saved config flattened to dotted keys, e.g. ``{"policy.params.lr": 0.0003, "env[0].type": ...}``.

    Lists of scalars stay one value (their text form); lists of sections are indexed (``env[0].id``). Every
    value is a scalar, as trackers' parameter tables expect.
    """
    out: dict[str, Scalar] = {}
    _flatten(read_run_config(run_dir), "", out)
    return out


def _flatten(data: Any, prefix: str, out: dict[str, Scalar]) -> None:
    if isinstance(data, dict):
        for key, value in data.items():
            _flatten(value, f"{prefix}.{key}" if prefix else str(key), out)
    elif isinstance(data, list) and any(isinstance(v, dict | list) for v in data):
        for i, value in enumerate(data):
            _flatten(value, f"{prefix}[{i}]", out)
    elif isinstance(data, list):
        out[prefix] = str(data)
    elif data is None or isinstance(data, str | int | float | bool):
        out[prefix] = data
    else:
        out[prefix] = str(data)
