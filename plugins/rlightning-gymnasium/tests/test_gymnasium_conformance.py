"""The ``gymnasium`` env passes rlightning's conformance kit (``conformance`` comes from rlightning's pytest plugin)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("params", [
    {"id": "CartPole-v1"},
    {"id": "Pendulum-v1", "max_episode_steps": 20},
], ids=["discrete", "continuous"])
def test_gymnasium_env_conforms(conformance, params):
    report = conformance.check_env("gymnasium", params)
    assert not report.notes, report


def test_stateful_wrapper_conforms_with_a_note(conformance):
    report = conformance.check_env("gymnasium", {"id": "CartPole-v1", "wrappers": [{"type": "NormalizeObservation"}]})
    assert any("running statistics" in note for note in report.notes), report


def test_metrics_env_conforms(conformance, metrics_env_id):
    conformance.check_env("gymnasium", {"id": metrics_env_id})
