from __future__ import annotations

import json
import os
import pickle
import random
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rlightning_core._version import __version__
from rlightning_core.checkpoint.manager import (
    CheckpointError,
    CheckpointManager,
    check_manifest,
    load_checkpoint,
    load_newest,
    resolve_checkpoint,
    to_numpy_tree,
    to_tensor_tree,
)
from rlightning_core.checkpoint.rng import capture_rng_state, restore_rng_state
from rlightning_core.errors import StorageError, UserError


def manifest(**extra: Any) -> dict[str, Any]:
    """The shape rlightning_core.run.build_manifest writes."""
    return {
        "rlightning": __version__,
        "plugins": {"rlightning": __version__, "rlightning-ppo": "0.1.0", "rlightning-tensorboard": "0.1.0"},
        "components": {
            "policy": {"kind": "policy", "name": "ppo", "distribution": "rlightning-ppo", "version": "0.1.0"},
            "buffer": {"kind": "buffer", "name": "rollout", "distribution": "rlightning",
                       "version": __version__},
        },
        "config_hash": "abc123",
        "config_yaml": "seed: 1\n",
        **extra,
    }


def state(value: float = 1.0) -> dict[str, Any]:
    return {"policy": {"weight": torch.full((4, 4), value), "bias": torch.zeros(4)},
            "counters": {"step": 10, "iteration": 1}, "note": "hello", "pair": (1, 2.5), "none": None}


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


class Evil:
    """Pickles to a call of os.system that creates a marker file: must never run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {shlex.quote(str(self.marker))}",))


# -- save / load ---------------------------------------------------------------------------------------------


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path / "ckpt")
    path = mgr.save(state(2.0), step=100, iteration=1, manifest=manifest())
    assert path == tmp_path / "ckpt" / "ckpt-00000001.pt"
    loaded, man = CheckpointManager.load(path)
    assert torch.equal(loaded["policy"]["weight"], torch.full((4, 4), 2.0))
    assert loaded["counters"] == {"step": 10, "iteration": 1}
    assert loaded["pair"] == (1, 2.5) and loaded["note"] == "hello" and loaded["none"] is None
    assert man == manifest()
    assert names(tmp_path / "ckpt") == ["ckpt-00000001.pt", "index.json"]


def test_payload_is_weights_only_loadable(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path)
    path = mgr.save(state(), step=5, iteration=3, eval_return=1.5, manifest=manifest())
    payload = torch.load(path, map_location="cpu", weights_only=True)
    assert payload["format"] == "rlightning-checkpoint"
    assert payload["meta"] == {"step": 5, "iteration": 3, "eval_return": 1.5}
    assert set(payload) >= {"manifest", "state"}


def test_index_lists_checkpoints_latest_and_best(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path)
    mgr.save(state(), step=10, iteration=1, eval_return=5.0, manifest=manifest())
    mgr.save(state(), step=20, iteration=2, eval_return=3.0, manifest=manifest())
    mgr.save(state(), step=30, iteration=3, manifest=manifest())
    index = json.loads((tmp_path / "index.json").read_text())
    assert index["checkpoints"] == [
        {"file": "ckpt-00000001.pt", "step": 10, "iteration": 1, "eval_return": 5.0},
        {"file": "ckpt-00000002.pt", "step": 20, "iteration": 2, "eval_return": 3.0},
        {"file": "ckpt-00000003.pt", "step": 30, "iteration": 3, "eval_return": None},
    ]
    assert index["latest"] == "ckpt-00000003.pt"
    assert index["best"] == "ckpt-00000001.pt"
    assert mgr.latest() == tmp_path / "ckpt-00000003.pt"
    assert mgr.best() == tmp_path / "ckpt-00000001.pt"
    assert [c.iteration for c in mgr.checkpoints()] == [1, 2, 3]


def test_state_that_weights_only_would_refuse_fails_at_save(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path)
    with pytest.raises(TypeError, match=r"state\['obs'\]\['mean'\]: numpy.ndarray .*to_tensor_tree"):
        mgr.save({"obs": {"mean": np.zeros(3)}}, step=0, iteration=0, manifest=manifest())
    with pytest.raises(TypeError, match=r"state\['x'\]: numpy.float64"):
        mgr.save({"x": np.float64(1.0)}, step=0, iteration=0, manifest=manifest())
    with pytest.raises(TypeError, match=r"manifest\['obj'\]: .*Path"):
        mgr.save({}, step=0, iteration=0, manifest={"obj": tmp_path})
    assert not tmp_path.joinpath("ckpt-00000000.pt").exists()


@pytest.mark.parametrize("keep_last", [0, -1, 1.5, True])
def test_keep_last_validated(tmp_path: Path, keep_last: Any) -> None:
    with pytest.raises(ValueError, match="keep_last"):
        CheckpointManager(tmp_path, keep_last=keep_last)


# -- atomicity and robustness --------------------------------------------------------------------------------


def test_leftover_temp_file_is_ignored_and_cleaned(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path)
    good = mgr.save(state(), step=10, iteration=1, manifest=manifest())
    leftover = tmp_path / ".ckpt-00000002.pt.0badc0de.tmp"
    leftover.write_bytes(b"PK\x03\x04 half a checkpoint")
    index_leftover = tmp_path / ".index.json.deadbeef.tmp"
    index_leftover.write_text("{")
    assert mgr.latest() == good
    assert [c.path for c in mgr.checkpoints()] == [good]
    assert leftover.exists()  # readers never delete: it may belong to a write in progress
    mgr.save(state(), step=20, iteration=2, manifest=manifest())
    assert not leftover.exists() and not index_leftover.exists()
    assert names(tmp_path) == ["ckpt-00000001.pt", "ckpt-00000002.pt", "index.json"]


def test_failed_write_leaves_no_file_and_keeps_previous(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mgr = CheckpointManager(tmp_path)
    good = mgr.save(state(), step=10, iteration=1, manifest=manifest())

    def crash(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        f.write(b"PK\x03\x04partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(StorageError, match=r"cannot write checkpoint .*ckpt-00000002\.pt: disk full"):
        mgr.save(state(), step=20, iteration=2, manifest=manifest())
    monkeypatch.undo()
    assert names(tmp_path) == ["ckpt-00000001.pt", "index.json"]
    assert mgr.latest() == good


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
@pytest.mark.parametrize("index", ["kept", "deleted", "corrupt"])
def test_damaged_latest_falls_back_to_previous_good(tmp_path: Path, damage: str, index: str) -> None:
    mgr = CheckpointManager(tmp_path, keep_last=5)
    mgr.save(state(1.0), step=10, iteration=1, eval_return=1.0, manifest=manifest())
    good = mgr.save(state(2.0), step=20, iteration=2, eval_return=2.0, manifest=manifest())
    bad = mgr.save(state(3.0), step=30, iteration=3, eval_return=3.0, manifest=manifest())
    data = bad.read_bytes()
    damaged = {"truncate": data[: len(data) // 2], "garbage": os.urandom(len(data)), "empty": b""}
    bad.write_bytes(damaged[damage])
    if index == "deleted":
        mgr.index_path.unlink()
    elif index == "corrupt":
        mgr.index_path.write_text('{"checkpoints": [tru')

    assert mgr.latest() == good
    assert mgr.best() == good
    assert resolve_checkpoint(tmp_path) == good
    with pytest.raises(CheckpointError, match=r"not a valid rlightning checkpoint: .*ckpt-00000003\.pt"):
        load_checkpoint(bad)


def test_stale_index_and_unindexed_files(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path, keep_last=5)
    first = mgr.save(state(), step=10, iteration=1, eval_return=9.0, manifest=manifest())
    old_index = mgr.index_path.read_text()
    second = mgr.save(state(), step=20, iteration=2, eval_return=1.0, manifest=manifest())
    mgr.index_path.write_text(old_index)  # a crash between the rename and the index update
    assert mgr.latest() == second
    assert mgr.best() == first
    first.unlink()  # the index names a file that is gone
    assert mgr.best() == second


def test_index_missing_best_read_from_files(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path, keep_last=5)
    mgr.save(state(), step=10, iteration=1, eval_return=1.0, manifest=manifest())
    best = mgr.save(state(), step=20, iteration=2, eval_return=7.0, manifest=manifest())
    mgr.save(state(), step=30, iteration=3, manifest=manifest())
    mgr.index_path.unlink()
    assert mgr.best() == best
    assert CheckpointManager(tmp_path / "nowhere").latest() is None
    assert CheckpointManager(tmp_path / "nowhere").best() is None


def test_best_is_none_without_eval(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path)
    mgr.save(state(), step=10, iteration=1, manifest=manifest())
    mgr.save(state(), step=20, iteration=2, eval_return=float("nan"), manifest=manifest())
    assert mgr.best() is None
    assert json.loads(mgr.index_path.read_text())["best"] is None


# -- retention -----------------------------------------------------------------------------------------------


def test_retention_keeps_last_and_best(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path, keep_last=2, keep_best=True)
    returns = [1.0, 9.0, 3.0, None, 2.0, 4.0]
    for it, ret in enumerate(returns, start=1):
        mgr.save(state(), step=it * 10, iteration=it, eval_return=ret, manifest=manifest())
    assert names(tmp_path) == ["ckpt-00000002.pt", "ckpt-00000005.pt", "ckpt-00000006.pt", "index.json"]
    index = json.loads(mgr.index_path.read_text())
    assert [c["iteration"] for c in index["checkpoints"]] == [2, 5, 6]
    assert index["best"] == "ckpt-00000002.pt" and index["latest"] == "ckpt-00000006.pt"
    assert mgr.best() == tmp_path / "ckpt-00000002.pt"

    mgr.save(state(), step=70, iteration=7, eval_return=10.0, manifest=manifest())
    assert names(tmp_path) == ["ckpt-00000006.pt", "ckpt-00000007.pt", "index.json"]


def test_retention_without_best(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path, keep_last=1, keep_best=False)
    mgr.save(state(), step=10, iteration=1, eval_return=100.0, manifest=manifest())
    mgr.save(state(), step=20, iteration=2, eval_return=1.0, manifest=manifest())
    assert names(tmp_path) == ["ckpt-00000002.pt", "index.json"]
    assert mgr.best() == tmp_path / "ckpt-00000002.pt"


def test_retention_never_deletes_the_one_just_written(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path, keep_last=1, keep_best=False)
    mgr.save(state(), step=50, iteration=5, manifest=manifest())
    written = mgr.save(state(), step=30, iteration=3, manifest=manifest())  # an older iteration number
    assert written.exists()
    assert names(tmp_path) == ["ckpt-00000003.pt", "ckpt-00000005.pt", "index.json"]


def test_retention_includes_files_missing_from_index(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path, keep_last=2, keep_best=False)
    for it in (1, 2):
        mgr.save(state(), step=it, iteration=it, manifest=manifest())
    mgr.index_path.unlink()
    mgr.save(state(), step=3, iteration=3, manifest=manifest())
    assert names(tmp_path) == ["ckpt-00000002.pt", "ckpt-00000003.pt", "index.json"]


# -- refusing unsafe or foreign files ------------------------------------------------------------------------


def test_malicious_torch_checkpoint_is_refused_without_running(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "ckpt-00000009.pt"
    torch.save({"format": "rlightning-checkpoint", "state": {"x": Evil(marker)}}, path)
    expected = r"not a valid rlightning checkpoint: .*refusing to unpickle"
    with pytest.raises(CheckpointError, match=expected) as info:
        load_checkpoint(path)
    assert "system" in str(info.value)
    assert isinstance(info.value, UserError)
    assert not marker.exists()


def test_malicious_plain_pickle_is_refused_without_running(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "ckpt-00000009.pt"
    path.write_bytes(pickle.dumps({"state": Evil(marker)}))
    with pytest.raises(CheckpointError, match=r"not a valid rlightning checkpoint: .*not a torch zip"):
        CheckpointManager.load(path)
    assert not marker.exists()


def test_malicious_file_in_directory_is_skipped(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    mgr = CheckpointManager(tmp_path, keep_last=1)
    good = mgr.save(state(), step=10, iteration=1, eval_return=1.0, manifest=manifest())
    torch.save({"format": "rlightning-checkpoint", "x": Evil(marker)}, tmp_path / "ckpt-00000009.pt")
    assert mgr.latest() == good
    assert mgr.best() == good
    mgr.save(state(), step=20, iteration=2, manifest=manifest())
    assert not marker.exists()


def test_load_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"checkpoint .*missing.pt does not exist"):
        load_checkpoint(tmp_path / "missing.pt")
    with pytest.raises(CheckpointError, match="is a directory"):
        load_checkpoint(tmp_path)
    foreign = tmp_path / "model.pt"
    torch.save({"weight": torch.ones(2)}, foreign)
    with pytest.raises(CheckpointError, match=r"not a valid rlightning checkpoint: .*model\.pt \(no rlightn"):
        load_checkpoint(foreign)
    future = tmp_path / "future.pt"
    torch.save({"format": "rlightning-checkpoint", "format_version": 99}, future)
    with pytest.raises(CheckpointError, match=r"format version 99.*upgrade rlightning"):
        load_checkpoint(future)


# -- manifests -----------------------------------------------------------------------------------------------


def test_check_manifest_compatible() -> None:
    current = manifest(plugins={"rlightning": "0.1.9", "rlightning_PPO": "0.1.0", "rlightning-extra": "1"})
    assert check_manifest(manifest(), expected=current) == []


def test_check_manifest_ignores_unused_plugins_and_core_minor_versions() -> None:
    saved = manifest(rlightning="1.0.0")
    current = manifest(rlightning="1.9.3", plugins={"rlightning": "1.9.3", "rlightning-ppo": "0.1.0"})
    assert check_manifest(saved, expected=current) == []  # rlightning-tensorboard was loaded, never used


def test_check_manifest_reports_each_incompatibility() -> None:
    saved = manifest(rlightning="1.4.2", config_hash="aaaaaaaaaaaaaaaa")
    saved["components"]["env[0]"] = {"kind": "env", "name": "grid", "distribution": "rlightning-grid",
                                     "version": "0.3.0"}
    current = manifest(rlightning="2.0.0", config_hash="bbbbbbbbbbbbbbbb",
                       plugins={"rlightning": "2.0.0", "rlightning_ppo": "0.2.0"})
    problems = check_manifest(saved, expected=current)
    assert len(problems) == 4, problems
    assert all(isinstance(p, str) for p in problems)
    text = "\n".join(problems)
    assert "rlightning 1.4.2, this is rlightning 2.0.0 (major version differs" in text
    assert "rlightning-ppo (for policy): checkpoint written with 0.1.0, installed is 0.2.0" in text
    assert "rlightning-grid 0.3.0 (for env[0]) wrote this checkpoint but is not installed" in text
    assert "config differs" in text and "aaaaaaaaaaaa" in text and "bbbbbbbbbbbb" in text


def test_check_manifest_without_components_checks_every_recorded_plugin() -> None:
    saved = {"rlightning": "0.1.0", "plugins": {"rlightning": "0.1.0", "rlightning-sac": "0.3.0"}}
    problems = check_manifest(saved, expected={"rlightning": "0.1.0", "plugins": {"rlightning": "0.1.0"}})
    assert problems == ["plugin distribution rlightning-sac 0.3.0 wrote this checkpoint but is not installed "
                        "or did not load (pip install 'rlightning-sac==0.3.0')"]


def test_check_manifest_reports_missing_records() -> None:
    problems = check_manifest({}, expected=manifest())
    assert len(problems) == 3, problems
    assert any("rlightning version" in p for p in problems)
    assert any("which plugins" in p for p in problems)
    assert any("config hash" in p for p in problems)


# -- damaged directory state ---------------------------------------------------------------------------------


def test_an_index_json_that_is_a_directory_is_set_aside(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """It crashed the first save with IsADirectoryError; now it is moved aside (kept) and the index rebuilt."""
    (tmp_path / "index.json").mkdir()
    (tmp_path / "index.json" / "notes.txt").write_text("someone's files")
    mgr = CheckpointManager(tmp_path)
    with caplog.at_level("WARNING", logger="rlightning"):
        path = mgr.save(state(), step=10, iteration=1, manifest=manifest())
    assert json.loads(mgr.index_path.read_text())["latest"] == path.name
    assert (tmp_path / "index.json.rejected" / "notes.txt").read_text() == "someone's files"
    assert any("index.json is not a file" in r.getMessage() and "moved to index.json.rejected" in r.getMessage()
               for r in caplog.records), caplog.text
    assert mgr.latest() == path


def test_a_checkpoints_path_that_is_a_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "checkpoints").write_text("not a directory")
    with pytest.raises(CheckpointError, match=r"cannot write checkpoints into .*checkpoints: it is a file"):
        CheckpointManager(tmp_path / "checkpoints").save(state(), step=1, iteration=1, manifest=manifest())


def test_save_never_overwrites_a_damaged_file_of_the_same_iteration(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path)
    mgr.path_for(4).write_bytes(b"PK\x03\x04 not really")
    written = mgr.save(state(4.0), step=40, iteration=4, manifest=manifest())
    assert load_checkpoint(written)[0]["policy"]["weight"][0, 0] == 4.0
    assert (tmp_path / "ckpt-00000004.pt.rejected").read_bytes() == b"PK\x03\x04 not really"


def test_load_newest_checks_structure_and_names(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path, keep_last=5)
    good = mgr.save({"engine": {}, "rng": {}}, step=1, iteration=1, manifest=manifest())
    mgr.save({"engine": {}}, step=2, iteration=2, manifest=manifest())  # lacks 'rng'
    renamed = tmp_path / "ckpt-00000007.pt"
    renamed.write_bytes(good.read_bytes())  # its meta says iteration 1
    loaded = load_newest(tmp_path, required_state=("engine", "rng"))
    assert loaded.path == good and loaded.meta["iteration"] == 1
    assert [(r.path.name, r.reason) for r in loaded.refused] == [
        ("ckpt-00000007.pt", "its meta says iteration 1, its name 7"),
        ("ckpt-00000002.pt", "its state lacks 'rng': not written by this kind of run"),
    ]
    with pytest.raises(CheckpointError, match=r"ckpt-00000002.pt .*lacks 'rng'"):  # a file: no fallback
        load_newest(mgr.path_for(2), required_state=("engine", "rng"))
    good.unlink()
    with pytest.raises(CheckpointError, match=r"no readable checkpoint in .*\(2 unreadable: ckpt-00000007.pt: "):
        load_newest(tmp_path, required_state=("engine", "rng"))


# -- resolve_checkpoint --------------------------------------------------------------------------------------


def test_resolve_checkpoint_run_dir_dir_and_file(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    mgr = CheckpointManager(run_dir / "checkpoints")
    mgr.save(state(), step=10, iteration=1, manifest=manifest())
    latest = mgr.save(state(), step=20, iteration=2, manifest=manifest())
    assert resolve_checkpoint(run_dir) == latest
    assert resolve_checkpoint(run_dir / "checkpoints") == latest
    assert resolve_checkpoint(str(run_dir / "checkpoints" / "ckpt-00000001.pt")) == mgr.path_for(1)


def test_resolve_checkpoint_errors(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no such file or directory"):
        resolve_checkpoint(tmp_path / "nope")
    (tmp_path / "checkpoints").mkdir()
    with pytest.raises(CheckpointError, match="no readable checkpoint in"):
        resolve_checkpoint(tmp_path)
    (tmp_path / "checkpoints" / "ckpt-00000001.pt").write_bytes(b"junk")
    with pytest.raises(CheckpointError, match=r"1 unreadable: ckpt-00000001.pt"):
        resolve_checkpoint(tmp_path)


# -- numpy trees ---------------------------------------------------------------------------------------------


DTYPES = [np.bool_, np.uint8, np.int8, np.int32, np.int64, np.float16, np.float32, np.float64, np.uint16]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_numpy_tree_round_trips_dtypes_through_a_checkpoint(tmp_path: Path, dtype: Any) -> None:
    arr = (np.arange(12).reshape(3, 4) % 5).astype(dtype)
    tree = {"a": arr, "t": arr.T, "nested": [arr[::2], (arr[0],)], "scalar": np.dtype(dtype).type(1), "n": 3}
    path = CheckpointManager(tmp_path).save(to_tensor_tree(tree), step=0, iteration=0, manifest={})
    loaded, _ = load_checkpoint(path)
    back = to_numpy_tree(loaded)
    assert back["a"].dtype == np.dtype(dtype) and np.array_equal(back["a"], arr)
    assert back["t"].dtype == np.dtype(dtype) and np.array_equal(back["t"], arr.T)
    assert np.array_equal(back["nested"][0], arr[::2]) and isinstance(back["nested"][1], tuple)
    assert back["nested"][1][0].dtype == np.dtype(dtype)
    assert back["scalar"].shape == () and back["scalar"].dtype == np.dtype(dtype)
    assert back["n"] == 3


def test_to_tensor_tree_copies_and_handles_byte_order() -> None:
    arr = np.arange(4, dtype=np.float32)
    tensor = to_tensor_tree(arr)
    arr[0] = 99
    assert tensor[0].item() == 0.0
    big = np.arange(3, dtype=">i4")
    assert to_tensor_tree(big).dtype == torch.int32
    assert to_tensor_tree(big).tolist() == [0, 1, 2]
    readonly = np.zeros(2)
    readonly.flags.writeable = False
    assert to_tensor_tree(readonly).dtype == torch.float64


def test_tree_conversion_refuses_what_cannot_round_trip() -> None:
    with pytest.raises(TypeError, match="numpy dtype object"):
        to_tensor_tree(np.array([object()], dtype=object))
    with pytest.raises(TypeError, match="bfloat16 has no numpy equivalent"):
        to_numpy_tree({"w": torch.zeros(2, dtype=torch.bfloat16)})


# -- RNG state -----------------------------------------------------------------------------------------------


def draw() -> tuple[Any, ...]:
    return (random.random(), random.gauss(0, 1), np.random.rand(3).tolist(), np.random.randn(),
            torch.rand(3).tolist(), torch.randint(0, 100, (2,)).tolist())


def test_rng_round_trip() -> None:
    random.gauss(0, 1)  # leave a cached gaussian in both python and numpy
    np.random.randn()
    captured = capture_rng_state()
    first = draw()
    restore_rng_state(captured)
    assert draw() == first


def test_rng_state_survives_a_weights_only_checkpoint(tmp_path: Path) -> None:
    captured = capture_rng_state()
    path = CheckpointManager(tmp_path).save({"rng": captured}, step=0, iteration=0, manifest={})
    first = draw()
    loaded, _ = load_checkpoint(path)
    assert loaded["rng"]["numpy"]["key"].dtype == torch.uint32
    restore_rng_state(loaded["rng"])
    assert draw() == first


def test_restore_rng_state_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="not a captured RNG state"):
        restore_rng_state({"python": {}})
    bad = capture_rng_state()
    bad["torch"] = [1, 2, 3]
    with pytest.raises(ValueError, match="uint8 tensor"):
        restore_rng_state(bad)


def test_flipped_bits_in_tensor_data_are_detected(tmp_path: Path) -> None:
    path = CheckpointManager(tmp_path).save({"w": torch.arange(50_000, dtype=torch.float32)}, step=0,
                                            iteration=0, manifest={})
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="fails its CRC check"):
        load_checkpoint(path)


def test_config_hash_allows_moving_a_run_between_local_and_ray() -> None:
    """Where a run trains (local or Ray, topology, weight transport) may change on resume; the buffer layout not."""
    from rlightning_core import load_config
    from rlightning_core.run import config_hash

    cartpole = Path(__file__).resolve().parents[2] / "examples" / "cartpole_ppo.yaml"

    def digest(*overrides: str) -> str:
        return config_hash(load_config(cartpole, list(overrides), resolve=False))

    base = digest()
    assert base == digest("cluster.mode=ray", "cluster.topology=inference_server", "cluster.num_inference_servers=1",
                          "cluster.weight_sync=object_store",
                          "cluster.offload=true", "env.num_workers=3")
    assert base != digest("cluster.sharded_buffer=true")  # shard contents are not checkpointed
    assert base != digest("policy.params.lr=0.1")
    assert base == digest("policy.device=cuda", "policy.rollout_device=cuda")  # a GPU run resumes on CPU
