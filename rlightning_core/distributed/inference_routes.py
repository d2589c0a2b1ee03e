"""Routing of env workers to inference servers (torch-free, so ``train --dry-run`` can print it)."""

from __future__ import annotations

__all__ = ["route"]


def route(num_env_workers: int, num_servers: int) -> list[tuple[int, int]]:
    """``(server, half)`` of every env worker: round-robin over servers, alternating halves on each."""
    out = []
    for i in range(num_env_workers):
        server = i % num_servers
        out.append((server, (i // num_servers) % 2))
    return out
