"""DreamerV3 percentile return scaling against a float64 NumPy reference.

The reference follows DreamerV3's ``Normalize(impl='perc')`` as configured for
``retnorm`` (rate 0.01, limit 1, percentiles 5 / 95, no debias): averages
start at 0, ``x' = (1 - rate) x + rate * percentile``, and the divisor is
``max(limit, high - low)``.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rewardnorm_jax as rn


class DreamerPercentiles:
    """NumPy port of DreamerV3's percentile moving averages (retnorm settings)."""

    def __init__(self, rate=0.01, low=5.0, high=95.0, limit=1.0):
        self.rate, self.q, self.limit = rate, (low, high), limit
        self.low = self.high = 0.0

    def update(self, x):
        x = np.asarray(x, np.float64)
        x = x[np.isfinite(x)]
        if x.size == 0:
            return
        low, high = np.percentile(x, self.q)
        self.low = (1 - self.rate) * self.low + self.rate * low
        self.high = (1 - self.rate) * self.high + self.rate * high

    @property
    def scale(self):
        return max(self.limit, self.high - self.low)


def reference_stream(rewards, terminated, truncated, gamma, semantics, update, rate):
    """Rewards scaled by the percentile range of the tracked returns, step by step."""
    perc, ret = DreamerPercentiles(rate=rate), np.zeros(rewards.shape[1])
    outputs = np.zeros_like(rewards)
    for t in range(rewards.shape[0]):
        r, done = rewards[t], terminated[t] | truncated[t]
        reset_before = terminated[t] if semantics == "gymnasium" else done
        finite = np.isfinite(r)
        ret = np.where(
            finite,
            np.where(reset_before, 0.0, ret) * gamma + np.where(finite, r, 0.0),
            np.where(reset_before, 0.0, ret),
        )
        if update[t]:
            perc.update(ret[finite])
        outputs[t] = r / perc.scale
    return outputs, perc


def test_update_percentiles_matches_dreamer_reference():
    rng = np.random.default_rng(0)
    batches = rng.normal(3.0, 10.0, (30, 7, 9))
    masks = rng.random(batches.shape) < 0.8
    batches[rng.random(batches.shape) < 0.02] = np.nan
    masks[4] = False  # nothing valid: unchanged
    ref = DreamerPercentiles(rate=0.1)

    @jax.jit
    def run(batches, masks):
        def body(state, xs):
            return rn.update_percentiles(state, xs[0], xs[1], rate=0.1), None

        return jax.lax.scan(body, rn.init_percentiles(), (batches, masks))[0]

    for batch, mask in zip(batches, masks, strict=True):
        ref.update(batch[mask])
    with jax.enable_x64(True):
        state = run(jnp.asarray(batches), jnp.asarray(masks))
        np.testing.assert_allclose(
            [float(state.low), float(state.high)], [ref.low, ref.high], rtol=1e-12
        )
        np.testing.assert_allclose(float(rn.percentile_scale(state)), ref.scale, rtol=1e-12)


def test_scale_starts_at_limit_and_grows_with_rate():
    # Averages start at 0 without debiasing: the first update moves them by 1%.
    returns = jnp.linspace(-500.0, 500.0, 1001)
    update = jax.jit(rn.update_percentiles)
    state = update(rn.init_percentiles(), returns)
    assert float(rn.percentile_scale(state)) == 9.0  # 0.01 * (450 - (-450))
    assert float(rn.percentile_scale(state, limit=20.0)) == 20.0
    for _ in range(299):
        state = update(state, returns)
    np.testing.assert_allclose(float(rn.percentile_scale(state)), 900 * (1 - 0.99**300), rtol=1e-5)


def test_axis_name_gathers_exact_global_percentiles():
    rng = np.random.default_rng(1)
    parts = jnp.asarray(rng.standard_exponential((4, 50)) * np.arange(1, 5)[:, None], jnp.float32)

    @jax.jit
    def both(parts):
        update = lambda x: rn.update_percentiles(rn.init_percentiles(), x, rate=1.0, axis_name="d")  # noqa: E731
        return jax.vmap(update, axis_name="d")(parts), rn.update_percentiles(
            rn.init_percentiles(), parts, rate=1.0
        )

    gathered, whole = both(parts)
    np.testing.assert_array_equal(gathered.low, np.full(4, whole.low))
    np.testing.assert_array_equal(gathered.high, np.full(4, whole.high))
    np.testing.assert_allclose(whole.high, np.percentile(np.asarray(parts), 95), rtol=1e-6)


def test_tuple_axis_names_gather_the_whole_grid():
    parts = jnp.asarray(np.random.default_rng(4).normal(size=(2, 3, 20)), jnp.float32)

    def update(x):
        return rn.update_percentiles(rn.init_percentiles(), x, rate=1.0, axis_name=("a", "b"))

    gathered = jax.jit(jax.vmap(jax.vmap(update, axis_name="b"), axis_name="a"))(parts)
    whole = rn.update_percentiles(rn.init_percentiles(), parts, rate=1.0)
    np.testing.assert_array_equal(gathered.low, np.full((2, 3), whole.low))
    np.testing.assert_array_equal(gathered.high, np.full((2, 3), whole.high))


def test_shard_map_sees_the_percentiles_as_replicated():
    """Under shard_map's replication check, the shared percentiles may be returned as P()."""
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:1]), ("d",))
    scaler = rn.percentile_scale_reward(axis_name="d")
    spec = rn.PercentileScaleRewardState(percentiles=P(), ret=P("d"))  # type: ignore[arg-type]  # a pytree of specs
    step = jax.jit(
        jax.shard_map(scaler.step, mesh=mesh, in_specs=(spec, P("d")), out_specs=(P("d"), spec))
    )
    rewards = jnp.linspace(-3.0, 5.0, 8)
    out, state = step(scaler.init((8,)), rewards)
    plain = rn.percentile_scale_reward()
    expected_out, expected = plain.step(plain.init((8,)), rewards)
    np.testing.assert_array_equal(out, expected_out)
    np.testing.assert_array_equal(state.percentiles.high, expected.percentiles.high)


@pytest.mark.parametrize("semantics", ["gymnasium", "purejaxrl"])
def test_reward_transform_matches_reference_stream(semantics):
    rng = np.random.default_rng(2)
    steps, num_envs, gamma, rate = 40, 16, 0.9, 0.2
    rewards = rng.normal(0.0, 1.0, (steps, num_envs)) * np.linspace(1, 30, num_envs)
    rewards[rng.random(rewards.shape) < 0.02] = np.nan
    terminated = rng.random((steps, num_envs)) < 0.1
    truncated = rng.random((steps, num_envs)) < 0.1
    update = rng.random(steps) < 0.8
    expected, ref = reference_stream(rewards, terminated, truncated, gamma, semantics, update, rate)

    def run(transform, rewards, terminated, truncated, update):
        def body(state, xs):
            out, state = transform.step(state, *xs)
            return state, out

        return jax.lax.scan(
            body, transform.init((num_envs,)), (rewards, terminated, truncated, update)
        )

    with jax.enable_x64(True):
        transform = rn.percentile_scale_reward(gamma, rate=rate, semantics=semantics)
        state, outputs = jax.jit(run, static_argnums=0)(
            transform, *map(jnp.asarray, (rewards, terminated, truncated, update))
        )
        np.testing.assert_allclose(outputs, expected, rtol=1e-12)
        np.testing.assert_allclose(float(state.percentiles.high), ref.high, rtol=1e-12)
        assert float(rn.percentile_scale(state.percentiles)) > 1.0  # the scale is active
    assert np.isnan(np.asarray(outputs)[np.isnan(rewards)]).all()  # non-finite rewards pass through


def test_chain_vmap_and_state_structure():
    rng = np.random.default_rng(3)
    rewards = jnp.asarray(rng.normal(0, 50, (3, 32)), jnp.float32)  # 3 groups of 32 envs
    transform = rn.chain(rn.percentile_scale_reward(0.99, rate=0.5), rn.clip_reward(-1.0, 1.0))
    step = jax.jit(jax.vmap(transform.step))
    state = jax.vmap(lambda _: transform.init((32,)))(jnp.arange(3))
    out, new_state = step(state, rewards)
    chex.assert_trees_all_equal_shapes_and_dtypes(new_state, state)
    single = jax.jit(transform.step)
    for g in range(3):
        out_g, _ = single(transform.init((32,)), rewards[g])
        np.testing.assert_allclose(out[g], out_g, rtol=1e-6)
    assert float(jnp.max(jnp.abs(out))) <= 1.0


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"rate": 0.0}, "rate"),
        ({"rate": 1.5}, "rate"),
        ({"low": 95.0, "high": 5.0}, "percentiles"),
        ({"high": 101.0}, "percentiles"),
        ({"limit": 0.0}, "limit"),
        ({"gamma": 1.5}, "gamma"),
    ],
)
def test_bad_options_raise(kwargs, name):
    with pytest.raises(ValueError, match=name):
        rn.percentile_scale_reward(**kwargs)
