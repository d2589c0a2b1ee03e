"""The remote-env wire format: frames, arrays, spaces, tokens, params and client specs (no server needed)."""

from __future__ import annotations

import pickle
import socket
import struct
import threading

import gymnasium
import msgpack
import numpy as np
import pytest
from gymnasium import spaces

from rlightning_core.env.remote.params import LocalEnvSpec, RemoteEnvParams
from rlightning_core.env.remote.protocol import (
    DTYPES,
    HEADER,
    ConnectionClosed,
    ProtocolError,
    array_from_wire,
    array_to_wire,
    decode,
    encode,
    recv_frame,
    send_frame,
    space_from_wire,
    space_to_wire,
    token_matches,
)
from rlightning_core.errors import ConfigError, UserError


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_arrays_round_trip_with_their_dtype_and_shape(name: str) -> None:
    rng = np.random.default_rng(0)
    a = (rng.random((3, 2, 5)) * 100).astype(name)
    wire = array_to_wire(a)
    assert wire["dtype"] == name and wire["shape"] == [3, 2, 5] and len(wire["data"]) == a.nbytes
    b = array_from_wire(decode(encode({"t": "x", "a": wire}))["a"], "a")
    assert b.dtype == a.dtype and b.shape == a.shape
    np.testing.assert_array_equal(a, b)


def test_arrays_travel_little_endian_and_contiguous() -> None:
    a = np.arange(6, dtype=">i4").reshape(2, 3).T  # big-endian and not C-contiguous
    wire = array_to_wire(a)
    assert wire["data"] == np.ascontiguousarray(a, dtype="<i4").tobytes()
    np.testing.assert_array_equal(array_from_wire(wire, "a"), a)
    assert array_from_wire(array_to_wire(np.float32(1.5)), "s").shape == ()


@pytest.mark.parametrize("bad, why", [
    ({"dtype": "object", "shape": [1], "data": b"\x00" * 8}, "dtype 'object'"),
    ({"dtype": "float32", "shape": [2], "data": b"\x00" * 4}, "4 bytes of data"),
    ({"dtype": "float32", "shape": [-1], "data": b""}, "shape"),
    ({"dtype": "float32", "shape": [True], "data": b"\x00" * 4}, "shape"),
    ({"dtype": "float32", "shape": [1], "data": "text"}, "bin"),
    ({"dtype": "float32", "shape": [1], "data": b"\x00" * 4, "extra": 1}, "exactly"),
    ([1, 2, 3], "exactly"),
])
def test_bad_arrays_are_malformed(bad: object, why: str) -> None:
    with pytest.raises(ProtocolError, match=why) as info:
        array_from_wire(bad, "obs")
    assert info.value.code == "malformed"


def test_object_arrays_cannot_be_sent() -> None:
    with pytest.raises(ProtocolError, match="cannot travel"):
        array_to_wire(np.array([{"a": 1}], dtype=object))


def test_pickle_and_extension_types_are_never_decoded(tmp_path) -> None:
    marker = tmp_path / "ran"

    class Exploit:
        def __reduce__(self):
            return (marker.write_text, ("executed",))

    for payload in (pickle.dumps({"t": "hello", "x": Exploit()}), pickle.dumps(Exploit(), protocol=0),
                    msgpack.packb({"t": "hello", "x": msgpack.ExtType(1, b"")}), msgpack.packb([1, 2]),
                    msgpack.packb({"t": 3}), msgpack.packb({1: "int keys"}), b"\xc1"):
        with pytest.raises(ProtocolError) as info:
            decode(payload)
        assert info.value.code == "malformed"
    assert not marker.exists()


def test_frames_over_a_socket_pair() -> None:
    a, b = socket.socketpair()
    with a, b:
        send_frame(a, {"t": "ping", "time": 1.5})
        assert recv_frame(b, max_bytes=1024, timeout=1) == {"t": "ping", "time": 1.5}
        a.sendall(HEADER.pack(10_000))  # only a header: refused at once, the payload is never awaited
        with pytest.raises(ProtocolError, match="exceeds the limit of 1024") as info:
            recv_frame(b, max_bytes=1024, timeout=5)
        assert info.value.code == "frame_too_large"
        a.sendall(HEADER.pack(0))
        with pytest.raises(ProtocolError, match="empty frame"):
            recv_frame(b, max_bytes=1024, timeout=1)
        a.sendall(struct.pack(">I", 5) + b"ab")  # a truncated frame times out
        with pytest.raises(TimeoutError):
            recv_frame(b, max_bytes=1024, timeout=0.2)
    c, d = socket.socketpair()
    with d:
        c.close()
        with pytest.raises(ConnectionClosed):
            recv_frame(d, max_bytes=1024, timeout=1)


def test_a_frame_split_across_writes_is_reassembled() -> None:
    a, b = socket.socketpair()
    with a, b:
        payload = encode({"t": "step", "actions": array_to_wire(np.arange(1000))})
        frame = HEADER.pack(len(payload)) + payload

        def dribble() -> None:
            for i in range(0, len(frame), 777):
                a.sendall(frame[i:i + 777])

        t = threading.Thread(target=dribble)
        t.start()
        msg = recv_frame(b, max_bytes=1 << 20, timeout=5)
        t.join()
        np.testing.assert_array_equal(array_from_wire(msg["actions"], "actions"), np.arange(1000))


@pytest.mark.parametrize("space", [
    spaces.Box(low=-1.0, high=2.0, shape=(3, 2), dtype=np.float32),
    spaces.Box(low=np.array([0, -5]), high=np.array([255, 5]), dtype=np.int16),
    spaces.Box(low=0, high=255, shape=(4, 4, 3), dtype=np.uint8),
    spaces.Discrete(5, start=-2),
    spaces.MultiDiscrete([3, 4, 2]),
    spaces.MultiBinary(6),
    spaces.MultiBinary([2, 3]),
])
def test_spaces_round_trip(space: gymnasium.Space) -> None:
    wire = decode(encode({"t": "x", "s": space_to_wire(space)}))["s"]
    assert space_from_wire(wire, "s") == space


def test_unsupported_and_bad_spaces_are_refused() -> None:
    with pytest.raises(ProtocolError, match=r"this Dict space cannot travel: observation key 'a'") as info:
        space_to_wire(spaces.Dict({"a": spaces.Discrete(2)}))
    assert info.value.code == "unsupported_space"
    with pytest.raises(ProtocolError, match=r"observation_space\.spaces must be a non-empty map"):
        space_from_wire({"kind": "dict", "spaces": {}}, "observation_space")
    with pytest.raises(ProtocolError, match=r"observation_space\.spaces\.a: a space is a map"):
        space_from_wire({"kind": "dict", "spaces": {"a": 3}}, "observation_space")
    with pytest.raises(ProtocolError, match="unknown space kind") as info:
        space_from_wire({"kind": "graph"}, "observation_space")
    assert info.value.code == "unsupported_space"
    with pytest.raises(ProtocolError, match="must be an int"):
        space_from_wire({"kind": "discrete", "n": "5"}, "action_space")
    with pytest.raises(ProtocolError):
        space_from_wire({"kind": "discrete", "n": -3}, "action_space")
    box = space_to_wire(spaces.Box(-1, 1, (2,)))
    box["shape"] = [3]
    with pytest.raises(ProtocolError, match="disagree"):
        space_from_wire(box, "observation_space")


def test_tokens_compare_exactly() -> None:
    assert token_matches("s3cret", "s3cret")
    assert not token_matches("s3cre", "s3cret")
    assert not token_matches(None, "s3cret")
    assert not token_matches(["s3cret"], "s3cret")
    assert token_matches("clé", "clé")


def test_params_need_exactly_one_token_source(monkeypatch) -> None:
    with pytest.raises(ValueError, match="exactly one of token and token_env"):
        RemoteEnvParams()
    with pytest.raises(ValueError, match="exactly one of token and token_env"):
        RemoteEnvParams(token="a", token_env="B")
    with pytest.raises(ValueError, match="max_clients"):
        RemoteEnvParams(token="a", num_clients=3, max_clients=2)
    with pytest.raises(ValueError, match="heartbeat_timeout_s"):
        RemoteEnvParams(token="a", heartbeat_s=5, heartbeat_timeout_s=4)
    monkeypatch.delenv("RL_REMOTE_TEST_TOKEN", raising=False)
    params = RemoteEnvParams(token_env="RL_REMOTE_TEST_TOKEN")
    with pytest.raises(ConfigError, match="RL_REMOTE_TEST_TOKEN"):
        params.resolve_token()
    monkeypatch.setenv("RL_REMOTE_TEST_TOKEN", "from-env")
    assert params.resolve_token() == "from-env"
    assert (params.capacity, params.wait_for) == (1, 1)


def test_params_errors_are_path_addressed_in_configs() -> None:
    from rlightning_core import load_config_dict

    data = {"env": {"type": "remote", "params": {"token": "t", "port": 70000, "vacant_slots": "pause"}},
            "policy": {"type": "ppo"}}
    with pytest.raises(ConfigError) as info:
        load_config_dict(data)
    text = str(info.value)
    assert "env[0].params.port: must be between 0 and 65535" in text
    assert "env[0].params.vacant_slots: must be one of" in text


def test_evaluation_uses_the_local_env_or_a_server_of_its_own() -> None:
    from rlightning_core.config.schema import EnvConfig

    local = RemoteEnvParams(token="t", num_clients=2, local_env=LocalEnvSpec(type="gymnasium",
                                                                            params={"id": "CartPole-v1"}))
    cfg = EnvConfig(type="remote", params=local, num_envs=8, name="cp")
    ev = local.eval_env_config(cfg)
    assert (ev.type, ev.params, ev.label) == ("gymnasium", {"id": "CartPole-v1"}, "cp")
    remote = RemoteEnvParams(token="t", num_clients=2, port=5000, eval_port=5001)
    ev = remote.eval_env_config(EnvConfig(type="remote", params=remote, num_envs=8))
    assert ev.type == "remote" and ev.params.port == 5001 and ev.params.role == "eval"
    assert ev.params.num_clients == 1


def test_client_specs(tmp_path) -> None:
    from rlightning_core.env.remote.client import env_config_from_spec, parse_address

    cfg, n = env_config_from_spec("gymnasium:CartPole-v1")
    assert (cfg.type, cfg.params, n) == ("gymnasium", {"id": "CartPole-v1"}, 1)
    cfg, _ = env_config_from_spec("gymnasium:my_pkg.envs:Maze-v0")
    assert cfg.params == {"id": "my_pkg.envs:Maze-v0"}
    cfg, n = env_config_from_spec("examples/cartpole_ppo_remote.yaml")
    assert (cfg.type, cfg.params, cfg.label, n) == ("gymnasium", {"id": "CartPole-v1"}, "CartPole-v1", 4)
    two = tmp_path / "two.yaml"
    two.write_text("env:\n- {type: gymnasium, name: a, num_envs: 3, params: {id: CartPole-v1}}\n"
                   "- {type: gymnasium, name: b, num_envs: 5, params: {id: Pendulum-v1}}\n")
    cfg, n = env_config_from_spec(str(two), "b")
    assert (cfg.params, n) == ({"id": "Pendulum-v1"}, 5)
    with pytest.raises(UserError, match="no env entry named 'c'"):
        env_config_from_spec(str(two), "c")
    server_only = tmp_path / "server.yaml"
    server_only.write_text("env: {type: remote, params: {token: t}}\n")
    with pytest.raises(UserError, match=r"without params\.local_env"):
        env_config_from_spec(str(server_only))
    with pytest.raises(UserError, match="TYPE:ID"):
        env_config_from_spec("CartPole-v1")
    with pytest.raises(UserError, match="no such config file"):
        env_config_from_spec("missing.yaml")
    assert parse_address("127.0.0.1:5555") == ("127.0.0.1", 5555)
    assert parse_address("[::1]:80") == ("::1", 80)
    for bad in ("localhost", ":80", "host:0", "host:http"):
        with pytest.raises(UserError, match="HOST:PORT"):
            parse_address(bad)
