"""Options of the ``pettingzoo`` env (``env[i].params``). Light at import: PettingZoo loads in the worker.

An env is named by its module, never by an arbitrary import path: ``pettingzoo.<family>.<name>_v<N>`` (e.g.
``pettingzoo.butterfly.pistonball_v6``) or ``mpe2.<name>_v<N>`` (the MPE tasks, e.g. ``mpe2.simple_spread_v3``).
A config file therefore cannot make a worker import any other module. Validation imports that module (not
the env's dependencies it loads lazily) to check ``kwargs`` against the env's signature.
"""

from __future__ import annotations

import re
from typing import Any

from attrs import Factory, define, field

__all__ = ["ENV_MODULE_PATTERN", "PettingZooParams"]

#: The env modules a config may name.
ENV_MODULE_PATTERN = re.compile(r"^(pettingzoo\.[a-z][a-z0-9_]*|mpe2)\.[a-z][a-z0-9_]*_v\d+$")
_RESERVED_KWARGS = {"render_mode": "the builder passes render_mode (e.g. for evaluation videos)"}


def _env_module(_inst: Any, _attr: Any, value: Any) -> None:
    if not isinstance(value, str) or not ENV_MODULE_PATTERN.match(value):
        raise ValueError(
            "must name a PettingZoo env module, 'pettingzoo.<family>.<name>_v<N>' (e.g. "
            f"'pettingzoo.butterfly.pistonball_v6') or 'mpe2.<name>_v<N>' (e.g. 'mpe2.simple_spread_v3'), got {value!r}"
        )
    from rlightning_core.dependencies import is_installed
    from rlightning_pettingzoo.deps import check_env_dependencies

    check_env_dependencies(value)  # the family's packages (pymunk for butterfly ...), named with the extra
    if not is_installed(value):
        raise ValueError(f"cannot find the module {value!r}: no such env (check the name and its version "
                         "suffix); MPE tasks live in the mpe2 package, e.g. 'mpe2.simple_spread_v3'")


def _env_constructor(env: Any) -> Any:
    """The callable whose signature ``kwargs`` must fit, or ``None`` when the module cannot be loaded here.

    PettingZoo's ``parallel_env`` usually wraps ``raw_env(**kwargs)`` and hides its signature, so ``raw_env`` (the
    env class every PettingZoo module exports) is preferred.
    """
    if not isinstance(env, str) or not ENV_MODULE_PATTERN.match(env):
        return None  # the env validator reports it
    import importlib

    try:
        module = importlib.import_module(env)
    except ImportError:  # not installed: the env validator reports it
        return None
    return getattr(module, "raw_env", None) or getattr(module, "parallel_env", None)


def _kwargs(inst: Any, _attr: Any, value: Any) -> None:
    for key in value:
        if key in _RESERVED_KWARGS:
            raise ValueError(f"may not set {key!r}: {_RESERVED_KWARGS[key]}")
    make = _env_constructor(getattr(inst, "env", None))
    if make is not None:  # names and simply-typed values, as the env's constructor declares them
        from rlightning_core.config.callargs import call_problems

        problems = call_problems(make, value, name=inst.env)
        if problems:
            raise ValueError("; ".join(problems))


@define(frozen=True, kw_only=True)
class PettingZooParams:
    """Options of the ``pettingzoo`` env: which parallel env to build and with what arguments."""

    env: str = field(validator=_env_module)
    """Module of the env, whose ``parallel_env(**kwargs)`` builds one copy: ``mpe2.simple_spread_v3``,
    ``pettingzoo.butterfly.pistonball_v6`` ... A family whose packages are not installed is refused with the
    extra to install, e.g. ``pip install 'rlightning-pettingzoo[butterfly]'``."""
    kwargs: dict[str, Any] = field(default=Factory(dict), validator=_kwargs)
    """Keyword arguments of ``parallel_env`` (e.g. ``{N: 3, max_cycles: 25}`` for simple_spread), checked when the
    config is validated against the env's ``raw_env`` signature: unknown names, and values its annotations
    (``int``, ``float``, ``bool``, ``str``, optional or in lists) refuse."""
