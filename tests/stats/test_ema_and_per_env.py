"""Exponential moving statistics, per-environment statistics and the g_max floor.

References are float64 NumPy, written from the formulas: the EMA statistics
as an explicitly weighted mean / variance over every sample (not the merge
recurrence), per-environment statistics against Gymnasium's own single-env
``NormalizeReward`` (1.3.0 is exact for a single environment), and the g_max
floor from SimbaV2's published formula.
"""

from typing import Any

import chex
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rewardnorm_jax as rn
from tests.streams import jit_scan_steps, scan_steps

BETA = 0.9


def weighted_reference(batches, masks, beta):
    """Weighted mean, population variance and total weight, prior included.

    A sample merged ``k`` non-empty updates ago weighs ``beta**k``; the prior
    (mean 0, variance 1, weight 1e-4) decays the same way.
    """
    values: list[float] = []
    ages: list[int] = []
    prior_age = 0
    for batch, mask in zip(batches, masks, strict=True):
        selected = np.asarray(batch, np.float64)[np.asarray(mask, bool)]
        if selected.size == 0:
            continue
        ages = [a + 1 for a in ages]
        prior_age += 1
        values.extend(selected.tolist())
        ages.extend([0] * selected.size)
    samples, weights = np.array(values), beta ** np.array(ages, np.float64)
    prior_weight = 1e-4 * beta**prior_age
    total = weights.sum() + prior_weight
    mean = (weights * samples).sum() / total
    m2 = (weights * (samples - mean) ** 2).sum() + prior_weight * (1.0 + mean**2)
    return mean, m2 / total, total


def run_stream(transform, rewards, terminated, update=True):
    """``scan_steps`` under ``jax.jit``; outputs as a NumPy array."""
    state, outputs = jit_scan_steps(transform, rewards, terminated, False, update)
    return np.asarray(outputs), state


# --- exponential moving statistics -------------------------------------------------------


def test_ema_stats_match_weighted_reference_with_varying_masks():
    rng = np.random.default_rng(0)
    batches = [rng.normal(i / 4, 1 + i / 10, 16) for i in range(40)]
    masks = [rng.random(16) < 0.6 for _ in batches]
    masks[7][:] = False  # an update with no sample: nothing is discounted
    with jax.enable_x64(True):
        update = jax.jit(rn.merge_stats)
        stats = rn.init_stats(decay=BETA)
        for batch, mask in zip(batches, masks, strict=True):
            stats = update(stats, jnp.asarray(batch), jnp.asarray(mask))
        mean, var, weight = weighted_reference(batches, masks, BETA)
        np.testing.assert_allclose(float(stats.mean), mean, rtol=1e-12)
        np.testing.assert_allclose(float(stats.var), var, rtol=1e-11)
        np.testing.assert_allclose(float(stats.total_weight), weight, rtol=1e-12)
        assert int(rn.count_as_int(stats)) == sum(int(m.sum()) for m in masks)


def test_bias_correction_equals_adams_for_constant_batch_size():
    # A zero-started EMA of the batch means is biased by (1 - beta^t); the
    # tracked weight divides that out (up to the prior's weight 1e-4 beta^t).
    rng = np.random.default_rng(1)
    n, steps = 8, 6
    batches = rng.normal(5.0, 2.0, (steps, n))
    with jax.enable_x64(True):
        stats, update = rn.init_stats(decay=BETA), jax.jit(rn.merge_stats)
        naive = 0.0
        for t, batch in enumerate(batches, start=1):
            stats = update(stats, jnp.asarray(batch))
            naive = BETA * naive + (1 - BETA) * batch.mean()
            corrected = naive / (1 - BETA**t)
            weight = n * (1 - BETA**t) / (1 - BETA)
            np.testing.assert_allclose(
                float(stats.total_weight), weight + 1e-4 * BETA**t, rtol=1e-13
            )
            np.testing.assert_allclose(float(stats.mean), corrected, rtol=1e-4 / weight * 1.01)
        # Without the correction the first steps would be far off: 5 * (1 - 0.9^6) = 2.3.
        assert abs(naive - batches.mean()) > 2.0
        assert abs(float(stats.mean) - batches.mean()) < 0.3


def test_ema_forgets_an_old_reward_scale_the_cumulative_stats_keep():
    rng = np.random.default_rng(2)
    before, after = rng.normal(0, 1, (200, 32)), rng.normal(0, 100, (50, 32))
    stream = np.concatenate([before, after])

    @jax.jit
    def run(stream):
        def body(carry, batch):
            ema, cumulative = carry
            return (rn.merge_stats(ema, batch), rn.merge_stats(cumulative, batch)), None

        return jax.lax.scan(body, (rn.init_stats(decay=0.95), rn.init_stats()), stream)[0]

    ema, cumulative = run(jnp.asarray(stream, jnp.float32))
    # 50 updates at decay 0.95 leave weight 0.95^50 = 7.7% on the old scale.
    assert 0.8 < float(ema.std) / 100 < 1.1
    assert float(cumulative.std) / 100 < 0.45


def test_ema_update_under_vmap_axis_name_equals_one_merged_batch():
    rng = np.random.default_rng(3)
    parts = jnp.asarray(rng.normal(2.0, 3.0, (4, 5, 6)), jnp.float32)  # 4 devices x (5, 6)

    @jax.jit
    def per_device_and_merged(parts):
        stats = rn.merge_stats(rn.init_stats((6,), decay=0.8), jnp.ones((2, 6)))
        update = lambda x: rn.merge_stats(stats, x, axis_name="d")  # noqa: E731
        return jax.vmap(update, axis_name="d")(parts), rn.merge_stats(stats, parts.reshape(20, 6))

    per_device, merged = per_device_and_merged(parts)
    for name in ("mean", "var", "total_weight"):
        got = getattr(per_device, name)
        np.testing.assert_allclose(got[0], getattr(merged, name), rtol=2e-6)
        np.testing.assert_array_equal(got[0], got[3])  # every participant agrees


def test_normalize_reward_with_decay_matches_reference():
    rng = np.random.default_rng(4)
    steps, num_envs, gamma, epsilon = 30, 4, 0.9, 1e-8
    rewards = rng.normal(1.0, 2.0, (steps, num_envs))
    terminated = rng.random((steps, num_envs)) < 0.1
    with jax.enable_x64(True):
        outputs, state = run_stream(
            rn.normalize_reward(gamma, epsilon, statistics=rn.Statistics(decay=BETA)),
            jnp.asarray(rewards),
            jnp.asarray(terminated),
        )
    ret, returns, expected = np.zeros(num_envs), [], np.zeros_like(rewards)
    for t in range(steps):  # Gymnasium's return, then the weighted statistics
        ret = np.where(terminated[t], 0.0, ret) * gamma + rewards[t]
        returns.append(ret)
        _, var, _ = weighted_reference(returns, [np.ones(num_envs, bool)] * len(returns), BETA)
        expected[t] = rewards[t] / np.sqrt(var + epsilon)
    np.testing.assert_allclose(outputs, expected, rtol=1e-10)
    assert state.stats.decay == BETA


# --- per-environment statistics ----------------------------------------------------------


class _Replay(gym.Env):
    """An environment that replays a fixed reward and termination stream."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,))
    action_space = gym.spaces.Discrete(1)

    def __init__(self, rewards, terminated):
        self._rewards, self._terminated, self._t = rewards, terminated, 0

    def reset(self, *, seed=None, options=None):
        return np.zeros(1, np.float32), {}

    def step(self, action):
        t, self._t = self._t, self._t + 1
        return (
            np.zeros(1, np.float32),
            float(self._rewards[t]),
            bool(self._terminated[t]),
            False,
            {},
        )


def test_per_env_stats_equal_gymnasium_single_env_wrappers():
    rng = np.random.default_rng(5)
    steps, scales = 40, np.array([0.01, 1.0, 300.0])  # one reward scale per task
    rewards = rng.normal(0.5, 1.0, (steps, 3)) * scales
    terminated = rng.random((steps, 3)) < 0.1
    expected = np.zeros_like(rewards)
    for i in range(3):
        env = gym.wrappers.NormalizeReward(_Replay(rewards[:, i], terminated[:, i]), gamma=0.95)
        env.reset(seed=0)
        expected[:, i] = [env.step(0)[1] for _ in range(steps)]
    with jax.enable_x64(True):
        outputs, state = run_stream(
            rn.normalize_reward(0.95, statistics=rn.Statistics(per_env=True)),
            jnp.asarray(rewards),
            jnp.asarray(terminated),
        )
    assert state.stats.mean.shape == (3,)
    np.testing.assert_allclose(outputs, expected, rtol=1e-10)
    # Each task ends near unit scale; shared statistics would be set by the largest task.
    assert np.all(np.std(outputs[10:], axis=0) > 0.1)
    shared_outputs, _ = run_stream(
        rn.normalize_reward(0.95), jnp.asarray(rewards, jnp.float32), jnp.asarray(terminated)
    )
    assert np.std(shared_outputs[10:, 0]) < 1e-3


def test_per_env_equals_vmap_of_single_env():
    decay = 0.9
    rng = np.random.default_rng(6)
    rewards = jnp.asarray(rng.normal(0, 1, (25, 5)) * np.arange(1, 6), jnp.float32)
    terminated = jnp.asarray(rng.random((25, 5)) < 0.1)
    norm = rn.normalize_reward(0.99, statistics=rn.Statistics(per_env=True, decay=decay))
    batched, _ = run_stream(norm, rewards, terminated)
    single = rn.normalize_reward(0.99, statistics=rn.Statistics(decay=decay))
    looped = jax.jit(jax.vmap(lambda r, d: scan_steps(single, r, d)[1], in_axes=1, out_axes=1))(
        rewards, terminated
    )
    np.testing.assert_allclose(batched, looped, rtol=1e-6)


# --- running max |G| floor (SimbaV2) -----------------------------------------------------


def simba_reference(rewards, done, gamma, g_max, epsilon=1e-8):
    """SimbaV2's reward scaling, written from its formula (Lee et al. 2025, eqs. 18-19)."""
    mean, var, count = 0.0, 1.0, 1e-4  # Gymnasium's RunningMeanStd
    ret, ret_max = np.zeros(rewards.shape[1]), 0.0
    outputs = np.zeros_like(rewards)
    for t in range(rewards.shape[0]):
        ret = gamma * (1 - done[t]) * ret + rewards[t]
        b_mean, b_var, b_count = ret.mean(), ret.var(), ret.size
        delta, total = b_mean - mean, count + b_count
        mean, var = (
            mean + delta * b_count / total,
            (var * count + b_var * b_count + delta**2 * count * b_count / total) / total,
        )
        count = total
        ret_max = max(ret_max, np.max(np.abs(ret)))
        outputs[t] = rewards[t] / max(np.sqrt(var + epsilon), ret_max / g_max)
    return outputs


def test_g_max_floor_matches_simba_formula():
    rng = np.random.default_rng(7)
    # Sparse large rewards: the variance stays small against max |G|, so the floor binds.
    rewards = np.where(rng.random((60, 4)) < 0.05, 50.0, 0.01) + rng.normal(0, 0.01, (60, 4))
    done = rng.random((60, 4)) < 0.05
    expected = simba_reference(rewards, done, 0.99, g_max=2.0)
    with jax.enable_x64(True):
        outputs, state = run_stream(
            rn.normalize_reward(0.99, semantics="purejaxrl", g_max=2.0),
            jnp.asarray(rewards),
            jnp.asarray(done),
        )
    np.testing.assert_allclose(outputs, expected, rtol=1e-12)
    plain = simba_reference(rewards, done, 0.99, g_max=np.inf)
    assert np.max(np.abs(plain - expected)) > 1.0  # the floor changed some outputs
    assert float(state.ret_abs_max) > 0


def test_state_structure_is_stable_under_scan_and_cond():
    configs: list[dict[str, Any]] = [
        {"statistics": rn.Statistics(per_env=True, decay=0.99), "g_max": 10.0}
    ]
    for kwargs in configs:
        norm = rn.normalize_reward(**kwargs)
        state = norm.init((3,))
        step = jax.jit(norm.step)
        flags = jnp.zeros(3, bool)
        _, new_state = step(state, jnp.ones(3), flags, flags, jnp.bool_(True))
        chex.assert_trees_all_equal_shapes_and_dtypes(new_state, state)
        frozen, frozen_state = step(new_state, jnp.full(3, 9.0), flags, flags, jnp.bool_(False))
        expected = jax.jit(norm.apply)(new_state, jnp.full(3, 9.0))
        np.testing.assert_allclose(frozen, expected, rtol=1e-6)
        chex.assert_trees_all_equal(frozen_state.stats, new_state.stats)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"decay": 1.0}, "decay"),
        ({"decay": -0.1}, "decay"),
        ({"decay": "0.9"}, "decay"),
        ({"g_max": 0.0}, "g_max"),
        ({"g_max": float("inf")}, "g_max"),
    ],
)
def test_bad_options_raise(kwargs, name):
    build = rn.Statistics if "decay" in kwargs else rn.normalize_reward
    with pytest.raises(ValueError, match=name):
        build(**kwargs)
