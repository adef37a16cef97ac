"""Per-step cost added by the Gymnasium adapters, against Gymnasium's own wrappers.

The environments are trivial (a step returns precomputed arrays), so the
wrapper's own work dominates. For each setting the script times, in turn
(A, B, C, A, B, C, ...; minimum over ``--repeats`` after a warm-up; see
``benchmarks/_timing.py``), a loop of ``--steps`` steps of:

* the bare environment;
* Gymnasium's ``NormalizeReward`` (``gymnasium.wrappers`` / ``.vector``);
* ``rewardnorm_jax.gymnasium`` (``.vector``) ``NormalizeReward``;
* single env only: the bare environment plus one jitted call of the JAX core's
  ``normalize_reward().step`` per step (the naive way to reuse the core).

"added" is a variant's time per step minus the bare environment's. Targets:
ours adds at most half of what Gymnasium's single-env wrapper adds, and the
vector adapter is faster than Gymnasium's from 64 environments on.

Run ``python -m benchmarks.gymnasium_overhead --help`` for the options; the
defaults finish in well under two minutes.
"""

import argparse

import gymnasium as gym
import jax
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space
from gymnasium.wrappers import NormalizeReward as GymNormalizeReward
from gymnasium.wrappers.vector import NormalizeReward as GymVectorNormalizeReward

import rewardnorm_jax as rn
from benchmarks import _timing
from rewardnorm_jax.gymnasium import NormalizeReward
from rewardnorm_jax.gymnasium.vector import NormalizeReward as VectorNormalizeReward

NUM_ENVS = (1, 8, 64, 256, 1024, 4096)
PERIOD = 64  # rows of precomputed rewards and flags the trivial envs cycle through
EPISODE = 50  # each environment terminates once every EPISODE steps (staggered)


class TrivialEnv(gym.Env):
    """One environment whose step costs almost nothing: precomputed values, cycled."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self):
        rng = np.random.default_rng(0)
        self._obs = np.zeros(1, np.float32)
        self._rewards = [float(r) for r in rng.normal(size=PERIOD)]
        self._t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs, {}

    def step(self, action):
        self._t += 1
        return self._obs, self._rewards[self._t % PERIOD], self._t % EPISODE == 0, False, {}


class TrivialVectorEnv(VectorEnv):
    """N environments in NEXT_STEP autoreset mode whose step returns precomputed arrays."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}  # noqa: RUF012  Gymnasium's own type

    def __init__(self, num_envs: int):
        self.num_envs = num_envs
        self.single_observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        rng = np.random.default_rng(0)
        self._obs = np.zeros((num_envs, 1), np.float32)
        self._rewards = rng.normal(size=(PERIOD, num_envs))
        steps = np.arange(PERIOD)[:, None] + np.arange(num_envs)[None, :]
        self._terminated = steps % EPISODE == 0
        self._truncated = np.zeros((PERIOD, num_envs), bool)
        self._t = 0

    def reset(self, *, seed=None, options=None):
        self._t = 0
        return self._obs, {}

    def step(self, actions):
        self._t = t = (self._t + 1) % PERIOD
        return self._obs, self._rewards[t], self._terminated[t], self._truncated[t], {}


def stepping(env, action, steps: int):
    """A zero-argument callable running ``steps`` steps of ``env``."""
    env.reset(seed=0)

    def run():
        for _ in range(steps):
            env.step(action)

    return run


def jitted_core_stepping(steps: int):
    """The bare env plus one jitted call of the JAX core per step (float32)."""
    env = TrivialEnv()
    env.reset(seed=0)
    norm = rn.normalize_reward(gamma=0.99, epsilon=1e-8)
    step = jax.jit(norm.step)
    box = [norm.init()]

    def run():
        state = box[0]
        for _ in range(steps):
            _, reward, terminated, truncated, _ = env.step(0)
            scaled, state = step(state, reward, terminated, truncated)
            float(scaled)  # the user needs the reward on the host
        box[0] = state
        return state

    return run


def single_env(steps: int, repeats: int):
    variants = {
        "bare env": stepping(TrivialEnv(), 0, steps),
        "Gymnasium NormalizeReward": stepping(GymNormalizeReward(TrivialEnv()), 0, steps),
        "rewardnorm_jax.gymnasium.NormalizeReward": stepping(
            NormalizeReward(TrivialEnv()), 0, steps
        ),
        "bare env + jitted core step": jitted_core_stepping(steps),
    }
    best = {name: t / steps * 1e6 for name, t in _timing.compare(variants, repeats).items()}
    bare = best["bare env"]
    gym_added = best["Gymnasium NormalizeReward"] - bare
    rows = []
    for name, micros in best.items():
        added = micros - bare
        rows.append((name, micros, added, added / gym_added if name != "bare env" else "-"))
    return rows


def vector_env(num_envs: int, steps: int, repeats: int):
    action = np.zeros(num_envs, np.int64)
    variants = {
        "bare": stepping(TrivialVectorEnv(num_envs), action, steps),
        "gymnasium": stepping(GymVectorNormalizeReward(TrivialVectorEnv(num_envs)), action, steps),
        "ours": stepping(VectorNormalizeReward(TrivialVectorEnv(num_envs)), action, steps),
    }
    best = {name: t / steps * 1e6 for name, t in _timing.compare(variants, repeats).items()}
    gym_added = best["gymnasium"] - best["bare"]
    ours_added = best["ours"] - best["bare"]
    return (
        num_envs,
        best["bare"],
        gym_added,
        ours_added,
        ours_added / gym_added,
        gym_added / ours_added,
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50, help="steps per timed call (default 50)")
    parser.add_argument(
        "--num-envs",
        type=int,
        nargs="+",
        default=list(NUM_ENVS),
        help=f"vector sizes to time (default {' '.join(map(str, NUM_ENVS))})",
    )
    _timing.add_common_args(parser)
    # Short calls, many of them: on shared cores the minimum needs quiet windows.
    parser.set_defaults(repeats=100)
    args = parser.parse_args(argv)
    if args.repeats < _timing.MIN_REPEATS:
        print(f"note: fewer than {_timing.MIN_REPEATS} repeats; figures are indicative only")

    packages = ("gymnasium", "numpy", "jax")
    _timing.print_results(
        "Single environment: microseconds per step",
        ("variant", "us/step", "added us/step", "added / Gymnasium's added"),
        single_env(args.steps, args.repeats),
        args.markdown,
        packages,
    )
    _timing.print_results(
        "Vector environment (NEXT_STEP): microseconds per step",
        (
            "num_envs",
            "bare env",
            "Gymnasium added",
            "ours added",
            "ours / Gymnasium",
            "Gymnasium / ours",
        ),
        [vector_env(n, args.steps, args.repeats) for n in args.num_envs],
        args.markdown,
        packages,
    )


if __name__ == "__main__":
    main()
