"""The driver-to-runner direct line (rlightning_core.distributed.channel): real Unix sockets and threads."""

from __future__ import annotations

import os
import re
import socket
import stat
import threading
import time

import numpy as np
import pytest

from rlightning_core.distributed.channel import (
    ChannelHub,
    ChannelLost,
    ChannelTimeout,
    RemoteError,
    serve,
)
from rlightning_core.env.runner import EnvStepError

_RELEASE = threading.Event()


def _handler(mode: str, value: np.ndarray | None = None):
    if mode == "env":
        raise EnvStepError("env[0] (cartpole) worker 0 failed in step()", label="cartpole", phase="step",
                           kind="non_finite")
    if mode == "bug":
        raise KeyError("a bug in the rollout copy")
    if mode == "diverged":
        from rlightning_core.policy.numerics import NonFiniteError

        raise NonFiniteError("loss/value=inf", offending={"loss/value": float("inf")}, learn_call=3)
    if mode == "held":  # answers once the test lets it (at the latest after a minute: a missed deadline then fails)
        _RELEASE.wait(60)
    return {"echo": value, "pid": os.getpid()}


@pytest.fixture
def line():
    """A hub and worker 3 serving it on a thread, connected; closed afterwards."""
    hub = ChannelHub()
    worker = threading.Thread(target=serve, args=(hub.path, hub.token, 3, _handler), daemon=True)
    worker.start()
    hub.accept(3, lambda: not worker.is_alive(), timeout=10)
    yield hub, worker
    hub.close()
    worker.join(timeout=10)


def test_results_and_arrays_round_trip(line):
    hub, _ = line
    value = np.arange(12, dtype=np.float32).reshape(3, 4)
    for _ in range(3):  # one connection carries every call
        hub.request(3, ("ok", value))
        out = hub.reply(3, time.monotonic() + 10, "env worker 3")
        assert np.array_equal(out["echo"], value) and out["echo"].dtype == np.float32
        assert out["pid"] == os.getpid()


def test_an_env_fault_arrives_as_a_restartable_env_step_error_with_the_workers_traceback(line):
    hub, _ = line
    hub.request(3, ("env",))
    with pytest.raises(EnvStepError) as info:
        hub.reply(3, time.monotonic() + 10, "env worker 3")
    err = info.value
    assert (err.label, err.phase, err.kind) == ("cartpole", "step", "non_finite")
    assert "failed in step()" in str(err) and "env worker 3's traceback" in str(err) and "_handler" in str(err)
    hub.request(3, ("ok", None))  # the worker keeps serving after an error
    assert hub.reply(3, time.monotonic() + 10, "env worker 3")["echo"] is None


def test_any_other_error_is_a_remote_error_naming_the_type(line):
    hub, _ = line
    hub.request(3, ("bug",))
    with pytest.raises(RemoteError, match=re.escape("env worker 3 failed: builtins.KeyError: 'a bug in the")):
        hub.reply(3, time.monotonic() + 10, "env worker 3")


def test_an_rlightning_error_arrives_as_itself(line):
    """A learner's NonFiniteError over the line is the same class with the same fields (the engine adds the
    iteration, the CLI prints it without a traceback); the worker's traceback is in its notes."""
    from rlightning_core.policy.numerics import NonFiniteError

    hub, _ = line
    hub.request(3, ("diverged",))
    with pytest.raises(NonFiniteError) as info:
        hub.reply(3, time.monotonic() + 10, "the learner")
    assert str(info.value) == "loss/value=inf"
    assert info.value.offending == {"loss/value": float("inf")} and info.value.learn_call == 3
    assert any("raised in the learner" in n and "_handler" in n for n in info.value.__notes__)


def test_a_late_answer_times_out(line):
    """The answer cannot come before the deadline (the handler waits for this test): the wait ends at it."""
    hub, _ = line
    _RELEASE.clear()
    hub.request(3, ("held",))
    try:
        with pytest.raises(ChannelTimeout, match="env worker 3 sent no answer in time"):
            hub.reply(3, time.monotonic() + 0.3, "env worker 3")
    finally:
        _RELEASE.set()


def test_closing_the_hub_ends_the_workers_loop_and_removes_the_socket(line):
    hub, worker = line
    directory = os.path.dirname(hub.path)
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700  # only this user reaches the socket
    hub.detach(3)
    worker.join(timeout=10)
    assert not worker.is_alive()
    hub.close()
    assert not os.path.exists(directory)


def test_a_dead_worker_is_a_lost_channel():
    hub = ChannelHub()
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.connect(hub.path)
    raw.sendall(b"H" + (len(hub.token) + 4).to_bytes(8, "big") + hub.token + (5).to_bytes(4, "big"))
    hub.accept(5, lambda: False, timeout=10)
    raw.close()  # the worker's process died
    try:
        with pytest.raises(ChannelLost):
            hub.request(5, ("ok", None))
            hub.reply(5, time.monotonic() + 10, "env worker 5")
    finally:
        hub.close()


def test_a_connection_without_the_token_is_dropped():
    hub = ChannelHub()
    try:
        stranger = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stranger.connect(hub.path)
        stranger.sendall(b"H" + (20).to_bytes(8, "big") + b"\0" * 16 + (1).to_bytes(4, "big"))
        worker = threading.Thread(target=serve, args=(hub.path, hub.token, 1, _handler), daemon=True)
        worker.start()
        hub.accept(1, lambda: not worker.is_alive(), timeout=10)
        assert stranger.recv(1) == b""  # the hub closed the stranger's connection
        hub.request(1, ("ok", None))
        assert hub.reply(1, time.monotonic() + 10, "env worker 1")["echo"] is None
        stranger.close()
    finally:
        hub.close()


def test_accept_gives_up_when_the_worker_ends_or_the_time_is_up():
    hub = ChannelHub()
    try:
        with pytest.raises(ChannelLost, match="env worker 2 ended its channel"):
            hub.accept(2, lambda: True, timeout=10)
        with pytest.raises(ChannelTimeout, match="did not connect its channel within"):
            hub.accept(2, lambda: False, timeout=0.2)
    finally:
        hub.close()


class _Sneaky:
    """Unpickles into a call of a function the pickle names (what a hostile message would do)."""

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def test_messages_are_read_with_a_restricted_unpickler(tmp_path):
    import pickle

    from rlightning_core.buffer.base import Chunk
    from rlightning_core.distributed import channel
    from rlightning_core.env.runner import EpisodeStats, RolloutStats

    data = {"obs": np.ones((3, 2, 4), np.float32), "actions": np.arange(6, dtype=np.int64).reshape(3, 2),
            "done": np.zeros((3, 2), bool), "value": np.float32(0.5), "count": np.int64(7)}
    chunk = Chunk(data=data, last_obs=np.zeros((2, 4), np.float32), last_values=None, weight_version=3,
                  column=0, env_label="cartpole")
    stats = RolloutStats(label="cartpole", episodes=[EpisodeStats(env_index=1, episode_return=12.0, length=12)],
                         metrics={"x": [1.0]}, preprocessor_states=[{"mean": np.zeros(4), "count": 2.0}])
    back_chunk, back_stats = channel.loads(pickle.dumps((chunk, stats), protocol=5))
    assert back_chunk.env_label == "cartpole" and back_chunk.weight_version == 3
    assert all(np.array_equal(back_chunk.data[k], v) and np.asarray(back_chunk.data[k]).dtype == np.asarray(v).dtype
               for k, v in data.items())
    assert back_stats.episodes[0].episode_return == 12.0 and back_stats.preprocessor_states[0]["count"] == 2.0

    marker = tmp_path / "ran"
    for hostile in (_Sneaky(os.system, f"touch {marker}"), _Sneaky(channel.serve, "/nowhere", b"", 0, print),
                    _Sneaky(getattr, "text", "upper"), _Sneaky(channel.ChannelHub)):  # a class that acts
        with pytest.raises(pickle.UnpicklingError, match="not plain data, numpy or an rlightning class"):
            channel.loads(pickle.dumps(hostile, protocol=5))
    assert not marker.exists()
