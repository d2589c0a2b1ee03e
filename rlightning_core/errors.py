"""The exception hierarchy. Every error a user can cause derives from :class:`RlightningError`.

The CLI turns a :class:`UserError` into a clean message and exit code 2 (no traceback); any other
:class:`RlightningError` (a run that failed for a reason outside the code: a full disk, workers that kept
dying) into a clean message and exit code 1; anything else is a bug and exits 1 with a traceback.
"""

from __future__ import annotations

import errno
import shlex
from collections.abc import Sequence

__all__ = [
    "ConfigError",
    "DuplicateComponentError",
    "MissingDependencyError",
    "PluginLoadError",
    "PreprocessFnError",
    "RestartsUsedUpError",
    "RlightningError",
    "StorageError",
    "UnknownComponentError",
    "UnsupportedSpaceError",
    "UserError",
    "describe_os_error",
    "unsupported_space",
]


class RlightningError(Exception):
    """Base class of every error raised on purpose by rlightning."""


class UserError(RlightningError):
    """A mistake in the user's input (config, arguments, files): reported without a traceback, exit code 2."""


class StorageError(RlightningError):
    """The run could not write its files: a full disk, a quota, a read-only or failing filesystem.

    Neither a bug nor a mistake in the input: the message names the file and what failed, and the CLI prints
    it without a traceback and exits with code 1.
    """


def describe_os_error(exc: BaseException) -> str:
    """``No space left on device (ENOSPC)``: the system's words and the errno's name, for messages."""
    if isinstance(exc, OSError) and exc.strerror:
        name = errno.errorcode.get(exc.errno or 0)
        return f"{exc.strerror} ({name})" if name else exc.strerror
    return str(exc) or type(exc).__name__


class ConfigError(UserError):
    """One or more problems in a configuration, each addressed by its dotted key path.

    Args:
        problems: one line per problem, e.g. ``"policy.params.lr: expected float, got 'abc'"``.
        source: the file (or other origin) the configuration came from, named in the message.
    """

    def __init__(self, problems: Sequence[str], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        super().__init__(self._render())

    def __reduce__(self) -> tuple[type, tuple[list[str], str | None]]:
        # rebuilt from its problems when it crosses a process (a Ray actor, an env worker's child process)
        return type(self), (self.problems, self.source)

    def _render(self) -> str:
        where = f" in {self.source}" if self.source else ""
        n = len(self.problems)
        head = f"invalid configuration{where} ({n} problem{'s' if n != 1 else ''}):"
        return "\n".join([head, *(f"  {p}" for p in self.problems)])


class UnknownComponentError(UserError):
    """A component name that no loaded plugin registered for that kind."""

    def __init__(self, kind: str, name: str, message: str) -> None:
        self.kind = kind
        self.name = name
        super().__init__(message)


class DuplicateComponentError(UserError):
    """Two distributions registered the same name for one kind and the config did not say which to use."""

    def __init__(self, kind: str, name: str, message: str) -> None:
        self.kind = kind
        self.name = name
        super().__init__(message)


class MissingDependencyError(UserError):
    """A component, command or mode needs an optional Python package that is not installed.

    Raised by :func:`rlightning_core.dependencies.require` (plugins call it in their params' validators, so
    ``config validate`` and ``--dry-run`` report it, and in their factories). The message names what needs the
    module and the pip command that installs it.

    Args:
        module: the top-level module that cannot be imported, e.g. ``"mujoco"``.
        requirement: what to ``pip install``, e.g. ``"rlightning-gymnasium[mujoco]"`` (a plugin's extra where
            one exists) or ``"matplotlib>=3.7"``.
        needed_by: what needs it, e.g. ``"env 'Hopper-v5'"`` or ``"rlightning plot"``.
        note: an extra sentence, e.g. a build prerequisite.
    """

    def __init__(self, module: str, requirement: str, needed_by: str, note: str | None = None) -> None:
        self.module = module
        self.requirement = requirement
        self.needed_by = needed_by
        self.note = note
        text = (f"{needed_by} needs the Python module {module!r}, which is not installed; install it with: "
                f"{self.pip_command}")
        super().__init__(f"{text} ({note})" if note else text)

    @property
    def pip_command(self) -> str:
        """The shell command that installs :attr:`requirement`, quoted for the shell where needed."""
        return f"pip install {shlex.quote(self.requirement)}"

    @property
    def extra(self) -> str | None:
        """The extra named by :attr:`requirement` (``"mujoco"`` in ``rlightning-gymnasium[mujoco]``), if any."""
        _name, sep, rest = self.requirement.partition("[")
        extra = rest.split("]", 1)[0].strip()
        return extra if sep and extra else None

    def __reduce__(self) -> tuple[type, tuple[str, str, str, str | None]]:  # survives pickling (Ray, processes)
        return type(self), (self.module, self.requirement, self.needed_by, self.note)


class PreprocessFnError(UserError):
    """A function given to a builder raised, or returned observations the run cannot use.

    Raised for ``build_env_group(preprocess_fn=...)`` and plain-function preprocessors; the message names the
    function and the env config. It stops the run (it is not an env failure: recreating the env would not help).
    """


class RestartsUsedUpError(RlightningError):
    """A worker failed after the run had recreated ``cluster.max_restarts`` failed workers: the run stops.

    Not a mistake in the input (exit code 1, no traceback): the env, the simulator or the machine kept failing.
    One class for every kind of worker that is recreated (env workers in either mode, eval env workers,
    inference servers), so a caller catches one type.

    Args:
        worker: which worker failed, e.g. ``"env[0] (CartPole-v1, type 'gymnasium') worker 1"``.
        max_restarts: the value of ``cluster.max_restarts`` the run used up.
        cause: the last failure (its message ends this one), or ``None``.
    """

    def __init__(self, worker: str, max_restarts: int, cause: BaseException | str | None = None) -> None:
        self.worker = worker
        self.max_restarts = max_restarts
        self.cause = None if cause is None else str(cause)
        last = f" Last failure: {self.cause}" if self.cause else ""
        super().__init__(f"{worker} failed and cluster.max_restarts={max_restarts} worker restarts are used up, "
                         f"so the run stops (the last checkpoint is intact).{last}")

    def __reduce__(self) -> tuple[type, tuple[str, int, str | None]]:  # survives pickling (Ray, processes)
        return type(self), (self.worker, self.max_restarts, self.cause)


class PluginLoadError(RlightningError):
    """One or more plugins failed to load while ``RLIGHTNING_STRICT_PLUGINS=1`` asks that to be fatal."""


class UnsupportedSpaceError(ConfigError, TypeError):
    """A component that cannot work with the env's observation or action space: a config error (exit code 2).

    Also a ``TypeError`` (the space is the wrong kind of value for the component), so code that caught the
    ``TypeError`` plugins raised before this class existed still catches it. Build one with
    :func:`unsupported_space`.
    """


def unsupported_space(component: str, role: str, space: object, supported: str,
                      hint: str | None = None) -> UnsupportedSpaceError:
    """The error a component raises for a space it does not support, naming the component, the space and the fix.

    Args:
        component: who refuses, as a config names it, e.g. ``"policy 'ppo'"``.
        role: ``"observation"`` or ``"action"``.
        space: the space refused.
        supported: the spaces it does support, e.g. ``"Discrete, MultiDiscrete, MultiBinary and 1-D Box"``.
        hint: what to do instead (another component, a wrapper), or ``None``.
    """
    key = "policy.type" if component.startswith("policy") else "env"
    text = (f"{key}: {component} does not support the {role} space {space} of the env; it supports "
            f"{supported} {role} spaces")
    return UnsupportedSpaceError([f"{text} ({hint})" if hint else text])
