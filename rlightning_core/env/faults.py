"""Which env failures are the config's fault: an env that cannot be built, or fails its first reset, with its params.

A ``TypeError`` or ``ValueError`` from an env's constructor (or from the third-party call its params go to, such as
``gymnasium.make(**kwargs)``) or from the first ``reset()`` of a worker that never ran says the params are wrong: a
new worker built from the same params fails the same way, so it is reported as a :class:`EnvConfigError` (exit
code 2, naming the env config and the plugin) instead of spending ``cluster.max_restarts`` on it. Failures later in
a run, or of a worker that already ran, stay restartable faults.
"""

from __future__ import annotations

import inspect
from typing import Any

from rlightning_core.errors import ConfigError

__all__ = ["CONFIG_SHAPED", "EnvConfigError", "env_config_error", "factory_takes"]

#: Exceptions that, raised while building an env or on its first reset, mean its config is wrong.
CONFIG_SHAPED = (TypeError, ValueError)


class EnvConfigError(ConfigError):
    """An env refused its config: it raised ``TypeError``/``ValueError`` while being built or on its first reset."""


def env_config_error(path: str, failure: str) -> EnvConfigError:
    """The error for env config ``path`` (``env[0]``) whose env failed as ``failure`` says (its first line is kept).

    ``failure`` names the env and what it raised, e.g. ``env 'gymnasium' from rlightning-gymnasium 0.1.0 raised
    TypeError while being built: ...``.
    """
    first = failure.strip().splitlines()[0] if failure.strip() else "failed"
    return EnvConfigError([f"{path}.params: {first} (the env refuses these params or num_envs; a restart would "
                           "fail the same way, so none is tried)"])


def factory_takes(spec: Any, params: Any, kwargs: dict[str, Any]) -> bool:
    """Whether ``spec``'s factory accepts the call ``spec.build(params, **kwargs)`` makes.

    A ``TypeError`` from a call its signature refuses (say a ``render_mode`` it does not take) is the plugin's
    fault, not the config's, and is raised as it is.
    """
    args = (params,) if spec.config is not None else ()
    try:
        inspect.signature(spec.factory).bind(*args, **kwargs)
    except TypeError:
        return False
    except ValueError:  # no signature to read (a builtin): assume it does
        return True
    return True
