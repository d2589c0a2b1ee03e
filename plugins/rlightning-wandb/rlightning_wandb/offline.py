"""Read back what an offline W&B run recorded, without a W&B server.

wandb keeps an offline run in one transaction log, ``RUN_DIR/wandb/offline-run-*/run-<id>.wandb``: the LevelDB
log format (32 KiB blocks of checksummed records, records split across blocks as FIRST/MIDDLE/LAST pieces)
with a ``:W&B`` file header, each record a ``wandb.proto.wandb_internal_pb2.Record`` protobuf. wandb reads this
file in its Go core (``wandb sync``) and no longer ships a Python reader, so this module decodes the log
format here and the records with wandb's own protobuf classes. Every record's CRC-32 is checked.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["find_offline_runs", "has_exit_record", "iter_records", "read_offline_history"]

_FILE_HEADER = struct.Struct("<4sHB")  # ident, magic, version
_RECORD_HEADER = struct.Struct("<IHB")  # crc32, length, type
_IDENT, _MAGIC = b":W&B", 0xBEE1
_BLOCK = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def find_offline_runs(run_dir: str | Path) -> list[Path]:
    """The transaction logs (``*.wandb``) of every W&B run under ``run_dir``, oldest first."""
    root = Path(run_dir)
    return sorted(root.glob("wandb/*run-*/run-*.wandb"), key=_started)


def _started(file: Path) -> tuple[str, float]:
    """Sort key: the start time in the folder name (``offline-run-20250101_120000-<id>``), then mtime."""
    match = re.search(r"run-(\d{8}_\d{6})-", file.parent.name)
    return (match.group(1) if match else "", file.stat().st_mtime)


def _raw_records(data: bytes, source: str) -> Iterator[bytes]:
    if len(data) < _FILE_HEADER.size:
        raise ValueError(f"{source}: not a W&B run file (shorter than its header)")
    ident, magic, _version = _FILE_HEADER.unpack_from(data)
    if ident != _IDENT or magic != _MAGIC:
        raise ValueError(f"{source}: not a W&B run file (header {ident!r}, magic {magic:#x})")
    pos, pending = _FILE_HEADER.size, b""
    while pos + _RECORD_HEADER.size <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _RECORD_HEADER.size:  # block trailer: zero padding
            pos += left
            continue
        crc, length, kind = _RECORD_HEADER.unpack_from(data, pos)
        if kind == 0 and length == 0:  # zero padding to the end of the block (or of a file being written)
            pos += left
            continue
        body = data[pos + _RECORD_HEADER.size: pos + _RECORD_HEADER.size + length]
        if len(body) < length:
            break  # a record still being written: stop at the last complete one
        if zlib.crc32(body, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != crc:
            raise ValueError(f"{source}: record at byte {pos} fails its checksum (file damaged)")
        pos += _RECORD_HEADER.size + length
        if kind == _FULL:
            yield body
        elif kind == _FIRST:
            pending = body
        elif kind == _MIDDLE:
            pending += body
        elif kind == _LAST:
            yield pending + body
            pending = b""
        else:
            raise ValueError(f"{source}: unknown record type {kind} at byte {pos}")


def has_exit_record(path: str | Path) -> bool:
    """Whether the run file already holds its closing ``exit`` record (so everything before it is on disk).

    wandb's core process writes the file behind ``run.finish()``: the last records can land a moment after
    ``finish()`` returns.
    """
    from wandb.proto import wandb_internal_pb2

    file = Path(path)
    if not file.is_file():
        return False
    for raw in _raw_records(file.read_bytes(), str(file)):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "exit":
            return True
    return False


def iter_records(path: str | Path) -> Iterator[Any]:
    """Every ``wandb_internal_pb2.Record`` in a ``run-<id>.wandb`` file, in write order."""
    from wandb.proto import wandb_internal_pb2

    file = Path(path)
    for raw in _raw_records(file.read_bytes(), str(file)):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        yield record


def read_offline_history(path: str | Path) -> list[dict[str, Any]]:
    """The history rows of an offline run: ``[{"_step": 100, "loss/policy": 0.5, ...}, ...]``.

    Args:
        path: a ``run-<id>.wandb`` file, or a run directory (its newest W&B run is read).

    Values are decoded from W&B's JSON (``NaN`` and ``Infinity`` included); media entries (videos, images)
    come back as the dicts W&B stores, e.g. ``{"_type": "video-file", "path": "media/videos/...mp4", ...}``.
    """
    file = Path(path)
    if file.is_dir():
        runs = find_offline_runs(file)
        if not runs:
            raise FileNotFoundError(f"no W&B run file (wandb/*run-*/run-*.wandb) under {file}")
        file = runs[-1]
    rows = []
    for record in iter_records(file):
        if record.WhichOneof("record_type") != "history":
            continue
        row: dict[str, Any] = {}
        for item in record.history.item:
            *parents, leaf = list(item.nested_key) or [item.key]
            target = row
            for part in parents:  # media and other dict values arrive as one item per leaf
                target = target.setdefault(part, {})
            target[leaf] = json.loads(item.value_json)
        rows.append(row)
    return rows
