"""Python callbacks on real CartPole PPO runs: every event in order, stops that end with a checkpoint, failures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlightning_core import Callback, StopTraining, hookimpl, train
from rlightning_core.plugins import load_plugins, reset_plugins

pytestmark = pytest.mark.usefixtures("training_plugins")

ROOT = Path(__file__).resolve().parents[2]
CARTPOLE = ROOT / "examples" / "cartpole_ppo.yaml"
#: 4 envs x 32 steps = 128 env steps per iteration.
TINY = ("logging.progress=false", "env.num_envs=4", "engine.params.rollout_steps=32", "engine.eval_episodes=2",
        "engine.target_eval_return=null", "policy.params.hidden_sizes=[16,16]")


class Recorder(Callback):
    """Records every event into a shared list (with the plugin's, to show who is called first)."""

    def __init__(self, log: list, who: str = "cb") -> None:
        self.log, self.who = log, who

    def on_run_start(self, config, run_dir):
        self.log.append((self.who, "on_run_start", {"run_dir": run_dir, "seed": config.seed}))

    def on_metrics(self, step, metrics):
        self.log.append((self.who, "on_metrics", {"step": step, "metrics": dict(metrics)}))

    def on_eval(self, step, metrics):
        self.log.append((self.who, "on_eval", {"step": step, "metrics": dict(metrics)}))

    def on_checkpoint(self, path, step):
        self.log.append((self.who, "on_checkpoint", {"path": path, "step": step, "file": path.is_file()}))

    def on_run_end(self, run_dir, status, error):
        self.log.append((self.who, "on_run_end", {"run_dir": run_dir, "status": status, "error": error}))


class PluginRecorder:
    """The same events as a plugin sees them (the lifecycle hooks)."""

    def __init__(self, log: list) -> None:
        self.log = log

    @hookimpl
    def on_run_start(self, config, run_dir):
        self.log.append(("plugin", "on_run_start"))

    @hookimpl
    def on_metrics(self, step, metrics):
        self.log.append(("plugin", "on_metrics"))

    @hookimpl
    def on_eval(self, step, metrics):
        self.log.append(("plugin", "on_eval"))

    @hookimpl
    def on_checkpoint(self, path, step):
        self.log.append(("plugin", "on_checkpoint"))

    @hookimpl
    def on_run_end(self, run_dir, status, error):
        self.log.append(("plugin", "on_run_end"))


def of(log: list, who: str = "cb") -> list[tuple[str, dict]]:
    return [(name, data) for w, name, *rest in log if w == who for data in (rest or [{}])]


def training_rows(run: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "iteration" in r]


def test_callbacks_see_every_event_in_order_after_the_plugins(tmp_path):
    log: list = []
    reset_plugins(load_plugins(extra=[("rlt-recorder", PluginRecorder(log))]))
    run = tmp_path / "run"
    result = train(str(CARTPOLE), run, overrides=[*TINY, "engine.total_steps=1024", "engine.eval_every=2",
                                                  "checkpoint.every=3"], callbacks=[Recorder(log)])
    assert result.stop_reason == "total_steps" and result.stop_message is None

    events = of(log)
    names = [n for n, _ in events]
    assert names[0] == "on_run_start" and events[0][1] == {"run_dir": run, "seed": 1}
    assert names[-1] == "on_run_end" and events[-1][1] == {"run_dir": run, "status": "completed", "error": None}
    assert names.count("on_run_start") == names.count("on_run_end") == 1
    iteration_steps = [d["step"] for n, d in events if n == "on_metrics" and "iteration" in d["metrics"]]
    assert iteration_steps == list(range(128, 1025, 128))  # every iteration, steps increasing
    evals = [d for n, d in events if n == "on_eval"]
    assert [d["step"] for d in evals] == [256, 512, 768, 1024]
    assert all(set(d["metrics"]) >= {"eval/episode_return_mean"} and all(k.startswith("eval/") for k in d["metrics"])
               for d in evals)
    # each evaluation comes just before the row of metrics that holds it, with the same value
    for i, (name, data) in enumerate(events):
        if name == "on_eval":
            nxt_name, nxt = events[i + 1]
            assert nxt_name == "on_metrics" and nxt["step"] == data["step"]
            assert nxt["metrics"]["eval/episode_return_mean"] == data["metrics"]["eval/episode_return_mean"]
    ckpts = [d for n, d in events if n == "on_checkpoint"]
    assert [d["step"] for d in ckpts] == [384, 768, 1024] and all(d["file"] for d in ckpts)
    assert ckpts[-1]["path"].is_file() and ckpts[-1]["path"].parent == run / "checkpoints"
    # one dispatch path: the plugin saw the same events, each just before the callback
    assert [w for w, *_ in log] == ["plugin", "cb"] * len(events)
    assert [n for _, n, *_ in log][::2] == names


class StopAt(Callback):
    """Asks to stop at ``step`` in ``event``: by returning False or by raising StopTraining."""

    def __init__(self, event: str, step: int, how: str) -> None:
        self.event, self.step, self.how = event, step, how

    def _maybe(self, event: str, step: int) -> bool | None:
        if event != self.event or step < self.step:
            return None
        if self.how == "raise":
            raise StopTraining(f"stop at {step}")
        return False

    def on_metrics(self, step, metrics):
        return self._maybe("on_metrics", step)

    def on_eval(self, step, metrics):
        return self._maybe("on_eval", step)

    def on_checkpoint(self, path, step):
        return self._maybe("on_checkpoint", step)


@pytest.mark.parametrize(("engine", "event", "how", "message"), [
    ("sync", "on_metrics", "return False", "callback StopAt.on_metrics returned False"),
    ("sync", "on_eval", "raise", "stop at 256"),
    ("async", "on_metrics", "raise", "stop at 384"),
    ("sync", "on_checkpoint", "return False", "callback StopAt.on_checkpoint returned False"),
])
def test_a_callback_stops_the_run_with_a_checkpoint_that_resumes(tmp_path, engine, event, how, message):
    log: list = []
    run = tmp_path / "run"
    step = 256 if event == "on_eval" else 384
    # no checkpoint schedule and none at the end: the stop's own checkpoint is the only one (on_checkpoint's
    # case: a checkpoint every 3 iterations, the one at 384 asks to stop)
    ckpt = "checkpoint.every=3" if event == "on_checkpoint" else "checkpoint.every=0"
    overrides = [*TINY, f"engine.type={engine}", "engine.total_steps=1024", "engine.eval_every=2", ckpt,
                 "checkpoint.at_end=false"]
    result = train(str(CARTPOLE), run, overrides=overrides, callbacks=[StopAt(event, step, how), Recorder(log)])

    assert result.stop_reason == "callback" and result.stop_message == message and result.stop_signal is None
    assert result.env_steps == step and result.iterations == step // 128  # at the iteration boundary
    events = of(log)
    assert events[-1] == ("on_run_end", {"run_dir": run, "status": "completed", "error": None})
    saved = [d for n, d in events if n == "on_checkpoint"]
    assert saved[-1]["step"] == step and saved[-1]["file"]
    assert [p.name for p in sorted((run / "checkpoints").glob("ckpt-*.pt"))] == [saved[-1]["path"].name]
    assert training_rows(run)[-1]["step"] == step  # the last iteration's metrics were logged

    resumed = train(None, resume_from=run, overrides=["engine.total_steps=768"])
    assert resumed.stop_reason == "total_steps" and resumed.env_steps == 768
    assert [r["step"] for r in training_rows(run)] == [*range(128, step + 1, 128), *range(step + 128, 769, 128)]


def test_a_plugin_stops_by_raising_stop_training_and_its_false_is_ignored(tmp_path):
    class Voter:
        @hookimpl
        def on_metrics(self, step, metrics):
            return False  # ignored: hook return values are unused

    class Stopper:
        @hookimpl
        def on_eval(self, step, metrics):
            raise StopTraining(f"plugin stop at {step}")

    reset_plugins(load_plugins(extra=[("rlt-voter", Voter())]))
    result = train(str(CARTPOLE), tmp_path / "a", overrides=[*TINY, "engine.total_steps=384", "engine.eval_every=0",
                                                             "checkpoint.every=0"])
    assert result.stop_reason == "total_steps" and result.env_steps == 384

    reset_plugins(load_plugins(extra=[("rlt-stopper", Stopper())]))
    result = train(str(CARTPOLE), tmp_path / "b", overrides=[*TINY, "engine.total_steps=1024", "engine.eval_every=1",
                                                             "checkpoint.every=0"])
    assert result.stop_reason == "callback" and result.stop_message == "plugin stop at 128"
    assert result.env_steps == 128 and len(list((tmp_path / "b" / "checkpoints").glob("ckpt-*.pt"))) == 1


def test_a_failing_callback_fails_the_run(tmp_path):
    class Broken(Callback):
        def on_metrics(self, step, metrics):
            if step >= 256:
                raise ZeroDivisionError("callback bug")

    log: list = []
    with pytest.raises(ZeroDivisionError, match="callback bug"):
        train(str(CARTPOLE), tmp_path / "run", overrides=[*TINY, "engine.total_steps=1024", "engine.eval_every=0",
                                                           "checkpoint.every=0"], callbacks=[Recorder(log), Broken()])
    name, end = of(log)[-1]
    assert name == "on_run_end" and end["status"] == "failed" and isinstance(end["error"], ZeroDivisionError)
    assert max(d["step"] for n, d in of(log) if n == "on_metrics") == 256


@pytest.mark.ray
@pytest.mark.parametrize("engine", ["sync", "async"])
def test_callbacks_fire_and_stop_a_ray_mode_run(ray_cluster, tmp_path, engine):
    log: list = []
    run = tmp_path / "run"
    overrides = [*TINY, "cluster.mode=ray", f"engine.type={engine}", "env.num_workers=2", "env.num_envs=2",
                 "engine.total_steps=4096", "engine.eval_every=2", "checkpoint.every=0"]
    result = train(str(CARTPOLE), run, overrides=overrides, callbacks=[Recorder(log), StopAt("on_eval", 1, "raise")])

    assert result.stop_reason == "callback" and result.stop_message.startswith("stop at ")
    assert result.iterations == 2  # the first evaluation (iteration 2) asked to stop
    names = [n for n, _ in of(log)]
    assert names[0] == "on_run_start" and names[-1] == "on_run_end" and "on_eval" in names
    saved = [d for n, d in of(log) if n == "on_checkpoint"]
    assert len(saved) == 1 and saved[0]["file"] and saved[0]["step"] == result.env_steps
    assert ray_cluster.is_initialized()


def test_a_callback_failing_at_the_run_end_fails_the_run_after_the_cleanup(tmp_path):
    class BrokenEnd(Callback):
        def on_run_end(self, run_dir, status, error):
            raise RuntimeError("cannot upload")

    log: list = []
    with pytest.raises(RuntimeError, match="cannot upload"):
        train(str(CARTPOLE), tmp_path / "run", callbacks=[BrokenEnd(), Recorder(log)],
              overrides=[*TINY, "engine.total_steps=256", "engine.eval_every=0", "checkpoint.every=0"])
    assert of(log)[-1] == ("on_run_end", {"run_dir": tmp_path / "run", "status": "completed", "error": None})
    assert len(list((tmp_path / "run" / "checkpoints").glob("ckpt-*.pt"))) == 1  # the run itself had finished


def test_a_callback_class_instead_of_an_instance_is_refused_before_anything_is_built(tmp_path):
    with pytest.raises(TypeError, match=r"Recorder is a class; pass an instance"):
        train(str(CARTPOLE), tmp_path / "run", overrides=list(TINY), callbacks=[Recorder])
    assert not (tmp_path / "run").exists()
