"""The seed ledger appends whole JSON lines; a line cut off by a crash is dropped when the run resumes."""

from __future__ import annotations

import json

from rlightning_core.distributed.seed_ledger import SeedLedger


def test_records_before_attach_are_written_first_and_a_cut_off_line_is_dropped(tmp_path, caplog) -> None:
    ledger = SeedLedger()
    ledger.record("env", group=0, rank=0, restart=0, seed=11)
    ledger.attach(tmp_path)
    ledger.record("env", group=0, rank=1, restart=0, seed=12)
    ledger.close()
    path = tmp_path / SeedLedger.FILE
    with path.open("a") as f:  # the driver died in the middle of a line
        f.write('{"time": 1.0, "event": "rest')
    resumed = SeedLedger()
    resumed.attach(tmp_path)
    resumed.record("env", group=0, rank=1, restart=1, seed=13)
    resumed.close()
    rows = [json.loads(line) for line in path.read_text().splitlines()]  # every line parses
    assert [(r["rank"], r["restart"], r["seed"]) for r in rows] == [(0, 0, 11), (1, 0, 12), (1, 1, 13)]
    assert "incomplete line" in caplog.text
