"""Runs the normalizer on several devices and prints how far it is from one device.

Started by ``tests/stats/test_multidevice.py`` in a fresh interpreter, so that the
device count set through ``XLA_FLAGS`` does not leak into the rest of the suite:

* ``python -m tests._multidevice_worker matrix SECTION...`` needs 8 CPU devices
  (``XLA_FLAGS=--xla_force_host_platform_device_count=8``). Sections
  ``float32`` and ``float64`` run the same reward stream through ``vmap`` with
  ``axis_name``, ``pmap``, ``shard_map`` and ``jit`` over
  ``NamedSharding``-sharded inputs on 1, 2, 4 and 8 devices, for the three
  semantics (in float32 also with ``decay`` and ``g_max``); ``gymnax`` runs the
  gymnax adapter under ``shard_map``; ``large_batch`` one update past float32's
  exact count; ``keyed`` per-task statistics on 2 and 8 devices; ``groups``
  group advantages and ``whitening`` masked whitening on 2 devices, ``verl``
  verl's estimators and weighted whitening on 2 devices against its float64
  code, ``aggregation`` every loss aggregation mode on 2 and 8 devices. It prints one
  JSON object: for every run, the largest deviation from the single-device run
  and whether every participant ended with bit-identical statistics.
* ``python -m tests._multidevice_worker distributed PORT PROCESS_ID`` is one of two
  processes joined by ``jax.distributed.initialize`` on ``127.0.0.1:PORT``; it
  prints the final statistics it holds, which must match the other process's.

Nothing runs at import (pytest imports this module to collect doctests).
"""

import json
import os
import sys
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import rewardnorm_jax as rn
from tests import group_reference, token_reference
from tests.llm import test_aggregation as aggregation
from tests.streams import scan_steps

STEPS = 48
NUM_ENVS = 21  # real environments; padded with inactive ones to a multiple of 8
PADDED_ENVS = 24
DEVICE_COUNTS = (1, 2, 4, 8)
GAMMA = 0.99
# The three reference semantics, in float32 and float64; in float32 also the
# options whose state is merged too: exponential moving statistics (decay) and
# the running max |G| (g_max, merged with a pmax).
SEMANTICS = {s: {"semantics": s} for s in ("gymnasium", "sb3", "purejaxrl")}
OPTIONS = {
    "gymnasium_decay": {"semantics": "gymnasium", "statistics": rn.Statistics(decay=0.9)},
    "purejaxrl_g_max": {"semantics": "purejaxrl", "g_max": 3.0},
}


def worker_environment(devices: int) -> dict[str, str]:
    """The environment of a worker process with ``devices`` virtual CPU devices.

    This process's environment: its ``XLA_FLAGS`` (``full``'s quick compilation)
    kept, with the device count added; ``JAX_ENABLE_X64`` dropped (the worker
    chooses its dtypes).
    """
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}"
    env = {**os.environ, "XLA_FLAGS": flags.strip(), "JAX_PLATFORMS": "cpu"}
    env.pop("JAX_ENABLE_X64", None)
    return env


def configs(dtype) -> dict:
    """Normalizer configurations run for ``dtype``, by label."""
    return {**SEMANTICS, **OPTIONS} if np.dtype(dtype) == np.float32 else SEMANTICS


def make_stream(seed: int = 0):
    """A (STEPS, PADDED_ENVS) stream: rewards, terminated, truncated, active.

    Environments 0-5 sit out the first 10 steps (so whole shards are empty on
    4 and 8 devices), a random 15 % of the other entries are inactive, and the
    padding environments are never active and hold NaN rewards.
    """
    rng = np.random.default_rng(seed)
    shape = (STEPS, PADDED_ENVS)
    rewards = rng.normal(1.0, 2.0, shape)
    terminated = rng.random(shape) < 0.05
    truncated = rng.random(shape) < 0.03
    active = rng.random(shape) > 0.15
    active[:10, :6] = False
    active[:, NUM_ENVS:] = False
    rewards[:, NUM_ENVS:] = np.nan
    return rewards, terminated, truncated, active


def normalizers(dtype, axis_name=None) -> list:
    """One ``normalize_reward`` per configuration of ``configs(dtype)``."""
    return [
        rn.normalize_reward(GAMMA, dtype=dtype, axis_name=axis_name, **kwargs)
        for kwargs in configs(dtype).values()
    ]


def run_all(dtype, batch_shape, axis_name=None):
    """``(*stream, states=None) -> [(stats, outputs)]``, one normalizer per config.

    All configurations run side by side in one program (one compilation).
    Without ``states`` each starts from ``init(batch_shape)``.
    """
    norms = normalizers(dtype, axis_name)

    def run(rewards, terminated, truncated, active, states=None):
        if states is None:
            states = [n.init(batch_shape) for n in norms]
        results = [
            scan_steps(n, rewards, terminated, truncated, True, active, state=state)
            for n, state in zip(norms, states, strict=True)
        ]
        return [(state.stats, out) for state, out in results]

    run.norms = norms  # type: ignore[attr-defined]  # the configurations travel with run
    return run


def split(x, parts: int) -> np.ndarray:
    """(T, N) -> (parts, T, N / parts): environments grouped as devices hold them."""
    return np.moveaxis(x.reshape(x.shape[0], parts, -1), 1, 0)


def unsplit(x) -> np.ndarray:
    """(parts, T, N / parts) -> (T, N)."""
    x = np.asarray(x)
    return np.moveaxis(x, 0, 1).reshape(x.shape[1], -1)


def run_single(dtype, stream):
    """The reference: one device, plain jit, the unpadded environments."""
    return jax.jit(run_all(dtype, (NUM_ENVS,)))(*(x[:, :NUM_ENVS] for x in stream))


def run_vmaps(dtype, stream) -> dict:
    """``jax.vmap`` with an axis name, in one program.

    ``vmap/P``: ``P`` groups of environments, each group a batch (as ``P``
    devices would hold them). ``vmap_per_env_shared_stats``: a per-environment
    step vmapped over all environments, with the statistics passed in and
    returned unbatched (``in_axes=None`` / ``out_axes=None``).
    """
    state_axes = rn.NormalizeRewardState(stats=None, ret=0, ret_abs_max=None)  # type: ignore[arg-type]  # vmap axes

    def per_env_scan(norm, *stream):
        def per_env_step(state, reward, terminated, truncated, active):
            return norm.step(state, reward, terminated, truncated, active=active)

        vstep = jax.vmap(
            per_env_step,
            in_axes=(state_axes, 0, 0, 0, 0),
            out_axes=(0, state_axes),
            axis_name="env",
        )

        def body(state, xs):
            reward, state = vstep(state, *xs)
            return state, reward

        state = norm.init().replace(ret=jnp.zeros(PADDED_ENVS, dtype))
        state, out = jax.lax.scan(body, state, stream)
        return state.stats, out

    def program(grouped, stream):
        results = {
            f"vmap/{parts}": jax.vmap(
                run_all(dtype, (PADDED_ENVS // parts,), "group"), axis_name="group"
            )(*data)
            for parts, data in grouped.items()
        }
        results["vmap_per_env_shared_stats/8"] = [
            per_env_scan(n, *stream) for n in normalizers(dtype, "env")
        ]
        return results

    def to_host(key, stats, out):
        if key.startswith("vmap_per_env"):  # unbatched statistics: one participant
            return jax.tree.map(lambda x: np.asarray(x)[None], stats), np.asarray(out)
        return stats, unsplit(out)

    grouped = {parts: [split(x, parts) for x in stream] for parts in DEVICE_COUNTS}
    results = jax.jit(program)(grouped, stream)
    return {key: [to_host(key, stats, out) for stats, out in runs] for key, runs in results.items()}


def run_pmap(dtype, stream, parts):
    fn = jax.pmap(
        run_all(dtype, (PADDED_ENVS // parts,), "device"),
        axis_name="device",
        devices=jax.devices()[:parts],
    )
    return [(stats, unsplit(out)) for stats, out in fn(*(split(x, parts) for x in stream))]


def run_pmap_of_vmap(dtype, stream):
    """Two named axes at once: ``pmap`` over 4 devices of ``vmap`` over 6 envs each."""
    per_env = jax.vmap(
        run_all(dtype, (), ("device", "env")),
        in_axes=1,
        out_axes=[(0, 1)] * len(configs(dtype)),
        axis_name="env",
    )
    fn = jax.pmap(per_env, axis_name="device", devices=jax.devices()[:4])
    results = fn(*(split(x, 4) for x in stream))  # per device: (T, 6)
    return [
        # (devices, envs, *packed) -> (participants, *packed)
        (jax.tree.map(lambda x: np.asarray(x).reshape(-1, *x.shape[2:]), stats), unsplit(out))
        for stats, out in results
    ]


def run_shard_map(dtype, stream, parts, mesh_shape=None):
    """``jax.shard_map``; each device returns its own copy of the statistics.

    A two-axis ``mesh_shape`` shards the environments over both axes and merges
    with ``axis_name=("host", "device")``.
    """
    axes: str | tuple[str, str]
    if mesh_shape is None:
        mesh = Mesh(np.array(jax.devices()[:parts]), ("device",))
        axes = "device"
    else:
        mesh = Mesh(np.array(jax.devices()[:parts]).reshape(mesh_shape), ("host", "device"))
        axes = ("host", "device")
    run = run_all(dtype, (PADDED_ENVS,), axes)

    def local(states, *stream):
        results = run(*stream, states=states)
        return [(jax.tree.map(lambda x: x[None], stats), out) for stats, out in results]

    # The state enters through in_specs (statistics replicated, returns sharded),
    # so the per-device returns are typed as varying over the mesh axes.
    state_spec = rn.NormalizeRewardState(stats=P(), ret=P(axes), ret_abs_max=P())  # type: ignore[arg-type]  # a pytree of specs
    fn = jax.jit(
        jax.shard_map(
            local,
            mesh=mesh,
            in_specs=([state_spec] * len(run.norms),) + (P(None, axes),) * 4,
            out_specs=[(P(axes), P(None, axes))] * len(run.norms),
        )
    )
    return fn([n.init((PADDED_ENVS,)) for n in run.norms], *stream)


def run_sharded_jit(dtype, stream, parts):
    """Plain ``jax.jit`` on inputs sharded by ``NamedSharding``; no axis name."""
    mesh = Mesh(np.array(jax.devices()[:parts]), ("device",))
    env_sharding = NamedSharding(mesh, P(None, "device"))
    data = [jax.device_put(x, env_sharding) for x in stream]
    results = jax.jit(run_all(dtype, (PADDED_ENVS,)))(*data)
    if len(results[0][1].sharding.device_set) != parts:
        raise AssertionError("the outputs are not sharded over the mesh")
    return [(jax.tree.map(lambda x: np.asarray(x)[None], stats), out) for stats, out in results]


def final_stats(stats) -> dict:
    """Mean, variance and exact count of (host copies of) statistics."""
    stats = jax.tree.map(np.asarray, stats)
    return {"mean": stats.mean, "var": stats.var, "count": rn.count_as_int(stats)}


def deviation(result, reference) -> float:
    """Largest ``|a - b| / max(|b|, 1)``: relative, absolute for magnitudes below 1."""
    result, reference = np.asarray(result, np.float64), np.asarray(reference, np.float64)
    return float(np.max(np.abs(result - reference) / np.maximum(np.abs(reference), 1.0)))


def compare(stats, out, ref_stats, ref_out) -> dict:
    """How a run (statistics with a leading participant axis) differs from the reference."""
    stats = jax.tree.map(np.asarray, stats)
    ref = final_stats(ref_stats)
    got = final_stats(jax.tree.map(lambda x: x[0], stats))
    return {
        "participants": int(stats.mean.shape[0]),
        "identical": all(bool(np.all(x == x[:1])) for x in jax.tree.leaves(stats)),
        "count": int(got["count"]),
        "reference_count": int(ref["count"]),
        "stats": max(deviation(got["mean"], ref["mean"]), deviation(got["var"], ref["var"])),
        "rewards": deviation(np.asarray(out)[:, :NUM_ENVS], ref_out),
    }


def gymnax_runs() -> dict:
    """A PureJaxRL-style rollout through the gymnax adapter, on 1 and 8 devices.

    ``NormalizeReward(VecEnv(CartPole), semantics="purejaxrl", axis_name="device")``
    resets and steps the environments each device holds inside ``shard_map``;
    the reference is the same wrapper without an axis name over all
    environments on one device.
    """
    import gymnax

    from rewardnorm_jax.gymnax import NormalizeReward, VecEnv, get_transform_state

    env, params = gymnax.make("CartPole-v1")
    num_envs, steps = 16, 64
    # Raw uint32 keys (one per environment and step) and random actions, from NumPy.
    rng = np.random.default_rng(1)
    reset_keys = rng.integers(0, 2**32, (num_envs, 2), dtype=np.uint32)
    step_keys = rng.integers(0, 2**32, (steps, num_envs, 2), dtype=np.uint32)
    actions = rng.integers(0, 2, (steps, num_envs), dtype=np.int32)

    def rollout(env, reset_keys, step_keys, actions):
        _obs, state = env.reset(reset_keys, params)

        def body(state, xs):
            _obs, state, reward, _terminated, _truncated, _info = env.step(
                xs[0], state, xs[1], params
            )
            return state, reward

        state, rewards = jax.lax.scan(body, state, (step_keys, actions))
        return get_transform_state(state).stats, rewards

    single = NormalizeReward(VecEnv(env), semantics="purejaxrl")
    ref_stats, ref_out = jax.jit(partial(rollout, single))(reset_keys, step_keys, actions)
    shared = NormalizeReward(VecEnv(env), semantics="purejaxrl", axis_name="device")

    mesh = Mesh(np.array(jax.devices()), ("device",))

    def local(*args):
        stats, out = rollout(shared, *args)
        return jax.tree.map(lambda x: x[None], stats), out

    # check_vma=False: gymnax's reset returns leaves that do not vary over the
    # mesh (env_state.time, the zero returns) which the scan then carries as
    # varying; JAX's type check rejects that carry, the values are right.
    fn = jax.jit(
        jax.shard_map(
            local,
            mesh=mesh,
            in_specs=(P("device"), P(None, "device"), P(None, "device")),
            out_specs=(P("device"), P(None, "device")),
            check_vma=False,
        )
    )
    stats, out = fn(reset_keys, step_keys, actions)
    return {"gymnax_shard_map/purejaxrl/float32/8": compare(stats, out, ref_stats, ref_out)}


def large_batch() -> dict:
    """One update of more entries than float32 counts exactly, over 8 devices and on one.

    ``8 * (2**21 + 1)`` entries, one masked out: the count 16777223 is odd and
    above :math:`2^{24}`, so no float32 holds it and the count must come from
    the ``uint32`` reduction (across the devices, a ``uint32`` ``psum``).
    """
    parts, size = 8, 8 * (2**21 + 1)
    batch = np.random.default_rng(2).normal(3.0, 2.0, size).astype(np.float32)
    mask = np.ones(size, bool)
    mask[-1] = False
    stats = rn.init_stats()
    reference = jax.jit(rn.merge_stats)(stats, batch, mask)
    mesh = Mesh(np.array(jax.devices()[:parts]), ("device",))

    def local(stats, batch, mask):
        merged = rn.merge_stats(stats, batch, mask, axis_name="device")
        return jax.tree.map(lambda x: x[None], merged)

    fn = jax.jit(
        jax.shard_map(
            local, mesh=mesh, in_specs=(P(), P("device"), P("device")), out_specs=P("device")
        )
    )
    merged = jax.tree.map(np.asarray, fn(stats, batch, mask))
    got, ref = final_stats(jax.tree.map(lambda x: x[0], merged)), final_stats(reference)
    exact = batch[:-1].astype(np.float64)
    return {
        "participants": parts,
        "identical": all(bool(np.all(x == x[:1])) for x in jax.tree.leaves(merged)),
        "count": int(got["count"]),
        "reference_count": int(ref["count"]),
        "expected_count": size - 1,
        "stats": max(deviation(got["mean"], ref["mean"]), deviation(got["var"], ref["var"])),
        # For scale: the single-device float32 result against float64 NumPy.
        "single_vs_float64": max(
            deviation(ref["mean"], exact.mean()), deviation(ref["var"], exact.var())
        ),
    }


def keyed(dtype_name: str) -> dict:
    """Per-task statistics of two objectives under ``shard_map`` on 2 and 8 devices, and on one.

    The 24 environments run 5 tasks, drawn again at each episode's end; each
    device merges its environments' returns into the tasks' shared sets.
    """
    with jax.enable_x64(dtype_name == "float64"):
        dtype = np.dtype(dtype_name)
        rng = np.random.default_rng(4)
        terminated = rng.random((STEPS, PADDED_ENVS)) < 0.1
        tasks = rng.integers(0, 5, (STEPS, PADDED_ENVS)).astype(np.int32)
        for t in range(1, STEPS):  # a task changes only at an episode's end
            tasks[t] = np.where(terminated[t - 1], tasks[t], tasks[t - 1])
        scale = (10.0**tasks)[..., None] * np.array([1.0, 1e3])
        rewards = (rng.normal(1.0, 1.0, (STEPS, PADDED_ENVS, 2)) * scale).astype(dtype)

        def norm(axis_name):
            return rn.normalize_reward(
                GAMMA, axis_name=axis_name, statistics=rn.Statistics(components=1, num_tasks=5)
            )

        def run(axis_name, state, rewards, terminated, tasks):
            transform = norm(axis_name)

            def body(state, xs):
                reward, done, task = xs
                out, state = transform.step(state, reward, done, False, task=task)
                return state, out

            state, out = jax.lax.scan(body, state, (rewards, terminated, tasks))
            return state.stats, out

        state = norm(None).init(rewards.shape[1:])
        ref_stats, ref_out = jax.jit(partial(run, None))(state, rewards, terminated, tasks)
        # The state enters through in_specs: statistics replicated, returns sharded.
        state_spec = rn.NormalizeRewardState(stats=P(), ret=P("device"))  # type: ignore[arg-type]  # a pytree of specs
        results = {}
        for parts in (2, 8):
            mesh = Mesh(np.array(jax.devices()[:parts]), ("device",))

            def local(state, *stream):
                stats, out = run("device", state, *stream)
                return jax.tree.map(lambda leaf: leaf[None], stats), out

            fn = jax.jit(
                jax.shard_map(
                    local,
                    mesh=mesh,
                    in_specs=(state_spec,) + (P(None, "device"),) * 3,
                    out_specs=(P("device"), P(None, "device")),
                )
            )
            stats, out = fn(state, rewards, terminated, tasks)
            stats = jax.tree.map(np.asarray, stats)
            got = final_stats(jax.tree.map(lambda x: x[0], stats))
            ref = final_stats(ref_stats)
            results[f"keyed/{dtype_name}/{parts}"] = {
                "identical": all(bool(np.all(x == x[:1])) for x in jax.tree.leaves(stats)),
                "count": got["count"].tolist(),
                "reference_count": ref["count"].tolist(),
                "stats": max(
                    deviation(got["mean"], ref["mean"]), deviation(got["var"], ref["var"])
                ),
                "rewards": deviation(out, ref_out),
            }
    return results


def popart_runs() -> dict:
    """PopArt's per-task statistics and rescaled head under ``shard_map`` on 2 and 8 devices.

    Each step, the 24 environments' value targets (3 tasks, scales 1 to 100)
    update the statistics across the devices, and the head's last layer is
    rescaled; against the same updates of all 24 targets on one device.
    """
    rng = np.random.default_rng(5)
    tasks = rng.integers(0, 3, (STEPS, PADDED_ENVS)).astype(np.int32)
    targets = (rng.normal(1.0, 1.0, (STEPS, PADDED_ENVS)) * 10.0**tasks).astype(np.float32)
    layer = {"kernel": jnp.asarray(rng.normal(size=(4, 3)), jnp.float32), "bias": jnp.zeros(3)}

    def run(axis_name, layer, targets, tasks):
        popart = rn.popart(1e-3, num_tasks=3, axis_name=axis_name)

        def body(carry, xs):
            layer, state = popart.step(*carry, *xs)
            return (layer, state), None

        (layer, state), _ = jax.lax.scan(body, (layer, popart.init()), (targets, tasks))
        return layer, state

    ref_layer, ref_state = jax.jit(partial(run, None))(layer, targets, tasks)
    results = {}
    for parts in (2, 8):
        mesh = Mesh(np.array(jax.devices()[:parts]), ("device",))

        def local(layer, targets, tasks):
            return jax.tree.map(lambda leaf: leaf[None], run("device", layer, targets, tasks))

        fn = jax.jit(
            jax.shard_map(
                local,
                mesh=mesh,
                in_specs=(P(), P(None, "device"), P(None, "device")),
                out_specs=P("device"),
            )
        )
        got_layer, got_state = jax.tree.map(np.asarray, fn(layer, targets, tasks))
        results[f"popart/float32/{parts}"] = {
            "identical": all(
                bool(np.all(x == x[:1])) for x in jax.tree.leaves((got_layer, got_state))
            ),
            "count": rn.count_as_int(jax.tree.map(lambda x: x[0], got_state.stats)).tolist(),
            "reference_count": rn.count_as_int(ref_state.stats).tolist(),
            "stats": max(
                deviation(got_state.shift[0], ref_state.shift),
                deviation(got_state.scale[0], ref_state.scale),
            ),
            "layer": max(
                deviation(got_layer[name][0], ref_layer[name]) for name in ("kernel", "bias")
            ),
        }
    return results


def matrix(dtype_name: str) -> dict:
    """Every run against the single-device reference, keyed ``mode/config/dtype/devices``."""
    results = {}
    with jax.enable_x64(dtype_name == "float64"):
        dtype = np.dtype(dtype_name)
        stream = [x.astype(dtype) if x.dtype.kind == "f" else x for x in make_stream()]
        references = run_single(dtype, stream)
        runs = run_vmaps(dtype, stream)
        for parts in DEVICE_COUNTS:
            runs[f"pmap/{parts}"] = run_pmap(dtype, stream, parts)
            runs[f"shard_map/{parts}"] = run_shard_map(dtype, stream, parts)
            runs[f"sharded_jit/{parts}"] = run_sharded_jit(dtype, stream, parts)
        runs["pmap_of_vmap_tuple_axes/8"] = run_pmap_of_vmap(dtype, stream)
        runs["shard_map_2x4_tuple_axes/8"] = run_shard_map(dtype, stream, 8, (2, 4))
        for key, per_config in runs.items():
            mode, parts = key.split("/")
            for config, (stats, out), (ref_stats, ref_out) in zip(
                configs(dtype), per_config, references, strict=True
            ):
                results[f"{mode}/{config}/{dtype_name}/{parts}"] = compare(
                    stats, out, ref_stats, ref_out
                )
        if dtype_name == "float32":
            ref = final_stats(references[list(SEMANTICS).index("purejaxrl")][0])
            results["reference/purejaxrl/float32"] = {k: v.item() for k, v in ref.items()}
    return results


def distributed(port: int, process_id: int) -> dict:
    """One of two processes: ``shard_map`` over every device of both processes."""
    # Both processes may start minutes apart on a loaded machine.
    jax.distributed.initialize(
        f"127.0.0.1:{port}", num_processes=2, process_id=process_id, initialization_timeout=600
    )
    try:
        mesh = Mesh(np.array(jax.devices()), ("device",))
        norm = rn.normalize_reward(GAMMA, semantics="purejaxrl", axis_name="device")
        state_spec = rn.NormalizeRewardState(stats=P(), ret=P("device"))  # type: ignore[arg-type]  # a pytree of specs
        fn = jax.jit(
            jax.shard_map(
                lambda s, r, te, tr, a: scan_steps(norm, r, te, tr, True, a, state=s),
                mesh=mesh,
                in_specs=(state_spec,) + (P(None, "device"),) * 4,
                out_specs=(state_spec, P(None, "device")),
            )
        )
        # Every process loads only its own environments' slice of the stream.
        env_sharding = NamedSharding(mesh, P(None, "device"))
        mine = slice(process_id * PADDED_ENVS // 2, (process_id + 1) * PADDED_ENVS // 2)
        rewards, terminated, truncated, active = make_stream()
        stream = [
            jax.make_array_from_process_local_data(env_sharding, x[:, mine])
            for x in (rewards.astype(np.float32), terminated, truncated, active)
        ]
        ret = jax.make_array_from_process_local_data(
            NamedSharding(mesh, P("device")), np.zeros(PADDED_ENVS // 2, np.float32)
        )
        state, _ = fn(norm.init((PADDED_ENVS,)).replace(ret=ret), *stream)
        # The statistics are replicated: one copy per local device, as lists of leaves.
        leaves, treedef = jax.tree.flatten(state.stats)
        copies = [
            [np.asarray(shard.data) for shard in shards]
            for shards in zip(*(leaf.addressable_shards for leaf in leaves), strict=True)
        ]
        local = jax.tree.unflatten(treedef, copies[0])
        return {
            "process_count": jax.process_count(),
            "device_count": jax.device_count(),
            "local_copies": len(copies),
            "local_copies_identical": all(
                all(np.array_equal(a, b) for a, b in zip(copy, copies[0], strict=True))
                for copy in copies
            ),
            "mean": float(local.mean),
            "var": float(local.var),
            "count": int(rn.count_as_int(local)),
        }
    finally:
        jax.distributed.shutdown()


def group_runs() -> dict:
    """Group advantages inside ``shard_map`` on 2 devices, against one device on the whole batch.

    Batch statistics (``batch_std``, TRL's ``gdpo``) with contiguous groups;
    ragged ids whose groups have answers on both devices
    (``groups_span_devices=True``); ids that each device numbers on its own
    (``groups_span_devices=False``); and a contiguous group split across the
    devices, which is refused. Each row: the largest deviation, whether NaN
    and the zero-variance flags match exactly.
    """
    mesh = Mesh(np.array(jax.devices()[:2]), ("device",))
    rng = np.random.default_rng(0)
    rewards = rng.standard_normal(64).astype(np.float32)
    rewards[8:16] = np.float32(1000 / 7)  # a constant group
    rewards[[3, 40]] = np.nan
    two = np.stack([rewards, rng.standard_normal(64).astype(np.float32)], axis=1)
    ids = rng.integers(0, 12, 64).astype(np.int32)  # most groups on both devices
    local_ids = rng.integers(0, 6, 64).astype(np.int32)  # numbered per device
    as_one = local_ids + 6 * (np.arange(64) // 32)  # device k's group g is group g + 6 k
    contiguous: dict[str, tuple[dict[str, Any], np.ndarray]] = {
        "batch_std": ({"estimator": "batch_std", "group_size": 8}, rewards),
        "gdpo_trl": ({"estimator": "gdpo", "convention": "trl", "group_size": 8}, two),
    }
    result: dict[str, dict | str] = {}
    for name, (options, values) in contiguous.items():
        want = jax.jit(rn.group_advantages(**options).apply)(values)
        many = rn.group_advantages(**options, axis_name="device")
        fn = jax.shard_map(many.apply, mesh=mesh, in_specs=P("device"), out_specs=P("device"))
        result[f"groups/{name}"] = _group_deviation(jax.jit(fn)(values), want)
    ragged: dict[str, tuple[dict[str, Any], np.ndarray, np.ndarray, bool]] = {
        "grpo_span": ({"estimator": "grpo", "num_groups": 12}, ids, ids, True),
        "rloo_verl_span": (
            {"estimator": "rloo", "convention": "verl", "num_groups": 12},
            ids,
            ids,
            True,
        ),
        "grpo_local": ({"estimator": "grpo", "num_groups": 6}, local_ids, as_one, False),
    }
    for name, (options, device_ids, whole_ids, span) in ragged.items():
        one = rn.group_advantages(**{**options, "num_groups": 12})
        want = jax.jit(one.apply)(rewards, group_ids=whole_ids)
        many = rn.group_advantages(**options, axis_name="device", groups_span_devices=span)
        fn = jax.shard_map(
            partial(_apply_with_ids, many),
            mesh=mesh,
            in_specs=(P("device"), P("device")),
            out_specs=P("device"),
        )
        result[f"groups/{name}"] = _group_deviation(jax.jit(fn)(rewards, device_ids), want)
    split = rn.group_advantages("grpo", group_size=64, axis_name="device")
    fn = jax.shard_map(split.apply, mesh=mesh, in_specs=P("device"), out_specs=P("device"))
    try:
        jax.jit(fn)(rewards)
        result["groups/split_contiguous"] = "accepted"
    except ValueError as error:
        result["groups/split_contiguous"] = str(error)
    return result


def whitening_runs() -> dict:
    """Masked whitening inside ``shard_map`` on 2 devices, against one device on the whole batch.

    Token values with a NaN and an inf at masked-out positions, rows of
    different lengths, every convention and ``shift_mean=False``. Each row:
    the largest deviation, and whether the NaN match exactly.
    """
    mesh = Mesh(np.array(jax.devices()[:2]), ("device",))
    rng = np.random.default_rng(1)
    values = (rng.standard_normal((8, 24)) * 3 + 2).astype(np.float32)
    mask = np.arange(24) < rng.integers(1, 25, (8, 1))
    values[~mask] = rng.choice([np.nan, np.inf, 1e30], (~mask).sum())
    result: dict[str, dict] = {}
    for convention in ("exact", "verl", "tunix", "openrlhf"):
        for shift_mean in (True, False):
            whiten = partial(rn.masked_whiten, convention=convention, shift_mean=shift_mean)
            want = np.asarray(jax.jit(whiten)(values, mask))
            fn = jax.shard_map(
                partial(whiten, axis_name="device"),
                mesh=mesh,
                in_specs=(P("device"), P("device")),
                out_specs=P("device"),
            )
            got = np.asarray(jax.jit(fn)(values, mask))
            finite = ~np.isnan(want)
            result[f"whiten/{convention}/{shift_mean}"] = {
                "values": deviation(got[finite], want[finite]),
                "nan_match": bool(np.array_equal(np.isnan(got), ~finite)),
                "finite": bool(finite.all()),
            }
    return result


def verl_runs() -> dict:
    """Verl's GPG, vectorized RLOO and weighted whitening on 2 devices, against its float64 code.

    ``shard_map`` on 2 devices over ragged ids spanning both, groups of one
    among them, with a NaN reward, and over contiguous groups (GPG with
    ``f_norm=2``), in float32 and float64; and ``masked_whiten`` with a
    weighted mask. Each row: the largest deviation from the float64 transcription of
    verl's code (``tests/group_reference.py``, ``tests/token_reference.py``),
    relative to ``|A| + 1``, and whether NaN match exactly.
    """
    mesh = Mesh(np.array(jax.devices()[:2]), ("device",))
    rng = np.random.default_rng(2)
    rewards = rng.standard_normal(64) * (rng.random(64) < 0.6)  # many exact zeros
    rewards[5] = np.nan
    ids = rng.integers(0, 12, 64).astype(np.int32)
    ids[[0, 33, 50, 63]] = [12, 13, 14, 15]  # groups of one, on both devices
    values = rng.standard_normal((8, 24)) * 3 + 2
    weights = rng.random((8, 24)) * 2 * (rng.random((8, 24)) < 0.7)
    # float32 values, so that both dtypes and the reference see the same inputs
    rewards, values, weights = (
        x.astype(np.float32).astype(np.float64) for x in (rewards, values, weights)
    )
    want_tokens = token_reference.verl_masked_whiten(values, weights)
    result: dict[str, dict] = {}
    for dtype in ("float32", "float64"):
        with jax.enable_x64(dtype == "float64"):
            contiguous = rn.group_advantages(
                "gpg", convention="verl", group_size=8, f_norm=2.0, axis_name="device"
            )
            fn = jax.shard_map(
                contiguous.apply, mesh=mesh, in_specs=P("device"), out_specs=P("device")
            )
            want = group_reference.verl(rewards, np.arange(64) // 8, 8, "gpg", f_norm=2.0)
            got = jax.jit(fn)(rewards.astype(dtype)).advantages
            result[f"verl/gpg_contiguous/{dtype}"] = _against(got, want)
            for estimator in ("gpg", "rloo_vectorized"):
                want = group_reference.verl(rewards, ids, 16, estimator)
                many = rn.group_advantages(
                    estimator,
                    convention="verl",
                    num_groups=16,
                    axis_name="device",
                    groups_span_devices=True,
                )
                fn = jax.shard_map(
                    partial(_apply_with_ids, many),
                    mesh=mesh,
                    in_specs=(P("device"), P("device")),
                    out_specs=P("device"),
                )
                got = jax.jit(fn)(rewards.astype(dtype), ids).advantages
                result[f"verl/{estimator}/{dtype}"] = _against(got, want)
            whiten = partial(rn.masked_whiten, convention="verl", axis_name="device")
            sharded = jax.shard_map(
                whiten, mesh=mesh, in_specs=(P("device"), P("device")), out_specs=P("device")
            )
            got = jax.jit(sharded)(values.astype(dtype), weights.astype(dtype))
            result[f"verl/weighted_whiten/{dtype}"] = _against(
                got, np.where(weights != 0, want_tokens, 0)
            )
    return result


def aggregation_runs() -> dict:
    """Every loss aggregation mode under ``shard_map`` on 2 and 8 devices and ``pmap`` on 2.

    The devices' shares of a weighted batch with an empty response, NaN and
    inf where masked out, summed, against one device on the whole batch,
    relative to the aggregation of ``|w x|``; and each device's gradient for its
    own tokens against the one-device gradient, relative to it. In float32 and
    float64.
    """
    losses, mask, clean = aggregation.batch(weighted=True)
    value = partial(aggregation.every_mode, axis_name="device")

    def local(x, m):
        return value(x, m)[None], jax.jacrev(value)(x, m)

    result: dict[str, dict] = {}
    for dtype in ("float32", "float64"):
        with jax.enable_x64(dtype == "float64"):
            x, m = losses.astype(dtype), mask.astype(dtype)
            want, want_gradient = aggregation.program(x, m)
            scale = np.asarray(aggregation.program(np.abs(clean).astype(dtype), m)[0])
            runs = {}
            for parts in (2, 8):
                mesh = Mesh(np.array(jax.devices()[:parts]), ("device",))
                fn = jax.shard_map(
                    local,
                    mesh=mesh,
                    in_specs=(P("device"), P("device")),
                    out_specs=(P("device"), P(None, "device")),
                )
                runs[f"shard_map/{parts}"] = jax.jit(fn)(x, m)
            shards = (x.reshape(2, -1, x.shape[-1]), m.reshape(2, -1, m.shape[-1]))
            shares, gradient = jax.pmap(local, axis_name="device")(*shards)
            runs["pmap/2"] = (
                shares[:, 0],
                np.moveaxis(gradient, 0, 1).reshape(want_gradient.shape),
            )
            for name, (shares, gradient) in runs.items():
                got, gradient = np.asarray(shares).sum(0), np.asarray(gradient)
                nonzero = np.asarray(want_gradient) != 0
                result[f"aggregation/{name}/{dtype}"] = {
                    "values": float((np.abs(got - want) / scale).max()),
                    "gradients": float(
                        (
                            np.abs(gradient - want_gradient)[nonzero]
                            / np.abs(want_gradient)[nonzero]
                        ).max()
                    ),
                    "zeros_match": bool(np.array_equal(gradient != 0, nonzero)),
                }
    return result


def _against(got, want) -> dict:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    finite = ~np.isnan(want)
    error = np.abs(got[finite] - want[finite]) / (np.abs(want[finite]) + 1)
    return {
        "error": float(error.max()),
        "nan_match": bool(np.array_equal(np.isnan(got), ~finite)),
    }


def _apply_with_ids(estimate, rewards, group_ids):
    return estimate.apply(rewards, group_ids=group_ids)


def _group_deviation(got, want) -> dict:
    got_adv, want_adv = np.asarray(got.advantages), np.asarray(want.advantages)
    finite = ~np.isnan(want_adv)
    return {
        "advantages": deviation(got_adv[finite], want_adv[finite]),
        "nan_match": bool(np.array_equal(np.isnan(got_adv), ~finite)),
        "zero_variance_match": bool(np.array_equal(got.zero_variance, want.zero_variance)),
    }


if __name__ == "__main__":
    if sys.argv[1] == "matrix":
        sections = {
            "float32": lambda: matrix("float32"),
            "float64": lambda: matrix("float64"),
            "gymnax": gymnax_runs,
            "large_batch": lambda: {"large_batch/float32/8": large_batch()},
            "keyed": lambda: keyed("float32") | keyed("float64"),
            "popart": popart_runs,
            "groups": group_runs,
            "whitening": whitening_runs,
            "verl": verl_runs,
            "aggregation": aggregation_runs,
        }
        if jax.device_count() < 8:
            raise SystemExit(f"needs 8 devices, found {jax.device_count()}: set XLA_FLAGS")
        result = {}
        for section in sys.argv[2:]:
            result.update(sections[section]())
    else:
        result = distributed(int(sys.argv[2]), int(sys.argv[3]))
    print(json.dumps(result))
