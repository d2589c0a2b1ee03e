"""Module attributes imported on first access (PEP 562), so importing a package stays cheap.

A package lists which of its names live in which module and sets ``__getattr__ = lazy_getattr(...)``; the first
access imports that module and caches the value in the package's namespace. Used where a light process (the
CLI's light commands, a Ray env worker) imports a package for a few names and must not pay for the rest.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_getattr"]


def lazy_getattr(package: str, where: Mapping[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` for ``package``: ``where`` maps each lazy name to its full module name.

    ``namespace`` is the package's ``globals()``: a value is stored there once imported, so later accesses
    are plain lookups. Names not in ``where`` raise ``AttributeError`` (which also lets ``from package import
    submodule`` fall through to importing the submodule).
    """

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
