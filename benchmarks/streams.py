"""Reward streams beyond one scalar per environment: each layout against the shared step.

At ``N`` environments (``--sizes``, default 4096), side by side in one run
(``_timing.compare``), a jitted ``lax.scan`` of ``normalize_reward``'s step
over the same stream:

* ``shared``: one set of statistics for ``N`` scalar rewards (the default step);
* ``tasks K``: ``Statistics(num_tasks=K)`` with each environment's task id, for K = 16
  and 256 (ids drawn again at each episode's end);
* ``(N, 3) shared`` / ``(N, 3) each``: three objectives (or stacked agents) as
  an ``(N, 3)`` array, one scale for all or one set each (``Statistics(components=1)``);
* ``dict of 3``: the same three rewards as a dict of ``(N,)`` arrays (JaxMARL's
  agents), stacked along the component axis and unstacked after the step;
* ``intrinsic``: ``semantics="non_episodic"``.

Usage::

    python -m benchmarks.streams
    python -m benchmarks.streams --sizes 1024 4096 --markdown
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np

import rewardnorm_jax as rn
from benchmarks._timing import add_common_args, compare, loop_kernels, print_results

GAMMA = 0.99
AGENTS = ("agent_0", "agent_1", "agent_2")


def make_stream(steps: int, num_envs: int, num_tasks: int, seed: int = 0):
    """Rewards ``(T, N, 3)``, ends ``(T, N)`` and task ids ``(T, N)``, redrawn after each end."""
    rng = np.random.default_rng(seed)
    rewards = rng.standard_normal((steps, num_envs, 3), dtype=np.float32)
    terminated = rng.random((steps, num_envs)) < 0.01
    tasks = np.zeros((steps, num_envs), np.int32)
    current = rng.integers(0, num_tasks, num_envs)
    for t in range(steps):
        if t:
            redrawn = rng.integers(0, num_tasks, num_envs)
            current = np.where(terminated[t - 1], redrawn, current)
        tasks[t] = current
    return rewards, terminated, tasks


def scan_of(transform, with_tasks=False):
    """A jitted scan of ``transform.step`` over ``(rewards, terminated[, tasks])``."""

    @jax.jit
    def scan(rewards, terminated, tasks):
        def body(state, xs):
            reward, done, task = xs
            ids = {"task": task} if with_tasks else {}
            out, state = transform.step(state, reward, done, False, **ids)
            return state, out

        return jax.lax.scan(body, transform.init(rewards.shape[1:]), (rewards, terminated, tasks))[
            1
        ]

    return scan


def dict_scan(transform):
    """As :func:`scan_of`, with the rewards a dict of agents stacked into components."""

    @jax.jit
    def scan(rewards, terminated, tasks):
        def body(state, xs):
            reward, done = xs
            stacked = jnp.stack([reward[name] for name in AGENTS], axis=-1)
            out, state = transform.step(state, stacked, done, False)
            return state, {name: out[..., i] for i, name in enumerate(AGENTS)}

        as_dict = {name: rewards[..., i] for i, name in enumerate(AGENTS)}
        init = transform.init(rewards.shape[1:])
        return jax.lax.scan(body, init, (as_dict, terminated))[1]

    return scan


def variants(num_tasks_list=(16, 256)):
    """Name -> (scan, which rewards: scalar or three)."""
    each = rn.normalize_reward(GAMMA, statistics=rn.Statistics(components=1))
    found = {"shared": (scan_of(rn.normalize_reward(GAMMA)), "scalar")}
    for k in num_tasks_list:
        found[f"tasks {k}"] = (
            scan_of(rn.normalize_reward(GAMMA, statistics=rn.Statistics(num_tasks=k)), True),
            "scalar",
        )
    found["(N, 3) shared"] = (scan_of(rn.normalize_reward(GAMMA)), "three")
    found["(N, 3) each"] = (scan_of(each), "three")
    found["dict of 3 each"] = (dict_scan(each), "three")
    found["intrinsic"] = (scan_of(rn.normalize_reward(GAMMA, semantics="non_episodic")), "scalar")
    return found


def measure(num_envs: int, steps: int, repeats: int) -> list[list]:
    """Rows: each variant's microseconds per step, ratios and kernels."""
    rewards, terminated, tasks = make_stream(steps, num_envs, 16)
    _, _, tasks_256 = make_stream(steps, num_envs, 256)
    scalar = (jnp.asarray(rewards[..., 0]), jnp.asarray(terminated))
    three = (jnp.asarray(rewards), jnp.asarray(terminated))
    found = variants()

    def args(name, kind):
        ids = tasks_256 if name == "tasks 256" else tasks
        return (*(scalar if kind == "scalar" else three), jnp.asarray(ids))

    inputs = {name: args(name, kind) for name, (_, kind) in found.items()}
    calls = {name: (lambda s=scan, a=inputs[name]: s(*a)) for name, (scan, _) in found.items()}
    seconds = compare(calls, repeats)
    us = {name: t / steps * 1e6 for name, t in seconds.items()}
    return [
        [
            num_envs,
            name,
            us[name],
            us[name] / us["shared"],
            us[name] / us["(N, 3) each"],
            loop_kernels(scan, *args(name, kind)),
        ]
        for name, (scan, kind) in found.items()
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096], help="numbers N")
    parser.add_argument("--steps", type=int, default=500, help="stream length T (default 500)")
    add_common_args(parser)
    args = parser.parse_args(argv)
    headers = ["N", "layout", "us/step", "/shared", "/(N, 3) each", "kernels"]
    rows = [row for n in args.sizes for row in measure(n, args.steps, args.repeats)]
    print_results("Reward streams, float32", headers, rows, args.markdown)


if __name__ == "__main__":
    main()
