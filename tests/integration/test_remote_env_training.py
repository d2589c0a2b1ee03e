"""Training through remote env clients: the CLI as a user runs it, and Ray mode (the server inside an actor)."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from remote_env_support import RLIGHTNING_EXE, ROOT, TOKEN, ClientProcs, client_env, wait_for_file

pytestmark = pytest.mark.usefixtures("training_plugins")

EXAMPLE = ROOT / "examples" / "cartpole_ppo_remote.yaml"


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_training_through_two_client_processes_solves_cartpole(tmp_path: Path) -> None:
    """examples/cartpole_ppo_remote.yaml, trainer and two env clients as separate processes on loopback."""
    address_file, run_dir = tmp_path / "address.json", tmp_path / "run"
    cmd = [str(RLIGHTNING_EXE), "train", str(EXAMPLE), "--run-dir", str(run_dir), "logging.progress=false",
           f"env.params.address_file={address_file}", "env.params.connect_timeout_s=60", "checkpoint.every=0"]
    with open(tmp_path / "train.log", "wb") as out:
        trainer = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=client_env(), cwd=ROOT)
    try:
        with ClientProcs(tmp_path) as procs:
            port = wait_for_file(address_file, timeout=120)["port"]
            clients = [procs.start(port, name=f"c{i}", spec=str(EXAMPLE)) for i in range(2)]  # served: local_env
            rc = trainer.wait(timeout=1200)  # a guard against a hung run
            log = (tmp_path / "train.log").read_text()
            assert rc == 0, log
            assert "Stopped (target_eval_return)" in log, log
            for proc in clients:
                assert proc.wait(timeout=30) == 0, procs.log_of(proc)
                assert "the run is over" in procs.log_of(proc)
    finally:
        if trainer.poll() is None:
            trainer.send_signal(signal.SIGKILL)
            trainer.wait(timeout=10)
    rows = _metrics(run_dir)
    evals = [r["eval/episode_return_mean"] for r in rows if "eval/episode_return_mean" in r]
    assert evals and evals[-1] >= 475
    served = [r for r in rows if "env/CartPole-v1/clients_connected" in r]
    assert served and all(r["env/CartPole-v1/clients_connected"] == 2.0 for r in served)
    assert all(r["env/CartPole-v1/client_dropped_episodes"] == 0.0 for r in served)
    assert all(r["env/CartPole-v1/server_port"] == port for r in served)  # the run dir records the port
    assert any("env/CartPole-v1/client1/episode_return" in r for r in rows)


def _rows_so_far(run_dir: Path) -> list[dict]:
    """The complete lines of a running run's metrics.jsonl (a line being written is left for the next look)."""
    try:
        text = (run_dir / "metrics.jsonl").read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.split("\n")[:-1] if line.strip()]


def _wait_until(trainer: subprocess.Popen, run_dir: Path, what: str, done: Callable[[list[dict]], bool]) -> None:
    """Poll the run's metrics until ``done(rows)``; the deadline only guards against a hung run."""
    import time

    deadline = time.monotonic() + 600
    while not done(_rows_so_far(run_dir)):
        assert trainer.poll() is None, f"the run ended (exit {trainer.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} within 600 s: the run hangs"
        time.sleep(0.05)


@pytest.mark.slow
def test_killing_a_client_mid_run_the_run_goes_on_and_a_restarted_client_rejoins(tmp_path: Path) -> None:
    """Every step of this is an event in the run's metrics; the run has a step budget it never reaches and is
    stopped with SIGTERM once the restarted client has served a few iterations."""
    address_file, run_dir = tmp_path / "address.json", tmp_path / "run"
    key = "env/CartPole-v1/clients_connected"
    cmd = [str(RLIGHTNING_EXE), "train", str(EXAMPLE), "--run-dir", str(run_dir), "logging.progress=false",
           f"env.params.address_file={address_file}", "env.params.connect_timeout_s=60", "checkpoint.every=0",
           "engine.total_steps=1000000000", "engine.target_eval_return=null", "engine.eval_every=0",
           "env.params.max_clients=2"]

    def served(rows: list[dict]) -> list[float]:
        return [r[key] for r in rows if key in r]

    def rejoined_for(n: int) -> Callable[[list[dict]], bool]:
        def done(rows: list[dict]) -> bool:  # n full iterations after one with a vacant group
            connected = served(rows)
            short = [i for i, c in enumerate(connected) if c < 2.0]
            return bool(short) and len(connected) - short[-1] > n and connected[-1] == 2.0
        return done

    with open(tmp_path / "train.log", "wb") as out:
        trainer = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=client_env(), cwd=ROOT)
    try:
        with ClientProcs(tmp_path) as procs:
            port = wait_for_file(address_file, timeout=120)["port"]
            victim, survivor = (procs.start(port, name=f"c{i}") for i in range(2))
            _wait_until(trainer, run_dir, "5 iterations", lambda rows: len(served(rows)) >= 5)
            victim.send_signal(signal.SIGKILL)  # mid-episode: some episode of its 4 envs is always running
            victim.wait(timeout=10)
            replacement = procs.start(port, name="c2")
            _wait_until(trainer, run_dir, "the restarted client serving 3 iterations", rejoined_for(3))
            trainer.send_signal(signal.SIGTERM)
            rc = trainer.wait(timeout=600)
            log = (tmp_path / "train.log").read_text()
            assert rc == 128 + signal.SIGTERM and "Stopped by SIGTERM" in log, log
            assert "dropped client" in log and "'c2'" in log and "serves group" in log, log
            for proc in (survivor, replacement):
                assert proc.wait(timeout=60) == 0, procs.log_of(proc)
    finally:
        if trainer.poll() is None:
            trainer.send_signal(signal.SIGKILL)
            trainer.wait(timeout=10)
    rows = [r for r in _metrics(run_dir) if key in r]
    connected = [r[key] for r in rows]
    short = [i for i, c in enumerate(connected) if c < 2.0]
    assert short and short[0] >= 5, connected  # a vacant group only after the kill
    assert short[-1] < len(rows) - 1 and connected[-1] == 2.0, connected  # rejoined, and went on
    assert rows[-1]["env/CartPole-v1/client_disconnects"] == 1.0
    assert rows[-1]["env/CartPole-v1/client_dropped_episodes"] >= 1.0


@pytest.mark.ray
def test_in_ray_mode_the_server_runs_inside_the_env_actor(ray_cluster, tmp_path: Path) -> None:
    from rlightning_core import load_config

    address_file = tmp_path / "address.json"
    config = load_config(EXAMPLE, ["cluster.mode=ray", "logging.progress=false", "checkpoint.every=0",
                                   "engine.total_steps=1024", "engine.target_eval_return=null",
                                   "engine.eval_every=0", "engine.eval_episodes=2", "env.params.token_env=null",
                                   f"env.params.token={TOKEN}", f"env.params.address_file={address_file}",
                                   "env.params.connect_timeout_s=60"])
    with ClientProcs(tmp_path) as procs:
        from rlightning_core.builders import build_env_group

        env_group = build_env_group(config.env, seed=config.seed, cluster=config.cluster)
        try:
            info = wait_for_file(address_file, timeout=120)
            import os

            assert info["pid"] != os.getpid()  # the server lives in the env actor
            for i in range(2):
                procs.start(info["port"], name=f"c{i}")
            from rlightning_core.builders import build_data_buffer, build_engine, build_policy_group

            policy_group = build_policy_group(config.policy.type, config.policy, config.cluster)
            buffer = build_data_buffer(config.buffer.type, config.buffer)
            engine = build_engine(config, env_group, policy_group, buffer)
            result = engine.run(tmp_path / "run")
        finally:
            env_group.close()
        assert result.env_steps >= 1024
    rows = _metrics(tmp_path / "run")
    served = [r for r in rows if "env/CartPole-v1/clients_connected" in r]
    assert served and served[-1]["env/CartPole-v1/clients_connected"] == 2.0


def test_ppo_with_action_masking_trains_through_a_client_serving_a_dict_env(tmp_path: Path) -> None:
    """examples/masked_ppo.yaml's env served by an env client: the Dict observations (with the action_mask key)
    travel flat, the masked policy trains from them and solves the task (evaluated on the same env in process)."""
    import yaml

    address_file, run_dir = tmp_path / "address.json", tmp_path / "run"
    config = yaml.safe_load((ROOT / "examples" / "masked_ppo.yaml").read_text())
    local_env = config["env"]
    config["env"] = {"type": "remote", "name": "masked", "num_envs": local_env["num_envs"],
                     "params": {"host": "127.0.0.1", "port": 0, "token_env": "RLIGHTNING_ENV_TOKEN",
                                "num_clients": 1, "connect_timeout_s": 120, "address_file": str(address_file),
                                "local_env": {"type": local_env["type"], "params": local_env["params"]}}}
    (tmp_path / "remote_masked.yaml").write_text(yaml.safe_dump(config))
    cmd = [str(RLIGHTNING_EXE), "train", str(tmp_path / "remote_masked.yaml"), "--run-dir", str(run_dir),
           "logging.progress=false", "logging.log_every=1"]
    with open(tmp_path / "train.log", "wb") as out:
        trainer = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=client_env(), cwd=ROOT)
    try:
        with ClientProcs(tmp_path) as procs:
            port = wait_for_file(address_file, timeout=120)["port"]
            client = procs.start(port, name="dict", spec=str(tmp_path / "remote_masked.yaml"), num_envs=8)
            rc = trainer.wait(timeout=1200)  # a guard against a hung run
            log = (tmp_path / "train.log").read_text()
            assert rc == 0, log
            assert client.wait(timeout=30) == 0, procs.log_of(client)
    finally:
        if trainer.poll() is None:
            trainer.send_signal(signal.SIGKILL)
            trainer.wait(timeout=10)
    rows = _metrics(run_dir)
    served = [r for r in rows if "env/masked/clients_connected" in r]
    assert served and all(r["env/masked/clients_connected"] == 1.0 for r in served)
    evals = [r["eval/episode_return_mean"] for r in rows if "eval/episode_return_mean" in r]
    assert evals and evals[-1] >= 9.5  # of 10: the cued legal action at every step
