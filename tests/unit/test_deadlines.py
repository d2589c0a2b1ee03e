"""The Ray backend's deadline rule for env work and how its messages name runners (distributed.deadlines)."""

from __future__ import annotations

import attrs
import pytest

from rlightning_core.distributed.deadlines import RunnerTimeout, env_work_deadline, name_runner, name_runners


@pytest.mark.parametrize(("step", "call", "steps", "seconds", "source"), [
    (2.0, 600.0, 8, 18.0, "env.step_timeout_s=2 x 9 steps"),  # a collect of 8 steps, plus the call itself
    (2.0, 600.0, 1, 4.0, "env.step_timeout_s=2 x 2 steps"),  # a reset
    (2.0, 600.0, 0, 2.0, "env.step_timeout_s=2 x 1 steps"),  # a state capture
    (2.0, 10.0, 8, 10.0, "cluster.call_timeout_s=10"),  # the ceiling
    (None, 600.0, 8, 600.0, "cluster.call_timeout_s=600"),  # no step timeout
])
def test_env_work_ends_within_one_step_timeout_per_step_plus_one_capped_by_the_call_timeout(step, call, steps,
                                                                                            seconds, source):
    deadline = env_work_deadline(step, call, steps)
    assert (deadline.seconds, deadline.source) == (seconds, source)


def test_a_runner_timeout_says_what_missed_which_deadline():
    exc = RunnerTimeout("its collect of 8 steps", env_work_deadline(2.0, 600.0, 8))
    assert str(exc) == "its collect of 8 steps did not finish within 18s (env.step_timeout_s=2 x 9 steps)"


@attrs.define
class _Cfg:
    type: str = "faulty"


@attrs.define
class _Slot:
    config_index: int
    label: str
    worker_index: int
    cfg: _Cfg = attrs.Factory(_Cfg)


def test_runners_are_named_by_env_config_label_and_worker():
    slots = [_Slot(0, "sim", 1), _Slot(1, "other", 0), _Slot(1, "other", 2)]
    assert name_runner(slots[0]) == "env[0] (sim) worker 1"
    assert name_runners(slots[:1], with_type=True) == "env[0] (sim, type 'faulty') worker 1"
    assert name_runners(slots) == "env[0] (sim) worker 1, env[1] (other) worker 0 and env[1] (other) worker 2"
