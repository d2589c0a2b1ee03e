"""Pixel observations end to end: the CNN encoders of ppo and dqn learn on a uint8 image env, the buffers keep
the pixels uint8, a CNN checkpoint resumes bit for bit, and on Ray the learner receives uint8 chunks.

The env is ``PatternImage-v0`` (rlightning_core/testing/image_env.py): 4x36x36 uint8 frames, reward 1 for
naming the side of a bright square, 16 steps per episode, so a random policy returns about 8 and a policy
that reads the image 16.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.usefixtures("training_plugins")

ROOT = Path(__file__).resolve().parents[2]
PPO = ROOT / "examples" / "pattern_image_ppo.yaml"
DQN = ROOT / "examples" / "pattern_image_dqn.yaml"
FRAME = 4 * 36 * 36  # bytes of one observation
QUIET = ("logging.progress=false",)


def _config(path: Path, *overrides: str):
    from rlightning_core import load_config

    return load_config(path, [*QUIET, *overrides])


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_ppo_cnn_learns_from_pixels_and_the_rollout_buffer_keeps_them_uint8(tmp_path, build_run):
    from rlightning_core.policy.encoders import NatureCNN

    config = _config(PPO, "engine.total_steps=1024", "engine.eval_every=16", "checkpoint.every=0")
    engine = build_run(config)
    learner = engine.policy_group.learner
    assert isinstance(learner.net.encoder, NatureCNN)  # encoder: auto picked the CNN for the image space
    result = engine.run(tmp_path / "run")
    assert result.env_steps == 1024
    assert result.last_eval_return >= 14  # random: 8; it reads the square's side off the pixels

    obs = engine.execution.buffer["obs"]
    assert obs.dtype == torch.uint8 and obs.shape == (16, 4, 4, 36, 36)
    assert obs.nbytes == 16 * 4 * FRAME  # one byte per pixel
    rows = [r for r in _rows(tmp_path / "run") if "loss/value" in r]
    assert len(rows) == 16
    assert rows[0]["loss/entropy"] > 0.6 and rows[-1]["loss/entropy"] < rows[0]["loss/entropy"] - 0.2


def test_dqn_cnn_learns_from_pixels_and_the_replay_stores_uint8(tmp_path, build_run):
    config = _config(DQN, "engine.total_steps=1024", "engine.eval_every=16", "checkpoint.every=0",
                     "buffer.params.capacity=2048")
    engine = build_run(config)
    result = engine.run(tmp_path / "run")
    assert result.env_steps == 1024

    buffer = engine.execution.buffer
    storage = buffer.storage
    assert len(storage) == 1024
    stored = storage.tensors["obs"]
    assert stored.dtype == torch.uint8 and stored.shape == (2048, 4, 36, 36) and stored.nbytes == 2048 * FRAME
    # next_obs: references to later transitions, except each chunk's last steps (4 per chunk of 16 x 4)
    assert "next_obs" not in storage.tensors and buffer.pool.data.dtype == torch.uint8
    assert buffer.pool.live == 1024 // 16 and buffer.pool.data.nbytes <= 2 * 64 * FRAME
    filled = storage.tensors["obs"][:1024]
    assert int(filled.max()) == 255 and int(filled[:, 0].float().mean()) > 0  # real frames, not zeros
    rows = [r for r in _rows(tmp_path / "run") if "loss/td" in r]
    updates = [r["stats/num_updates"] for r in rows]
    assert updates[-1] >= 400  # (1024 - 64) * 0.5 updates
    losses = [r["loss/td"] for r in rows]
    assert max(losses) - min(losses) > 0.01 and len(set(losses)) == len(losses)  # the loss moves
    assert result.best_eval_return >= 12  # random: 8


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_a_cnn_checkpoint_resumes_bit_for_bit(tmp_path, build_run, algo):
    """Interrupt a CNN run after iteration 5 (Ctrl-C), resume it: the same parameters as never stopping (and for
    dqn the same replay: obs, shared next_obs references and their pool)."""
    from rlightning_core import hookimpl
    from rlightning_core.plugins import get_plugins, load_plugins

    path = PPO if algo == "ppo" else DQN
    overrides = ("engine.total_steps=512", "engine.eval_every=0", "checkpoint.every=0", "policy.params.cnn_features=64",
                 "logging.log_every=1")
    full = build_run(_config(path, *overrides))
    full.run(tmp_path / "full")

    class CtrlC:
        """Presses Ctrl-C right after iteration 5 is logged."""

        @hookimpl
        def on_metrics(self, step, metrics):
            if metrics.get("iteration") == 5:
                raise KeyboardInterrupt

    first = build_run(_config(path, *overrides))
    first.plugins = load_plugins(extra=[("ctrl-c", CtrlC())])
    stopped = first.run(tmp_path / "split")
    first.plugins = get_plugins()
    assert stopped.stop_reason == "interrupted" and stopped.iterations == 5

    resumed = build_run(_config(path, *overrides))
    result = resumed.run(tmp_path / "split", resume_from=tmp_path / "split")
    assert result.env_steps == 512 and result.iterations == full.iteration_count
    learner_f, learner_r = full.policy_group.learner, resumed.policy_group.learner
    for name, module in learner_f.modules().items():
        pf, pr = _state(module), _state(learner_r.modules()[name])
        assert pf.keys() == pr.keys() and all(torch.equal(pf[k], pr[k]) for k in pf), name
    assert any("convs" in k for m in learner_f.modules().values() for k in m.state_dict())
    sf, sr = learner_f.optimizer.state_dict()["state"], learner_r.optimizer.state_dict()["state"]
    assert all(torch.equal(sf[i]["exp_avg"], sr[i]["exp_avg"]) for i in sf)
    if algo == "dqn":
        bf, br = full.execution.buffer, resumed.execution.buffer
        assert learner_f.num_updates == learner_r.num_updates > 0
        assert torch.equal(bf.storage.tensors["obs"], br.storage.tensors["obs"])
        assert (bf.next_ref == br.next_ref).all() and bf.pool.live == br.pool.live


def test_image_observations_refuse_normalize_obs_by_name(tmp_path, build_run):
    from rlightning_core.errors import UserError

    config = _config(PPO, "engine.total_steps=64", "preprocessors=[{type: normalize_obs}]")
    with pytest.raises(UserError, match="'normalize_obs': the observations are uint8 images of shape"):
        build_run(config).run(tmp_path / "run")


def test_forcing_the_mlp_on_images_keeps_storage_uint8(tmp_path, build_run):
    config = _config(PPO, "engine.total_steps=128", "engine.eval_every=0", "checkpoint.every=0",
                     "policy.params.encoder=mlp", "policy.params.hidden_sizes=[32]")
    engine = build_run(config)
    assert not hasattr(engine.policy_group.learner.net, "encoder")
    engine.run(tmp_path / "run")
    assert engine.execution.buffer["obs"].dtype == torch.uint8


@pytest.mark.ray
@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_on_ray_two_env_runners_send_the_learner_uint8_chunks(ray_cluster, tmp_path, build_run, algo):
    config = _config(PPO if algo == "ppo" else DQN, "cluster.mode=ray", "env.num_workers=2", "env.num_envs=2",
                     "engine.total_steps=256", "engine.eval_every=0", "checkpoint.every=0",
                     "policy.params.cnn_features=64", "buffer.params.capacity=512" if algo == "dqn" else "seed=0")
    engine = build_run(config)
    ex = engine.execution
    ray = ex.ray

    def record_incoming(actor):  # nested: travels to the learner actor by value
        seen = actor.seen_obs = []

        def record(chunk):
            for key in ("obs", "next_obs"):
                if key in chunk.data:
                    arr = chunk.data[key]
                    seen.append((key, str(arr.dtype), type(arr).__name__, tuple(arr.shape), int(arr.nbytes)))
            return chunk

        actor.buffer.preprocess_fn = record
        return True

    def stored_obs(actor):
        buf = actor.buffer
        tensors = buf.tensors if hasattr(buf, "tensors") else buf.storage.tensors
        return str(tensors["obs"].dtype), int(tensors["obs"].nbytes)

    assert ray.get(ex.learner.__ray_call__.remote(record_incoming))
    steps = config.engine.params.rollout_steps
    for _ in range(2):
        ex.collect(steps)
        ex.learn(0.0)
        ex.sync()
    seen = ray.get(ex.learner.__ray_call__.remote(lambda actor: actor.seen_obs))
    stored_dtype, stored_nbytes = ray.get(ex.learner.__ray_call__.remote(stored_obs))
    ex.close()
    keys = {"obs", "next_obs"} if algo == "dqn" else {"obs"}
    assert {k for k, *_ in seen} == keys
    assert len(seen) == 2 * 2 * len(keys)  # 2 rounds x 2 runners
    for _key, dtype, kind, shape, nbytes in seen:
        assert (dtype, kind) == ("uint8", "ndarray")
        assert shape == (steps, 2, 4, 36, 36) and nbytes == steps * 2 * FRAME
    capacity = 512 if algo == "dqn" else steps * 4  # replay rows, or T x N rollout slots
    assert stored_dtype == "torch.uint8" and stored_nbytes == capacity * FRAME  # and the learner stores uint8


def test_a_cnn_for_flat_observations_is_refused_by_key_with_exit_2(rlightning_cli, tmp_path):
    result = rlightning_cli(["train", str(ROOT / "examples" / "cartpole_ppo.yaml"), "policy.params.encoder=cnn",
                             "engine.total_steps=64", "--run-dir", str(tmp_path / "run")])
    assert result.returncode == 2, result
    assert "policy.params.encoder: 'cnn' needs channels-first image observations" in result.output
    assert "Traceback" not in result.output
