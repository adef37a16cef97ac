"""Side by side with Gymnasium 1.4's own reward wrappers, step by step, to 1e-12 in float64.

Gymnasium's ``NormalizeReward``, ``ClipReward`` and ``TransformReward`` (single
environment and vector) and ours wrap two copies of the same seeded
environment and get the same actions; every reward and, for
``NormalizeReward``, the running statistics and the tracked returns must agree
at every step. Vector environments run under each autoreset mode (NEXT_STEP,
SAME_STEP, DISABLED) with partial resets (``reset(options={"reset_mask": m})``)
at random steps, and under DISABLED every ended environment is reset that way.

One difference is on purpose: on a partial reset Gymnasium zeroes the return
and the pending-autoreset flag of *every* environment (an open upstream bug,
Gymnasium PR #1696), where ours zeroes only those of the reset environments.
After each partial reset the comparison checks ours against that formula, then
puts Gymnasium's values for the environments that were not reset back, so that
the streams stay comparable.

Gymnasium 1.3 (which gymnax requires) computes SAME_STEP differently, so this
module runs only where Gymnasium 1.4 or newer is installed: the ``newest`` nox
session.
"""

import functools
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import wrappers as gym_wrappers
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.wrappers import vector as gym_vector
from packaging.version import Version

from rewardnorm_jax import gymnasium as rn_gym
from rewardnorm_jax.gymnasium import vector as rn_vector

pytestmark = pytest.mark.skipif(
    Version(gym.__version__) < Version("1.4"),
    reason=f"compares with Gymnasium 1.4's wrappers; Gymnasium {gym.__version__} is installed",
)

RTOL = 1e-12
NUM_ENVS = 5
STEPS = 600
GAMMA = 0.97
MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]


class RandomRewardEnv(gym.Env):
    """Rewards of changing scale, random terminations and a time limit, all from the seed."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float64)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, max_steps: int):
        self.max_steps = max_steps
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1), {}

    def step(self, action):
        self.t += 1
        scale = self.np_random.choice([0.1, 1.0, 30.0])
        reward = float(self.np_random.normal(loc=action - 0.3, scale=scale))
        terminated = bool(self.np_random.random() < 0.04)
        truncated = self.t >= self.max_steps
        return np.array([reward]), reward, terminated, truncated, {}


def make_vec(mode: AutoresetMode) -> SyncVectorEnv:
    """``NUM_ENVS`` environments with different time limits, so episodes end out of step."""
    return SyncVectorEnv(
        [functools.partial(RandomRewardEnv, max_steps=17 + 6 * i) for i in range(NUM_ENVS)],
        autoreset_mode=mode,
    )


def transform(reward):
    return 2.0 * reward - 0.5


# Constructors of (our wrapper, Gymnasium's wrapper) by name.
SINGLE: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "NormalizeReward": (
        lambda env: rn_gym.NormalizeReward(env, gamma=GAMMA),
        lambda env: gym_wrappers.NormalizeReward(env, gamma=GAMMA),
    ),
    "ClipReward": (
        lambda env: rn_gym.ClipReward(env, -0.5, 2.0),
        lambda env: gym_wrappers.ClipReward(env, -0.5, 2.0),
    ),
    "TransformReward": (
        lambda env: rn_gym.TransformReward(env, transform),
        lambda env: gym_wrappers.TransformReward(env, transform),
    ),
}
VECTOR: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "NormalizeReward": (
        lambda envs: rn_vector.NormalizeReward(envs, gamma=GAMMA),
        lambda envs: gym_vector.NormalizeReward(envs, gamma=GAMMA),
    ),
    "ClipReward": (
        lambda envs: rn_vector.ClipReward(envs, -0.5, 2.0),
        lambda envs: gym_vector.ClipReward(envs, -0.5, 2.0),
    ),
    "TransformReward": (
        lambda envs: rn_vector.TransformReward(envs, transform),
        lambda envs: gym_vector.TransformReward(envs, transform),
    ),
}


def assert_same_statistics(ours, theirs):
    """Running statistics and tracked returns of two ``NormalizeReward`` wrappers."""
    for name in ("mean", "var", "count"):
        ours_value = np.asarray(getattr(ours.return_rms, name), np.float64)
        theirs_value = np.asarray(getattr(theirs.return_rms, name), np.float64)
        np.testing.assert_allclose(ours_value, theirs_value, rtol=RTOL, atol=0, err_msg=name)


def frozen_during(step: int) -> bool:
    """A stretch of steps with ``update_running_mean = False`` (statistics frozen)."""
    return STEPS // 2 <= step < STEPS // 2 + 50


@pytest.mark.parametrize("name", SINGLE)
def test_single_env_wrappers_match_gymnasium(name):
    make_ours, make_theirs = SINGLE[name]
    ours = make_ours(RandomRewardEnv(max_steps=29))
    theirs = make_theirs(RandomRewardEnv(max_steps=29))
    ours.reset(seed=3)
    theirs.reset(seed=3)
    actions = np.random.default_rng(0).integers(0, 2, STEPS)
    for step, action in enumerate(actions):
        if name == "NormalizeReward":
            ours.update_running_mean = theirs.update_running_mean = not frozen_during(step)
        _, reward, terminated, truncated, _ = ours.step(action)
        _, expected, terminated_ref, truncated_ref, _ = theirs.step(action)
        assert (terminated, truncated) == (terminated_ref, truncated_ref)
        np.testing.assert_allclose(reward, expected, rtol=RTOL, atol=0, err_msg=f"step {step}")
        if name == "NormalizeReward":
            assert_same_statistics(ours, theirs)
            np.testing.assert_array_equal(ours.discounted_reward, theirs.discounted_reward)
        if terminated or truncated:
            ours.reset()
            theirs.reset()


def partial_reset(ours, theirs, mask: np.ndarray) -> None:
    """Resets the environments in ``mask``; checks ours, then mends Gymnasium's (see above)."""
    normalize = isinstance(ours, rn_vector.NormalizeReward)
    kept = ours.accumulated_reward[~mask].copy() if normalize else None
    kept_dones = theirs._prev_dones[~mask].copy() if normalize else None
    # Fresh options dicts: the vector environment pops "reset_mask" from them.
    ours.reset(options={"reset_mask": mask.copy()})
    theirs.reset(options={"reset_mask": mask.copy()})
    if normalize:
        # The documented formula: only the reset environments' returns start from zero.
        np.testing.assert_array_equal(ours.accumulated_reward[mask], 0.0)
        np.testing.assert_array_equal(ours.accumulated_reward[~mask], kept)
        # Gymnasium zeroed every environment's return and autoreset flag.
        theirs.accumulated_reward[~mask] = kept
        theirs._prev_dones[~mask] = kept_dones


@pytest.mark.parametrize("mode", MODES, ids=[mode.name for mode in MODES])
@pytest.mark.parametrize("name", VECTOR)
def test_vector_wrappers_match_gymnasium_with_partial_resets(name, mode):
    make_ours, make_theirs = VECTOR[name]
    ours, theirs = make_ours(make_vec(mode)), make_theirs(make_vec(mode))
    ours.reset(seed=11)
    theirs.reset(seed=11)
    rng = np.random.default_rng(1)
    partial_resets = 0
    for step in range(STEPS):
        if name == "NormalizeReward":
            ours.update_running_mean = theirs.update_running_mean = not frozen_during(step)
        actions = rng.integers(0, 2, NUM_ENVS)
        _, reward, terminated, truncated, _ = ours.step(actions)
        _, expected, terminated_ref, truncated_ref, _ = theirs.step(actions)
        np.testing.assert_array_equal(terminated, terminated_ref)
        np.testing.assert_array_equal(truncated, truncated_ref)
        np.testing.assert_allclose(reward, expected, rtol=RTOL, atol=0, err_msg=f"step {step}")
        if name == "NormalizeReward":
            assert_same_statistics(ours, theirs)
            np.testing.assert_array_equal(ours.accumulated_reward, theirs.accumulated_reward)
        # DISABLED steps no environment past its end: reset the ended ones, plus a few more.
        mask = rng.random(NUM_ENVS) < 0.03
        if mode == AutoresetMode.DISABLED:
            mask |= terminated | truncated
        if mask.any():
            partial_reset(ours, theirs, mask)
            partial_resets += not mask.all()
    assert partial_resets >= 20
