"""MetricsHub.log_video: videos reach loggers that take them and ``on_video`` hooks; a failing logger is isolated."""

from __future__ import annotations

import json

import pytest

from rlightning_core import hookimpl
from rlightning_core.logging.hub import MetricsHub
from rlightning_core.plugins import load_plugins


class MetricsOnly:
    """A logger without log_video (the optional part of the contract)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, dict]] = []

    def log(self, step, metrics):
        self.rows.append((step, metrics))

    def close(self):
        pass


class TakesVideos(MetricsOnly):
    def __init__(self) -> None:
        super().__init__()
        self.videos: list[tuple] = []

    def log_video(self, step, path, *, tag, fps):
        self.videos.append((step, path.name, tag, fps))


class BrokenVideos(MetricsOnly):
    def log_video(self, step, path, *, tag, fps):
        raise OSError("disk full")


class Observer:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    @hookimpl
    def on_video(self, path, step, tag):
        self.calls.append((path.name, step, tag))


def test_videos_go_to_loggers_that_take_them_and_to_hooks(tmp_path, caplog: pytest.LogCaptureFixture):
    video = tmp_path / "iter_2.mp4"
    video.write_bytes(b"not decoded here")
    plain, taker, broken, observer = MetricsOnly(), TakesVideos(), BrokenVideos(), Observer()
    hub = MetricsHub(tmp_path, [plain, broken, taker], plugins=load_plugins(extra=[("observer", observer)]))
    hub.log_video(512, video, tag="video", fps=50)
    hub.log_video(1024, video, tag="video/short", fps=25)
    hub.log(1024, {"loss/policy": 0.5})
    hub.close()

    assert taker.videos == [(512, "iter_2.mp4", "video", 50), (1024, "iter_2.mp4", "video/short", 25)]
    assert observer.calls == [("iter_2.mp4", 512, "video"), ("iter_2.mp4", 1024, "video/short")]
    warnings = [r.getMessage() for r in caplog.records if "BrokenVideos" in r.getMessage()]
    assert len(warnings) == 1 and "disk full" in warnings[0]  # reported once, then no more videos for it
    assert broken.rows == plain.rows == taker.rows == [(1024, {"loss/policy": 0.5})]  # its metrics still flow
    assert [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [
        {"step": 1024, "loss/policy": 0.5}]
