"""Brax's PPO on 2 CPU devices with statistics merged across its pmap axis, against one device.

Started by ``tests/adapters/test_brax_multidevice.py`` in a fresh interpreter with
``XLA_FLAGS=--xla_force_host_platform_device_count=2`` (set before JAX starts),
as ``python -m tests._brax_multidevice_worker``. It trains Brax's own
``ppo.train`` on the inverted pendulum through
``wrap_env_fn(normalize_reward(0.99, axis_name="i"))`` (``"i"`` is the axis
name of Brax's ``pmap``), records every step each device takes
(:mod:`tests.brax_recorder`), feeds the gathered stream, both devices'
environments side by side, to the core on one device, and prints one JSON
object: each device's final count, whether the devices ended with identical
statistics, and the largest deviation of the statistics and of every
normalized reward from the single-device run.

Nothing runs at import (pytest imports this module to collect doctests).
"""

import json

import jax
import numpy as np

import rewardnorm_jax as rn
from tests.streams import jit_scan_steps

AXIS = "i"  # Brax's trainers pmap over this axis name
GAMMA = 0.99
NUM_ENVS = 8


def deviation(result, reference) -> float:
    """Largest ``|a - b| / max(|b|, 1)``: relative, absolute for magnitudes below 1."""
    result, reference = np.asarray(result, np.float64), np.asarray(reference, np.float64)
    return float(np.max(np.abs(result - reference) / np.maximum(np.abs(reference), 1.0)))


def train(records: list, progress: list) -> None:
    """Brax PPO, 8 environments over every device, statistics merged across ``AXIS``."""
    from brax import envs
    from brax.training.agents.ppo import networks as ppo_networks
    from brax.training.agents.ppo import train as ppo

    from rewardnorm_jax import brax as rnb
    from tests import brax_recorder

    env = envs.get_environment("inverted_pendulum", backend="positional")
    transform = rn.normalize_reward(GAMMA, axis_name=AXIS)
    ppo.train(
        env,
        wrap_env_fn=brax_recorder.recording_wrap_env_fn(transform, records, axis_name=AXIS),
        eval_env=rnb.RawRewardEvaluation(env),
        num_timesteps=1_600,
        num_evals=1,
        episode_length=25,
        num_envs=NUM_ENVS,
        batch_size=8,
        num_minibatches=2,
        unroll_length=10,
        num_updates_per_batch=1,
        num_eval_envs=8,
        network_factory=lambda *args, **kwargs: ppo_networks.make_ppo_networks(
            *args, policy_hidden_layer_sizes=(16,), value_hidden_layer_sizes=(16,), **kwargs
        ),
        seed=0,
        progress_fn=lambda step, metrics: progress.append(step),
    )


def main() -> dict:
    """Trains, then compares the merged statistics with the core on one device."""
    from tests import brax_recorder

    records: list = []
    progress: list = []
    train(records, progress)
    steps = brax_recorder.stream(records)
    single = rn.normalize_reward(GAMMA)  # one device, the whole batch, no axis
    reference, expected = jit_scan_steps(
        single, steps["raw"], steps["terminated"], steps["truncated"]
    )
    first, *others = steps["final"]  # the statistics merged; the returns are each device's own
    identical = all(
        np.array_equal(a, b)
        for other in others
        for a, b in zip(jax.tree.leaves(first.stats), jax.tree.leaves(other.stats), strict=True)
    )
    return {
        "device_count": jax.device_count(),
        "devices_recorded": len(steps["final"]),
        "shape": list(steps["raw"].shape),
        "terminations": int(steps["terminated"].sum()),
        "truncations": int(steps["truncated"].sum()),
        "counts": [int(rn.count_as_int(final.stats)) for final in steps["final"]],
        "reference_count": int(rn.count_as_int(reference.stats)),
        "brax_steps": int(progress[-1]),
        "identical": identical,
        "returns": deviation(np.concatenate([f.ret for f in steps["final"]]), reference.ret),
        "stats": max(
            deviation(getattr(first.stats, name), getattr(reference.stats, name))
            for name in ("mean", "var")
        ),
        "rewards": deviation(steps["reward"], expected),
    }


if __name__ == "__main__":
    print(json.dumps(main()))
