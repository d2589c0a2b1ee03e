"""``check_policy``: does a policy component honour :class:`~rlightning_core.policy.base.BasePolicy`?"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

from rlightning_core.testing._common import (
    ConformanceReport,
    Subject,
    checkpoint_round_trip,
    resolve_subject,
    trees_equal,
)

__all__ = ["check_policy", "check_policy_spaces"]


def check_policy(component: str | Callable[..., Any], params: Any = None, *, config: type | None = None,
                 registry: Any = None, observation_space: Any = None, action_space: Any = None,
                 num_envs: int = 4, rollout_steps: int = 16, learn_iterations: int = 1,
                 seed: int = 0, image: bool = False) -> ConformanceReport:
    """Check a policy: roles, ``act``, log-probs, weights and state round trips, and ``learn``.

    Both roles must build; ``act`` must return the right shapes and extras; ``learn`` on a tiny batch must
    change the parameters. With ``image=True`` the observations are channels-first ``uint8`` images
    (:func:`~rlightning_core.testing.image_env.image_spaces`, ``(4, 36, 36)``, unless ``observation_space``
    is given), and the policy must also act on read-only ``uint8`` batches (as they arrive through Ray's object
    store) and leave them ``uint8`` in the buffer.

    The batch is collected by the rollout copy from a :class:`~rlightning_core.testing.doubles.SpaceEnv` with
    the given spaces, into the buffer the policy names in ``default_buffer`` (built with its default params).

    Args:
        component: a registered policy name, or the factory (class) itself.
        params: its params (a mapping as in a config file, an instance, or ``None`` for the defaults).
        config: the params class when ``component`` is a factory.
        registry: the registry to resolve names (the policy's and its buffer's) against.
        observation_space: single-env observation space (default ``Box(-1, 1, (4,))``).
        action_space: single-env action space (default ``Discrete(2)``).
        num_envs: envs in the batch.
        rollout_steps: steps per env collected before each ``learn``.
        learn_iterations: collect-then-learn rounds before parameters must have changed (raise it for
            off-policy algorithms that wait for a warm-up).
        seed: seed of the policies and the env double.
        image: check the policy on image observations (see above).

    Raises:
        ConformanceError: the first broken rule, with the fix.
    """
    from rlightning_core.policy.base import BasePolicy, PolicyRole
    from rlightning_core.testing.doubles import SpaceEnv, default_spaces

    if registry is None:
        from rlightning_core.plugins import get_plugins

        registry = get_plugins().registry
    s = resolve_subject("policy", component, params, config=config, registry=registry)
    default_obs, default_act = default_spaces()
    if image:
        from rlightning_core.testing.image_env import image_spaces

        default_obs = image_spaces()[0]
    obs_space = observation_space if observation_space is not None else default_obs
    act_space = action_space if action_space is not None else default_act

    def build(role: Any, policy_seed: int) -> Any:
        policy = s.build(f"the factory (role={role.name})", observation_space=obs_space, action_space=act_space,
                         role=role, device="cpu", seed=policy_seed)
        if not isinstance(policy, BasePolicy):
            s.fail(f"the factory built a {type(policy).__name__}, which does not derive from BasePolicy",
                   "subclass rlightning_core.policy.base.BasePolicy (the policy group requires it)")
        return policy

    learner, rollout = build(PolicyRole.LEARNER, seed), build(PolicyRole.ROLLOUT, seed + 1)
    s.ok("builds as learner (LEARNER) and rollout copy (ROLLOUT) with (params, observation_space=, action_space=, "
         "role=, device=, seed=)")
    _check_modules(s, learner)
    env = SpaceEnv(obs_space, act_space, num_envs=num_envs, seed=seed)
    obs = env.reset(seed=seed)
    _check_act(s, rollout, obs, act_space, num_envs)
    _check_weights(s, learner, rollout, obs)
    buffer = _check_learn(s, registry, learner, rollout, env, obs_space, act_space, num_envs, rollout_steps,
                          learn_iterations, seed)
    if image:
        _check_images(s, rollout, obs, buffer)
    _check_state(s, learner, lambda: build(PolicyRole.LEARNER, seed + 7))
    return s.report


def _check_modules(s: Subject, policy: Any) -> None:
    import torch

    modules = s.call("modules()", policy.modules)
    if not isinstance(modules, dict) or not modules or not all(
            isinstance(m, torch.nn.Module) for m in modules.values()):
        s.fail(f"modules() returned {modules!r}",
               "return a non-empty dict of name -> torch.nn.Module holding every parameter of the policy")
    s.ok(f"modules() names its torch modules: {', '.join(modules)}")


def _check_act(s: Subject, policy: Any, obs: np.ndarray, act_space: Any, n: int) -> None:
    from gymnasium import spaces

    from rlightning_core.policy.base import PolicyOutput

    out = s.call("act(obs)", policy.act, obs)
    if not isinstance(out, PolicyOutput):
        s.fail(f"act(obs) returned a {type(out).__name__}",
               "return rlightning_core.policy.base.PolicyOutput(actions=..., extras={...})")
    shape = (n, *act_space.shape)
    for name in ("actions", "env_actions"):
        arr = getattr(out, name)
        if arr is None and name == "env_actions":
            continue
        if not isinstance(arr, np.ndarray) or arr.shape != shape:
            s.fail(f"act(obs) {name} is {_short(arr)}, expected a numpy array of shape {shape}",
                   "return one action per observation, in the env's action format, as numpy")
    sent = out.env_actions if out.env_actions is not None else out.actions
    for i in range(n):
        if not act_space.contains(sent[i].astype(act_space.dtype) if act_space.dtype is not None else sent[i]):
            s.fail(f"act(obs): action {i} ({_short(sent[i])}) is outside the action space {act_space}",
                   "sample within the space, or return the clipped action in env_actions")
    s.ok(f"act(obs) returns actions shaped {shape} inside the action space")
    spec = policy.extras_spec
    for key, (eshape, dtype) in spec.items():
        arr = out.extras.get(key)
        want = (n, *eshape)
        if not isinstance(arr, np.ndarray) or arr.shape != want:
            s.fail(f"act(obs) extras[{key!r}] is {_short(arr)}, extras_spec promises shape {want}",
                   f"return extras[{key!r}] as a numpy array of shape {want}, or fix extras_spec")
        if arr.dtype != np.dtype(dtype):
            s.fail(f"act(obs) extras[{key!r}] has dtype {arr.dtype}, extras_spec promises {np.dtype(dtype)}",
                   f"cast with .astype(np.{np.dtype(dtype)}) or fix extras_spec")
    undeclared = sorted(set(out.extras) - set(spec))
    if undeclared:
        s.note(f"extras {undeclared} are not in extras_spec: buffers will not store them")
    if spec:
        s.ok(f"extras match extras_spec: {', '.join(spec)}")
    logp = out.extras.get("log_prob")
    if logp is not None:
        if not np.isfinite(logp).all():
            s.fail(f"log_prob holds non-finite values {_short(logp)}", "compute log-probabilities stably")
        if isinstance(act_space, spaces.Discrete | spaces.MultiDiscrete) and (logp > 1e-6).any():
            s.fail(f"log_prob of discrete actions exceeds 0: {_short(logp)}",
                   "return log-probabilities (log of a probability <= 1), e.g. log_softmax(...).gather(...)")
        s.ok("log_prob is finite" + (" and <= 0" if isinstance(act_space, spaces.Discrete) else ""))
    a = s.call("act(obs, deterministic=True)", policy.act, obs, deterministic=True)
    b = s.call("act(obs, deterministic=True)", policy.act, obs, deterministic=True)
    if not np.array_equal(a.actions, b.actions):
        s.fail("act(obs, deterministic=True) returned different actions for the same observations",
               "take the distribution's mode (argmax / mean) when deterministic=True")
    s.ok("act(obs, deterministic=True) is repeatable")
    if type(policy).value is not _base_value():
        values = s.call("value(obs)", policy.value, obs)
        if not isinstance(values, np.ndarray) or values.shape != (n,) or not np.isfinite(values).all():
            s.fail(f"value(obs) returned {_short(values)}, expected finite values of shape ({n},)",
                   "return one state value per observation as a numpy array")
        s.ok(f"value(obs) returns finite values shaped ({n},)")


def _base_value() -> Any:
    from rlightning_core.policy.base import BasePolicy

    return BasePolicy.value


def _check_weights(s: Subject, learner: Any, rollout: Any, obs: np.ndarray) -> None:
    synced = s.call("rollout_modules()", learner.rollout_modules)
    extra = sorted(set(synced) - set(learner.modules()))
    if not synced or extra:
        s.fail(f"rollout_modules() must name a non-empty subset of modules(), got {sorted(synced)}"
               + (f" ({extra} are not in modules())" if extra else ""),
               "return the modules act() uses, under the names modules() gives them")
    weights = s.call("get_weights()", learner.get_weights)
    if not isinstance(weights, dict) or not weights or not all(
            isinstance(v, np.ndarray) for v in weights.values()):
        s.fail("get_weights() must return a non-empty dict of numpy arrays",
               "keep BasePolicy.get_weights, or return {name: np.ndarray}")
    s.call("set_weights(weights, version=3)", rollout.set_weights, weights, version=3)
    back = s.call("get_weights()", rollout.get_weights)
    if back.keys() != weights.keys() or not all(np.array_equal(weights[k], back[k]) for k in weights):
        diff = sorted(k for k in weights if k not in back or not np.array_equal(weights[k], back[k]))
        s.fail(f"set_weights(get_weights()) of the learner did not reproduce its weights in the rollout copy "
               f"(differs: {diff[:5]})", "copy every array of get_weights() into the modules in set_weights")
    if rollout.weight_version != 3:
        s.fail(f"set_weights(..., version=3) left weight_version at {rollout.weight_version}",
               "set self.weight_version = version when a version is given")
    a = s.call("act(obs, deterministic=True)", learner.act, obs, deterministic=True)
    b = s.call("act(obs, deterministic=True)", rollout.act, obs, deterministic=True)
    if not np.array_equal(a.actions, b.actions):
        s.fail("after set_weights(learner.get_weights()), learner and rollout copy act differently",
               "make every parameter and buffer that act() uses part of rollout_modules() (modules() by default)")
    s.ok("get_weights / set_weights round trip: equal weights, equal deterministic actions, version set")


def _check_state(s: Subject, learner: Any, fresh: Callable[[], Any]) -> None:
    state = s.call("state_dict()", learner.state_dict)
    loaded = checkpoint_round_trip(s, state, "state_dict()")
    other = fresh()
    s.call("load_state_dict(state)", other.load_state_dict, loaded)
    if not trees_equal(_all_weights(learner), _all_weights(other)):
        s.fail("load_state_dict(state_dict()) into a policy built with another seed did not restore the weights",
               "restore every module in load_state_dict (BasePolicy's default does)")
    if not trees_equal(_optimizer_states(learner), _optimizer_states(other)):
        s.fail("load_state_dict(state_dict()) after learn() did not restore the optimizer state",
               "list every optimizer in optimizers() so state_dict() saves it")
    s.ok("state_dict survives torch.save / torch.load(weights_only=True) and load_state_dict restores it")


def _all_weights(policy: Any) -> dict[str, Any]:
    """Every module's state (not only what a sync sends), as numpy arrays."""
    return {f"{m}.{k}": t.detach().cpu().numpy() for m, module in policy.modules().items()
            for k, t in module.state_dict().items()}


def _optimizer_states(policy: Any) -> dict[str, Any]:
    return {name: opt.state_dict() for name, opt in policy.optimizers().items()}


def _check_images(s: Subject, policy: Any, obs: np.ndarray, buffer: Any) -> None:
    if obs.dtype != np.uint8:
        s.fail(f"image=True needs uint8 observations, the observation space gives {obs.dtype}",
               "pass a uint8 Box observation_space (C, H, W), or leave it to the default image space")
    frozen = obs.copy()
    frozen.flags.writeable = False
    with warnings.catch_warnings():  # torch's "not writable" warning on wrapping it is not a failure
        warnings.filterwarnings("ignore", message=".*not writable", category=UserWarning)
        a = s.call("act(read-only uint8 obs, deterministic=True)", policy.act, frozen, deterministic=True)
    b = s.call("act(obs, deterministic=True)", policy.act, obs, deterministic=True)
    if not np.array_equal(a.actions, b.actions):
        s.fail("act() gave other actions for a read-only copy of the same uint8 observations",
               "read observations without writing to them (Ray hands them over read-only)")
    s.ok("act() takes read-only uint8 image batches")
    tensors = getattr(buffer, "tensors", None) or getattr(getattr(buffer, "storage", None), "tensors", None)
    stored = tensors.get("obs") if isinstance(tensors, dict) else None
    if stored is None:
        s.note(f"cannot see how the {type(buffer).__name__} buffer stores observations; dtype not checked")
        return
    import torch

    if stored.dtype != torch.uint8:
        s.fail(f"the buffer stores image observations as {stored.dtype}, not uint8",
               "keep pixels uint8 in storage (space_layout does for uint8 Boxes) and convert on the device")
    s.ok("the buffer stores image observations as uint8")


def _check_learn(s: Subject, registry: Any, learner: Any, rollout: Any, env: Any, obs_space: Any, act_space: Any,
                 n: int, steps: int, iterations: int, seed: int) -> Any:
    from rlightning_core.buffer.base import BufferSpec
    from rlightning_core.config.loading import resolve_params
    from rlightning_core.env.runner import EnvRunner

    name = type(learner).default_buffer
    spec = registry.resolve("buffer", name)
    problems: list[str] = []
    bparams = resolve_params(spec, {}, "buffer", problems)
    if attrs.has(type(bparams)) and isinstance(getattr(bparams, "capacity", None), int):
        # room for what is collected, not the default million transitions (gigabytes of images)
        bparams = attrs.evolve(bparams, capacity=min(bparams.capacity, n * steps * iterations))
    buffer = spec.build(bparams, spec=BufferSpec(observation_space=obs_space, action_space=act_space,
                                                 num_envs=n, num_steps=steps,
                                                 extras_spec=dict(learner.extras_spec), seed=seed))
    runner = EnvRunner(env, rollout, needs_next_obs=buffer.needs_next_obs)
    runner.reset(seed=seed)
    before = learner.get_weights()
    metrics: Any = {}
    for _ in range(iterations):
        chunk, _stats = s.call(f"collecting {steps} steps with act()", runner.collect, steps)
        s.call(f"{name} buffer add(chunk)", buffer.add, chunk)
        metrics = s.call(f"learn({name} buffer)", learner.learn, buffer, progress=0.0)
        if hasattr(buffer, "reset"):
            buffer.reset()
        rollout.set_weights(learner.get_weights())
    if not isinstance(metrics, dict) or not all(isinstance(k, str) for k in metrics):
        s.fail(f"learn() returned {_short(metrics)}", "return a dict of metric name -> float (e.g. loss/policy)")
    for key, value in metrics.items():
        try:
            float(value)
        except (TypeError, ValueError):
            s.fail(f"learn() metric {key!r} is {value!r}, not a number", "return plain floats (tensor.item())")
    after = learner.get_weights()
    if trees_equal(before, after):
        s.fail(f"learn() on {iterations} batch(es) of {steps} x {n} transitions left every parameter unchanged",
               "step the optimizer in learn(); if the algorithm waits for a warm-up, pass learn_iterations=")
    s.ok(f"learn() on a {steps} x {n} batch from the {name!r} buffer changes the parameters and returns "
         f"metrics ({', '.join(sorted(metrics)) or 'none'})")
    return buffer


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_policy_spaces(component: str | Callable[..., Any], params: Any = None, *, action_spaces: Any,
                        config: type | None = None, registry: Any = None, observation_space: Any = None,
                        **kwargs: Any) -> ConformanceReport:
    """Check a policy on every action space it declares it supports, and its refusal of the others.

    ``action_spaces`` names the kinds the policy supports, out of those of
    :func:`~rlightning_core.testing.space_envs.standard_action_spaces` (``discrete``, ``multi_discrete``,
    ``multi_binary``, ``box``, ``tuple``). For each declared kind :func:`check_policy` runs with that space, and,
    when the policy provides ``export_module()``, the exported module must give the actions that
    ``act(obs, deterministic=True)`` sends to the envs. Each kind not declared must be refused when the policy is
    built, with :class:`~rlightning_core.errors.UnsupportedSpaceError` (a config error: ``rlightning train``
    reports it without a traceback and exits with code 2).

    Args:
        component: a registered policy name, or the factory (class) itself.
        params: its params (a mapping, an instance, or ``None`` for the defaults).
        config: the params class when ``component`` is a factory.
        registry: the registry to resolve names against.
        action_spaces: the kinds supported, e.g. ``("discrete", "box")``.
        observation_space: single-env observation space (default ``Box(-1, 1, (4,))``).
        **kwargs: passed on to :func:`check_policy` (``num_envs``, ``rollout_steps``, ...).

    Raises:
        ConformanceError: the first broken rule, with the fix.
    """
    from rlightning_core.errors import UnsupportedSpaceError
    from rlightning_core.policy.base import PolicyRole
    from rlightning_core.testing.doubles import default_spaces
    from rlightning_core.testing.space_envs import standard_action_spaces

    if registry is None:
        from rlightning_core.plugins import get_plugins

        registry = get_plugins().registry
    standard = standard_action_spaces()
    declared = [action_spaces] if isinstance(action_spaces, str) else list(action_spaces)
    unknown = sorted(set(declared) - set(standard))
    if unknown:
        raise ValueError(f"check_policy_spaces: unknown action space kinds {unknown}; kinds are {', '.join(standard)}")
    s = resolve_subject("policy", component, params, config=config, registry=registry)
    obs_space = observation_space if observation_space is not None else default_spaces()[0]
    for kind, space in standard.items():
        if kind in declared:
            report = check_policy(component, params, config=config, registry=registry, observation_space=obs_space,
                                  action_space=space, **kwargs)
            s.ok(f"{kind} actions ({space}): {len(report.passed)} checks passed")
            _check_export(s, component, params, config, registry, obs_space, space, kind)
            continue
        args = (s.params,) if s.takes_params else ()
        try:
            s.factory(*args, observation_space=obs_space, action_space=space, role=PolicyRole.LEARNER,
                      device="cpu", seed=0)
        except UnsupportedSpaceError:
            s.ok(f"{kind} actions ({space}), not declared, are refused with UnsupportedSpaceError")
            continue
        except Exception as exc:
            s.fail(f"building it with the undeclared {kind} action space {space} raised {type(exc).__name__}: {exc}",
                   "raise rlightning_core.errors.unsupported_space(...) for spaces the policy does not support, "
                   f"or declare {kind!r} in action_spaces if it does")
        s.fail(f"it builds with the {kind} action space {space}, which action_spaces does not declare",
               f"declare {kind!r} in action_spaces, or refuse the space with "
               "rlightning_core.errors.unsupported_space(...)")
    return s.report


def _check_export(s: Subject, component: Any, params: Any, config: Any, registry: Any, obs_space: Any,
                  act_space: Any, kind: str) -> None:
    """The exported module acts as ``act(obs, deterministic=True)`` does (when the policy can be exported)."""
    import torch

    from rlightning_core.policy.base import BasePolicy, PolicyRole
    from rlightning_core.testing.doubles import SpaceEnv

    sub = resolve_subject("policy", component, params, config=config, registry=registry)
    policy = sub.build("the factory (role=ROLLOUT)", observation_space=obs_space, action_space=act_space,
                       role=PolicyRole.ROLLOUT, device="cpu", seed=3)
    if type(policy).export_module is BasePolicy.export_module:
        s.note(f"{kind}: no export_module(); the exported actions are not checked")
        return
    obs = SpaceEnv(obs_space, act_space, num_envs=4, seed=3).reset(seed=3)
    out = s.call("act(obs, deterministic=True)", policy.act, obs, deterministic=True)
    sent = out.env_actions if out.env_actions is not None else out.actions
    from rlightning_core.errors import UserError

    try:
        module = policy.export_module()
    except UserError as exc:  # a clear refusal (e.g. a recurrent policy) is allowed
        s.note(f"{kind}: export_module() refuses: {exc}")
        return
    except Exception as exc:
        s.fail(f"{kind}: export_module() raised {type(exc).__name__}: {exc}",
               "export the deterministic action graph, or refuse with a UserError that says why")
    with torch.no_grad():
        exported = module(torch.as_tensor(obs, dtype=torch.float32)).numpy()
    if exported.shape != sent.shape or not np.allclose(exported, sent, atol=1e-5):
        s.fail(f"{kind}: export_module() gives {_short(exported)}, act(obs, deterministic=True) sends "
               f"{_short(sent)}", "export the mode the env gets (start offsets and clipping included)")
    s.ok(f"{kind}: export_module() gives the actions act(obs, deterministic=True) sends")
