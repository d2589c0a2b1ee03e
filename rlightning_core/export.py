"""Export a trained policy with its observation preprocessing to TorchScript or ONNX (``rlightning export``).

The exported graph maps a float batch of raw observations ``obs [N, *shape]`` to the deterministic env
actions ``action [N, ...]``, the ones ``load_policy(run).predict(obs)`` gives: the run's preprocessors with
their saved statistics frozen (each one's ``export_module()``), then the policy's ``export_module()``. A JSON
file beside it describes the input and output (names, shapes, dtypes, the action space's bounds).
Imports torch: the CLI imports this module inside its command.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from rlightning_core.dependencies import require
from rlightning_core.errors import UserError

__all__ = ["FORMATS", "export_policy"]

#: Format -> default file suffix.
FORMATS = {"onnx": ".onnx", "torchscript": ".pt"}


def export_policy(path: str | Path, fmt: str, output: str | Path | None = None, *, best: bool = False
                  ) -> tuple[Path, Path]:
    """Write the run's deterministic policy (preprocessing included) as ``fmt``; returns (model, spec) paths.

    Args:
        path: a run directory, its ``checkpoints`` directory, or one checkpoint file.
        fmt: ``onnx`` or ``torchscript``.
        output: the model file (default: ``policy.onnx`` / ``policy.pt`` in the run directory's ``export/``);
            the spec is written beside it with the suffix ``.json``.
        best: export the checkpoint recorded as best by evaluation instead of the newest.

    Raises:
        UserError: an unknown format, nothing loadable at ``path``, or a policy / preprocessor that cannot
            be exported (named).
        MissingDependencyError: ``onnx`` (or the exporter's ``onnxscript``) is not installed.
    """
    if fmt not in FORMATS:
        raise UserError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if fmt == "onnx":
        require(["onnx", "onnxscript"], pip="rlightning[export]", needed_by="rlightning export --format onnx")
    from rlightning_core.predict import load_policy

    loaded = load_policy(path, best=best)
    module = _ExportedPolicy([p.export_module() for p in loaded.preprocessors], loaded.policy.export_module())
    module = module.to("cpu").eval()
    space = loaded.observation_space
    dtype = np.dtype(space.dtype)
    example = torch.as_tensor(np.stack([space.sample() for _ in range(2)]).astype(dtype))
    file = Path(output) if output is not None else _default_output(Path(path), loaded.checkpoint, fmt)
    file.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        if fmt == "torchscript":
            traced = torch.jit.trace(module, (example,))
            traced.save(str(file))
        else:
            _onnx_export(module, example, file)
        action = module(example)
    spec = _spec(loaded, fmt, file, dtype, action)
    spec_file = file.with_suffix(".json")
    spec_file.write_text(json.dumps(spec, indent=2) + "\n")
    return file, spec_file


def _onnx_export(module: nn.Module, example: torch.Tensor, file: Path) -> None:
    """Export with torch's ONNX exporter (a dynamic batch axis), its progress lines and internal warnings silenced."""
    import logging
    import warnings

    batch = torch.export.Dim("batch", min=1)
    exporter_log = logging.getLogger("torch.onnx")
    level = exporter_log.level
    exporter_log.setLevel(logging.ERROR)  # e.g. "torchvision is not installed. Skipping ..."
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # raised inside torch.export, not by this code
            torch.onnx.export(module, (example,), str(file), input_names=["obs"], output_names=["action"],
                              dynamic_shapes=({0: batch},), dynamo=True, verbose=False)
    finally:
        exporter_log.setLevel(level)


def _default_output(path: Path, checkpoint: Path, fmt: str) -> Path:
    """``RUN_DIR/export/policy.SUFFIX`` (the run directory being the checkpoint's parent's parent)."""
    run_dir = checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else checkpoint.parent
    return run_dir / "export" / f"policy{FORMATS[fmt]}"


def _spec(loaded: Any, fmt: str, file: Path, obs_dtype: Any, action: Any) -> dict[str, Any]:
    """The input/output description written beside the model."""
    space = loaded.action_space
    out: dict[str, Any] = {"shape": ["batch", *action.shape[1:]], "dtype": str(action.numpy().dtype)}
    from gymnasium import spaces

    if isinstance(space, spaces.MultiDiscrete):  # per dimension: indices start .. start + nvec - 1
        start = np.asarray(space.start)
        out.update(kind="multi_discrete", nvec=space.nvec.tolist(), low=start.tolist(),
                   high=(start + space.nvec - 1).tolist())
    elif isinstance(space, spaces.MultiBinary):
        out.update(kind="multi_binary", n=int(np.prod(space.shape)), low=0, high=1)
    elif hasattr(space, "n"):
        start = int(getattr(space, "start", 0))
        out.update(kind="discrete", n=int(space.n), low=start, high=start + int(space.n) - 1)
    else:
        out.update(kind="box", low=np.asarray(space.low).tolist(), high=np.asarray(space.high).tolist())
    obs_space = loaded.observation_space
    return {
        "format": fmt,
        "file": file.name,
        "checkpoint": str(loaded.checkpoint),
        "policy": loaded.config.policy.type,
        "preprocessors": [type(p).__name__ for p in loaded.preprocessors],
        "inputs": [{"name": "obs", "shape": ["batch", *obs_space.shape], "dtype": str(np.dtype(obs_dtype)),
                    "description": "raw observations, as the env returns them (preprocessing is inside)"}],
        "outputs": [{"name": "action", **out, "description": "deterministic env actions"}],
    }


class _ExportedPolicy(nn.Module):
    """The preprocessors' modules, then the policy's deterministic module."""

    def __init__(self, preprocessors: list[nn.Module], policy: nn.Module) -> None:
        super().__init__()
        self.preprocessors = nn.ModuleList(preprocessors)
        self.policy = policy

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic env actions of a batch of raw observations."""
        for pre in self.preprocessors:
            obs = pre(obs)
        return self.policy(obs)
