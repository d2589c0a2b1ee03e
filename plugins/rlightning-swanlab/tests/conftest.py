from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


def read_run(run_dir: Path) -> dict[str, Any]:
    """What the newest SwanLab run under ``run_dir`` recorded, read with swanlab's own reader (the one
    ``swanlab sync`` uploads from): ``{"scalars": {key: [(step, value)]}, "config": {...}, "finished": bool}``.

    ``DataStoreReader`` and the ``Record`` protobuf are swanlab internals: if a swanlab release moves them,
    this helper (not the plugin) needs updating.
    """
    from swanlab.proto.swanlab.record.v1.record_pb2 import Record
    from swanlab.sdk.internal.core_python.store import DataStoreReader

    files = sorted(run_dir.glob("swanlog/run-*/run-*.swanlab"))
    assert files, f"no SwanLab run file under {run_dir}/swanlog"
    reader = DataStoreReader()
    reader.open(files[-1])
    scalars: dict[str, list[tuple[int, float]]] = {}
    kinds = []
    try:
        for raw in reader:
            record = Record()
            record.ParseFromString(raw)
            kind = record.WhichOneof("record_type")
            kinds.append(kind)
            if kind == "scalar":
                scalars.setdefault(record.scalar.key, []).append((record.scalar.step, record.scalar.value.number))
    finally:
        reader.close()
    import yaml

    config = yaml.safe_load((files[-1].parent / "files" / "config.yaml").read_text())
    return {"scalars": scalars, "config": {k: v["value"] for k, v in (config or {}).items()},
            "finished": kinds[-1] == "finish"}


@pytest.fixture
def read_swanlab():
    """``read_swanlab(run_dir)``: see :func:`read_run`."""
    return read_run
