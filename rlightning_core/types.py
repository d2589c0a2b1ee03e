"""Shared vocabulary: component kinds and the ``register`` callback's protocol."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["HOOK_FOR_KIND", "KINDS", "RegisterFn"]

#: Every kind of component a plugin can register, in the order they are listed to users.
KINDS: tuple[str, ...] = ("env", "policy", "buffer", "preprocessor", "engine", "logger")

#: The registration hook that provides each kind.
HOOK_FOR_KIND: dict[str, str] = {
    "env": "register_envs",
    "policy": "register_policies",
    "buffer": "register_buffers",
    "preprocessor": "register_preprocessors",
    "engine": "register_engines",
    "logger": "register_loggers",
}


class RegisterFn(Protocol):
    """The callback a registration hook receives.

    ``register(name, factory, config=ParamsClass, description="...")`` adds one component. ``factory`` is
    called later with the structured ``params`` instance (or no argument when ``config`` is ``None``) plus
    any keyword arguments the builder passes for that kind. Import heavy libraries (torch, ray) inside the
    factory, not at module top, so that listing plugins stays fast.
    """

    def __call__(
        self,
        name: str,
        factory: Callable[..., Any],
        *,
        config: type | None = None,
        description: str = "",
    ) -> None:
        """Register one component under ``name``."""
        ...
