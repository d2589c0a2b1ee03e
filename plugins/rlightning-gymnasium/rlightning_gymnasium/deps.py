"""Which optional packages a Gymnasium env needs, told from Gymnasium's registry without importing the env.

Gymnasium registers every id of its own families (MuJoCo, Box2D, ...) whether or not their packages are
installed; an id's entry point (``gymnasium.envs.mujoco.hopper_v5:HopperEnv``) says which family it belongs
to, and :func:`importlib.util.find_spec` says whether that family's packages are importable. So a config
naming ``Hopper-v5`` is refused when it is read (``rlightning config validate``, ``train --dry-run``), with the
extra of this plugin that installs what is missing.
"""

from __future__ import annotations

import re

from rlightning_core.dependencies import is_installed, pip_name, require
from rlightning_core.errors import MissingDependencyError, UserError

__all__ = ["EXTRAS", "check_env_dependencies", "ensure_ale_registered", "entry_point_module", "looks_like_atari",
           "translate_make_error"]

_DIST = "rlightning-gymnasium"


#: Env families: (entry-point module prefix, modules an env of it imports, extra of this plugin, note).
EXTRAS: tuple[tuple[str, tuple[str, ...], str, str | None], ...] = (
    ("gymnasium.envs.mujoco", ("mujoco",), "mujoco", None),
    ("gymnasium.envs.box2d", ("Box2D", "pygame"), "box2d",
     "where no Box2D wheel fits the platform it builds from source, which needs swig: pip install swig"),
    ("ale_py", ("ale_py",), "atari", None),
)

#: Families whose envs import pygame only to render (a ``render_mode``, e.g. for videos).
_RENDER_WITH_PYGAME = ("gymnasium.envs.classic_control", "gymnasium.envs.toy_text", "gymnasium.envs.phys2d")

#: Env-id namespaces that a package registers when imported (``ALE/Pong-v5`` needs ``ale_py``).
_NAMESPACES = {"ALE": "ale_py"}

#: Atari ids outside the ``ALE/`` namespace, which ale_py registers too (``BreakoutNoFrameskip-v4`` ...).
_ATARI_V4_RE = re.compile(r"^[A-Z][A-Za-z0-9]*(NoFrameskip|Deterministic)-v[04]$")


def looks_like_atari(env_id: str) -> bool:
    """Whether ``env_id`` is an id of ale_py's (``ALE/Pong-v5``, ``PongNoFrameskip-v4``), told from its name."""
    return env_id.startswith("ALE/") or bool(_ATARI_V4_RE.match(env_id))


def ensure_ale_registered() -> None:
    """Register ale_py's env ids with Gymnasium when they are not yet (Gymnasium loads no env plugins itself).

    Called only for Atari ids, so other envs never import ale_py; every process that makes an env calls it
    (the subprocesses of ``async`` workers and Ray actors start with Gymnasium's own registry).
    """
    import gymnasium

    if "ALE/Pong-v5" in gymnasium.registry:
        return
    import ale_py

    gymnasium.register_envs(ale_py)


def _in_family(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def entry_point_module(env_id: str) -> str | None:
    """The module that builds ``env_id`` (``module:EnvId`` names it; else the registry's entry point).

    ``None`` when the id is not registered or its entry point is a callable rather than a string.
    """
    if ":" in env_id:
        return env_id.split(":", 1)[0]
    import gymnasium

    try:
        entry = gymnasium.spec(env_id).entry_point
    except gymnasium.error.Error:
        return None
    return entry.split(":", 1)[0] if isinstance(entry, str) else None


def _requirement(top: str) -> str:
    """The pip requirement that installs top-level module ``top``: this plugin's extra where one has it."""
    for prefix, modules, extra, _note in EXTRAS:
        if top in modules or _in_family(top, prefix):
            return f"{_DIST}[{extra}]"
    return pip_name(top)


def check_env_dependencies(env_id: str, render_mode: str | None = None, *, atari: bool = False) -> None:
    """Raise :class:`MissingDependencyError` when an optional package that ``env_id`` needs is not installed.

    An Atari id (:func:`looks_like_atari`, or any id when ``atari``) needs ale_py and, for the preset's frame
    resizing, OpenCV; ale_py's ids are registered here when they are installed.

    Args:
        env_id: a Gymnasium id (``Hopper-v5``) or ``module:EnvId``.
        render_mode: the render mode the env is built with; rendering classic-control and toy-text envs
            needs pygame.
        atari: the env uses the ``atari`` preset.
    """
    needed_by = f"env {env_id!r}"
    if atari or looks_like_atari(env_id.split(":", 1)[-1]):
        modules = ("ale_py", "cv2") if atari else ("ale_py",)
        require(modules, pip=f"{_DIST}[atari]", needed_by=needed_by + (" (preset atari)" if atari else ""))
        ensure_ale_registered()
    namespace = env_id.split("/", 1)[0] if "/" in env_id and ":" not in env_id else None
    if namespace in _NAMESPACES and not is_installed(_NAMESPACES[namespace]):
        top = _NAMESPACES[namespace]
        raise MissingDependencyError(top, _requirement(top), needed_by)
    module = entry_point_module(env_id)
    if module is None:
        return
    top = module.split(".", 1)[0]
    if not is_installed(top):  # ``some_package:EnvId`` whose package is missing
        raise MissingDependencyError(top, _requirement(top), needed_by)
    for prefix, modules, extra, note in EXTRAS:
        if _in_family(module, prefix):
            require(modules, pip=f"{_DIST}[{extra}]", needed_by=needed_by, note=note)
    if render_mode is not None and any(_in_family(module, p) for p in _RENDER_WITH_PYGAME):
        require("pygame", pip="rlightning[video]", needed_by=f"rendering env {env_id!r}")


def translate_make_error(exc: BaseException, env_id: str) -> UserError | None:
    """The user error behind a failure of ``gymnasium.make(env_id)`` to import what the env needs, or ``None``.

    - a package that is not installed: :class:`MissingDependencyError`. Gymnasium raises
      ``DependencyNotInstalled`` from the ``ModuleNotFoundError``; both are looked through;
    - any other ``DependencyNotInstalled``: Gymnasium's own message, which names what to install;
    - an ``ImportError`` of an id that Gymnasium registers with a function instead of an env class
      (``Hopper-v3``: Gymnasium keeps the old MuJoCo ids to say where they moved): that message too.

    Anything else (an installed package that fails to import: a broken install, a bug) is left as it is.
    """
    import gymnasium

    from rlightning_core.dependencies import missing_dependency

    for candidate in (exc, exc.__cause__, exc.__context__):
        if candidate is None:
            continue
        name = getattr(candidate, "name", None)
        top = name.split(".", 1)[0] if isinstance(name, str) else None
        err = missing_dependency(candidate, needed_by=f"env {env_id!r}", pip=_requirement(top) if top else None)
        if err is not None:
            return err
    if isinstance(exc, gymnasium.error.DependencyNotInstalled):
        return UserError(f"env {env_id!r}: {exc}")
    if isinstance(exc, ImportError) and ":" not in env_id:
        try:
            entry = gymnasium.spec(env_id).entry_point
        except gymnasium.error.Error:
            return None
        if not isinstance(entry, str) and str(getattr(entry, "__module__", "")).startswith("gymnasium"):
            return UserError(f"env {env_id!r} cannot be made: {exc}")
    return None
