"""Remote envs over real loopback sockets, with env clients in real separate processes.

The server runs in this process (a ``RemoteEnvWorker`` as the engine would build it); clients are
``rlightning env-client`` subprocesses, or raw sockets speaking (or breaking) the protocol by hand.
"""

from __future__ import annotations

import json
import logging
import pickle
import signal
import threading
import time
from pathlib import Path
from typing import Any

import attrs
import msgpack
import numpy as np
import pytest
from remote_env_support import (
    ClientProcs,
    cartpole_hello,
    encode,
    raw_connect,
    raw_exchange,
    start_worker,
)

from rlightning_core.env.remote.protocol import array_to_wire, recv_frame, send_frame

pytestmark = pytest.mark.usefixtures("training_plugins")


@pytest.fixture
def remote_log():
    """Records of the ``rlightning.remote`` logger (attached directly: the CLI may have stopped propagation)."""
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


def _local_worker(num_envs: int, seed: int = 0):
    from rlightning_gymnasium.params import GymnasiumParams
    from rlightning_gymnasium.worker import GymnasiumWorker

    return GymnasiumWorker(GymnasiumParams(id="CartPole-v1"), num_envs=num_envs, seed=seed)


def _steps_until(worker: Any, predicate: Any, timeout: float = 120.0, action: int = 1) -> Any:
    """Step until ``predicate(batch)``; ``timeout`` only guards against a hang (a client process may take a while
    to start on a busy machine)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch = worker.step(np.full(worker.num_envs, action, dtype=np.int64))
        if predicate(batch):
            return batch
        time.sleep(0.01)
    raise AssertionError("condition not reached while stepping")


def test_two_client_processes_step_exactly_like_the_local_env(tmp_path: Path) -> None:
    """Row i of the remote worker is env i of a local worker: same seeds, same transitions, same episodes."""
    with ClientProcs(tmp_path) as procs:
        worker = start_worker(tmp_path, lambda port: [procs.start(port, name=f"c{i}") for i in range(2)],
                              num_envs=8, num_clients=2)
        local = _local_worker(8)
        try:
            assert (worker.observation_space, worker.action_space) == (local.observation_space, local.action_space)
            np.testing.assert_array_equal(worker.reset(seed=11), local.reset(seed=11))
            rng = np.random.default_rng(0)
            episodes = 0
            for _ in range(300):
                actions = rng.integers(0, 2, size=8)
                got, want = worker.step(actions), local.step(actions)
                np.testing.assert_array_equal(got.obs, want.obs)
                np.testing.assert_array_equal(got.reward, want.reward)
                np.testing.assert_array_equal(got.terminated, want.terminated)
                np.testing.assert_array_equal(got.truncated, want.truncated)
                assert (got.final_obs is None) == (want.final_obs is None)
                if want.final_obs is not None:
                    np.testing.assert_array_equal(got.final_obs, want.final_obs)
                assert [(e.env_index, e.episode_return, e.length) for e in got.episodes] == \
                    [(e.env_index, e.episode_return, e.length) for e in want.episodes]
                episodes += len(got.episodes)
            assert episodes > 50
            assert got.metrics["clients_connected"] == [2.0]
            assert got.metrics["vacant_slots"] == [0.0]
        finally:
            worker.close()
            local.close()
        for proc in procs.procs:  # the server's close ends the clients cleanly
            assert proc.wait(timeout=60) == 0, procs.log_of(proc)
            assert "done after 300 steps" in procs.log_of(proc)


MASKED_SPEC = "gymnasium:rlightning_core.testing.dict_envs:MaskedChoice-v0"


def test_a_dict_observation_env_travels_flat_and_steps_like_the_local_one(tmp_path: Path) -> None:
    """A client serving a Dict env (obs + action_mask keys): the run sees the same FlatDict space as with the env
    in process, and the same flat observations, rewards and episodes."""
    from rlightning_gymnasium.params import GymnasiumParams
    from rlightning_gymnasium.worker import GymnasiumWorker

    import rlightning_core.testing.dict_envs  # noqa: F401  (registers the ids)
    from rlightning_core.env.dict_obs import flatten_dict_observations
    from rlightning_core.spaces import ACTION_MASK, FlatDict

    with ClientProcs(tmp_path) as procs:
        worker = start_worker(tmp_path, lambda port: [procs.start(port, name="dict", spec=MASKED_SPEC)],
                              num_envs=4, num_clients=1)
        local = flatten_dict_observations(GymnasiumWorker(
            GymnasiumParams(id="rlightning_core.testing.dict_envs:MaskedChoice-v0"), num_envs=4, seed=0))
        try:
            space = worker.observation_space
            assert isinstance(space, FlatDict) and space == local.observation_space and space.has_action_mask
            assert worker.action_space == local.action_space
            np.testing.assert_array_equal(worker.reset(seed=5), local.reset(seed=5))
            rng = np.random.default_rng(0)
            for _ in range(60):
                actions = rng.integers(0, local.action_space.n, size=4)
                got, want = worker.step(actions), local.step(actions)
                np.testing.assert_array_equal(got.obs, want.obs)
                np.testing.assert_array_equal(got.reward, want.reward)
                assert [(e.env_index, e.episode_return) for e in got.episodes] == \
                    [(e.env_index, e.episode_return) for e in want.episodes]
            masks = space.unflatten(got.obs)[ACTION_MASK]
            assert masks.shape == (4, local.action_space.n) and masks.any(axis=1).all()
        finally:
            worker.close()
            local.close()


def _pickle_that_writes(path: Path) -> bytes:
    class Exploit:
        def __reduce__(self):
            return (Path.write_text, (path, "pwned"))

    return pickle.dumps({"t": "hello", "payload": Exploit()})


def test_bad_handshakes_are_refused_and_logged_while_a_good_client_is_served(tmp_path: Path, remote_log) -> None:
    with ClientProcs(tmp_path) as procs:
        worker = start_worker(tmp_path, lambda port: procs.start(port, name="good"), num_envs=4, num_clients=1)
        port = worker.port
        try:
            worker.reset(seed=0)
            marker = tmp_path / "pwned.txt"
            ext = msgpack.packb({"t": "hello", "x": msgpack.ExtType(42, b"\x00")}, use_bin_type=True)
            bad_dtype = cartpole_hello()
            bad_dtype["observation_space"]["low"] = {**bad_dtype["observation_space"]["low"], "dtype": "object"}
            attempts = [
                ("bad_token", dict(message=cartpole_hello(token="wrong-token"))),
                ("bad_version", dict(message=cartpole_hello(protocol=99))),
                ("malformed", dict(payload=b"\xc1 this is not msgpack")),
                ("malformed", dict(payload=encode({"no_type": 1}))),
                ("frame_too_large", dict(header_len=50_000_000)),
                ("malformed", dict(payload=_pickle_that_writes(marker))),
                ("malformed", dict(payload=ext)),
                ("malformed", dict(message=bad_dtype)),
                ("num_envs_mismatch", dict(message=cartpole_hello(num_envs=3))),
                ("space_mismatch", dict(message=cartpole_hello(action_space={"kind": "discrete", "n": 3,
                                                                              "start": 0}))),
                ("server_full", dict(message=cartpole_hello())),
            ]
            for i, (code, how) in enumerate(attempts):
                reply = raw_exchange(port, **how)
                assert (reply["t"], reply["code"]) == ("error", code), (code, reply)
                batch = worker.step(np.zeros(4, dtype=np.int64))  # the good client goes on being served
                assert batch.metrics["clients_connected"] == [1.0]
                assert batch.metrics["refused_connections"] == [float(i + 1)]
                assert not batch.truncated.all()  # real transitions, not placeholders
            assert not marker.exists(), "a pickle payload must never be unpickled"
            assert worker.server.disconnects == 0
            refusals = [r.getMessage() for r in remote_log if "refused connection" in r.getMessage()]
            assert len(refusals) == len(attempts)
            for code, _ in attempts:
                assert any(code in line for line in refusals), code
            # a CLI client with a wrong token is told why and exits with the user-error code
            bad = procs.start(port, name="bad", token="nope", extra=("--no-reconnect",))
            assert bad.wait(timeout=60) == 2
            assert "bad_token" in procs.log_of(bad)
            assert worker.step(np.zeros(4, dtype=np.int64)).metrics["clients_connected"] == [1.0]
        finally:
            worker.close()


def _raw_client(port: int, *, on_step: str, ready: threading.Event, done: threading.Event) -> None:
    """A hand-written client: handshakes, answers resets, then misbehaves on the first step."""
    sock = raw_connect(port)
    try:
        send_frame(sock, cartpole_hello(name="raw"))
        assert recv_frame(sock, max_bytes=1 << 20, timeout=10)["t"] == "welcome"
        ready.set()
        while not done.is_set():
            try:
                msg = recv_frame(sock, max_bytes=1 << 20, timeout=0.2)
            except TimeoutError:
                continue
            if msg["t"] == "reset":
                send_frame(sock, {"t": "reset_ok", "seq": msg["seq"],
                                  "obs": array_to_wire(np.zeros((4, 4), dtype=np.float32))})
            elif msg["t"] == "step":
                if on_step == "oversized":
                    sock.sendall((2**31).to_bytes(4, "big"))
                elif on_step == "wrong_dtype":
                    send_frame(sock, {"t": "step_ok", "seq": msg["seq"],
                                      "obs": array_to_wire(np.zeros((4, 4), dtype=np.float64))})
                elif on_step == "silent":
                    pass
            elif msg["t"] == "ping" and on_step != "silent":
                send_frame(sock, {"t": "pong", "time": msg.get("time")})
    except Exception:  # the server hung up on us: what these tests expect
        pass
    finally:
        sock.close()


@pytest.mark.parametrize("misbehaviour", ["oversized", "wrong_dtype", "silent"])
def test_a_client_breaking_the_protocol_is_dropped_and_the_other_goes_on(tmp_path: Path, misbehaviour: str,
                                                                         remote_log) -> None:
    ready, done = threading.Event(), threading.Event()
    with ClientProcs(tmp_path) as procs:
        def clients(port: int) -> None:
            threading.Thread(target=_raw_client, args=(port,), daemon=True,
                             kwargs=dict(on_step=misbehaviour, ready=ready, done=done)).start()
            assert ready.wait(10)
            procs.start(port, name="good")

        worker = start_worker(tmp_path, clients, num_envs=8, num_clients=2, request_timeout_s=1.0)
        try:
            worker.reset(seed=0)
            bad_group = next(g for g, c in enumerate(worker._groups) if c is not None and c.name == "raw")
            rows = slice(bad_group * 4, bad_group * 4 + 4)
            other = slice((1 - bad_group) * 4, (1 - bad_group) * 4 + 4)
            batch = worker.step(np.zeros(8, dtype=np.int64))  # a silent client never answers: its timeout ends this
            assert batch.metrics["client_disconnects"] == [1.0]
            assert batch.truncated[rows].all() and not batch.reward[rows].any()  # placeholders
            assert batch.reward[other].all()  # the good client's real CartPole rewards (1.0 each)
            for _ in range(20):
                batch = worker.step(np.zeros(8, dtype=np.int64))
                assert batch.metrics["clients_connected"] == [1.0]
                assert batch.metrics["vacant_slots"] == [4.0]
            messages = [r.getMessage() for r in remote_log]
            drops = [m for m in messages if "dropped client" in m and "raw" in m]
            assert drops, messages
            assert misbehaviour != "silent" or "timed out" in drops[0], drops
        finally:
            done.set()
            worker.close()


def test_a_silent_idle_client_is_dropped_by_the_heartbeat(tmp_path: Path) -> None:
    ready, done = threading.Event(), threading.Event()

    def clients(port: int) -> None:
        threading.Thread(target=_raw_client, args=(port,), daemon=True,
                         kwargs=dict(on_step="silent", ready=ready, done=done)).start()

    worker = start_worker(tmp_path, clients, num_envs=4, num_clients=1, heartbeat_s=0.2, heartbeat_timeout_s=0.6)
    try:
        worker.reset(seed=0)
        deadline = time.monotonic() + 120  # a guard: the client never answers a ping, so the drop must come
        while worker.server.disconnects == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert worker.server.disconnects == 1
        batch = worker.step(np.zeros(4, dtype=np.int64))
        assert batch.metrics["clients_connected"] == [0.0] and batch.truncated.all()
    finally:
        done.set()
        worker.close()


def test_a_killed_client_is_counted_and_a_restarted_one_rejoins(tmp_path: Path) -> None:
    with ClientProcs(tmp_path) as procs:
        worker = start_worker(tmp_path, lambda port: [procs.start(port, name=f"c{i}") for i in range(2)],
                              num_envs=8, num_clients=2)
        try:
            worker.reset(seed=3)
            for _ in range(3):  # CartPole lasts ~9 steps under a constant action: every episode is in flight
                batch = worker.step(np.ones(8, dtype=np.int64))
            assert not (batch.terminated | batch.truncated).any()
            victim = worker._groups[0]
            proc = procs.procs[int(victim.name[1:])]  # clients are named c<index>
            held = batch.obs[:4].copy()
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
            batch = worker.step(np.ones(8, dtype=np.int64))
            assert batch.metrics["client_disconnects"] == [1.0]
            assert batch.metrics["client_dropped_episodes"] == [4.0]  # the 4 episodes in flight are discarded
            assert batch.metrics["clients_connected"] == [1.0]
            np.testing.assert_array_equal(batch.obs[:4], held)
            assert batch.truncated[:4].all() and not batch.reward[:4].any()
            survivors = 0
            for _ in range(40):  # the run continues with the other client
                batch = worker.step(np.ones(8, dtype=np.int64))
                assert all(e.env_index >= 4 for e in batch.episodes)
                survivors += len(batch.episodes)
            assert survivors >= 4
            procs.start(worker.port, name="c2")  # a restarted client takes the vacant group over
            batch = _steps_until(worker, lambda b: b.metrics["clients_connected"] == [2.0])
            assert batch.truncated[:4].all()  # the join step cuts the placeholder and starts real episodes
            assert worker._groups[0].name == "c2"
            batch = _steps_until(worker, lambda b: any(e.env_index < 4 for e in b.episodes))
            assert batch.metrics["client_dropped_episodes"] == [4.0]
        finally:
            worker.close()


def test_a_standby_client_takes_over_at_once(tmp_path: Path) -> None:
    with ClientProcs(tmp_path) as procs:
        worker = start_worker(tmp_path, lambda port: [procs.start(port, name=f"c{i}") for i in range(2)],
                              num_envs=4, num_clients=1, max_clients=2, min_clients=1)
        try:
            deadline = time.monotonic() + 120  # a guard: both client processes connect
            while len(worker.clients) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(worker.clients) == 2
            worker.reset(seed=0)
            owner = worker._groups[0]
            procs.procs[int(owner.name[1:])].send_signal(signal.SIGKILL)
            _steps_until(worker, lambda b: b.metrics["client_disconnects"] == [1.0])
            _steps_until(worker, lambda b: b.metrics["clients_connected"] == [1.0]
                                 and worker._groups[0] is not None)
            assert worker._groups[0].name != owner.name
        finally:
            worker.close()


def test_no_client_in_time_is_a_clear_error(tmp_path: Path) -> None:
    from rlightning_core.env.remote import RemoteEnvError

    with pytest.raises(RemoteEnvError, match=r"0 of 1 env client.*rlightning env-client --connect 127\.0\.0\.1:"):
        start_worker(tmp_path, lambda port: None, num_envs=4, timeout=0.5)


class _AlwaysRight:
    """A stand-in policy for the evaluator: push the cart right (episodes end in ~10 steps)."""

    def act(self, obs: np.ndarray, deterministic: bool = False) -> Any:
        from types import SimpleNamespace

        return SimpleNamespace(env_actions=None, actions=np.ones(len(obs), dtype=np.int64))


def test_evaluation_without_local_env_runs_through_a_server_of_its_own(tmp_path: Path) -> None:
    from remote_env_support import TOKEN, wait_for_file

    from rlightning_core.config.schema import EnvConfig
    from rlightning_core.engine.evaluation import Evaluator
    from rlightning_core.env.remote.params import RemoteEnvParams
    from rlightning_core.plugins import get_plugins

    address_file = tmp_path / "address.json"
    params = RemoteEnvParams(token=TOKEN, num_clients=2, address_file=str(address_file), connect_timeout_s=60)
    cfg = EnvConfig(type="remote", params=params, num_envs=8, name="cp")
    box: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: box.setdefault(
        "ev", Evaluator([cfg], _AlwaysRight(), episodes=3, seed=0, registry=get_plugins().registry)), daemon=True)
    with ClientProcs(tmp_path) as procs:
        thread.start()
        info = wait_for_file(tmp_path / "address.eval.json")  # the evaluation server, not the training one
        assert info["role"] == "eval"
        procs.start(info["port"], num_envs=3, name="evaluator")
        thread.join(timeout=120)
        evaluator = box["ev"]
        try:
            metrics = evaluator.evaluate()
            assert 5 <= metrics["eval/episode_return_mean"] <= 20
            assert metrics["eval/episode_length_mean"] == metrics["eval/episode_return_mean"]
        finally:
            evaluator.close()
        assert procs.procs[0].wait(timeout=60) == 0
    assert not address_file.exists()  # no training server was started


def test_the_remote_env_passes_the_env_conformance_kit(tmp_path: Path) -> None:
    """``check_env('remote')`` builds three workers (one, then two fresh ones for determinism): each gets a client."""
    from remote_env_support import TOKEN

    from rlightning_core.testing import check_component

    address_file = tmp_path / "address.json"
    box: dict[str, Any] = {}

    def check() -> None:
        try:
            box["report"] = check_component("env", "remote", {"token": TOKEN, "address_file": str(address_file),
                                                              "connect_timeout_s": 60}, num_envs=2, steps=100)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=check, daemon=True)
    with ClientProcs(tmp_path) as procs:
        thread.start()
        served: set[int] = set()
        deadline = time.monotonic() + 120
        while thread.is_alive() and time.monotonic() < deadline:
            try:
                port = json.loads(address_file.read_text())["port"]
            except (OSError, ValueError):
                port = None
            if port is not None and port not in served:
                served.add(port)
                procs.start(port, num_envs=2, name=f"c{len(served)}")
            time.sleep(0.05)
        thread.join(timeout=5)
    assert "error" not in box, box.get("error")
    report = box["report"]
    assert len(served) == 3
    assert any("the same seed gives the same" in line for line in report.passed), str(report)
    assert any("episode ends" in line for line in report.passed), str(report)


def test_vacant_slots_wait_blocks_until_a_client_fills_the_group(tmp_path: Path) -> None:
    from rlightning_core.env.remote import RemoteEnvError

    with ClientProcs(tmp_path) as procs:
        worker = start_worker(tmp_path, lambda port: procs.start(port, name="c0"), num_envs=8, num_clients=2,
                              min_clients=1, vacant_slots="wait", rejoin_timeout_s=0.5)
        try:
            with pytest.raises(RemoteEnvError, match=r"1 of 2 env client.*rejoin_timeout_s"):
                worker.reset(seed=0)
            worker.params = attrs.evolve(worker.params, rejoin_timeout_s=60.0)
            procs.start(worker.port, name="c1")
            obs = worker.reset(seed=0)  # returns once the second client came
            assert [c.name for c in worker._groups] == ["c0", "c1"]
            assert np.abs(obs[4:]).max() > 0  # the late group holds real reset observations, not zeros
            assert worker.step(np.zeros(8, dtype=np.int64)).metrics["vacant_slots"] == [0.0]
        finally:
            worker.close()


def test_a_client_dropped_for_a_timeout_reconnects_by_itself(tmp_path: Path) -> None:
    with ClientProcs(tmp_path) as procs:
        worker = start_worker(tmp_path, lambda port: procs.start(port, name="c0"), num_envs=4, num_clients=1,
                              request_timeout_s=1.0)
        try:
            worker.reset(seed=0)
            worker.step(np.zeros(4, dtype=np.int64))
            proc = procs.procs[0]
            proc.send_signal(signal.SIGSTOP)  # frozen: misses the next request's deadline
            try:
                batch = worker.step(np.zeros(4, dtype=np.int64))
            finally:
                proc.send_signal(signal.SIGCONT)
            assert batch.metrics["client_disconnects"] == [1.0] and batch.truncated.all()
            batch = _steps_until(worker, lambda b: b.metrics["clients_connected"] == [1.0])
            assert worker._groups[0].name == "c0" and proc.poll() is None  # the same process came back
            assert worker.server.disconnects == 1
        finally:
            worker.close()
        assert procs.procs[0].wait(timeout=60) == 0
        assert "dropped by the server: timeout" in procs.log_of(procs.procs[0])
