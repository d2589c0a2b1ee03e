"""The inference-server topology on a real local Ray cluster: env actors ask a batching rollout actor."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("training_plugins")]


def server_config(cartpole_config, *overrides):
    return cartpole_config("cluster.mode=ray", "env.num_workers=4", "env.num_envs=2", "env.num_cpus=0.5",
                           "checkpoint.every=0",
                           "cluster.topology=inference_server", "cluster.num_inference_servers=1", *overrides)


def test_route_spreads_env_workers_over_servers_and_halves():
    from rlightning_core.distributed.inference import route

    assert route(2, 1) == [(0, 0), (0, 1)]
    assert route(4, 2) == [(0, 0), (1, 0), (0, 1), (1, 1)]


def test_inference_server_batches_syncs_bit_for_bit_and_trains(ray_cluster, tmp_path, cartpole_config, build_run):
    ray = ray_cluster
    config = server_config(cartpole_config, "engine.total_steps=6144", "engine.eval_every=0",
                           "engine.eval_episodes=5")
    engine = build_run(config)
    ex = engine.execution
    assert len(ex.servers) == 1 and ex.rollout_actors == ex.servers
    learner = ray.get(ex.learner.get_weights.remote())
    served = ray.get(ex.servers[0].get_weights.remote())
    for key in learner:  # the first sync reached the server, bit for bit
        np.testing.assert_array_equal(served[key], learner[key])
    ex.reset(config.seed)
    stats = ex.collect(8)
    assert [s.steps for s in stats] == [16] * 4 and {s.weight_version for s in stats} == {1}
    served = ray.get(ex.servers[0].stats.remote())
    # a pass serves at most a half (2 env workers); whether both asked within max_wait_s is timing, so how many
    # passes shared is not asserted here (test_inference_batching.py checks the batching itself, by events)
    assert served["requests"] == 32 and 16 <= served["batches"] <= 32
    # cluster.local_channel (the default): every act of these same-node env actors went over the server's socket
    assert served["socket_requests"] == 32
    assert ray.get([a.uses_server_socket.remote() for a in ex.env_group.actors]) == [True] * 4
    result = engine.run(tmp_path / "run")
    assert result.env_steps >= 6144
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    returns = [r["rollout/episode_return_mean"] for r in rows if "rollout/episode_return_mean" in r]
    assert returns[-1] > 2 * returns[0] and returns[-1] > 40, returns
    lags = [r["perf/policy_lag_max"] for r in rows if "perf/policy_lag_max" in r]
    assert max(lags) == 0  # every chunk was collected with the newest weights (versions travel with answers)


def test_inference_server_needs_rollout_workers(cartpole_config):
    from rlightning_core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"cluster\.num_inference_servers: the inference_server topology needs"):
        server_config(cartpole_config, "cluster.num_inference_servers=0")  # when the config loads: before Ray starts


def test_dry_run_plan_shows_topology_learners_sync_and_buffer(cartpole_config):
    from rlightning_core.distributed.plan import describe_ray_plan

    config = server_config(cartpole_config, "cluster.num_learners=2", "cluster.weight_sync=node_shared",
                           "cluster.sharded_buffer=true")
    text = "\n".join(describe_ray_plan(config, ["CartPole-v1"] * 4))
    assert "topology: inference_server, 1 inference server(s)" in text
    assert "half A CartPole-v1#0, CartPole-v1#2; half B CartPole-v1#1, CartPole-v1#3" in text
    assert "learners: 2 data-parallel ranks over gloo" in text
    assert "weight sync: node_shared" in text and "buffer: sharded" in text
    assert "act calls (one per env step): over each rollout actor's Unix socket" in text


def test_a_killed_inference_server_is_recreated_resynced_and_training_finishes(ray_cluster, tmp_path,
                                                                              cartpole_config, build_run):
    from rlightning_core import hookimpl
    from rlightning_core.plugins import load_plugins

    engine = build_run(server_config(cartpole_config, "engine.total_steps=1024", "engine.eval_every=0",
                                     "engine.eval_episodes=2"))
    ex = engine.execution
    first = ex.servers[0]
    seen = {}

    class Killer:
        @hookimpl
        def on_metrics(self, step, metrics):
            if metrics.get("iteration") == 2:
                ray_cluster.kill(ex.servers[0], no_restart=True)

        @hookimpl
        def on_run_end(self, run_dir, status, error):
            learner = ray_cluster.get(ex.learner.get_weights.remote())
            served = ray_cluster.get(ex.servers[0].get_weights.remote())
            seen["synced"] = all(np.array_equal(served[k], learner[k]) for k in learner)
            seen["sockets"] = ray_cluster.get([a.uses_server_socket.remote() for a in ex.env_group.actors])
            seen["socket_requests"] = ray_cluster.get(ex.servers[0].stats.remote())["socket_requests"]

    engine.plugins = load_plugins(extra=[("killer", Killer())])
    result = engine.run(tmp_path / "run")
    assert result.stop_reason == "total_steps" and result.env_steps >= 1024
    assert ex.servers[0] is not first and ex.server_restarts == [1]
    assert seen["synced"]  # the new server acts with the learner's weights, bit for bit
    assert ex.restarts == 1  # the server; its env actors were re-attached, not recreated
    # the re-attached env actors talk to the new server over its own socket
    assert seen["sockets"] == [True] * 4 and seen["socket_requests"] > 0
    assert [s.restarts for s in ex.env_group.slots] == [0, 0, 0, 0]
    ledger = [json.loads(x) for x in (tmp_path / "run" / "seeds.jsonl").read_text().splitlines()]
    assert [e["restart"] for e in ledger if e["role"] == "rollout_server"] == [0, 1]



def test_without_the_local_channel_env_actors_ask_through_ray(ray_cluster, cartpole_config, build_run):
    engine = build_run(server_config(cartpole_config, "cluster.local_channel=false"))
    ex = engine.execution
    assert ray_cluster.get([a.uses_server_socket.remote() for a in ex.env_group.actors]) == [False] * 4
    ex.reset(engine.config.seed)
    stats = ex.collect(8)
    assert [s.steps for s in stats] == [16] * 4
    served = ray_cluster.get(ex.servers[0].stats.remote())
    assert served["requests"] == 32 and served["socket_requests"] == 0


@pytest.fixture
def lone_server(ray_cluster, cartpole_config):
    """An inference server actor (halves of one env actor each) and the spaces it serves."""
    import gymnasium as gym

    from rlightning_core.distributed.inference import InferenceServerActor
    from rlightning_core.plugins import get_plugins

    config = cartpole_config()
    env = gym.make("CartPole-v1")
    server = ray_cluster.remote(InferenceServerActor).options(num_cpus=0, max_concurrency=8).remote(
        config.policy, selection=get_plugins().selection(), seed=0, observation_space=env.observation_space,
        action_space=env.action_space, half_sizes=[1, 1])
    yield server, env
    ray_cluster.kill(server)


def test_a_broken_socket_falls_back_to_ray_calls(ray_cluster, lone_server):
    """A stand-in whose socket to a live server breaks keeps acting, through Ray calls."""
    import socket

    from rlightning_core.distributed.inference import RemotePolicy

    server, env = lone_server
    endpoint = ray_cluster.get(server.open_endpoint.remote())
    assert ray_cluster.get(server.open_endpoint.remote()) == endpoint  # idempotent
    if sys.platform == "linux":  # abstract: no file for a killed server to leave behind
        assert endpoint["path"].startswith("\0")
    policy = RemotePolicy(server, 0, observation_space=env.observation_space, action_space=env.action_space,
                          timeout_s=60.0, endpoint=endpoint)
    assert policy.sock is not None  # the driver is on the server's node
    obs = np.zeros((3, 4), dtype=np.float32)
    assert policy.act(obs).actions.shape == (3,)
    policy.sock.shutdown(socket.SHUT_RDWR)
    assert policy.act(obs).actions.shape == (3,)
    assert policy.sock is None
    served = ray_cluster.get(server.stats.remote())
    assert served["requests"] == 2 and served["socket_requests"] == 1


def test_the_server_socket_answers_only_its_token(ray_cluster, lone_server):
    import pickle
    import socket

    from rlightning_core.distributed.channel import ChannelLost, receive, send

    server, _ = lone_server
    endpoint = ray_cluster.get(server.open_endpoint.remote())
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(endpoint["path"])
    send(sock, b"H", bytes(len(endpoint["token"])), 10.0)  # a wrong token
    with pytest.raises(ChannelLost):  # closed without an answer (or refused the request)
        send(sock, b"Q", pickle.dumps((np.zeros((1, 4), np.float32), 0)), 10.0)
        receive(sock, None)
    sock.close()
    assert ray_cluster.get(server.stats.remote())["requests"] == 0
