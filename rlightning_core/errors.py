"""The exception hierarchy. Every error a user can cause derives from :class:`RlightningError`.

The CLI turns a :class:`UserError` into a clean message and exit code 2 (no traceback); anything else is a bug
and exits 1 with a traceback.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "ConfigError",
    "DuplicateComponentError",
    "PluginLoadError",
    "RlightningError",
    "UnknownComponentError",
    "UserError",
]


class RlightningError(Exception):
    """Base class of every error raised on purpose by rlightning."""


class UserError(RlightningError):
    """A mistake in the user's input (config, arguments, files): reported without a traceback, exit code 2."""


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


class PluginLoadError(RlightningError):
    """One or more plugins failed to load while ``RLIGHTNING_STRICT_PLUGINS=1`` asks that to be fatal."""
