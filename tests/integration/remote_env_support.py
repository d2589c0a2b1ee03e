"""Helpers of the remote-env tests: env-client subprocesses, a server started in a thread, raw protocol peers.

Every process started here is tracked by :class:`ClientProcs` and killed on exit; every wait has a timeout.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rlightning_core.env.remote.params import RemoteEnvParams
from rlightning_core.env.remote.protocol import (
    HEADER,
    PROTOCOL_VERSION,
    encode,
    recv_frame,
    send_frame,
    space_to_wire,
)

ROOT = Path(__file__).resolve().parents[2]
RLIGHTNING_EXE = Path(sys.executable).parent / "rlightning"
TOKEN = "test-token-0123456789"


def client_env(**extra: str) -> dict[str, str]:
    """The environment of a client subprocess (the token travels in RLIGHTNING_ENV_TOKEN, as documented)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RLIGHTNING_LOAD_PLUGINS", "RLIGHTNING_DISABLE_PLUGINS", "PYTHONPATH")}
    env["RLIGHTNING_ENV_TOKEN"] = TOKEN
    env.update(extra)
    return env


class ClientProcs:
    """``rlightning env-client`` subprocesses, each logging to a file; all killed when the block ends."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []

    def start(self, port: int, *, num_envs: int = 4, name: str | None = None, spec: str = "gymnasium:CartPole-v1",
              token: str | None = None, extra: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
        """Start one client serving ``spec`` to ``127.0.0.1:port``."""
        log = self.log_dir / f"client-{len(self.procs)}-{name or 'anon'}.log"
        cmd = [str(RLIGHTNING_EXE), "env-client", "--connect", f"127.0.0.1:{port}", "--num-envs", str(num_envs),
               "--retry-s", "10", *(["--name", name] if name else []), *extra, spec]
        env = client_env(**({"RLIGHTNING_ENV_TOKEN": token} if token is not None else {}))
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        self.procs.append(proc)
        self.logs.append(log)
        return proc

    def log_of(self, proc: subprocess.Popen[bytes]) -> str:
        """What a client printed so far."""
        return self.logs[self.procs.index(proc)].read_text(errors="replace")

    def __enter__(self) -> ClientProcs:
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover - the kernel reaps SIGKILLed processes
                pass


def wait_for_file(path: Path, timeout: float = 120.0) -> dict[str, Any]:
    """The JSON a server wrote to its address file."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return json.loads(path.read_text())
        time.sleep(0.02)
    raise TimeoutError(f"{path} did not appear within {timeout} s")


def start_worker(tmp_path: Path, clients: Any, *, num_envs: int, seed: int = 0, timeout: float = 60.0,
                 **params: Any) -> Any:
    """Build a :class:`RemoteEnvWorker` in a thread, call ``clients(port)`` once it listens, return the worker."""
    from rlightning_core.env.remote.worker import RemoteEnvWorker

    address_file = tmp_path / f"server-{time.monotonic_ns()}.json"
    params.setdefault("connect_timeout_s", timeout)
    p = RemoteEnvParams(token=TOKEN, address_file=str(address_file), **params)
    box: dict[str, Any] = {}

    def build() -> None:
        try:
            box["worker"] = RemoteEnvWorker(p, num_envs=num_envs, seed=seed)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=build, daemon=True)
    thread.start()
    port = wait_for_file(address_file)["port"]
    clients(port)
    thread.join(timeout=timeout + 5)
    if "error" in box:
        raise box["error"]
    assert "worker" in box, "the server did not finish starting"
    return box["worker"]


def cartpole_hello(**overrides: Any) -> dict[str, Any]:
    """A valid ``hello`` of a 4-env CartPole client."""
    import gymnasium

    env = gymnasium.make("CartPole-v1")
    hello = {"t": "hello", "protocol": PROTOCOL_VERSION, "token": TOKEN, "num_envs": 4,
             "observation_space": space_to_wire(env.observation_space),
             "action_space": space_to_wire(env.action_space), "name": "raw"}
    env.close()
    hello.update(overrides)
    return hello


def raw_connect(port: int) -> socket.socket:
    """A plain TCP connection to the server."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def raw_exchange(port: int, payload: bytes | None = None, *, message: dict[str, Any] | None = None,
                 header_len: int | None = None) -> dict[str, Any]:
    """Send one frame (a message, raw payload bytes, or only a header claiming ``header_len`` bytes) and read
    the server's answer; also checks that the server then closes the connection."""
    with raw_connect(port) as sock:
        if message is not None:
            send_frame(sock, message)
        elif header_len is not None:
            sock.sendall(HEADER.pack(header_len))
        else:
            assert payload is not None
            sock.sendall(HEADER.pack(len(payload)) + payload)
        reply = recv_frame(sock, max_bytes=1 << 20, timeout=10)
        sock.settimeout(10)
        if reply["t"] != "welcome":
            assert sock.recv(1) == b"", "the server should close the connection after refusing"
        return reply


__all__ = ["ROOT", "TOKEN", "ClientProcs", "cartpole_hello", "encode", "raw_connect", "raw_exchange",
           "start_worker", "wait_for_file"]
