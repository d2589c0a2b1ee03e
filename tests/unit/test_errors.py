"""The error classes' promises: what their messages name, and that they survive crossing a process."""

from __future__ import annotations

import pickle

import pytest

from rlightning_core.env.runner import RestartBudget
from rlightning_core.errors import RestartsUsedUpError, RlightningError, UserError


def test_a_used_up_restart_budget_raises_the_one_error_naming_the_worker_and_the_key() -> None:
    budget = RestartBudget(1)
    budget.take("env[0] (cartpole, type 'gymnasium') worker 1", RuntimeError("first"))
    with pytest.raises(RestartsUsedUpError) as info:
        budget.take("env[0] (cartpole, type 'gymnasium') worker 1", RuntimeError("simulator exploded"))
    err = info.value
    assert str(err) == ("env[0] (cartpole, type 'gymnasium') worker 1 failed and cluster.max_restarts=1 worker "
                        "restarts are used up, so the run stops (the last checkpoint is intact). Last failure: "
                        "simulator exploded")
    assert (err.worker, err.max_restarts) == ("env[0] (cartpole, type 'gymnasium') worker 1", 1)
    assert isinstance(err.__cause__, RuntimeError)
    # the run failed (exit code 1), the input was not wrong (that would be exit code 2)
    assert isinstance(err, RlightningError) and not isinstance(err, UserError)


def test_restarts_used_up_survives_pickling_as_it_crosses_from_a_ray_actor() -> None:
    err = RestartsUsedUpError("inference server 1", 3)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is RestartsUsedUpError and str(back) == str(err)
    assert str(back).startswith("inference server 1 failed and cluster.max_restarts=3 worker restarts are used up")
    assert "Last failure" not in str(back)  # no cause given: the message does not invent one
