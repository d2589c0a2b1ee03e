"""The ``rlightning`` command line."""

from rlightning_cli.main import build_cli, main

__all__ = ["build_cli", "main"]
