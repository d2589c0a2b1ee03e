"""``logging.video_every``: MP4s of deterministic episodes during training, handed to loggers and hooks."""

from __future__ import annotations

import io
import json

import pytest

from rlightning_core import hookimpl

pytestmark = pytest.mark.usefixtures("training_plugins")


class VideoObserver:
    """An observer plugin that records the ``on_video`` calls it receives."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    @hookimpl
    def on_video(self, path, step, tag):
        assert path.is_file()  # complete when the hook fires
        self.calls.append((path.name, step, tag))


def test_training_writes_videos_and_attaches_them(tmp_path, cartpole_config, build_run):
    pytest.importorskip("moviepy")
    from moviepy import VideoFileClip

    from rlightning_core.plugins import get_plugins, load_plugins

    loggers = "[{type: tensorboard}]" if "tensorboard" in get_plugins().registry.names("logger") else "[]"
    config = cartpole_config("engine.total_steps=1024", "engine.eval_every=0", "checkpoint.every=0",
                             "checkpoint.at_end=false", "logging.video_every=2", f"logging.loggers={loggers}")
    engine = build_run(config)
    observer = VideoObserver()
    engine.plugins = load_plugins(extra=[("video-observer", observer)])
    result = engine.run(tmp_path / "run")
    assert result.iterations == 4

    videos = tmp_path / "run" / "videos"
    assert sorted(p.name for p in videos.iterdir()) == ["iter_2.mp4", "iter_4.mp4"]
    steps = {json.loads(line)["iteration"]: json.loads(line)["step"]
             for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if "iteration" in line}
    assert observer.calls == [("iter_2.mp4", steps[2], "video"), ("iter_4.mp4", steps[4], "video")]
    for video in videos.iterdir():  # valid MP4s, read back by moviepy: CartPole's 600x400 frames at 50 fps
        with VideoFileClip(str(video), audio=False) as clip:
            frames = list(clip.iter_frames())
            assert clip.size == [600, 400] and clip.fps == 50
        assert 8 <= len(frames) <= 500  # one CartPole episode: at least 8 steps, at most 500
        assert frames[0].std() > 0  # a picture, not a blank frame

    if loggers != "[]":  # the TensorBoard event file holds one animated image per video, at its step
        from PIL import Image
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        acc = EventAccumulator(str(tmp_path / "run" / "tensorboard"), size_guidance={"images": 0})
        acc.Reload()
        images = acc.Images("video")
        assert [im.step for im in images] == [steps[2], steps[4]]
        gif = Image.open(io.BytesIO(images[0].encoded_image_string))
        assert gif.format == "GIF" and gif.n_frames > 1 and gif.size == (600, 400)


def test_video_every_is_validated(cartpole_config):
    from rlightning_core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"logging\.video_every"):
        cartpole_config("logging.video_every=0")


def test_one_video_per_env_config_cut_at_the_episode_end(tmp_path):
    """With several env configs, one file each (``iter_<n>-<label>.mp4``), exactly one episode long."""
    pytest.importorskip("moviepy")
    from rlightning_core.config.schema import EnvConfig
    from rlightning_core.plugins import get_plugins
    from rlightning_core.testing.doubles import TinyPolicy, TinyPolicyParams
    from rlightning_core.video import EpisodeVideoRecorder, read_mp4_frames

    registry = get_plugins().registry
    spec = registry.resolve("env", "gymnasium")
    cfgs = [EnvConfig(type="gymnasium", name="long", params=spec.config(id="CartPole-v1")),
            EnvConfig(type="gymnasium", name="short", params=spec.config(id="CartPole-v1", max_episode_steps=7))]
    recorder = EpisodeVideoRecorder(cfgs, [], tmp_path / "videos", seed=3, registry=registry)
    try:
        group = recorder.evaluators[0].group
        policy = TinyPolicy(TinyPolicyParams(), observation_space=group.observation_space,
                            action_space=group.action_space, seed=0)
        videos = recorder.record(policy, "iter_5")
        lengths = [ev.last_lengths[0] for ev in recorder.evaluators]
    finally:
        recorder.close()
    assert [(tag, path.name, fps) for tag, path, fps in videos] == [
        ("video/long", "iter_5-long.mp4", 50), ("video/short", "iter_5-short.mp4", 50)]
    assert lengths[1] == 7  # truncated by max_episode_steps
    for (_, path, _), length in zip(videos, lengths, strict=True):
        frames, fps = read_mp4_frames(path)
        assert len(frames) == length and fps == 50 and frames.shape[1:] == (400, 600, 3)
