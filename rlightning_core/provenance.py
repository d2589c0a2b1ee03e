"""Which plugin component an exception came from, so that an unexpected error names who raised it.

:meth:`ComponentSpec.build <rlightning_core.registry.ComponentSpec.build>` remembers the class of every object a
plugin's factory returns. When a run fails with an exception the core did not expect, :func:`culprit` walks its
traceback (and the exceptions it was raised from) from the innermost frame outwards and names the first
component it recognises: a frame running a method of a remembered class, a frame of the build itself, or
failing those, a frame in a plugin's own package. Nothing of this runs on the hot path: the lookup happens once,
at the error boundary of the CLI.
"""

from __future__ import annotations

import weakref
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlightning_core.registry import ComponentSpec

__all__ = ["culprit", "remember"]

_BUILT: weakref.WeakKeyDictionary[type, ComponentSpec] = weakref.WeakKeyDictionary()
_CORE_PACKAGES = ("builtins", "rlightning_core", "rlightning_cli")


def remember(obj: Any, spec: ComponentSpec) -> None:
    """Record that ``spec``'s factory built ``obj`` (classes of plugins only; core's are core's)."""
    cls = type(obj)
    if cls.__module__.partition(".")[0] not in _CORE_PACKAGES:
        _BUILT[cls] = spec


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from or while handling, innermost cause first."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not s for s in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen[::-1]


def _frames(tb: TracebackType | None) -> list[Any]:
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames[::-1]  # innermost first


def _plugin_packages() -> dict[str, Any]:
    """Top-level package -> ``PluginInfo`` of every external plugin that loaded in this process."""
    from rlightning_core import plugins as plugin_mod

    try:
        plugin_set = plugin_mod.get_plugins()
    except Exception:  # loading itself failed: nothing to attribute to
        return {}
    out = {}
    for info in plugin_set.plugins:
        module = plugin_set.pm.get_plugin(info.name) if info.name != plugin_mod.BUILTIN_NAME else None
        top = str(getattr(module, "__name__", "")).partition(".")[0]
        if top and top not in _CORE_PACKAGES:
            out[top] = info
    return out


def culprit(exc: BaseException) -> str | None:
    """Name the plugin component ``exc`` was raised in; ``None`` when no plugin's code is involved.

    E.g. ``env 'grid' from plugin 'grid' (distribution rlightning-grid 0.1.0), in GridEnv.step``.
    """
    from rlightning_core.registry import ComponentSpec

    packages: dict[str, Any] | None = None
    plugin_only: str | None = None
    for link in _chain(exc):
        for frame in _frames(link.__traceback__):
            owner = frame.f_locals.get("self")
            where = frame.f_code.co_qualname
            if isinstance(owner, ComponentSpec) and where == "ComponentSpec.build":
                if owner.plugin != "builtin":
                    return f"{owner.label}, while building it"
                continue
            spec = _BUILT.get(type(owner)) if owner is not None else None
            if spec is not None:
                return f"{spec.label}, in {where}"
            if plugin_only is None:
                if packages is None:
                    packages = _plugin_packages()
                info = packages.get(str(frame.f_globals.get("__name__", "")).partition(".")[0])
                if info is not None:
                    plugin_only = (f"plugin {info.name!r} (distribution {info.distribution} {info.version}), "
                                   f"in {where}")
    return plugin_only
