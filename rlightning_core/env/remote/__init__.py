"""Remote environments: an env server inside the run (env type ``remote``), env clients anywhere.

The server is an env worker (:class:`RemoteEnvWorker`) whose envs are served over TCP by clients
(:class:`EnvClient`, or ``rlightning env-client``); the wire format is in :mod:`.protocol` and
``docs/remote-envs.md``. Names are imported on first use, so that loading the ``remote`` params class (which
the CLI does for every command) imports neither numpy nor msgpack.
"""

from __future__ import annotations

from rlightning_core.lazy import lazy_getattr

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


__getattr__ = lazy_getattr(__name__, {name: f"{__name__}.{module}" for name, module in _WHERE.items()}, globals())
