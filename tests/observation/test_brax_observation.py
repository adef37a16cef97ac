"""normalize_observation("brax") against Brax's own running_statistics, and the conversions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

running_statistics = pytest.importorskip(
    "brax.training.acme.running_statistics", reason="the brax extra is not installed"
)

import rewardnorm_jax as rn  # noqa: E402  (after the skip)
from rewardnorm_jax import brax as rnb  # noqa: E402
from rewardnorm_jax._src.observation import std as observation_std  # noqa: E402
from tests.observation_reference import BraxReference  # noqa: E402

DIM = 4


def batches(seed, steps=12, envs=32):
    rng = np.random.default_rng(seed)
    scale, offset = np.array([0.5, 2.0, 30.0, 1e-2]), np.array([1.0, -4.0, 10.0, 0.5])
    return (rng.standard_normal((steps, envs, DIM)) * scale + offset).astype(np.float32)


def example():
    return {"state": jnp.zeros(DIM), "goal": jnp.zeros((2,))}


def obs_of(batch):
    return {"state": jnp.asarray(batch), "goal": jnp.asarray(batch[..., :2] * 3.0)}


def assert_same_normalization(brax_state, norm, state, batch, rtol=2e-5):
    expected = running_statistics.normalize(batch, brax_state)
    got = norm.apply(state, batch)
    jax.tree.map(lambda g, e: np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol), got, expected)


def test_brax_preset_equals_brax_update_and_normalize():
    """Equal to Brax's own float32 code within its rounding, and closer to its float64 math."""
    norm = rn.normalize_observation("brax")
    state = norm.init(jnp.zeros(DIM))
    brax_state = running_statistics.init_state(jnp.zeros(DIM))
    reference = BraxReference(DIM)
    update = jax.jit(norm.update)
    brax_update = jax.jit(running_statistics.update)
    ours_error = brax_error = 0.0
    for batch in batches(0):
        ours = np.asarray(norm.apply(state, batch), np.float64)  # before: std 1, then learned
        theirs = np.asarray(running_statistics.normalize(batch, brax_state), np.float64)
        truth = reference.normalize(batch)
        ours_error = max(ours_error, np.abs(ours - truth).max())
        brax_error = max(brax_error, np.abs(theirs - truth).max())
        np.testing.assert_allclose(ours, theirs, rtol=1e-3, atol=1e-3)  # Brax's float32 error
        state, brax_state = update(state, batch), brax_update(brax_state, batch)
        reference.update(batch)
    assert ours_error < 2e-5, ours_error
    assert ours_error < brax_error, (ours_error, brax_error)
    assert int(brax_state.count) == int(rn.count_as_int(state.stats)[0]) == 12 * 32
    np.testing.assert_allclose(state.stats.mean, brax_state.mean, rtol=2e-6, atol=1e-6)


def test_pytree_state_equals_brax_on_every_leaf():
    norm = rn.normalize_observation("brax")
    state = norm.init(example())
    brax_state = running_statistics.init_state(example())
    for batch in batches(9, steps=4):
        obs = obs_of(batch)
        state, brax_state = norm.update(state, obs), running_statistics.update(brax_state, obs)
    assert_same_normalization(brax_state, norm, state, obs_of(batches(10)[0]), rtol=1e-4)


def test_round_trip_keeps_count_words_exactly_and_brax_continues():
    norm = rn.normalize_observation("brax")
    state = norm.update(norm.init(example()), obs_of(batches(1)[0]))
    # A count past 2**32: the high word must survive the round trip.
    state = jax.tree.map(
        lambda s: s.replace(count_words=s.count_words.at[..., 0].set(3)),
        state,
        is_leaf=lambda x: isinstance(x, rn.RunningStats),
    )
    exported = rnb.to_running_statistics(norm.config, state)
    assert (int(exported.count.hi), int(exported.count.lo)) == (3, 32)
    assert int(exported.count) == 3 * 2**32 + 32
    back_norm, back = rnb.from_running_statistics(exported)
    assert back_norm.config == norm.config
    # Brax holds one word per moment: the mean and M come back as their two words' rounded sum.
    one_word = jax.tree.map(
        lambda s: rn.RunningStats.from_parts(
            s.mean + s.mean_low,
            jnp.zeros_like(s.mean),
            s.m2 + s.m2_low,
            jnp.zeros_like(s.m2),
            s.count_hi,
            s.count_lo,
            prior_count=s.prior_count,
        ),
        state.stats,
        is_leaf=lambda x: isinstance(x, rn.RunningStats),
    )
    jax.tree.map(np.testing.assert_array_equal, back.stats, one_word)

    # Brax continues from the exported state as the library continues from its own.
    state = norm.update(norm.init(example()), obs_of(batches(2)[0]))
    exported = rnb.to_running_statistics(norm.config, state)
    for batch in batches(2)[1:]:
        obs = obs_of(batch)
        exported = running_statistics.update(exported, obs)
        state = norm.update(state, obs)
    assert int(exported.count) == int(rn.count_as_int(state.stats["state"])[0]) == 12 * 32
    assert_same_normalization(exported, norm, state, obs_of(batches(3)[0]))


def test_a_state_brax_built_normalizes_the_same_in_the_library():
    brax_state = running_statistics.init_state(example(), std_eps=1e-3)
    for batch in batches(4):
        brax_state = running_statistics.update(brax_state, obs_of(batch))
    norm, state = rnb.from_running_statistics(brax_state, clip=5.0)
    assert norm.config.epsilon == 1e-3
    assert norm.config.clip == 5.0
    probe = obs_of(batches(5)[0] * 4.0)
    expected = running_statistics.normalize(probe, brax_state, max_abs_value=5.0)
    got = norm.apply(state, probe)
    jax.tree.map(lambda g, e: np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-5), got, expected)
    # Saved in the library's format, restored, exported back: Brax's fields unchanged.
    restored = rn.load_state(state, rn.save_state(state, norm.config), norm.config)
    again = rnb.to_running_statistics(norm.config, restored)
    assert int(again.count) == int(brax_state.count)
    jax.tree.map(np.testing.assert_array_equal, again.mean, brax_state.mean)
    jax.tree.map(np.testing.assert_array_equal, again.summed_variance, brax_state.summed_variance)
    jax.tree.map(np.testing.assert_allclose, again.std, brax_state.std)


def test_ema_mode_state_converts_its_variance():
    """Brax's EMA rate n_b / count is the cumulative statistics; its field holds the variance."""
    brax_state = running_statistics.init_state(jnp.zeros(DIM), mode="ema")
    for batch in batches(6):
        brax_state = running_statistics.update(brax_state, jnp.asarray(batch))
    norm, state = rnb.from_running_statistics(brax_state)
    probe = jnp.asarray(batches(7)[0])
    np.testing.assert_allclose(
        norm.apply(state, probe),
        running_statistics.normalize(probe, brax_state),
        rtol=1e-4,
        atol=1e-4,
    )


def brax_ema_state(until_count, std_eps=0.02):
    """Brax's EMA statistics (std_eps 0.02) of 12 batches of 32, frozen past ``until_count``."""
    update = jax.jit(running_statistics.update, static_argnames="until_count")
    brax_state = running_statistics.init_state(jnp.zeros(DIM), std_eps=std_eps, mode="ema")
    for batch in batches(14):
        brax_state = update(brax_state, jnp.asarray(batch), until_count=until_count)
    return brax_state, update


def assert_same_brax_state(got, expected):
    assert got.mode == expected.mode
    assert np.float32(got.std_eps) == np.float32(expected.std_eps)
    assert (int(got.count.hi), int(got.count.lo)) == (
        int(expected.count.hi),
        int(expected.count.lo),
    )
    for name in ("mean", "summed_variance", "std"):
        np.testing.assert_array_equal(getattr(got, name), getattr(expected, name), err_msg=name)


@pytest.mark.parametrize("until_count", [None, 100])
def test_ema_round_trip_keeps_mode_std_eps_and_until_freeze(until_count):
    """Brax continues from the state given back exactly as from its own, frozen or learning.

    With ``until_count=100`` Brax's EMA rate is 0 from the 4th batch (count 128 > 100):
    the statistics hold the first 96 observations while the count goes on to 384.
    """
    brax_state, update = brax_ema_state(until_count)
    assert int(brax_state.count) == 12 * 32
    norm, state = rnb.from_running_statistics(brax_state)
    assert norm.config.preset == "brax_ema"
    assert norm.config.epsilon == np.float32(0.02)
    back = rnb.to_running_statistics(norm.config, state)
    assert_same_brax_state(back, brax_state)
    probe = jnp.asarray(batches(15)[0])
    np.testing.assert_allclose(
        norm.apply(state, probe), running_statistics.normalize(probe, brax_state), rtol=2e-5
    )
    for batch in batches(16, steps=3):
        brax_state = update(brax_state, jnp.asarray(batch), until_count=until_count)
        back = update(back, jnp.asarray(batch), until_count=until_count)
    assert_same_brax_state(back, brax_state)
    if until_count is not None:  # still the first 96 observations
        np.testing.assert_allclose(
            brax_state.mean, batches(14)[:3].reshape(96, DIM).mean(0), rtol=1e-5
        )


def test_ema_variance_and_64_bit_count_read_and_given_back():
    """A count past 2**32 (words 3 and 7): the EMA variance is M / n, M held in two words."""
    brax_state, update = brax_ema_state(None)
    brax_state = brax_state.replace(
        count=brax_state.count.replace(hi=jnp.uint32(3), lo=jnp.uint32(7))
    )
    count = 3 * 2**32 + 7
    norm, state = rnb.from_running_statistics(brax_state)
    assert (rn.count_as_int(state.stats) == count).all()
    m2 = np.asarray(state.stats.m2, np.float64) + np.asarray(state.stats.m2_low, np.float64)
    expected_m2 = np.asarray(brax_state.summed_variance, np.float64) * count
    np.testing.assert_allclose(m2, expected_m2, rtol=1e-14)  # float32's 24 bits alone: 6e-8
    np.testing.assert_allclose(state.stats.var, brax_state.summed_variance, rtol=1e-7)
    back = rnb.to_running_statistics(norm.config, state)
    assert_same_brax_state(back, brax_state)
    batch = jnp.asarray(batches(17)[0])
    assert_same_brax_state(update(back, batch, until_count=None), update(brax_state, batch))


def test_welford_round_trip_keeps_std_eps_and_64_bit_count():
    update = jax.jit(running_statistics.update)
    brax_state = running_statistics.init_state(jnp.zeros(DIM), std_eps=0.3)
    for batch in batches(18, steps=3):
        brax_state = update(brax_state, jnp.asarray(batch))
    # A count past 2**32, then an update: Brax's std is of that count.
    brax_state = brax_state.replace(count=brax_state.count.replace(hi=jnp.uint32(2)))
    brax_state = update(brax_state, jnp.asarray(batches(18)[3] * 1e3))
    assert int(brax_state.count) == 2 * 2**32 + 4 * 32
    norm, state = rnb.from_running_statistics(brax_state)
    assert norm.config.preset == "brax"
    back = rnb.to_running_statistics(norm.config, state)
    assert back.mode == running_statistics.NormalizationMode.WELFORD
    assert_same_brax_state(back, brax_state)
    batch = jnp.asarray(batches(19)[0])
    assert_same_brax_state(update(back, batch), update(brax_state, batch))


def test_a_library_brax_ema_normalizer_gives_brax_an_ema_state():
    norm = rn.normalize_observation("brax_ema", epsilon=0.02)
    brax_state = running_statistics.init_state(jnp.zeros(DIM), std_eps=0.02, mode="ema")
    state = norm.init(jnp.zeros(DIM))
    assert_same_brax_state(rnb.to_running_statistics(norm.config, state), brax_state)
    reference = BraxReference(DIM, std_eps=0.02)
    for batch in batches(20, steps=4):
        state, brax_state = norm.update(state, batch), running_statistics.update(brax_state, batch)
        reference.update(batch)
    exported = rnb.to_running_statistics(norm.config, state)
    assert exported.mode == running_statistics.NormalizationMode.EMA
    assert int(exported.count) == int(brax_state.count) == 128
    np.testing.assert_allclose(exported.summed_variance, reference.summed_variance / 128, rtol=1e-6)
    np.testing.assert_allclose(exported.std, reference.std, rtol=1e-6)
    np.testing.assert_allclose(exported.std, brax_state.std, rtol=1e-4)  # Brax's float32 error


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"preset": "rsl_rl"}, r"epsilon_on='std' \(epsilon=0\.01 added to the std\)"),
        ({"preset": "brax_ema", "until_count": 100}, "cannot keep until_count=100"),
    ],
)
def test_options_brax_cannot_hold_are_refused(options, message):
    norm = rn.normalize_observation(**options)
    with pytest.raises(ValueError, match=message):
        rnb.to_running_statistics(norm.config, norm.init(jnp.zeros(DIM)))


def test_conversion_errors_name_the_problem():
    gym = rn.normalize_observation("gymnasium")
    with pytest.raises(ValueError, match="prior_count"):
        rnb.to_running_statistics(gym.config, gym.init(jnp.zeros(DIM)))
    norm = rn.normalize_observation("brax")
    batch = batches(8)[0]
    batch[0, 1] = np.nan  # feature 1 counts one sample fewer
    with pytest.raises(ValueError, match="different numbers of samples"):
        rnb.to_running_statistics(norm.config, norm.update(norm.init(jnp.zeros(DIM)), batch))
    with pytest.raises(TypeError, match="RunningStatisticsState"):
        rnb.from_running_statistics({"mean": 0})


def test_conversion_refuses_replicated_counts_and_other_std_bounds():
    brax_state = running_statistics.init_state(jnp.zeros(DIM))
    brax_state = running_statistics.update(
        brax_state, jnp.asarray(batches(11)[0]), std_min_value=0.5
    )
    with pytest.raises(ValueError, match="std_min_value and std_max_value"):
        rnb.from_running_statistics(brax_state)
    norm, _ = rnb.from_running_statistics(brax_state, std_min=0.5)
    assert norm.config.std_min == 0.5
    replicated = jax.tree.map(lambda x: jnp.stack([x, x]), brax_state)
    with pytest.raises(ValueError, match="one replica"):
        rnb.from_running_statistics(replicated)
    with pytest.raises(TypeError, match=r"norm\.config"):
        rnb.to_running_statistics(brax_state, brax_state)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("mean", np.nan, r"brax_state\.mean holds nan; expected a finite mean"),
        ("mean", np.inf, r"brax_state\.mean holds inf; expected a finite mean"),
        ("summed_variance", np.nan, r"brax_state\.summed_variance holds nan"),
    ],
)
def test_conversion_refuses_statistics_no_update_makes(field, value, message):
    brax_state = running_statistics.update(
        running_statistics.init_state(jnp.zeros(DIM)), jnp.asarray(batches(11)[0])
    )
    crafted = brax_state.replace(**{field: getattr(brax_state, field).at[1].set(value)})
    with pytest.raises(ValueError, match=message):
        rnb.from_running_statistics(crafted)


SHAPES = {"a": (), "b": (DIM,), "c": (2, 2)}  # feature shapes of a pytree observation


def weighted_batch(rng, fractional, envs=32):
    """Observations of every feature shape, and weights: integers, or fractions of integer total."""
    obs = {
        "a": rng.standard_normal(envs) * 3.0 + 10.0,
        "b": batches(rng.integers(1 << 30), steps=1, envs=envs)[0],
        "c": rng.standard_normal((envs, 2, 2)) * 1e-2 + 0.5,
    }
    weights = np.tile([0.5, 1.5], envs // 2) if fractional else rng.integers(0, 4, envs)
    return jax.tree.map(lambda x: x.astype(np.float32), obs), weights.astype(np.float32)


def weighted_truth(seen, weights):
    """The float64 weighted mean and standard deviation of every leaf."""
    w = np.concatenate(weights).astype(np.float64)

    def moments(*leaves):
        x = np.concatenate(leaves).astype(np.float64)
        wx = w.reshape(-1, *(1,) * (x.ndim - 1))
        mean = (wx * x).sum(0) / w.sum()
        return mean, np.sqrt((wx * (x - mean) ** 2).sum(0) / w.sum())

    return jax.tree.map(moments, *seen)


def test_weighted_update_and_denormalize_equal_brax():
    """Integer weights, and fractional ones of integer total (Brax's count is then exact)."""
    example = jax.tree.map(jnp.zeros, SHAPES, is_leaf=lambda x: isinstance(x, tuple))
    norm = rn.normalize_observation("brax")
    state, brax_state = norm.init(example), running_statistics.init_state(example)
    probe, _ = weighted_batch(np.random.default_rng(13), False, envs=4)
    # Before any sample both read the normalized values back as they are (std 1, mean 0).
    jax.tree.map(np.testing.assert_array_equal, norm.denormalize(state, probe), probe)
    update, brax_update = jax.jit(norm.update), jax.jit(running_statistics.update)
    rng, seen, weights_seen = np.random.default_rng(12), [], []
    for fractional in (False, True, False):
        obs, weights = weighted_batch(rng, fractional)
        state = update(state, obs, weights=weights)
        brax_state = brax_update(brax_state, obs, weights=jnp.asarray(weights))
        seen.append(obs)
        weights_seen.append(weights)
    stats = jax.tree.leaves(state.stats, is_leaf=lambda x: isinstance(x, rn.RunningStats))
    truth = jax.tree.leaves(
        weighted_truth(seen, weights_seen), is_leaf=lambda x: isinstance(x, tuple)
    )
    brax_std = jax.tree.leaves(brax_state.std)
    for leaf, (mean, std), theirs in zip(stats, truth, brax_std, strict=True):
        assert (rn.count_as_int(leaf) == int(brax_state.count)).all()
        ours = observation_std(norm.config, leaf)
        np.testing.assert_allclose(leaf.mean, mean, rtol=1e-6)  # float64's, to float32 rounding
        np.testing.assert_allclose(ours, std, rtol=1e-6)
        np.testing.assert_allclose(theirs, ours, rtol=1e-4)  # Brax's float32 Welford error
    np.testing.assert_allclose(state.stats["a"].mean, brax_state.mean["a"], rtol=1e-6)
    # denormalize is Brax's, x * std + mean: on Brax's statistics to rounding, and on the
    # library's (whose std is Brax's to 1e-4 of itself) to rounding at these scales.
    expected = running_statistics.denormalize(probe, brax_state)
    brax_norm, held = rnb.from_running_statistics(brax_state)
    same = lambda g, e: np.testing.assert_allclose(g, e, rtol=1e-6)  # noqa: E731
    jax.tree.map(same, brax_norm.denormalize(held, probe), expected)
    jax.tree.map(same, norm.denormalize(state, probe), expected)
