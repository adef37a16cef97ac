"""Running statistics: the Chan merge, masks, exact count, pytree behaviour."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import serialization
from hypothesis import given, settings
from hypothesis import strategies as st

import rewardnorm_jax as rn
from tests.reference import RunningMeanStd


def test_initial_state_matches_gymnasium_running_mean_std():
    stats = rn.init_stats()
    assert float(stats.mean) == 0.0
    assert float(stats.var) == 1.0
    assert float(stats.total_weight) == pytest.approx(1e-4, rel=1e-6)
    assert stats.mean.dtype == jnp.float32
    assert stats.count_hi.dtype == stats.count_lo.dtype == jnp.uint32


def test_one_sample_matches_closed_form():
    with jax.enable_x64(True):
        stats = rn.merge_stats(rn.init_stats(), jnp.array([1.0]))
        assert float(stats.mean) == pytest.approx(1 / 1.0001, rel=1e-15)
        assert float(stats.var) == pytest.approx(1.99970e-4, rel=1e-5)
        assert float(stats.var) == pytest.approx(1e-4 * (1 + 1 / 1.0001) / 1.0001, rel=1e-14)


# Jitted: compiled once per batch length, where eager dispatch runs each operation apart.
MERGE = jax.jit(rn.merge_stats)


@settings(max_examples=40, deadline=None)
@given(
    batches=st.lists(
        st.lists(st.floats(-1e3, 1e3, allow_nan=False, width=32), min_size=1, max_size=9),
        min_size=1,
        max_size=6,
    ),
    data=st.data(),
)
def test_matches_reference_with_masks(batches, data):
    ref = RunningMeanStd()
    with jax.enable_x64(True):
        stats = rn.init_stats()
        for batch in batches:
            mask = data.draw(st.lists(st.booleans(), min_size=len(batch), max_size=len(batch)))
            batch, mask = np.array(batch), np.array(mask)
            ref.update(batch[mask])
            stats = MERGE(stats, jnp.asarray(batch), jnp.asarray(mask))
        np.testing.assert_allclose(float(stats.mean), ref.mean, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(float(stats.var), ref.var, rtol=1e-11, atol=1e-14)
        np.testing.assert_allclose(float(stats.total_weight), ref.count, rtol=1e-15)


@settings(max_examples=25, deadline=None)
@given(
    values=st.lists(st.floats(-100, 100, width=32), min_size=2, max_size=40),
    split=st.integers(1, 39),
)
def test_one_batch_equals_sequential_batches(values, split):
    values = jnp.asarray(values, jnp.float32)
    split = min(split, len(values) - 1)
    together = MERGE(rn.init_stats(), values)
    apart = MERGE(MERGE(rn.init_stats(), values[:split]), values[split:])
    np.testing.assert_allclose(together.mean, apart.mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(together.var, apart.var, rtol=1e-4, atol=1e-6)
    assert rn.count_as_int(together) == rn.count_as_int(apart) == len(values)


def test_masked_entries_may_hold_nan_and_change_nothing():
    stats = rn.merge_stats(rn.init_stats(), jnp.array([1.0, 2.0]))
    after = rn.merge_stats(stats, jnp.array([jnp.nan, jnp.inf]), jnp.array([False, False]))
    chex.assert_trees_all_equal(after, stats)


def test_count_exact_past_two_to_the_32_with_uneven_batches():
    batch_size = 2**20 + 3  # not a power of two
    values = jnp.arange(batch_size, dtype=jnp.float32) % 5

    @jax.jit
    def run(values):  # an argument: a captured array would be a constant that XLA folds
        return jax.lax.fori_loop(0, 4096, lambda i, s: rn.merge_stats(s, values), rn.init_stats())

    stats = run(values)
    assert rn.count_as_int(stats) == 4096 * batch_size > 2**32
    assert int(stats.count_hi) == 1
    expected_mean = float(np.mean(np.arange(batch_size) % 5))
    np.testing.assert_allclose(float(stats.mean), expected_mean, rtol=1e-6)


def test_per_element_statistics_when_shapes_match():
    stats = rn.init_stats((3,))
    batch = jnp.array([[1.0, 10.0, -1.0], [3.0, 30.0, -3.0]])
    stats = rn.merge_stats(stats, batch)
    ref = [RunningMeanStd() for _ in range(3)]
    for i, r in enumerate(ref):
        r.update(np.asarray(batch[:, i]))
    np.testing.assert_allclose(stats.mean, [r.mean for r in ref], rtol=1e-6)
    np.testing.assert_allclose(stats.var, [r.var for r in ref], rtol=1e-5)


def test_shape_errors_are_clear():
    with pytest.raises(ValueError, match="does not end with the statistics' shape"):
        rn.merge_stats(rn.init_stats((3,)), jnp.ones((4, 2)))
    with pytest.raises(ValueError, match="mask has shape"):
        rn.merge_stats(rn.init_stats(), jnp.ones(4), jnp.ones(3, bool))
    with pytest.raises(ValueError, match="dtype=float16 is not supported"):
        rn.init_stats(dtype=jnp.float16)


def test_stats_round_trip_through_flax_serialization_bit_exactly():
    stats = rn.merge_stats(rn.init_stats(), jnp.array([0.1, 0.7, -3.3]))
    restored = serialization.from_bytes(rn.init_stats(), serialization.to_bytes(stats))
    chex.assert_trees_all_equal_shapes_and_dtypes(restored, stats)
    chex.assert_trees_all_equal(restored, stats)
