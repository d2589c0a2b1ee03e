"""The exception hierarchy. Every error a user can cause derives from :class:`RlightningError`.

The CLI turns a :class:`UserError` into a clean message and exit code 2 (no traceback); any other
:class:`RlightningError` (a run that failed for a reason outside the code: a full disk, workers that kept
dying) into a clean message and exit code 1; anything else is a bug and exits 1 with a traceback.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence

__all__ = [
    "ConfigError",
    "DuplicateComponentError",
    "PluginLoadError",
    "RlightningError",
    "StorageError",
    "UnknownComponentError",
    "UserError",
    "describe_os_error",
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


class PluginLoadError(RlightningError):
    """One or more plugins failed to load while ``RLIGHTNING_STRICT_PLUGINS=1`` asks that to be fatal."""
