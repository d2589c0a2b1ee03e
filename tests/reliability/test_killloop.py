"""The kill-loop at a reduced count (the ``killloop`` nox session runs 20+ trials): SIGKILL a real training
process at random moments and inside a checkpoint write, resume, and get the uninterrupted run's parameters."""

from __future__ import annotations

import pytest
from killloop import kill_loop

pytestmark = pytest.mark.slow


def test_sigkill_then_resume_loses_nothing(tmp_path, training_plugins):
    trials = kill_loop(3, tmp_path, seed=1, log=False)
    failed = [f"trial {t.index} ({t.mode}): {t.problem}" for t in trials if not t.ok]
    assert not failed, "\n".join(failed)
    assert all(t.resumed_from_iteration for t in trials)
