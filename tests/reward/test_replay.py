"""rewardnorm_jax.apply_sampled: replayed rewards with the statistics of the collection."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rewardnorm_jax as rn
from tests.streams import jit_scan_steps

rng = np.random.default_rng(0)
REWARDS = jnp.asarray(rng.normal(1.0, 2.0, (30, 4)), jnp.float32)
TERMINATED = jnp.asarray(rng.random((30, 4)) < 0.1)


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"g_max": 1.0},
        {"statistics": rn.Statistics(decay=0.9)},
        {"semantics": rn.Semantics("clip 0.5", "terminated", "never", clip=0.5)},
    ],
)
def test_a_sample_of_any_shape_is_normalized_as_the_collecting_batch_would_be(jit, options):
    norm = rn.normalize_reward(0.99, **options)
    state, _ = jit_scan_steps(norm, REWARDS, TERMINATED)
    sampled = jnp.asarray(rng.normal(0.0, 3.0, (3, 8)), jnp.float32)
    fn = jax.jit(rn.apply_sampled, static_argnums=0) if jit else rn.apply_sampled
    got = fn(norm, state, sampled)
    assert got.shape == sampled.shape
    # the same rewards through the collecting batch's own normalize, four at a time
    same = jnp.stack([norm.apply(state, row) for row in sampled.reshape(6, 4)])
    np.testing.assert_allclose(got.reshape(6, 4), same, rtol=1e-6)


def test_the_g_max_floor_divides_when_the_returns_outgrow_the_variance():
    norm = rn.normalize_reward(0.99, g_max=1.0)
    state, _ = jit_scan_steps(norm, REWARDS, TERMINATED)
    std = np.sqrt(np.float64(state.stats.var) + 1e-8)
    floor = np.float64(state.ret_abs_max) / 1.0
    assert floor > std
    got = rn.apply_sampled(norm, state, jnp.array([1.0, -2.0, 0.0]))
    np.testing.assert_allclose(got, np.array([1.0, -2.0, 0.0]) / floor, rtol=1e-6)


def test_chains_and_stateless_transforms_apply_to_samples():
    chained = rn.chain(rn.normalize_reward(0.99), rn.clip_reward(-1.0, 1.0))
    state, _ = jit_scan_steps(chained, REWARDS, TERMINATED)
    got = rn.apply_sampled(chained, state, jnp.array([100.0, 0.001]))
    assert got.tolist()[0] == 1.0
    clip = rn.clip_reward(-1.0, 1.0)
    np.testing.assert_array_equal(
        rn.apply_sampled(clip, clip.init(4), jnp.array([3.0, -0.5])), [1.0, -0.5]
    )


def test_per_environment_statistics_and_foreign_states_are_refused():
    per_env = rn.normalize_reward(0.99, statistics=rn.Statistics(per_env=True))
    with pytest.raises(ValueError, match=r"apply_sampled.*rn.Statistics\(per_env=True\)"):
        rn.apply_sampled(per_env, per_env.init(4), jnp.ones(6))
    with pytest.raises(ValueError, match=r"apply_sampled: state does not fit"):
        rn.apply_sampled(rn.normalize_reward(g_max=10.0), rn.normalize_reward().init(4), 1.0)
    with pytest.raises(ValueError, match=r"transform should be a rewardnorm_jax\.RewardTransform"):
        rn.apply_sampled(jnp.tanh, None, 1.0)  # type: ignore[arg-type]  # on purpose


@pytest.mark.parametrize("num_samples", [4, 6])  # the collecting batch's size, or another
def test_samples_are_normalized_by_their_own_tasks(num_samples):
    # A sample shaped like the collecting batch was divided by the statistics of the task
    # its position's environment ran at the end of collection.
    norm = rn.normalize_reward(0.99, statistics=rn.Statistics(num_tasks=3))
    state = norm.init(4)
    collecting = jnp.array([0, 1, 2, 2])
    for t in range(5):
        rewards = jnp.array([1.0, 10.0, 100.0, 300.0]) * (1.0 + 0.1 * t)
        _, state = norm.step(state, rewards, task=collecting)
    rng = np.random.default_rng(0)
    sampled = jnp.asarray(rng.normal(0.0, 50.0, num_samples), jnp.float32)
    ids = jnp.asarray(rng.permutation(np.arange(num_samples) % 3), jnp.int32)
    out = rn.apply_sampled(norm, state, sampled, ids)
    var = np.asarray(state.stats.var, np.float64)
    expected = np.asarray(sampled, np.float64) / np.sqrt(var[np.asarray(ids)] + 1e-8)
    np.testing.assert_allclose(out, expected, rtol=1e-5)
    with pytest.raises(ValueError, match=r"num_tasks=3\) .* needs each environment's task"):
        rn.apply_sampled(norm, state, sampled)
    with pytest.raises(ValueError, match="task has shape"):
        rn.apply_sampled(norm, state, sampled, ids[:2])
    plain = rn.normalize_reward(0.99)
    with pytest.raises(ValueError, match="task was given"):
        rn.apply_sampled(plain, plain.init(4), sampled, ids)
