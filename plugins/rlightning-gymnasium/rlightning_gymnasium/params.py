"""Options of the ``gymnasium`` env (``env[i].params``). Light at import: Gymnasium loads inside validators.

Wrappers are named, never imported by path: a wrapper ``type`` is a class of the ``gymnasium.wrappers``
namespace, written ``ClipAction`` or ``gymnasium.wrappers.ClipAction``. A config file therefore cannot make a
worker import an arbitrary module through a wrapper.
"""

from __future__ import annotations

import difflib
import inspect
import re
from collections.abc import Mapping
from typing import Any

from attrs import Factory, define, field

from rlightning_core.config.validators import ge, one_of

__all__ = ["PRESETS", "ROLES", "VECTORIZATION_MODES", "GymnasiumParams", "WrapperSpec", "available_wrappers",
           "resolve_wrapper"]

VECTORIZATION_MODES = ("sync", "async", "envpool")
PRESETS = (None, "atari")
ROLES = ("train", "eval")
_WRAPPER_PREFIX = "gymnasium.wrappers."
_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: Wrappers of ``gymnasium.wrappers`` a worker refuses, and why.
EXCLUDED_WRAPPERS: dict[str, str] = {
    "Autoreset": "the worker's vector env already resets finished episodes (same-step autoreset)",
    "ArrayConversion": "workers exchange numpy arrays",
    "JaxToNumpy": "workers exchange numpy arrays",
    "JaxToTorch": "workers exchange numpy arrays",
    "NumpyToTorch": "workers exchange numpy arrays",
}


#: ``gymnasium.make`` arguments that ``kwargs`` may not set, and where they come from instead.
_RESERVED_KWARGS: dict[str, str] = {
    "max_episode_steps": "use params.max_episode_steps",
    "render_mode": "the builder passes render_mode (e.g. for evaluation videos)",
    "autoreset": "the worker's vector env resets finished episodes",
}


def _short_name(name: str) -> str:
    return name[len(_WRAPPER_PREFIX):] if name.startswith(_WRAPPER_PREFIX) else name


def available_wrappers() -> list[str]:
    """Short names of the ``gymnasium.wrappers`` classes a wrapper spec may use (imports Gymnasium)."""
    import gymnasium
    import gymnasium.wrappers as wrappers

    names = []
    for name in wrappers.__all__:
        if name in EXCLUDED_WRAPPERS or not _IDENT_RE.match(name):
            continue
        obj = vars(wrappers).get(name)
        if isinstance(obj, type) and issubclass(obj, gymnasium.Wrapper):
            names.append(name)
    return sorted(names)


def resolve_wrapper(name: str) -> type:
    """The ``gymnasium.wrappers`` class called ``name`` (short or ``gymnasium.wrappers.``-prefixed).

    Raises:
        ValueError: not a wrapper of that namespace, or one a worker refuses; the message lists the options.
    """
    short = _short_name(name) if isinstance(name, str) else ""
    if not _IDENT_RE.match(short):
        raise ValueError(
            f"wrapper type {name!r} is not a gymnasium wrapper name: write a class of gymnasium.wrappers, "
            "e.g. 'ClipAction' or 'gymnasium.wrappers.ClipAction' (other modules cannot be imported from a "
            "config)"
        )
    if short in EXCLUDED_WRAPPERS:
        raise ValueError(f"wrapper {short!r} cannot be used here: {EXCLUDED_WRAPPERS[short]}")
    options = available_wrappers()
    if short not in options:
        close = difflib.get_close_matches(short, options, n=1, cutoff=0.6)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"unknown gymnasium wrapper {name!r}.{hint} Available wrappers: {', '.join(options)}"
        )
    import gymnasium.wrappers as wrappers

    cls: type = vars(wrappers)[short]
    return cls


def _wrapper_type(_inst: Any, _attr: Any, value: Any) -> None:
    resolve_wrapper(value)


@define(frozen=True, kw_only=True)
class WrapperSpec:
    """One wrapper of each single env (the first listed is innermost): a ``gymnasium.wrappers`` class."""

    type: str = field(validator=_wrapper_type)
    """Class name in ``gymnasium.wrappers`` (``NormalizeObservation``, ``ClipAction``, ``TimeLimit`` ...), or
    the same prefixed with ``gymnasium.wrappers.``."""
    kwargs: dict[str, Any] = Factory(dict)
    """Keyword arguments of the wrapper's constructor (after ``env``)."""

    def __attrs_post_init__(self) -> None:
        try:
            cls = resolve_wrapper(self.type)
        except ValueError:
            return  # the ``type`` validator reports it
        try:
            inspect.signature(cls).bind(None, **self.kwargs)
        except TypeError as exc:
            raise ValueError(f"wrapper {self.type!r}: bad kwargs {sorted(self.kwargs)}: {exc}") from None


def _to_wrapper_specs(value: Any) -> Any:
    """Let Python callers write wrappers as names or dicts; structured configs already hold specs."""
    if not isinstance(value, list | tuple):
        return value
    out = []
    for item in value:
        if isinstance(item, str):
            item = WrapperSpec(type=item)
        elif isinstance(item, Mapping):
            item = WrapperSpec(**item)
        out.append(item)
    return out


def _env_id(_inst: Any, _attr: Any, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be a Gymnasium env id such as 'CartPole-v1', got {value!r}")
    from rlightning_gymnasium.deps import check_env_dependencies

    # First: it names a missing package (``ALE/Pong-v5`` needs ale_py) and registers ale_py's ids.
    check_env_dependencies(value, atari=getattr(_inst, "preset", None) == "atari")
    if ":" in value:  # ``module:EnvId`` imports ``module`` (which registers the id) when the env is made
        return
    import gymnasium

    try:
        gymnasium.spec(value)
    except gymnasium.error.Error as exc:
        raise ValueError(
            f"{exc} (an env registered by another package is written 'package_module:EnvId')"
        ) from None


def _env_creator(env_id: Any) -> Any:
    """The registered creator of ``env_id`` (its class or function), or ``None`` when it cannot be loaded here."""
    if not isinstance(env_id, str) or ":" in env_id:
        return None  # ``module:EnvId`` registers the id only when the env is made
    import importlib

    import gymnasium

    try:
        entry = gymnasium.spec(env_id).entry_point
    except gymnasium.error.Error:
        return None  # the id validator reports it
    if callable(entry):
        return entry
    module, _, attr = str(entry).partition(":")
    try:
        return getattr(importlib.import_module(module), attr, None)
    except (ImportError, gymnasium.error.DependencyNotInstalled):  # box2d, mujoco ...: making the env reports it
        return None


def _make_kwargs(inst: Any, _attr: Any, value: Any) -> None:
    creator = _env_creator(getattr(inst, "id", None))
    if creator is None:
        return
    import inspect

    import gymnasium

    from rlightning_core.config.callargs import call_problems

    make_args = [p for p in inspect.signature(gymnasium.make).parameters
                 if p not in ("id", "kwargs") and p not in _RESERVED_KWARGS]
    problems = call_problems(creator, value, name=f"{inst.id} ({getattr(creator, '__qualname__', creator)})",
                             also=make_args)
    if problems:
        raise ValueError("; ".join(problems))


@define(frozen=True, kw_only=True)
class GymnasiumParams:
    """Options of the ``gymnasium`` env: which registered env, its kwargs, wrappers and vectorization."""

    id: str = field(validator=_env_id)
    """Gymnasium env id (``CartPole-v1``), or ``module:EnvId`` to import the module that registers it. An id
    whose family needs an optional package that is not installed (MuJoCo, Box2D, ALE) is refused with the
    extra to install, e.g. ``pip install 'rlightning-gymnasium[mujoco]'``."""
    kwargs: dict[str, Any] = field(factory=dict, validator=_make_kwargs)
    """Keyword arguments of ``gymnasium.make`` for this env (e.g. ``{continuous: true}``), checked when the config
    is validated against the signature of the env's registered class: unknown names, and values its annotations
    (``int``, ``float``, ``bool``, ``str``, optional or in lists) refuse."""
    wrappers: list[WrapperSpec] = field(factory=list, converter=_to_wrapper_specs)
    """Wrappers applied to every single env in order (first is innermost), e.g.
    ``[{type: ClipAction}, {type: NormalizeObservation, kwargs: {epsilon: 1e-8}}]``."""
    vectorization: str = field(default="sync", validator=one_of(*VECTORIZATION_MODES))
    """``sync``: the worker's envs step in its own process (fastest for cheap envs such as CartPole);
    ``async``: one subprocess per env (for envs whose step costs milliseconds); ``envpool``: envpool's C++ pool
    for MuJoCo ids and Atari ids with ``preset: atari`` (``pip install envpool``)."""
    max_episode_steps: int | None = field(default=None, validator=ge(1))
    """Truncate episodes after this many steps (``null``: the env's registered limit)."""
    context: str | None = field(default=None, validator=one_of(None, "fork", "spawn", "forkserver"))
    """multiprocessing start method of ``async`` workers (``null``: Python's default)."""
    preset: str | None = field(default=None, validator=one_of(*PRESETS))
    """``atari``: the standard Atari preprocessing, for an ``ALE/...-v5`` or ``...NoFrameskip-v4`` id (needs
    ``pip install 'rlightning-gymnasium[atari]'``): no-op reset, frame skip 4 with max-pooling, 84x84
    grayscale, FIRE on reset where the game needs it, 4 stacked frames as ``uint8`` of shape ``(4, 84, 84)``;
    in training only, a lost life ends the episode and rewards are clipped to [-1, 1]. Episode returns are
    the whole game's unclipped score in training and evaluation alike. Its wrappers come before
    ``wrappers``; ``max_episode_steps`` then counts agent steps (4 frames each). See
    :mod:`rlightning_gymnasium.atari`. ``null``: none."""
    role: str = field(default="train", validator=one_of(*ROLES))
    """``train`` or ``eval``: evaluation builds its envs with ``eval`` (a preset's training-only parts off).
    Left to its default in a config."""

    def __attrs_post_init__(self) -> None:
        clash = sorted(set(self.kwargs) & set(_RESERVED_KWARGS))
        if clash:
            reasons = [f"{k!r} is not a make() kwarg here: {_RESERVED_KWARGS[k]}" for k in clash]
            raise ValueError("kwargs: " + "; ".join(reasons))
        if self.preset == "atari":
            self._check_atari()
        if self.vectorization == "envpool":
            self._check_envpool()

    def _check_envpool(self) -> None:
        import importlib.util

        from rlightning_core.errors import MissingDependencyError
        from rlightning_gymnasium.envpool_worker import envpool_task

        if importlib.util.find_spec("envpool") is None:
            raise MissingDependencyError("envpool", "envpool", "env.params.vectorization: envpool")
        if self.wrappers or self.kwargs or envpool_task(self) is None:
            raise ValueError(f"vectorization 'envpool' steps MuJoCo ids (Hopper-v5 ...) and Atari ids with "
                             f"preset 'atari', without kwargs or wrappers; got {self.id!r}")

    def _check_atari(self) -> None:
        from rlightning_gymnasium.deps import entry_point_module

        module = entry_point_module(self.id) if isinstance(self.id, str) else None
        if module is not None and module.split(".", 1)[0] != "ale_py":  # ``None``: the id validator reports it
            raise ValueError(f"preset 'atari' needs an Atari env id such as 'ALE/Breakout-v5' or "
                             f"'BreakoutNoFrameskip-v4', got {self.id!r}")
        if "frameskip" in self.kwargs:
            raise ValueError("kwargs: 'frameskip' cannot be set with preset 'atari': the preset skips 4 frames "
                             "itself (the env is made with frameskip=1)")

    @property
    def training(self) -> bool:
        """Whether these params build training envs (``role: train``)."""
        return self.role == "train"

    def eval_env_config(self, cfg: Any) -> Any:
        """The env config evaluation builds for ``cfg`` (this env): the same with ``role: eval``."""
        from attrs import evolve

        return evolve(cfg, params=evolve(self, role="eval"))
