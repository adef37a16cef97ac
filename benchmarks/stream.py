"""Normalizing a (T, N) reward stream: ours vs Gymnasium vs naive JAX vs the memory floor.

Every variant normalizes the same stream of ``T`` steps of ``N`` environments
(standard-normal rewards, episodes terminating with probability ``--done-prob``
per step) and writes one normalized reward per input reward:

* ``floor``: a jitted ``lax.scan`` that reads each reward once, carries ``N``
  floats (``c <- 0.99 c + r``) and writes one output: what any scan over the
  stream costs, whatever it computes.
* ``floor+sum``: the floor plus one sum over the batch per step, which the
  step's output depends on: the least any normalizer by post-update batch
  statistics does (it cannot scale step ``t`` before summing step ``t``).
* ``ours``: a jitted ``lax.scan`` over ``rewardnorm_jax.normalize_reward``'s
  ``step`` (Gymnasium semantics, float32, NaN-safe), with Gymnasium's vector
  autoreset convention (an environment sits out the step after its episode
  ended: the ``active`` mask, computed from the stream's terminations), so it
  computes exactly what Gymnasium's vector wrapper does; the script checks
  that both outputs agree.
* ``default``: the same step called as ``step(state, r, terminated,
  False)``, without ``active`` (JAX environments that reset in the step they
  end): NaN-safe, so still masked by the rewards' finiteness.
* ``fast``: the step built with ``finite_rewards=True`` and called without
  ``active``: no masks at all, like the naive step.
* ``naive``: a jitted ``lax.scan`` over PureJaxRL's ``NormalizeVecReward``
  arithmetic (two-pass ``jnp.mean`` / ``jnp.var``, float32 count, no masks).
* ``gymnasium``: Gymnasium's ``gymnasium.wrappers.vector.NormalizeReward``
  around a vector environment that replays the stream from NumPy arrays;
  ``replay`` is that environment's loop alone (the part of Gymnasium's time
  that is not the wrapper's). Both host loops are timed on the first
  ``--host-steps`` steps; the whole stream is run once to check that ours
  gives Gymnasium's rewards.

Times are microseconds per step (all ``N`` environments), the minimum over
``--repeats`` alternating calls (see ``_timing.py``), in two groups: the JAX
scans among themselves, then ours against the two host loops (which flush the
caches); ``gymnasium/ours`` comes from the second group.

Usage::

    python -m benchmarks.stream                      # N = 64, 1024, 4096, 65536
    python -m benchmarks.stream --sizes 4096 --markdown
"""

import argparse

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.wrappers.vector import NormalizeReward as GymnasiumNormalizeReward

import rewardnorm_jax as rn
from benchmarks._timing import add_common_args, compare, loop_kernels, print_results

GAMMA = 0.99
EPSILON = 1e-8


def make_stream(steps: int, num_envs: int, done_prob: float = 0.01, seed: int = 0):
    """Float32 rewards and boolean terminations of shape ``(steps, num_envs)``, NumPy."""
    rng = np.random.default_rng(seed)
    rewards = rng.standard_normal((steps, num_envs), dtype=np.float32)
    terminated = rng.random((steps, num_envs)) < done_prob
    return rewards, terminated


@jax.jit
def floor_scan(rewards):
    """Reads each reward once, carries ``N`` floats, writes one output per reward."""

    def body(carry, reward):
        carry = GAMMA * carry + reward
        return carry, carry

    return jax.lax.scan(body, jnp.zeros_like(rewards[0]), rewards)[1]


@jax.jit
def floor_sum_scan(rewards):
    """The floor plus one batch sum per step that the output waits for."""

    def body(carry, reward):
        carry = GAMMA * carry + reward
        total = jnp.sum(carry)
        return carry, reward * jax.lax.rsqrt(total * total + 1.0)

    return jax.lax.scan(body, jnp.zeros_like(rewards[0]), rewards)[1]


_NORM = rn.normalize_reward(GAMMA, EPSILON)


def next_step_active(terminated):
    """Gymnasium's next-step autoreset: an environment sits out the step after its episode ended."""
    return jnp.concatenate([jnp.ones_like(terminated[:1]), ~terminated[:-1]])


def step_scan(norm: rn.RewardTransform, with_active: bool = False):
    """A jitted ``lax.scan`` of ``norm.step(state, r, terminated, False)`` over a stream.

    With ``with_active``, under Gymnasium's vector (next-step autoreset)
    convention, the scan takes a third argument: the ``active`` masks of every
    step (:func:`next_step_active`), made outside the timed scan, as a
    training loop holds each step's mask from the step before.
    """

    @jax.jit
    def scan(rewards, terminated, *active):
        if len(active) != with_active:
            raise TypeError(f"this scan takes {2 + with_active} arguments")

        def body(state, inputs):
            reward, done, *active = inputs
            out, state = norm.step(state, reward, done, False, active=active[0] if active else None)
            return state, out

        return jax.lax.scan(body, norm.init(rewards.shape[1:]), (rewards, terminated, *active))[1]

    return scan


ours_scan = step_scan(_NORM, with_active=True)
default_scan = step_scan(_NORM)
fast_scan = step_scan(rn.normalize_reward(GAMMA, EPSILON, finite_rewards=True))


def inline_init(num_envs: int):
    """State of :func:`inline_step`: ``(mean, var, count, return)``, float32."""
    return (
        jnp.float32(0.0),
        jnp.float32(1.0),
        jnp.float32(1e-4),
        jnp.zeros(num_envs, jnp.float32),
    )


def inline_step(state, reward, done, gamma=GAMMA):
    """PureJaxRL's ``NormalizeVecReward`` arithmetic, as written there (two passes)."""
    mean, var, count, return_val = state
    return_val = return_val * gamma * (1 - done) + reward
    batch_mean = jnp.mean(return_val, axis=0)
    batch_var = jnp.var(return_val, axis=0)
    batch_count = reward.shape[0]
    delta = batch_mean - mean
    tot_count = count + batch_count
    new_mean = mean + delta * batch_count / tot_count
    m_a = var * count
    m_b = batch_var * batch_count
    m2 = m_a + m_b + jnp.square(delta) * count * batch_count / tot_count
    new_var = m2 / tot_count
    return reward / jnp.sqrt(new_var + 1e-8), (new_mean, new_var, tot_count, return_val)


@jax.jit
def naive_scan(rewards, terminated):
    """A naive two-pass normalizer: :func:`inline_step` in a scan."""

    def body(state, inputs):
        out, state = inline_step(state, *inputs)
        return state, out

    return jax.lax.scan(body, inline_init(rewards.shape[1]), (rewards, terminated))[1]


class ReplayVectorEnv(VectorEnv):
    """A vector environment whose steps replay a recorded (T, N) reward stream."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}  # noqa: RUF012  Gymnasium's own type

    def __init__(self, rewards: np.ndarray, terminated: np.ndarray):
        self.rewards, self.terminated = rewards, terminated
        self.num_envs = rewards.shape[1]
        self.single_observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (self.num_envs, 1), np.float32)
        self.action_space = gym.spaces.MultiDiscrete(np.full(self.num_envs, 2))
        self._obs = np.zeros((self.num_envs, 1), np.float32)
        self._truncated = np.zeros(self.num_envs, bool)
        self._t = 0

    def reset(self, *, seed=None, options=None):
        self._t = 0
        return self._obs, {}

    def step(self, actions):
        t, self._t = self._t, self._t + 1
        return self._obs, self.rewards[t], self.terminated[t], self._truncated, {}


def run_stream(env, out: np.ndarray) -> np.ndarray:
    """Steps ``env`` through ``len(out)`` steps; writes the rewards it emits to ``out``."""
    env.reset()
    for t in range(len(out)):
        out[t] = env.step(None)[1]
    return out


def measure(num_envs: int, steps: int, repeats: int, done_prob: float, host_steps: int) -> dict:
    """Microseconds per step of every variant on one stream; checks ours against Gymnasium.

    The host loops (``gymnasium``, ``replay``) are timed on the first
    ``host_steps`` steps (their cost per step does not depend on the step).
    """
    rewards, terminated = make_stream(steps, num_envs, done_prob)
    rewards_jax, terminated_jax = jnp.asarray(rewards), jnp.asarray(terminated)
    active_jax = next_step_active(terminated_jax)
    replay = ReplayVectorEnv(rewards, terminated)
    gymnasium = GymnasiumNormalizeReward(ReplayVectorEnv(rewards, terminated), GAMMA, EPSILON)

    expected = run_stream(gymnasium, np.empty((steps, num_envs), np.float64))
    got = np.asarray(ours_scan(rewards_jax, terminated_jax, active_jax), np.float64)
    rel_err = float(np.max(np.abs(got - expected) / np.maximum(np.abs(expected), 1e-3)))
    if not rel_err < 1e-3:
        raise AssertionError(f"ours differs from Gymnasium's vector wrapper: rel. error {rel_err}")
    # Without active masks, on finite rewards and terminations alone, the default
    # and fast steps compute the naive step's recurrence (with an exact count).
    naive = np.asarray(naive_scan(rewards_jax, terminated_jax), np.float64)
    for name, scan in (("default", default_scan), ("fast", fast_scan)):
        out = np.asarray(scan(rewards_jax, terminated_jax), np.float64)
        diff = float(np.max(np.abs(out - naive) / np.maximum(np.abs(naive), 1e-3)))
        if not diff < 1e-3:
            raise AssertionError(f"{name} differs from the naive step: rel. error {diff}")

    # Two groups, each alternating within itself: the host loops sweep megabytes
    # of NumPy arrays through the caches, which would slow whichever JAX scan
    # runs after them. gymnasium/ours is taken within the second group.
    jax_times = compare(
        {
            "floor": lambda: floor_scan(rewards_jax),
            "floor+sum": lambda: floor_sum_scan(rewards_jax),
            "ours": lambda: ours_scan(rewards_jax, terminated_jax, active_jax),
            "default": lambda: default_scan(rewards_jax, terminated_jax),
            "fast": lambda: fast_scan(rewards_jax, terminated_jax),
            "naive": lambda: naive_scan(rewards_jax, terminated_jax),
        },
        repeats,
    )
    host_steps = min(host_steps, steps)
    host_out = np.empty((host_steps, num_envs), np.float64)
    host_times = compare(
        {
            "ours": lambda: ours_scan(rewards_jax, terminated_jax, active_jax),
            "gymnasium": lambda: run_stream(gymnasium, host_out),
            "replay": lambda: run_stream(replay, host_out),
        },
        repeats,
    )
    kernels = {
        "floor": loop_kernels(floor_scan, rewards_jax),
        "floor+sum": loop_kernels(floor_sum_scan, rewards_jax),
        "ours": loop_kernels(ours_scan, rewards_jax, terminated_jax, active_jax),
        "default": loop_kernels(default_scan, rewards_jax, terminated_jax),
        "fast": loop_kernels(fast_scan, rewards_jax, terminated_jax),
        "naive": loop_kernels(naive_scan, rewards_jax, terminated_jax),
    }
    us = {name: seconds / steps * 1e6 for name, seconds in jax_times.items()}
    us["gymnasium"] = host_times["gymnasium"] / host_steps * 1e6
    us["replay"] = host_times["replay"] / host_steps * 1e6
    us["gymnasium/ours"] = us["gymnasium"] / (host_times["ours"] / steps * 1e6)
    return us | {"rel_err": rel_err, "kernels": kernels}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[64, 1024, 4096, 65536],
        help="numbers of environments N (default: 64 1024 4096 65536)",
    )
    parser.add_argument("--steps", type=int, default=1000, help="stream length T (default 1000)")
    parser.add_argument(
        "--done-prob",
        type=float,
        default=0.01,
        help="per-step termination probability (default 0.01)",
    )
    parser.add_argument(
        "--host-steps",
        type=int,
        default=200,
        help="steps of the stream the Gymnasium loops are timed on (default 200)",
    )
    add_common_args(parser)
    args = parser.parse_args(argv)

    headers = [
        "N",
        "floor us/step",
        "floor+sum us/step",
        "ours us/step",
        "default us/step",
        "fast us/step",
        "naive us/step",
        "gymnasium us/step",
        "replay alone us/step",
        "ours/naive",
        "default/naive",
        "fast/naive",
        "ours/floor",
        "ours/(floor+sum)",
        "naive/floor",
        "gymnasium/ours",
        "max rel. diff ours vs gymnasium",
    ]
    rows, kernel_rows = [], []
    for num_envs in args.sizes:
        us = measure(num_envs, args.steps, args.repeats, args.done_prob, args.host_steps)
        kernel_rows.append([num_envs, *us["kernels"].values()])
        rows.append(
            [
                num_envs,
                us["floor"],
                us["floor+sum"],
                us["ours"],
                us["default"],
                us["fast"],
                us["naive"],
                us["gymnasium"],
                us["replay"],
                us["ours"] / us["naive"],
                us["default"] / us["naive"],
                us["fast"] / us["naive"],
                us["ours"] / us["floor"],
                us["ours"] / us["floor+sum"],
                us["naive"] / us["floor"],
                us["gymnasium/ours"],
                f"{us['rel_err']:.1e}",
            ]
        )
    print_results(
        f"Reward stream, T={args.steps} steps, float32",
        headers,
        rows,
        args.markdown,
        packages=("jax", "jaxlib", "numpy", "gymnasium"),
    )
    print_results(
        "Kernels launched per scan step (compiled HLO of the loop body)",
        ["N", "floor", "floor+sum", "ours", "default", "fast", "naive"],
        kernel_rows,
        args.markdown,
        packages=("jax", "jaxlib"),
    )


if __name__ == "__main__":
    main()
