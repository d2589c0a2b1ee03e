"""Dict observations travel flat: FlatDict's layout and round trip, the worker wrapper, refusals."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from gymnasium import spaces

import rlightning_core.testing.dict_envs  # noqa: F401  (registers the ids)
from rlightning_core.errors import UserError
from rlightning_core.spaces import ACTION_MASK, FlatDict, flat_dict_space, refuse_flat_dict


def _space() -> spaces.Dict:
    return spaces.Dict({"pos": spaces.Box(-1, 1, (3,), np.float32), "img": spaces.Box(0, 255, (1, 4, 4), np.uint8),
                        ACTION_MASK: spaces.MultiBinary(5)})


def test_round_trip_batched_and_single():
    d = _space()
    d.seed(0)
    flat = flat_dict_space(d)
    assert flat.keys == ("action_mask", "img", "pos") and flat.shape == (5 + 16 + 3,) and flat.dtype == np.float32
    batch = [d.sample() for _ in range(6)]
    stacked = {k: np.stack([b[k] for b in batch]) for k in d.spaces}
    out = flat.flatten(stacked)
    assert out.shape == (6, 24)
    back = flat.unflatten(out)
    for k in d.spaces:
        assert back[k].dtype == stacked[k].dtype and np.array_equal(back[k], stacked[k])
    one = flat.flatten(batch[0])
    assert one.shape == (24,) and np.array_equal(one, out[0])
    assert flat.contains(one)
    assert np.array_equal(out[:, flat.columns(ACTION_MASK)], stacked[ACTION_MASK])


def test_all_uint8_keys_stay_uint8_and_it_pickles():
    d = spaces.Dict({"a": spaces.Box(0, 255, (2, 2), np.uint8), "b": spaces.Box(0, 255, (3,), np.uint8)})
    flat = FlatDict(d)
    assert flat.dtype == np.uint8
    again = pickle.loads(pickle.dumps(flat))
    assert isinstance(again, FlatDict) and again == flat and again.layout == flat.layout
    assert flat != spaces.Box(flat.low, flat.high, flat.shape, flat.dtype)  # the layout is part of the space


@pytest.mark.parametrize("sub", [spaces.Dict({"x": spaces.Box(0, 1, (1,))}), spaces.Tuple([spaces.Discrete(2)]),
                                 spaces.Discrete(3)])
def test_nested_and_unsupported_keys_are_refused_by_name(sub):
    with pytest.raises(TypeError, match="observation key 'inner'"):
        FlatDict(spaces.Dict({"inner": sub, "ok": spaces.Box(0, 1, (2,))}))


def test_env_group_reports_flat_dict_and_flat_observations():
    from rlightning_core.config.schema import EnvConfig
    from rlightning_core.env.group import build_env_group

    cfg = EnvConfig(type="gymnasium", params={"id": "rlightning_core.testing.dict_envs:DictCue-v0"}, num_envs=3)
    group = build_env_group(cfg, seed=0)
    try:
        space = group.observation_space
        assert isinstance(space, FlatDict) and space.shape == (38,)
        obs = group.reset(seed=0)[0]
        assert obs.shape == (3, 38) and obs.dtype == np.float32
        finals = 0
        for _ in range(8):
            step = group.step([np.zeros(3, np.int64)])[0]
            assert step.obs.shape == (3, 38)
            if step.final_obs is not None:
                finals += 1
                assert step.final_obs.shape == (3, 38)
        assert finals == 1  # episodes of 8 steps
        assert set(space.unflatten(obs)) == {"image", "vec"}
    finally:
        group.close()


def test_mask_from_info_wrapper_moves_it_into_the_observation():
    import gymnasium

    env = gymnasium.make("rlightning_core.testing.dict_envs:InfoMaskedChoice-v0")
    obs, _ = env.reset(seed=1)
    assert set(obs) == {"obs", ACTION_MASK} and obs[ACTION_MASK].dtype == np.int8
    assert obs[ACTION_MASK][int(obs["obs"].argmax())] == 1  # the cued action is legal
    obs, *_ = env.step(int(obs["obs"].argmax()))
    assert env.observation_space.contains(obs)


def test_remote_protocol_carries_dict_spaces_as_their_flat_dict():
    from rlightning_core.env.remote.protocol import decode, encode, space_from_wire, space_to_wire

    for space in (FlatDict(_space()), _space()):
        wire = decode(encode({"t": "x", "s": space_to_wire(space)}))["s"]
        assert wire["kind"] == "dict"
        assert space_from_wire(wire, "s") == FlatDict(_space())


def test_plugins_that_cannot_use_a_mask_refuse_it():
    with pytest.raises(UserError, match=r"policy 'sac' does not support the observation space Dict.*an action_mask"):
        refuse_flat_dict(FlatDict(_space()), "sac", allow_plain=True)
    refuse_flat_dict(FlatDict(spaces.Dict({"a": spaces.Box(0, 1, (2,))})), "sac", allow_plain=True)
    with pytest.raises(UserError, match="recurrent_ppo"):
        refuse_flat_dict(FlatDict(spaces.Dict({"a": spaces.Box(0, 1, (2,))})), "recurrent_ppo")


def test_obs_normalization_refuses_a_mask():
    from rlightning_core.preprocess.builtins import NormalizeObs

    with pytest.raises(UserError, match=r"'normalize_obs'.*action_mask"):
        NormalizeObs(observation_space=FlatDict(_space()))
