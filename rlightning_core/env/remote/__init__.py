"""Remote environments: an env server inside the run (env type ``remote``), env clients anywhere.

The server is an env worker (:class:`RemoteEnvWorker`) whose envs are served over TCP by clients
(:class:`EnvClient`, or ``rlightning env-client``); the wire format is in :mod:`.protocol` and
``docs/remote-envs.md``. Names are imported on first use, so that loading the ``remote`` params class (which
the CLI does for every command) imports neither numpy nor msgpack.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "PROTOCOL_VERSION",
    "EnvClient",
    "LocalEnvSpec",
    "ProtocolError",
    "RemoteEnvError",
    "RemoteEnvParams",
    "RemoteEnvWorker",
    "build_client_worker",
    "env_config_from_spec",
    "make_remote_worker",
    "parse_address",
]

_WHERE = {
    "PROTOCOL_VERSION": "protocol", "ProtocolError": "protocol", "RemoteEnvError": "protocol",
    "EnvClient": "client", "build_client_worker": "client", "env_config_from_spec": "client",
    "parse_address": "client", "LocalEnvSpec": "params", "RemoteEnvParams": "params",
    "RemoteEnvWorker": "worker", "make_remote_worker": "worker",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
