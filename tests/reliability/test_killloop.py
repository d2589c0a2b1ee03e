"""The kill-loop at a reduced count (the ``killloop`` nox session runs 20+ trials): SIGKILL a real training
process at points chosen from its progress and inside a checkpoint write, resume, and get the uninterrupted
run's parameters."""

from __future__ import annotations

import pytest
from killloop import HOLD_ITERATION, kill_loop

pytestmark = pytest.mark.slow


def test_sigkill_then_resume_loses_nothing(tmp_path, training_plugins):
    trials = kill_loop(3, tmp_path, seed=1, log=False)
    failed = [f"trial {t.index} ({t.mode}): {t.problem}" for t in trials if not t.ok]
    assert not failed, "\n".join(failed)
    assert all(t.resumed_from_iteration for t in trials)
    # each kill came once the trial's target checkpoint was there (or during the hold), never after the hold
    for t in trials:
        assert 1 <= t.killed_at_iteration <= HOLD_ITERATION, t
        assert t.held or t.killed_at_iteration >= t.target_iteration, t
