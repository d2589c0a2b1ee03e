"""``cluster.early_rollout``: the first rollout acts with a helper's initial weights while the learner starts.

The helper is a plain process (no Ray), so most of this runs without a cluster; one test drives a real Ray run
in a fresh interpreter, because the helper starts with the run's own ``ray.init`` (here: joining the session's
cluster), which a process that already has Ray up never does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from rlightning_core import load_config
from rlightning_core.distributed.early_start import HelperFailed, LearnerHelper, early_rollout_possible
from rlightning_core.env.seeding import derive_seed

pytestmark = [pytest.mark.usefixtures("training_plugins")]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "cartpole_ppo.yaml"


def _config(*overrides):
    return load_config(EXAMPLE, ["logging.progress=false", "cluster.mode=ray", *overrides])


def _spaces():
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def _helper_pids() -> set[int]:
    """Live helper processes that are children of this process."""
    me, out = os.getpid(), set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        if int(stat[1]) == me and stat[0] != "Z" and b"rlightning_core.distributed.early_start" in cmd:
            out.add(int(pid))
    return out


#: The longest a wait for a helper may take: a guard against a hung helper only. It runs at SCHED_IDLE, so on a
#: busy machine it gets a core only now and then, and its imports alone may take minutes.
HELPER_GUARD_S = 600.0


def _wait_gone(pids: set[int], timeout: float = HELPER_GUARD_S) -> set[int]:
    deadline = time.monotonic() + timeout
    while pids & _helper_pids() and time.monotonic() < deadline:
        time.sleep(0.1)
    return pids & _helper_pids()


def test_the_helper_builds_the_learners_initial_weights_bit_for_bit():
    from rlightning_core.distributed.actors import LearnerActor
    from rlightning_core.plugins import get_plugins

    config = _config()
    seed = derive_seed(config.seed, 3, 0)
    obs_space, act_space = _spaces()
    helper = LearnerHelper()
    pid = helper.proc.pid
    helper.start_learner(config.policy, selection=get_plugins().selection(), seed=seed, num_threads=1)
    polls = []

    def give_up() -> bool:  # the first poll lets the stopped helper go on
        if not polls:
            os.kill(pid, signal.SIGCONT)
        polls.append(1)
        return False

    os.kill(pid, signal.SIGSTOP)  # it cannot answer before the call has polled give_up
    try:
        extras = helper.call("build", obs_space, act_space, timeout=HELPER_GUARD_S, give_up=give_up)
    finally:
        os.kill(pid, signal.SIGCONT)
    weights = helper.call("get_weights", timeout=HELPER_GUARD_S)
    nbytes = helper.call("weights_nbytes", timeout=HELPER_GUARD_S)
    on_policy = helper.call("buffer_needs_next_obs", "rlightning:rollout", timeout=HELPER_GUARD_S)
    off_policy = helper.call("buffer_needs_next_obs", "rlightning:replay", timeout=HELPER_GUARD_S)
    helper.close()
    assert polls  # it asked give_up while no answer had come

    learner = LearnerActor(config.policy, selection=get_plugins().selection(), seed=seed, plugins=get_plugins())
    assert extras == learner.build(obs_space, act_space)
    own = learner.get_weights()
    assert own.keys() == weights.keys()
    assert all(own[k].dtype == weights[k].dtype and np.array_equal(own[k], weights[k]) for k in own)
    assert nbytes == learner.weights_nbytes() == sum(w.nbytes for w in own.values())
    assert (on_policy, off_policy) == (False, True)  # read from the classes, no buffer allocated
    assert not _wait_gone({pid})  # closed: it exits (and is reaped) on its own
    with pytest.raises(HelperFailed, match="closed"):
        helper.call("get_weights", timeout=5)


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is a Linux scheduling policy")
def test_the_helper_runs_only_on_idle_cpu_and_gives_way_to_a_ready_learner():
    """SCHED_IDLE from its first line (its imports are speculative); a learner ready first ends the wait for it."""
    from rlightning_core.plugins import get_plugins

    helper = LearnerHelper()
    pid = helper.proc.pid
    try:
        deadline = time.monotonic() + HELPER_GUARD_S
        while os.sched_getscheduler(pid) != os.SCHED_IDLE and time.monotonic() < deadline:
            time.sleep(0.01)
        assert os.sched_getscheduler(pid) == os.SCHED_IDLE
        helper.start_learner(_config().policy, selection=get_plugins().selection(), seed=1, num_threads=1)
        os.kill(pid, signal.SIGSTOP)  # it cannot answer: only the learner being ready can end the call
        # (were give_up ignored, the call would fail only at its timeout, with another message)
        with pytest.raises(HelperFailed, match="learner actor was ready before the helper answered build"):
            helper.call("build", *_spaces(), timeout=HELPER_GUARD_S, give_up=lambda: True)
    finally:
        os.kill(pid, signal.SIGCONT)
        helper.close()


def test_a_helper_whose_learner_cannot_be_built_says_why():
    import attrs

    from rlightning_core.plugins import get_plugins

    bad = attrs.evolve(_config().policy, type="no-such-policy")  # (load_config would refuse it first)
    helper = LearnerHelper()
    try:
        helper.start_learner(bad, selection=get_plugins().selection(), seed=1, num_threads=1)
        with pytest.raises(HelperFailed, match="no-such-policy"):
            helper.call("build", *_spaces(), timeout=HELPER_GUARD_S)
        with pytest.raises(HelperFailed, match="no-such-policy"):  # and keeps saying it
            helper.call("get_weights", timeout=HELPER_GUARD_S)
    finally:
        helper.close()


def test_a_helper_left_waiting_exits_on_its_own():
    """Nobody closes it (a run failed before taking it): it exits after ``idle_exit_s`` without a message."""
    from rlightning_core.plugins import get_plugins

    idle = LearnerHelper(idle_exit_s=1.0)  # never given the learner's arguments
    started = LearnerHelper(idle_exit_s=1.0)  # given them, then never called
    started.start_learner(_config().policy, selection=get_plugins().selection(), seed=1, num_threads=1)
    pids = {idle.proc.pid, started.proc.pid}
    assert pids <= _helper_pids()
    assert not _wait_gone(pids)  # (each first imports torch, at the lowest priority)
    for helper in (idle, started):
        helper.close()


def test_the_driver_reads_only_data_from_the_helper():
    import pickle

    from rlightning_core.distributed.early_start import _load_reply

    status, value = _load_reply(pickle.dumps(("ok", {"w": np.arange(3, dtype=np.float32),
                                                     "spec": {"log_prob": ((), np.float32)},
                                                     "dtype": np.dtype("int64")})))
    assert status == "ok" and value["spec"]["log_prob"][1] is np.float32
    assert np.array_equal(value["w"], [0, 1, 2]) and value["dtype"] == np.int64
    for hostile in (os.system, subprocess.Popen, np.load):
        with pytest.raises(pickle.UnpicklingError):
            _load_reply(pickle.dumps(hostile))


def test_a_learner_adopts_other_initial_weights_and_says_whether_they_differed():
    from rlightning_core.distributed.actors import LearnerActor
    from rlightning_core.plugins import get_plugins

    config = _config()
    learner = LearnerActor(config.policy, selection=get_plugins().selection(), seed=7, plugins=get_plugins())
    learner.build(*_spaces())
    own = learner.get_weights()
    assert learner.adopt_initial_weights({k: v.copy() for k, v in own.items()}) is True
    other = {k: v + np.float32(0.5) for k, v in own.items()}
    assert learner.adopt_initial_weights(other) is False
    now = learner.get_weights()
    assert all(np.array_equal(now[k], other[k]) for k in other)


@pytest.mark.parametrize(("overrides", "possible"), [
    ((), True),
    (("cluster.early_rollout=false",), False),
    (("cluster.num_learners=0",), False),
    (("cluster.num_learners=2",), False),
    (("cluster.weight_sync=broadcast",), False),
    (("cluster.topology=inference_server", "cluster.num_inference_servers=1"), False),
    (("cluster.sharded_buffer=true",), False),
    (("cluster.learner_num_gpus=1",), False),
    (("policy.device=cuda", "cluster.learner_num_gpus=1"), False),
])
def test_which_runs_start_the_first_rollout_early(overrides, possible):
    from rlightning_core.distributed.plan import describe_ray_plan

    config = _config(*overrides)
    assert early_rollout_possible(config) is possible
    text = "\n".join(describe_ray_plan(config, ["CartPole-v1"] * config.env[0].num_workers))
    assert ("first rollout: with initial weights a helper process builds" in text) is possible


@pytest.mark.ray
def test_an_early_first_rollout_trains_exactly_like_waiting_for_the_learner(ray_cluster):
    """Same seeds, with and without the helper (and with one given up for a learner that was ready first): the
    runners' first weights, the learner's weights after three iterations and the line's takeover all match; no
    helper process is left."""
    address = ray_cluster.get_runtime_context().gcs_address
    code = textwrap.dedent("""
        import json, os, signal, sys, time
        import numpy as np
        import ray
        from rlightning_core import load_config
        from rlightning_core.builders import (build_data_buffer, build_engine, build_env_group,
                                              build_policy_group)

        def run(early):
            config = load_config(sys.argv[1], ["logging.progress=false", "cluster.mode=ray",
                                               f"cluster.address={sys.argv[2]}", "env.num_workers=2",
                                               "env.num_envs=2", f"cluster.early_rollout={early}",
                                               "checkpoint.every=0", "engine.eval_every=0"])
            env_group = build_env_group(config.env, seed=config.seed, cluster=config.cluster)
            engine = build_engine(config, env_group, build_policy_group(config.policy.type, config.policy,
                                                                        config.cluster),
                                  build_data_buffer(config.buffer.type, config.buffer))
            ex = engine.execution
            deferred = len(ex._learner_starting)
            first = ray.get(ex.env_group.actors[0].get_weights.remote())
            ex.reset(0)
            lines = []
            for it in range(3):
                ex.chain_learn(it / 10)
                ex.collect(config.engine.params.rollout_steps)
                ex.learn(it / 10)
                ex.sync()
                lines.append(ex._line_covers_all())
            ex._finish_sync()
            learner = ray.get(ex.learner.get_weights.remote())
            runner = ray.get(ex.env_group.actors[1].get_weights.remote())
            ex.close()
            env_group.close()
            return deferred, first, learner, runner, lines

        def helpers():  # this process's helper children still alive
            me, n = os.getpid(), 0
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
                    cmd = open(f"/proc/{pid}/cmdline", "rb").read()
                except (OSError, IndexError):
                    continue
                n += int(stat[1]) == me and stat[0] != "Z" and b"distributed.early_start" in cmd
            return n

        from rlightning_core.distributed import early_start
        call = early_start.LearnerHelper.call

        def awaited_call(self, method, *args, timeout, give_up=None):
            # whether the helper (SCHED_IDLE) answers before the learner actor is up is a race a busy machine
            # decides: here it always stands in, so the early path is the one compared
            return call(self, method, *args, timeout=max(timeout, 600))

        early_start.LearnerHelper.call = awaited_call
        early = run("true")  # first: the helper starts with this process's ray.init (the join)
        ray.shutdown()  # joined again next: another helper, which is given up (as if the learner was ready first)
        asked = []

        def given_up_call(self, method, *args, timeout, give_up=None):
            pid = self.proc.pid if self.proc is not None else None
            if pid is not None:  # stopped, it cannot answer before the first poll gives it up
                os.kill(pid, signal.SIGSTOP)
            try:
                return call(self, method, *args, timeout=timeout, give_up=lambda: not asked.append(method))
            finally:
                if pid is not None:
                    os.kill(pid, signal.SIGCONT)

        early_start.LearnerHelper.call = given_up_call
        given_up = run("true")
        early_start.LearnerHelper.call = call
        waited = run("false")
        deadline = time.monotonic() + 600  # a guard: the helpers run at SCHED_IDLE
        while helpers() and time.monotonic() < deadline:
            time.sleep(0.1)
        same = lambda a, b: a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
        print(json.dumps({"deferred": [early[0], given_up[0], waited[0]],
                          "first": same(early[1], waited[1]) and same(given_up[1], waited[1]),
                          "learner": same(early[2], waited[2]) and same(given_up[2], waited[2]),
                          "runner": same(early[3], waited[3]), "lines": [early[4], waited[4]],
                          "helpers_left": helpers(), "given_up": asked}))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLIGHTNING_")}
    proc = subprocess.run([sys.executable, "-c", code, str(EXAMPLE), address], capture_output=True, text=True,
                          timeout=600, env=env, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["deferred"] == [3, 0, 0]  # early: the learner's build, buffer and adoption queued, not awaited
    assert out["first"] and out["learner"] and out["runner"]
    assert out["lines"] == [[True, True, True], [True, True, True]]  # the line opens once the learner is up
    assert out["helpers_left"] == 0
    assert out["given_up"] == ["buffer_needs_next_obs"]  # the second run's helper was asked once, then dropped
