"""Optional dependencies: whether a module is installed (found without importing it), and how to install it.

A component that needs an optional package says so with :func:`require`, where it can tell:

- in a validator (or ``__attrs_post_init__``) of its params class, so ``rlightning config validate`` and
  ``rlightning train --dry-run`` report it before anything starts: the config converter collects a
  :class:`~rlightning_core.errors.MissingDependencyError` like any failed validator, under the key's path;
- in its factory or command, for what only shows at run time (a render mode, a library call).

Either way the CLI prints one line naming the module and the ``pip install`` command, and exits 2::

    env[0].params.id: env 'Hopper-v5' needs the Python module 'mujoco', which is not installed; install it
    with: pip install 'rlightning-gymnasium[mujoco]'
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterable
from types import ModuleType

from rlightning_core.errors import MissingDependencyError

__all__ = ["MissingDependencyError", "import_module", "is_installed", "missing_dependency", "pip_name", "require"]

#: Import names whose distribution on PyPI is called something else.
_PIP_NAMES = {
    "Box2D": "box2d",
    "PIL": "pillow",
    "ale_py": "ale-py",
    "cv2": "opencv-python",
    "multi_agent_ale_py": "multi-agent-ale-py",
    "pygame": "pygame-ce",
    "pyspiel": "open_spiel",
    "rsl_rl": "rsl-rl-lib",
    "sklearn": "scikit-learn",
    "yaml": "pyyaml",
}


def pip_name(module: str) -> str:
    """The distribution that usually provides top-level ``module`` (``Box2D`` -> ``box2d``)."""
    top = module.partition(".")[0]
    return _PIP_NAMES.get(top, top.replace("_", "-"))


def is_installed(module: str) -> bool:
    """Whether ``module`` can be imported, decided without importing it (a dotted name imports its parents).

    Uses :func:`importlib.util.find_spec`, so it is cheap and sees exactly what ``import`` would: a module
    absent from every path entry (or blocked by ``sys.modules[name] = None``) is not installed.
    """
    if module in sys.modules:
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package of a dotted name is missing
        return False


def require(modules: str | Iterable[str], *, pip: str, needed_by: str, note: str | None = None) -> None:
    """Raise :class:`MissingDependencyError` for the first of ``modules`` that is not installed.

    Args:
        modules: top-level module names (``"mujoco"``), or several that are all needed.
        pip: the requirement to install: the plugin's extra where one exists (``"rlightning-gymnasium[mujoco]"``),
            else the distribution (``"matplotlib>=3.7"``).
        needed_by: what needs them, as the message's subject (``"env 'Hopper-v5'"``, ``"rlightning plot"``).
        note: an extra sentence for the message (e.g. a build prerequisite).

    Raises:
        MissingDependencyError: naming the module and the pip command.
    """
    for module in [modules] if isinstance(modules, str) else modules:
        if not is_installed(module):
            raise MissingDependencyError(module, pip, needed_by, note)


def missing_dependency(exc: BaseException, *, needed_by: str, pip: str | None = None,
                       note: str | None = None) -> MissingDependencyError | None:
    """The :class:`MissingDependencyError` behind a failed import, or ``None`` when that is not the cause.

    It is the cause when ``exc`` is a :class:`ModuleNotFoundError` whose top-level module is not installed.
    Anything else (a module that is installed but fails to import, a missing submodule of an installed
    package: a version mismatch) is left to be shown as it is.

    Args:
        exc: the exception an import raised.
        needed_by: what needed the import.
        pip: what to install (default: the distribution that usually provides the module, see :func:`pip_name`).
        note: an extra sentence for the message.
    """
    name = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    if not name:
        return None
    top = name.partition(".")[0]
    if is_installed(top):
        return None
    return MissingDependencyError(top, pip or pip_name(top), needed_by, note)


def import_module(module: str, *, pip: str, needed_by: str, note: str | None = None) -> ModuleType:
    """Import ``module``; if it (or a package it imports) is not installed, raise :class:`MissingDependencyError`.

    Args:
        module: the module to import (dotted names allowed).
        pip: what to install: it brings the module and what the module imports (a plugin's extra, or the
            distribution, whose own requirements pip installs too).
        needed_by: what needs the module.
        note: an extra sentence for the message.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        err = missing_dependency(exc, needed_by=needed_by, pip=pip, note=note)
        if err is None:
            raise
        raise err from None
