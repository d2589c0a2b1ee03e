"""The env server under connections that need no token to be a nuisance: idle ones, and floods of bad ones.

Real loopback sockets against a real :class:`EnvServer`; the client that must still get in is the documented
:class:`EnvClient`. Waits are on the server's own counters (its condition variable), never on guessed times;
the refusal log's windows follow a clock the test moves.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
from remote_env_support import TOKEN, cartpole_hello, raw_connect, raw_exchange

from rlightning_core.env.remote.admission import MAX_PENDING_HANDSHAKES, REFUSAL_LOG_BURST, REFUSAL_LOG_WINDOW_S
from rlightning_core.env.remote.protocol import recv_frame
from rlightning_core.env.remote.server import EnvServer

pytestmark = pytest.mark.usefixtures("training_plugins")


class FakeClock:
    """Monotonic seconds that only move when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def remote_log():
    """Records of the ``rlightning.remote`` logger."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("rlightning.remote")
    handler, old_level = Keep(level=logging.INFO), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield records
    logger.removeHandler(handler)
    logger.setLevel(old_level)


def _server(label: str = "test", **kw) -> EnvServer:
    # a long handshake deadline: idle peers would hold their places for the whole test
    return EnvServer(host="127.0.0.1", port=0, token=TOKEN, envs_per_client=4, capacity=2, handshake_timeout_s=600,
                     heartbeat_s=60, heartbeat_timeout_s=120, max_frame_bytes=1 << 24, label=label, **kw)


def _cartpole_worker():
    from rlightning_gymnasium.params import GymnasiumParams
    from rlightning_gymnasium.worker import GymnasiumWorker

    return GymnasiumWorker(GymnasiumParams(id="CartPole-v1"), num_envs=4, seed=0)


def test_idle_connections_that_never_send_a_byte_do_not_lock_a_real_client_out(tmp_path: Path) -> None:
    from rlightning_core.env.remote.client import EnvClient

    server = _server()
    extra = 8
    idle = []
    worker = _cartpole_worker()
    outcome: dict[str, object] = {}
    try:
        for _ in range(MAX_PENDING_HANDSHAKES + extra):  # no token needed to open these
            idle.append(raw_connect(server.address[1]))
        # every one was accepted: the places are full, and the surplus was refused
        assert server.wait_for(lambda: server.refused >= extra, timeout=60), server.refused
        # one attempt only: a refusal ends it (so a `busy` would show, not be retried away)
        client = EnvClient(worker, server.address, token=TOKEN, name="real", reconnect=False)

        def serve() -> None:
            try:
                outcome["result"] = client.serve()
            except Exception as exc:  # reported below
                outcome["error"] = exc

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        joined = server.wait_for(lambda: bool(server.live_clients()) or "error" in outcome, timeout=60)
        assert joined and "error" not in outcome, outcome.get("error")
        assert [c.name for c in server.live_clients()] == ["real"]
        # the oldest idle connection gave its place: it was told so
        idle[0].settimeout(30)
        reply = recv_frame(idle[0], max_bytes=1 << 16, timeout=30)
        assert (reply["t"], reply["code"]) == ("error", "busy")
    finally:
        server.close()
        for sock in idle:
            sock.close()
        worker.close()


def test_a_flood_of_bad_handshakes_logs_a_bounded_number_of_lines_with_a_count(remote_log) -> None:
    clock = FakeClock()
    # its own label: a server of an earlier test may still log the refusals of peers it saw close
    server = _server(label="flood", clock=clock)
    flood = 5 * REFUSAL_LOG_BURST
    try:
        for _ in range(flood):
            reply = raw_exchange(server.address[1], message=cartpole_hello(token="wrong"))
            assert reply["code"] == "bad_token"
        assert server.wait_for(lambda: server.refused == flood, timeout=60)
        lines = [m for m in (r.getMessage() for r in remote_log) if m.startswith("remote env flood: refused")]
        assert len(lines) == REFUSAL_LOG_BURST, lines[-3:]  # the burst in full, the rest counted
        assert all("refused connection from 127.0.0.1" in line and "bad_token" in line for line in lines)
        # the window ends: the next refusal brings the count of the ones not shown, and is shown itself
        clock.now += REFUSAL_LOG_WINDOW_S
        reply = raw_exchange(server.address[1], message=cartpole_hello(protocol=99))
        assert reply["code"] == "bad_version"
        assert server.wait_for(lambda: server.refused == flood + 1, timeout=60)
        lines = [m for m in (r.getMessage() for r in remote_log) if m.startswith("remote env flood: refused")]
        assert len(lines) == REFUSAL_LOG_BURST + 2, lines[-3:]
        summary = [line for line in lines if "more connection(s)" in line]
        assert len(summary) == 1
        assert f"refused {flood - REFUSAL_LOG_BURST} more connection(s)" in summary[0]
        assert f"(bad_token: {flood - REFUSAL_LOG_BURST})" in summary[0]
        assert "bad_version" in lines[-1]
    finally:
        server.close()
    assert server.refused == flood + 1  # every refusal counted (the run's refused_connections metric)
