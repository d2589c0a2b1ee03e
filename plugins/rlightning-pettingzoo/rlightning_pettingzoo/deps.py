"""Which optional packages a PettingZoo env module needs, told from its name without importing it.

PettingZoo installs every env family's modules but not their packages: ``pettingzoo.butterfly.pistonball_v6``
is found on disk and fails only when imported, because pymunk comes with ``pettingzoo[butterfly]``. The
family in the name says what to check with :func:`importlib.util.find_spec`, so a config naming it is refused
when it is read, with the extra of this plugin that installs what is missing.
"""

from __future__ import annotations

from rlightning_core.dependencies import missing_dependency, pip_name, require
from rlightning_core.errors import MissingDependencyError

__all__ = ["FAMILY_MODULES", "check_env_dependencies", "translate_import_error"]

_DIST = "rlightning-pettingzoo"

#: Modules every env of a PettingZoo family imports (the family's extra of this plugin installs them).
FAMILY_MODULES: dict[str, tuple[str, ...]] = {
    "atari": ("multi_agent_ale_py", "pygame"),
    "butterfly": ("pygame", "pymunk"),
    "classic": ("pygame",),
    "sisl": ("pygame", "pymunk", "scipy", "Box2D"),
}

#: What the env packages themselves import (their requirements: missing only after ``pip install --no-deps``).
_PACKAGE_MODULES: dict[str, tuple[str, ...]] = {"mpe2": ("pettingzoo", "pygame", "scipy")}

#: Classic envs that need more than the family's modules (their name without the ``_v<N>`` suffix).
_CLASSIC_ENV_MODULES: dict[str, tuple[str, ...]] = {
    "chess": ("chess",),
    "gin_rummy": ("rlcard",),
    "hanabi": ("shimmy",),
    "leduc_holdem": ("rlcard",),
    "texas_holdem": ("rlcard",),
    "texas_holdem_no_limit": ("rlcard",),
}


def _family(env: str) -> str | None:
    parts = env.split(".")
    return parts[1] if len(parts) == 3 and parts[0] == "pettingzoo" else None


def _requirement(env: str) -> str:
    family = _family(env)
    return f"{_DIST}[{family}]" if family in FAMILY_MODULES else _DIST


def check_env_dependencies(env: str) -> None:
    """Raise :class:`MissingDependencyError` when a package that env module ``env`` imports is missing.

    Args:
        env: the env's module, ``pettingzoo.<family>.<name>_v<N>`` or ``mpe2.<name>_v<N>``.
    """
    needed_by = f"env {env!r}"
    top = env.split(".", 1)[0]
    require(top, pip=pip_name(top), needed_by=needed_by)  # pettingzoo or mpe2, requirements of this plugin
    for module in _PACKAGE_MODULES.get(top, ()):
        require(module, pip=pip_name(module), needed_by=needed_by)
    family = _family(env)
    if family in FAMILY_MODULES:
        name = env.rsplit(".", 1)[1].rsplit("_v", 1)[0]
        modules = FAMILY_MODULES[family] + (_CLASSIC_ENV_MODULES.get(name, ()) if family == "classic" else ())
        require(modules, pip=_requirement(env), needed_by=needed_by)


def translate_import_error(exc: BaseException, env: str) -> MissingDependencyError | None:
    """The :class:`MissingDependencyError` behind an import of env module ``env`` that failed, or ``None``."""
    return missing_dependency(exc, needed_by=f"env {env!r}", pip=_requirement(env))
