"""Core's own plugin: registers core's components through the same public hooks third parties use."""

from __future__ import annotations

from rlightning_core.hookspecs import hookimpl
from rlightning_core.types import RegisterFn

RLIGHTNING_PLUGIN_API = ">=1,<2"


@hookimpl
def register_loggers(register: RegisterFn) -> None:
    """Core loggers."""
    from rlightning_core.logging.jsonl import JsonlLogger, JsonlParams

    register("jsonl", JsonlLogger, config=JsonlParams,
             description="Extra JSON-lines metrics file (metrics.jsonl is always written).")
