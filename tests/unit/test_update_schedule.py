"""UpdateSchedule across a resume: the update-to-data count continues whether or not the buffer came back."""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from rlightning_core.buffer.base import BufferSpec, Chunk
from rlightning_core.buffer.params import ReplayBufferParams
from rlightning_core.buffer.replay import ReplayBuffer
from rlightning_core.policy.schedule import UpdateSchedule

OBS = spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = spaces.Box(-2.0, 2.0, (2,), np.float32)


def make_buffer(capacity: int = 1000) -> ReplayBuffer:
    spec = BufferSpec(observation_space=OBS, action_space=ACT, num_envs=1, num_steps=8)
    return ReplayBuffer(ReplayBufferParams(capacity=capacity), spec=spec)


def chunk(steps: int, seed: int = 0) -> Chunk:
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1, 1, (steps, 1, 3)).astype(np.float32)
    data = {"obs": obs, "next_obs": np.roll(obs, -1, axis=0),
            "actions": rng.uniform(-1, 1, (steps, 1, 2)).astype(np.float32),
            "rewards": rng.normal(size=(steps, 1)).astype(np.float32),
            "terminated": np.zeros((steps, 1), bool), "truncated": np.zeros((steps, 1), bool)}
    return Chunk(data=data, last_obs=obs[-1])


def resumed(schedule: UpdateSchedule) -> UpdateSchedule:
    again = UpdateSchedule(schedule.utd_ratio, schedule.learning_starts)
    again.load_state_dict(schedule.state_dict())
    return again


def test_a_restored_buffer_continues_the_count_as_if_uninterrupted():
    for capacity in (1000, 50):  # filling, and wrapped around
        buffer, schedule = make_buffer(capacity), UpdateSchedule(utd_ratio=0.5, learning_starts=10)
        made = 0
        for i, steps in enumerate((30, 40, 20)):
            buffer.add(chunk(steps, seed=i))
            made += schedule.due(buffer)
        restored = make_buffer(capacity)
        restored.load_state_dict(buffer.state_dict())
        schedule = resumed(schedule)
        restored.add(chunk(12, seed=9))
        made += schedule.due(restored)
        assert schedule.written == 102 and made == schedule.updates == 46  # floor(0.5 * (102 - 10))


def test_a_buffer_that_came_back_empty_is_counted_on_from_what_was_written():
    buffer, schedule = make_buffer(), UpdateSchedule(utd_ratio=0.5, learning_starts=10)
    buffer.add(chunk(90))
    assert schedule.due(buffer) == 40
    schedule = resumed(schedule)
    fresh = make_buffer()  # the transitions were not checkpointed
    fresh.add(chunk(12, seed=1))
    assert schedule.due(fresh) == 6  # 12 new transitions at 0.5 updates each, not 0 until 90 are back
    fresh.add(chunk(4, seed=2))
    assert schedule.due(fresh) == 2 and schedule.written == 106


class Counted:
    """A buffer that counts what was written itself (``total_added``), as the sharded view does."""

    def __init__(self, total: int, held: int) -> None:
        self.total_added, self.held = total, held

    def __len__(self) -> int:
        return self.held


def test_a_buffer_with_its_own_count_restarting_is_counted_on():
    schedule = UpdateSchedule(utd_ratio=1.0, learning_starts=0)
    assert schedule.due(Counted(100, 100)) == 100
    schedule = resumed(schedule)
    assert schedule.due(Counted(8, 8)) == 8 and schedule.written == 108
    assert schedule.due(Counted(10, 10)) == 2
    schedule = resumed(schedule)
    assert schedule.due(Counted(115, 115)) == 5  # this one kept its count: no double counting
