"""The message of a refused resume: the training-config keys that differ, with both values."""

from __future__ import annotations

from rlightning_core.checkpoint.config_diff import MAX_LISTED, config_changes, config_mismatch
from rlightning_core.checkpoint.manager import check_manifest


def manifest(config_hash: str, **training: object) -> dict:
    return {"config_hash": config_hash, "training_config": dict(training)}


def test_the_keys_that_differ_are_named_with_both_values():
    saved = manifest("a" * 16, **{"policy.params.lr": 0.003, "policy.params.hidden_sizes[1]": 64, "seed": 1})
    now = manifest("b" * 16, **{"policy.params.lr": 0.1, "seed": 1, "env[0].params.id": "Acrobot-v1"})
    (line,) = check_manifest(saved, expected=now)
    assert line.splitlines() == [
        "the config differs from the one the checkpoint was written with (config hash aaaaaaaaaaaa in the "
        "checkpoint, bbbbbbbbbbbb now):",
        '    env[0].params.id: not set in the checkpoint, "Acrobot-v1" now',
        "    policy.params.hidden_sizes[1]: 64 in the checkpoint, not set now",
        "    policy.params.lr: 0.003 in the checkpoint, 0.1 now",
    ]


def test_a_value_of_another_type_differs():
    assert config_changes({"engine.params.rollout_steps": 32}, {"engine.params.rollout_steps": 32.0}) == [
        "engine.params.rollout_steps: 32 in the checkpoint, 32.0 now"]
    assert config_changes({"a": [1, 2]}, {"a": [1, 2]}) == []


def test_many_changes_are_counted_past_the_first_ones():
    saved = manifest("a" * 16, **{f"k{i:02d}": i for i in range(MAX_LISTED + 3)})
    now = manifest("b" * 16, **{f"k{i:02d}": -i - 1 for i in range(MAX_LISTED + 3)})
    text = config_mismatch(saved, now)
    assert text.count(" in the checkpoint, ") == MAX_LISTED + 1  # the hashes' line and the listed keys
    assert text.endswith("... and 3 more")


def test_an_older_checkpoint_without_its_training_config_names_the_hashes():
    assert config_mismatch({"config_hash": "a" * 16}, manifest("b" * 16, seed=1)) == (
        "the config differs from the one the checkpoint was written with (config hash aaaaaaaaaaaa in the "
        "checkpoint, bbbbbbbbbbbb now)")
