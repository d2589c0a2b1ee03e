"""attrs validators with messages users can act on ("must be > 0, got -1"), for core's and plugins' configs."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = ["device_spec", "ge", "gt", "in_range", "le", "one_of", "relative_path"]

Validator = Callable[[Any, Any, Any], None]


def _skip(value: Any) -> bool:
    return value is None


def gt(bound: float) -> Validator:
    """Value must be greater than ``bound`` (``None`` passes, for optional fields)."""

    def check(_inst: Any, _attr: Any, value: Any) -> None:
        if not _skip(value) and not value > bound:
            raise ValueError(f"must be > {bound}, got {value!r}")

    return check


def ge(bound: float) -> Validator:
    """Value must be at least ``bound`` (``None`` passes)."""

    def check(_inst: Any, _attr: Any, value: Any) -> None:
        if not _skip(value) and not value >= bound:
            raise ValueError(f"must be >= {bound}, got {value!r}")

    return check


def le(bound: float) -> Validator:
    """Value must be at most ``bound`` (``None`` passes)."""

    def check(_inst: Any, _attr: Any, value: Any) -> None:
        if not _skip(value) and not value <= bound:
            raise ValueError(f"must be <= {bound}, got {value!r}")

    return check


def in_range(low: float, high: float) -> Validator:
    """Value must lie in ``[low, high]`` (``None`` passes)."""

    def check(_inst: Any, _attr: Any, value: Any) -> None:
        if not _skip(value) and not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}, got {value!r}")

    return check


def one_of(*choices: Any) -> Validator:
    """Value must be one of ``choices`` (for fixed options; component names resolve through the registry)."""

    def check(_inst: Any, _attr: Any, value: Any) -> None:
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(map(repr, choices))}; got {value!r}")

    return check


_DEVICE_RE = re.compile(r"^(auto|cpu|cuda(:\d+)?|mps)$")


def device_spec(_inst: Any, _attr: Any, value: Any) -> None:
    """A torch device spelled ``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps``."""
    if not isinstance(value, str) or not _DEVICE_RE.match(value):
        raise ValueError(f"must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'; got {value!r}")


def relative_path(_inst: Any, _attr: Any, value: Any) -> None:
    """A non-empty relative path that stays inside the directory it is joined to (no leading ``/``, no ``..``).

    For file names in the run directory: only the driver writes there, and nothing is written outside it.
    """
    from pathlib import PurePosixPath, PureWindowsPath

    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        raise ValueError(f"must be a non-empty relative path inside the run directory, got {value!r}")
    for flavour in (PurePosixPath, PureWindowsPath):
        path = flavour(value)
        if path.is_absolute() or path.anchor or ".." in path.parts:
            raise ValueError(f"must be a relative path inside the run directory (no leading '/', no drive and "
                             f"no '..'), got {value!r}")
