"""The pettingzoo worker: slots per agent, early-finishing agents, per-agent stats, seeding and user errors."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import attrs
import numpy as np
import pytest
from rlightning_pettingzoo.params import PettingZooParams
from rlightning_pettingzoo.worker import PettingZooWorker

from rlightning_core.errors import UserError

PARAMS = PettingZooParams(env="mpe2.simple_spread_v3")


def _relay_worker(cls, num_envs=6, seed=0, **env_kwargs):
    return PettingZooWorker(PARAMS, num_envs=num_envs, seed=seed,
                            env_fn=lambda render_mode: cls(render_mode=render_mode, **env_kwargs))


def test_each_agent_of_each_copy_is_one_slot(relay_env):
    worker = _relay_worker(relay_env, num_envs=6, seed=10)
    obs = worker.reset(seed=10)
    assert worker.num_copies == 2 and worker.num_agents == 3
    assert obs.shape == (6, 3)
    # slot i = agent i % 3 of copy i // 3; copy c is seeded with seed + 3 c
    np.testing.assert_array_equal(obs[:, 1], [0, 1, 2, 0, 1, 2])
    np.testing.assert_array_equal(obs[:, 2], [10, 10, 10, 13, 13, 13])


def test_finished_agents_idle_until_their_copy_resets(relay_env):
    worker = _relay_worker(relay_env, num_envs=3)
    worker.reset(seed=0)
    steps = [worker.step(np.zeros(3, dtype=np.int64)) for _ in range(6)]
    # step 2: agent_0 terminates with its real last observation and its own episode stats
    b = steps[1]
    assert b.terminated.tolist() == [True, False, False] and not b.truncated.any()
    np.testing.assert_array_equal(b.final_obs[0], [2, 0, 0])
    assert [(e.env_index, e.episode_return, e.length) for e in b.episodes] == [(0, 2.0, 2)]
    assert b.metrics == {"agent/agent_0/episode_return": [2.0]}
    # steps 3-4: agent_0's slot idles (zero observation, no reward, not done); the env never sees its action
    for b in steps[2:4]:
        np.testing.assert_array_equal(b.obs[0], np.zeros(3))
        assert b.reward[0] == 0.0 and not b.terminated[0] and not b.truncated[0]
    assert steps[3].terminated.tolist() == [False, True, False]
    # step 6: the last agent is truncated, the copy resets, the team return is reported
    b = steps[5]
    assert b.truncated.tolist() == [False, False, True] and not b.terminated.any()
    assert [(e.env_index, e.episode_return, e.length) for e in b.episodes] == [(2, 6.0, 6)]
    assert b.metrics["team_episode_return"] == [12.0]
    np.testing.assert_array_equal(b.obs[:, 0], [0, 0, 0])  # every slot holds its reset observation
    np.testing.assert_array_equal(b.obs[:, 1], [0, 1, 2])
    b = worker.step(np.zeros(3, dtype=np.int64))
    assert b.reward.tolist() == [1.0, 1.0, 1.0]


def test_idle_observation_lies_inside_the_space(relay_env):
    worker = _relay_worker(relay_env, num_envs=3, obs_low=0.5)
    worker.reset(seed=0)
    for _ in range(3):
        b = worker.step(np.zeros(3, dtype=np.int64))
    np.testing.assert_array_equal(b.obs[0], [0.5, 0.5, 0.5])
    assert worker.observation_space.contains(b.obs[0])


def test_num_envs_must_be_a_multiple_of_the_agents(relay_env):
    with pytest.raises(UserError, match=r"env.num_envs: .*3 agents \(agent_0, agent_1, agent_2\).*multiple of 3"):
        _relay_worker(relay_env, num_envs=4)


def test_agents_with_different_spaces_are_refused_by_name(relay_env):
    with pytest.raises(UserError, match=r"\['agent_0', 'agent_1'\]: observation Box.*\['agent_2'\]: observation Box"):
        _relay_worker(relay_env, num_envs=3, wide_agent=True)


def test_render_gives_one_frame_per_slot(relay_env):
    worker = PettingZooWorker(PARAMS, num_envs=6, seed=0, render_mode="rgb_array",
                              env_fn=partial(lambda cls, render_mode: cls(render_mode=render_mode), relay_env))
    worker.reset(seed=0)
    worker.step(np.zeros(6, dtype=np.int64))
    frames = worker.render()
    assert len(frames) == 6 and frames[0].shape == (4, 4, 3) and int(frames[0][0, 0, 0]) == 1


def test_simple_spread_copies_differ_and_replay_with_a_seed():
    a = PettingZooWorker(PettingZooParams(env="mpe2.simple_spread_v3", kwargs={"N": 2}), num_envs=4, seed=3)
    b = PettingZooWorker(PettingZooParams(env="mpe2.simple_spread_v3", kwargs={"N": 2}), num_envs=4, seed=3)
    try:
        oa, ob = a.reset(seed=3), b.reset(seed=3)
        assert a.num_agents == 2 and a.observation_space.shape == oa.shape[1:]
        np.testing.assert_array_equal(oa, ob)
        assert not np.array_equal(oa[0], oa[2])  # copy 1 is seeded differently from copy 0
        acts = np.array([1, 2, 3, 4])
        np.testing.assert_array_equal(a.step(acts).obs, b.step(acts).obs)
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("env, match", [
    ("os.path", "must name a PettingZoo env module"),
    ("mpe2.no_such_task_v1", "cannot find the module 'mpe2.no_such_task_v1'"),
    ("pettingzoo.nofamily.thing_v1", "cannot find the module"),
])
def test_bad_env_names_are_refused(env, match):
    with pytest.raises(ValueError, match=match):
        PettingZooParams(env=env)


def test_config_errors_name_the_key(tmp_path):
    from rlightning_core import load_config
    from rlightning_core.errors import ConfigError

    cfg = tmp_path / "c.yaml"
    cfg.write_text("env:\n  type: pettingzoo\n  params:\n    env: os.path\n  num_envs: 3\npolicy:\n  type: ppo\n")
    with pytest.raises(ConfigError, match=r"env(\[0\])?\.params\.env: must name a PettingZoo env module"):
        load_config(cfg)
    cfg.write_text("env:\n  type: pettingzoo\n  params:\n    env: mpe2.simple_spread_v3\n"
                   "    kwargs: {render_mode: human}\n  num_envs: 3\npolicy:\n  type: ppo\n")
    with pytest.raises(ConfigError, match=r"params\.kwargs: may not set 'render_mode'"):
        load_config(cfg)


def test_bad_kwargs_name_the_key():
    with pytest.raises(ValueError, match=r"bogus: not an argument of mpe2.simple_spread_v3; it takes N, "):
        PettingZooParams(env="mpe2.simple_spread_v3", kwargs={"bogus": 1})  # when the config is validated
    with attrs.validators.disabled():  # params built without validation still fail cleanly in the worker
        params = PettingZooParams(env="mpe2.simple_spread_v3", kwargs={"bogus": 1})
    with pytest.raises(UserError, match=r"env.params.kwargs: mpe2.simple_spread_v3.parallel_env\(\) refused"):
        PettingZooWorker(params, num_envs=3, seed=0)


def test_simple_tag_is_refused_naming_its_agent_groups():
    with pytest.raises(UserError, match=r"\['adversary_0', 'adversary_1', 'adversary_2'\]: .*\['agent_0'\]"):
        PettingZooWorker(PettingZooParams(env="mpe2.simple_tag_v3"), num_envs=4, seed=0)


def _cli(capsys, *args: str) -> tuple[int, str]:
    from rlightning_cli.main import main

    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out + out.err


def test_eval_and_videos_of_a_trained_run(tmp_path, capsys):
    """`rlightning eval --video`: one slot per episode, one MP4 per slot; a count that is no multiple is refused."""
    from rlightning_core import load_config
    from rlightning_core.builders import build_data_buffer, build_engine, build_env_group, build_policy_group

    pytest.importorskip("moviepy")
    example = Path(__file__).resolve().parents[3] / "examples" / "simple_spread_ppo.yaml"
    config = load_config(example, ["logging.progress=false", "engine.total_steps=1200", "engine.eval_every=0"])
    engine = build_engine(config, build_env_group(config.env, seed=config.seed),
                          build_policy_group(config.policy.type, config.policy, config.cluster),
                          build_data_buffer(config.buffer.type, config.buffer))
    engine.run(tmp_path / "run")
    code, out = _cli(capsys, "eval", str(tmp_path / "run"), "-n", "3", "--video", str(tmp_path / "videos"))
    assert code == 0, out
    assert len(list((tmp_path / "videos").glob("*.mp4"))) == 3
    code, out = _cli(capsys, "eval", str(tmp_path / "run"), "-n", "4")
    assert code == 2 and "must be multiples of 3" in out, out
