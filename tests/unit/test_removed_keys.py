"""Removed config keys: refused by name wherever they are set; dropped from configs a run saved itself."""

from __future__ import annotations

import pytest

from rlightning_core.config.removed import REMOVED_KEYS, without_removed_keys
from rlightning_core.config.schema import ClusterConfig, PolicyConfig
from rlightning_core.config.structuring import collect_errors, converter


def _problems(data, cls) -> list[str]:
    from cattrs.errors import BaseValidationError

    with pytest.raises(BaseValidationError) as info:
        converter.structure(data, cls)
    out: list[str] = []
    collect_errors(info.value, "section", out)
    return out


@pytest.mark.parametrize("removed", REMOVED_KEYS, ids=lambda r: r.path)
def test_every_removed_key_is_gone_from_its_class_and_refused_with_its_reason(removed):
    cls = {"ClusterConfig": ClusterConfig, "PolicyConfig": PolicyConfig}[removed.owner]
    assert removed.key not in {f.name for f in cls.__attrs_attrs__}
    data = {"type": "ppo"} if cls is PolicyConfig else {}
    assert _problems({**data, removed.key: True}, cls) == [f"section.{removed.key}: {removed.message}"]
    assert removed.message.endswith("; delete it from the config")


def test_a_removed_key_and_an_unknown_one_are_both_reported():
    problems = _problems({"early_rollout": True, "num_cpuz": 2}, ClusterConfig)
    assert problems[0].startswith("section.early_rollout: this key was removed together with the early-rollout")
    assert problems[1].startswith("section.num_cpuz: unknown key (did you mean 'num_cpus'?)")


def test_a_saved_config_loses_only_its_removed_keys():
    saved = {"cluster": {"mode": "ray", "early_rollout": True, "local_channel": True},
             "policy": {"type": "ppo", "rollout_impl": "auto"}, "seed": 3}
    assert without_removed_keys(saved) == {"cluster": {"mode": "ray"}, "policy": {"type": "ppo"}, "seed": 3}
    assert saved["cluster"]["early_rollout"] is True  # the input is left alone


def test_a_checkpoint_written_before_a_key_was_removed_still_fits_its_config():
    from pathlib import Path

    from rlightning_core import load_config
    from rlightning_core.checkpoint.manifest import check_manifest
    from rlightning_core.run import fields_hash, training_fields

    cartpole = Path(__file__).resolve().parents[2] / "examples" / "cartpole_ppo.yaml"
    now = training_fields(load_config(cartpole, resolve=False))
    expected = {"config_hash": fields_hash(now), "training_config": now}
    old = {**now, "policy.rollout_impl": "auto"}  # what a run hashed while the key existed
    assert check_manifest({"config_hash": fields_hash(old), "training_config": old}, expected=expected) == []
    changed = {**old, "policy.params.lr": 0.5}  # a real difference is still found, and named
    (problem,) = check_manifest({"config_hash": fields_hash(changed), "training_config": changed},
                                expected=expected)
    assert "policy.params.lr: 0.5 in the checkpoint" in problem


def test_a_saved_config_gets_renamed_keys_under_their_new_names():
    from rlightning_core.config.removed import upgrade_saved_config
    from rlightning_core.config.structuring import RENAMED_KEYS

    saved = {"cluster": {"mode": "ray", "train_workers": 2, "eval_workers": 1, "early_rollout": True},
             "seed": 3}
    assert upgrade_saved_config(saved) == {"cluster": {"mode": "ray", "num_learners": 2, "num_inference_servers": 1},
                                           "seed": 3}
    assert saved["cluster"]["train_workers"] == 2  # the input is left alone
    for old, new in RENAMED_KEYS.items():  # every rename is upgraded, and lands in ClusterConfig
        section, key = old.split(".")
        assert new.split(".")[1] in upgrade_saved_config({section: {key: 1}})[section]
