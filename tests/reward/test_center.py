"""center_reward: rewards minus their running mean, against a NumPy reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rewardnorm_jax as rn

rng = np.random.default_rng(3)
REWARDS = rng.normal(2.0, 1.5, (40, 4))


def test_the_cumulative_mean_is_every_finite_reward_seen_with_the_prior():
    center = rn.center_reward()
    step = jax.jit(center.step)
    state, seen = center.init((4,)), []
    rewards = REWARDS.copy()
    rewards[7, 2] = np.nan  # left out, passed through
    for reward in rewards:
        out, state = step(state, jnp.asarray(reward, jnp.float32))
        seen.extend(reward[np.isfinite(reward)])
        mean = np.sum(seen) / (len(seen) + rn.PRIOR_COUNT)
        np.testing.assert_allclose(out, reward - mean, rtol=1e-5, atol=1e-5)
    assert rn.count_as_int(state.stats) == REWARDS.size - 1


def test_frozen_and_inactive_rewards_are_centered_but_not_learned():
    center = rn.center_reward()
    state = center.update(center.init((4,)), jnp.ones(4))
    out, frozen = center.step(state, jnp.full(4, 9.0), update_stats=False)
    np.testing.assert_array_equal(frozen.stats.moments, state.stats.moments)
    np.testing.assert_allclose(out, 9.0 - float(state.stats.mean), rtol=1e-6)
    active = jnp.array([True, False, True, False])
    _, masked = center.step(state, jnp.full(4, 5.0), active=active)
    assert int(rn.count_as_int(masked.stats)) == 6


def test_moving_per_task_means_follow_their_own_rewards():
    center = rn.center_reward(statistics=rn.Statistics(num_tasks=2, decay=0.5))
    state = center.init((4,))
    task = jnp.array([0, 0, 1, 1])
    for scale in (1.0, 2.0, 4.0):
        _, state = center.step(state, jnp.array([1.0, 1.0, 100.0, 100.0]) * scale, task=task)
    means = np.asarray(state.stats.mean)
    assert means[0] == pytest.approx(4.0 * 4 / 7 + 2.0 * 2 / 7 + 1.0 / 7, rel=1e-3)
    assert means[1] == pytest.approx(100 * means[0], rel=1e-5)
    centered = center.apply(state, jnp.array([4.0, 4.0, 400.0, 400.0]), task=task)
    np.testing.assert_allclose(centered, [4.0 - means[0]] * 2 + [400.0 - means[1]] * 2, rtol=1e-6)


@pytest.mark.parametrize(
    ("statistics", "task"),
    [
        (rn.Statistics(), None),
        (rn.Statistics(per_env=True), None),
        (rn.Statistics(num_tasks=2), [0, 1, 1]),
    ],
    ids=["shared", "per_env", "per_task"],
)
def test_a_gradient_through_step_and_apply_holds_the_statistics_constant(statistics, task):
    """Differentiable simulators take gradients through the rollout: d(r - mean)/dr = 1."""
    center = rn.center_reward(statistics=statistics)
    state = center.init((3,))
    named = {} if task is None else {"task": jnp.array(task)}
    rewards = jnp.array([1.0, 2.0, 4.0])
    through_step = jax.grad(lambda r: center.step(state, r, **named)[0].sum())(rewards)
    through_apply = jax.grad(lambda r: center.apply(state, r, **named).sum())(rewards)
    np.testing.assert_array_equal(through_step, np.ones(3))
    np.testing.assert_array_equal(through_apply, np.ones(3))
