"""Options of the ``remote`` env (``env[i].params``). Light at import (attrs only): the CLI loads it.

A ``remote`` env worker is an env server: it listens on ``host:port`` and env clients (``rlightning
env-client``) connect to it, each serving ``num_envs / num_clients`` envs. See ``docs/remote-envs.md``.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from attrs import define, evolve, field

from rlightning_core.config.schema import ComponentConfig
from rlightning_core.config.validators import ge, gt, in_range, one_of

__all__ = ["LocalEnvSpec", "RemoteEnvParams"]


@define(frozen=True, kw_only=True)
class LocalEnvSpec(ComponentConfig):
    """The env the clients serve, when it can also be built here: ``type`` + ``params`` of any registered env.

    An env config nested in the remote env's params: it is resolved and validated with the run's config
    (``env[0].params.local_env.type: unknown env ...``), so its ``params`` hold that env's structured options.
    """

    kind: ClassVar[str | None] = "env"


def _nonempty(_inst: Any, attribute: Any, value: Any) -> None:
    if value is not None and (not isinstance(value, str) or not value):
        raise ValueError(f"must be a non-empty string, got {value!r}")


@define(frozen=True, kw_only=True)
class RemoteEnvParams:
    """An env server inside the run; env clients connect to it and serve the envs (see ``docs/remote-envs.md``)."""

    host: str = "127.0.0.1"
    """Address to listen on. Loopback by default; ``0.0.0.0`` accepts clients from other hosts."""
    port: int = field(default=0, validator=in_range(0, 65535))
    """TCP port; ``0`` picks a free one (logged, written to ``address_file``, and ``worker.address``). Worker
    ``w`` of a config with several workers listens on ``port + w``."""
    token: str | None = field(default=None, validator=_nonempty)
    """Shared secret every client must present. Prefer ``token_env``: the config is saved in the run dir."""
    token_env: str | None = field(default=None, validator=_nonempty)
    """Name of an environment variable holding the token (read when the server starts)."""
    num_clients: int = field(default=1, validator=ge(1))
    """Slot groups: the worker's ``num_envs`` envs are split into this many groups, one client serving each
    (every client must offer ``num_envs / num_clients`` envs)."""
    max_clients: int | None = field(default=None, validator=ge(1))
    """Clients accepted at once (default ``num_clients``); extra clients wait as standbys and take over the
    group of a client that drops."""
    min_clients: int | None = field(default=None, validator=ge(1))
    """Clients to wait for before training starts (default ``num_clients``); the first one defines the spaces."""
    connect_timeout_s: float = field(default=300.0, validator=gt(0))
    """How long the server waits for ``min_clients`` at start before failing the run."""
    vacant_slots: str = field(default="continue", validator=one_of("continue", "wait"))
    """What steps do while a group has no client: ``continue`` (the other groups go on; the vacant rows hold
    placeholder transitions, reward 0 and truncated) or ``wait`` (block up to ``rejoin_timeout_s``)."""
    rejoin_timeout_s: float = field(default=300.0, validator=gt(0))
    """With ``vacant_slots: wait``, how long a step waits for a client before failing the run."""
    request_timeout_s: float = field(default=30.0, validator=gt(0))
    """Longest wait for a client's answer to one reset or step; a client that misses it is dropped."""
    heartbeat_s: float = field(default=5.0, validator=gt(0))
    """An idle client is pinged after this many seconds without traffic."""
    heartbeat_timeout_s: float = field(default=30.0, validator=gt(0))
    """A ping unanswered this long drops the client; clients give up on a server silent this long."""
    handshake_timeout_s: float = field(default=10.0, validator=gt(0))
    """A connection must complete its ``hello`` within this time."""
    max_frame_bytes: int = field(default=64 * 1024 * 1024, validator=ge(1024))
    """Largest frame accepted from an authenticated client; larger ones are refused and the client dropped."""
    address_file: str | None = field(default=None, validator=_nonempty)
    """Write ``{"host", "port", ...}`` as JSON to this file once listening, removed on close (for scripts that
    start clients)."""
    local_env: LocalEnvSpec | None = None
    """The env the clients serve, if it can also run here (e.g. ``{type: gymnasium, params: {id: CartPole-v1}}``):
    evaluation then runs it locally, and ``rlightning env-client CONFIG`` serves it. Without it, evaluation
    runs a second server on ``eval_port`` that needs its own client."""
    eval_port: int = field(default=0, validator=in_range(0, 65535))
    """Port of the evaluation server when there is no ``local_env``."""
    role: str = field(default="train", validator=one_of("train", "eval"))
    """``eval`` marks the server the evaluator builds (set automatically; shown in logs and file names)."""

    def __attrs_post_init__(self) -> None:
        if (self.token is None) == (self.token_env is None):
            raise ValueError("set exactly one of token and token_env: clients authenticate with a shared token")
        if self.max_clients is not None and self.max_clients < self.num_clients:
            raise ValueError(f"max_clients ({self.max_clients}) must be >= num_clients ({self.num_clients})")
        if self.min_clients is not None and self.min_clients > self.num_clients:
            raise ValueError(f"min_clients ({self.min_clients}) must be <= num_clients ({self.num_clients})")
        if self.heartbeat_timeout_s <= self.heartbeat_s:
            raise ValueError(f"heartbeat_timeout_s ({self.heartbeat_timeout_s}) must exceed heartbeat_s "
                             f"({self.heartbeat_s})")

    def run_problems(self, component: Any, _config: Any) -> list[str]:
        """The worker's ``num_envs`` must split into ``num_clients`` equal groups (see ``ComponentConfig``)."""
        if component.num_envs % self.num_clients:
            return [f"num_envs: {component.num_envs} must be a multiple of params.num_clients ({self.num_clients}): "
                    "every client serves num_envs / num_clients envs"]
        return []

    @property
    def capacity(self) -> int:
        """Clients held at once, slot-group owners and standbys."""
        return self.max_clients if self.max_clients is not None else self.num_clients

    @property
    def wait_for(self) -> int:
        """Clients awaited at start."""
        return self.min_clients if self.min_clients is not None else self.num_clients

    def resolve_token(self) -> str:
        """The shared token (read from ``token_env`` when set).

        Raises:
            ConfigError: ``token_env`` names an unset or empty environment variable.
        """
        if self.token is not None:
            return self.token
        from rlightning_core.errors import ConfigError

        value = os.environ.get(str(self.token_env), "")
        if not value:
            raise ConfigError([f"env.params.token_env: environment variable {self.token_env!r} is not set (or "
                               "empty); export the token there before starting the run"])
        return value

    def eval_env_config(self, cfg: Any) -> Any:
        """The env config evaluation builds for ``cfg`` (this env): ``local_env`` locally, else a second server."""
        from rlightning_core.config.schema import EnvConfig

        if self.local_env is not None:
            return EnvConfig(type=self.local_env.type, params=self.local_env.params, name=cfg.label,
                             num_envs=cfg.num_envs)
        return evolve(cfg, params=evolve(self, port=self.eval_port, role="eval", num_clients=1,
                                         max_clients=None, min_clients=None), name=cfg.label)
