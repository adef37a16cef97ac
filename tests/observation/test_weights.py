"""normalize_observation's weighted updates and denormalize.

Integer weights against the entries repeated (bit for bit where the sums are
exact and both take the same sums), weight 0 against ``active=False``,
fractional weights, the refusals, and jit / vmap / scan. Brax's own
``update(..., weights=)`` and ``denormalize`` on several feature shapes:
tests/observation/test_brax_observation.py.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rewardnorm_jax as rn
from rewardnorm_jax._src.stats import summation

N, DIM = 16, 3  # entries per batch, features
NORM = rn.normalize_observation("brax")
UPDATE = jax.jit(NORM.update)  # one compiled update per set of options, shared by the tests
WEIGHTS = np.array([2, 0, 0, 0, 1, 3, 1, 2, 0, 3, 1, 1, 2, 0, 3, 1])  # 20 entries repeated


def observations(rng, n=N, quarters=False):
    """Float32 features of different scales and offsets; multiples of 1/4 if asked."""
    raw = rng.standard_normal((n, DIM)) * [0.5, 2.0, 30.0] + [1.0, -4.0, 100.0]
    return (np.round(raw * 4) / 4 if quarters else raw).astype(np.float32)


def shuffled_weights(rng):
    """WEIGHTS with entries 4 on shuffled: the first stays selected, the total stays 20."""
    return np.r_[WEIGHTS[:4], rng.permutation(WEIGHTS[4:])]


def assert_same_bits(a, b):
    jax.tree.map(np.testing.assert_array_equal, a, b)


def weighted_and_repeated(update, quarters, steps=3):
    """States after ``steps`` batches merged with integer weights, and repeated instead."""
    rng = np.random.default_rng(1)
    weighted = again = NORM.init(jnp.zeros(DIM))
    for _ in range(steps):
        obs, weights = observations(rng, quarters=quarters), shuffled_weights(rng)
        weighted = update(weighted, obs, weights=weights.astype(np.float32))
        again = update(again, np.repeat(obs, weights, axis=0))
    return weighted, again


def test_integer_weights_are_the_entries_repeated():
    # Multiples of 1/4 sum exactly: summed alike, both give the same bits, count included.
    with summation.everywhere("plain"):
        plain = jax.jit(lambda *args, **options: NORM.update(*args, **options))  # traced here
        weighted, again = weighted_and_repeated(plain, quarters=True)
    assert_same_bits(weighted, again)
    assert int(rn.count_as_int(weighted.stats)[0]) == 3 * WEIGHTS.sum()
    # Any data, each batch summed its own way: the count exact, the moments to rounding.
    weighted, again = weighted_and_repeated(UPDATE, quarters=False)
    np.testing.assert_array_equal(weighted.stats.count_words, again.stats.count_words)
    np.testing.assert_allclose(weighted.stats.mean, again.stats.mean, rtol=1e-6)
    np.testing.assert_allclose(weighted.stats.var, again.stats.var, rtol=1e-5)


def test_weight_zero_is_active_false_and_bad_traced_weights_weigh_zero_in_the_statistics():
    rng = np.random.default_rng(2)
    state = UPDATE(NORM.init(jnp.zeros(DIM)), observations(rng), weights=np.ones(N, np.float32))
    # Multiples of 1/4 sum exactly, in any order: each form of the merge gives the same bits.
    obs, weights = observations(rng, quarters=True), shuffled_weights(rng).astype(np.float32)
    zero = weights == 0
    expected = UPDATE(state, obs, weights=weights)
    # active and weights both apply: an inactive entry's weight is ignored.
    assert_same_bits(
        UPDATE(state, obs, active=~zero, weights=np.where(zero, 5.0, weights)), expected
    )
    # Traced, a negative or non-finite weight cannot be refused: the statistics weigh it 0
    # (NaN never enters them), and step's output is NaN in its entry.
    bad = np.where(zero, np.resize([-1.0, np.nan, np.inf], N), weights).astype(np.float32)
    assert_same_bits(UPDATE(state, obs, weights=bad), expected)
    out, stepped = jax.jit(NORM.step)(state, obs, weights=bad)
    zero_out, zero_stepped = jax.jit(NORM.step)(state, obs, weights=weights)
    assert_same_bits(stepped, zero_stepped)
    assert np.isnan(out[zero]).all()
    assert_same_bits(out[~zero], zero_out[~zero])
    # 0/1 weights are the active flags, summed alike.
    with summation.everywhere("plain"):
        plain = jax.jit(lambda *args, **options: NORM.update(*args, **options))
        flags = plain(state, obs, weights=(~zero).astype(np.float32))
        assert_same_bits(flags, plain(state, obs, active=~zero))


def test_fractional_weights_join_as_their_rounded_total():
    """The weighted moments within the batch; the batch counts round(W) samples."""
    rng = np.random.default_rng(3)
    obs, weights = observations(rng), rng.uniform(0.0, 1.0, N).astype(np.float32)
    state = UPDATE(NORM.init(jnp.zeros(DIM)), obs, weights=weights)
    w, x = weights.astype(np.float64)[:, None], obs.astype(np.float64)
    mean = (w * x).sum(0) / w.sum()
    np.testing.assert_allclose(state.stats.mean, mean, rtol=1e-6)
    np.testing.assert_allclose(state.stats.var, (w * (x - mean) ** 2).sum(0) / w.sum(), rtol=1e-5)
    assert (rn.count_as_int(state.stats) == np.round(weights.sum())).all()
    light = np.full(N, 0.4 / N, np.float32)  # a total below 1/2 rounds to no sample
    assert_same_bits(UPDATE(state, obs, weights=light), state)


@pytest.mark.parametrize(
    "statistics",
    [rn.Statistics(), rn.Statistics(per_env=True), rn.Statistics(num_tasks=2)],
    ids=["shared", "per_env", "tasks"],
)
@pytest.mark.parametrize("bad", [np.nan, -1.0, np.inf], ids=["nan", "negative", "inf"])
def test_a_bad_traced_weight_makes_its_entry_nan_in_every_floating_leaf(statistics, bad):
    """Pytree observations: the entry's floating leaves NaN, its integers unchanged."""
    norm = rn.normalize_observation("brax", statistics=statistics)
    task = {"task": np.array([0, 1, 1, 0], np.int32)} if statistics.num_tasks else {}
    rng = np.random.default_rng(5)
    obs = {
        "pos": observations(rng, n=4),
        "speed": rng.standard_normal(4).astype(np.float32),
        "cell": np.arange(4, dtype=np.int32),
    }
    example = jax.tree.map(lambda leaf: leaf[0], obs)
    state = norm.init(example, (4,) if statistics.per_env else ())
    weights = np.array([1.0, 2.0, 1.0, 3.0], np.float32)
    spoiled, zeroed = weights.copy(), weights.copy()
    spoiled[1], zeroed[1] = bad, 0.0
    step = jax.jit(lambda state, obs, weights: norm.step(state, obs, weights=weights, **task))
    out, stepped = step(state, obs, spoiled)
    zero_out, zero_stepped = step(state, obs, zeroed)
    assert_same_bits(stepped, zero_stepped)
    assert np.isnan(out["pos"][1]).all()
    assert np.isnan(out["speed"][1])
    np.testing.assert_array_equal(out["cell"], obs["cell"])
    keep = np.arange(4) != 1
    assert_same_bits(
        jax.tree.map(lambda leaf: leaf[keep], out), jax.tree.map(lambda leaf: leaf[keep], zero_out)
    )


@pytest.mark.parametrize(
    ("weights", "error", "message"),
    [
        (np.ones(N - 1), ValueError, r"weights has shape \(15,\); expected \(16,\)"),
        (np.r_[1.0, -1.0, np.ones(N - 2)], ValueError, r"weights holds -1\.0; expected .*>= 0"),
        (np.r_[np.nan, np.ones(N - 1)], ValueError, r"weights holds nan; expected .*finite"),
        (np.r_[np.inf, np.ones(N - 1)], ValueError, r"weights holds inf; expected .*finite"),
        (np.ones(N, np.complex64), TypeError, r"weights should hold .* got weights=a complex64"),
    ],
)
def test_weights_refused_naming_the_value_and_what_is_valid(weights, error, message):
    state = NORM.init(jnp.zeros(DIM))
    obs = observations(np.random.default_rng(0))
    with pytest.raises(error, match=message):
        NORM.update(state, obs, weights=weights)
    with pytest.raises(error, match=message):
        NORM.step(state, obs, weights=weights)


def test_weights_and_denormalize_under_jit_vmap_and_scan():
    rng = np.random.default_rng(4)
    batches = np.stack([observations(rng) for _ in range(3)])
    weights = np.stack([shuffled_weights(rng) for _ in batches]).astype(np.float32)

    def body(state, inputs):
        obs, w = inputs
        out, new = NORM.step(state, obs, weights=w)  # normalized by the statistics before
        return new, NORM.denormalize(state, out)

    init = NORM.init(jnp.zeros(DIM))
    final, restored = jax.jit(lambda s, xs: jax.lax.scan(body, s, xs))(init, (batches, weights))
    # Read back: the observations, to float32 rounding of the feature's magnitude.
    assert (np.abs(restored - batches) <= 1e-6 * np.abs(batches).max((0, 1))).all()
    state = init
    for obs, w in zip(batches, weights, strict=True):
        state = UPDATE(state, obs, weights=w)
    np.testing.assert_array_equal(final.stats.count_words, state.stats.count_words)
    np.testing.assert_allclose(final.stats.mean, state.stats.mean, rtol=1e-6)

    # Two participants of 8 entries each merge, across the vmapped axis, the whole batch.
    shared = rn.normalize_observation("brax", axis_name="i")
    split = jax.jit(jax.vmap(lambda obs, w: shared.update(init, obs, weights=w), axis_name="i"))(
        batches[0].reshape(2, N // 2, DIM), weights[0].reshape(2, N // 2)
    )
    whole = UPDATE(init, batches[0], weights=weights[0])
    np.testing.assert_array_equal(split.stats.count_words, np.stack([whole.stats.count_words] * 2))
    np.testing.assert_allclose(split.stats.mean, np.stack([whole.stats.mean] * 2), rtol=1e-6)
    np.testing.assert_allclose(split.stats.var, np.stack([whole.stats.var] * 2), rtol=1e-5)


def test_denormalize_inverts_apply_but_not_its_clip_and_integers_pass():
    norm = rn.normalize_observation("sb3")  # clip 10
    example = {"x": jnp.zeros(DIM), "id": jnp.zeros((), jnp.int32)}
    rng = np.random.default_rng(5)
    batch = {"x": observations(rng), "id": np.arange(N, dtype=np.int32)}
    state = jax.jit(norm.update)(norm.init(example), batch)
    stats = state.stats["x"]
    sigma = np.sqrt(np.asarray(stats.var, np.float64) + 1e-8)
    outlier = np.asarray(stats.mean, np.float64) + 1e3 * sigma  # normalized past the clip
    probe = {"x": np.r_[observations(rng, n=3), outlier[None]], "id": np.arange(4, dtype=np.int32)}
    back = jax.jit(lambda s, x: norm.denormalize(s, norm.apply(s, x)))(state, probe)
    np.testing.assert_allclose(back["x"][:3], probe["x"][:3], rtol=1e-6)
    # Clipped at 10: read back as mean + 10 sigma, not as the outlier.
    np.testing.assert_allclose(back["x"][3], np.asarray(stats.mean) + 10 * sigma, rtol=1e-6)
    assert back["id"].dtype == np.int32
    np.testing.assert_array_equal(back["id"], probe["id"])


MOST = 2**64 - 1  # the largest count the two words hold
PAIR = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)  # weighted alike: mean [2, 3], var [1, 1]


def merged(prior_count, batches):
    """Float64 mean and variance of weighted batches merged into a prior of mean 0, variance 1."""
    n, mean, m2 = prior_count, np.zeros(2), np.full(2, prior_count)
    for x, w in batches:
        x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)[:, None]
        total = w.sum()
        batch_mean = (w * x).sum(0) / total
        batch_var = (w * (x - batch_mean) ** 2).sum(0) / total
        delta, n_new = batch_mean - mean, n + total
        mean = mean + delta * total / n_new
        m2 = m2 + batch_var * total + delta**2 * n * total / n_new
        n = n_new
    return mean, m2 / n


@pytest.mark.parametrize("jit", [False, True])
def test_weight_totals_past_2_to_the_32_count_exactly_with_the_weighted_variance(jit):
    norm = rn.normalize_observation()
    update = jax.jit(norm.update) if jit else norm.update
    weights = np.array([3e9, 3e9], np.float32)
    state = update(norm.init(jnp.zeros(2)), PAIR, weights=weights)
    assert rn.count_as_int(state.stats).tolist() == [6_000_000_000] * 2
    mean, var = merged(1e-4, [(PAIR, weights)])
    np.testing.assert_allclose(state.stats.mean, mean, rtol=1e-6)
    np.testing.assert_allclose(state.stats.var, var, rtol=1e-6)  # [1, 1], not 1.397


@pytest.mark.parametrize("jit", [False, True])
def test_weight_totals_past_2_to_the_64_keep_the_proportions_and_fill_the_count(jit):
    norm = rn.normalize_observation()
    update = jax.jit(norm.update) if jit else norm.update
    heavy = np.array([1e20, 1e20], np.float32)
    state = update(norm.init(jnp.zeros(2)), PAIR, weights=heavy)
    assert rn.count_as_int(state.stats).tolist() == [MOST] * 2
    np.testing.assert_allclose(state.stats.mean, [2.0, 3.0], rtol=1e-6)
    np.testing.assert_allclose(state.stats.var, [1.0, 1.0], rtol=1e-6)  # not 4.66e10
    # A past of 8e18 samples and a batch of 1.6e19: together past 2^64, merged 1 : 2.
    first, second = np.array([4e18, 4e18], np.float32), np.array([8e18, 8e18], np.float32)
    other = np.array([[-3.0, 10.0], [5.0, 30.0]], np.float32)
    state = update(norm.init(jnp.zeros(2)), PAIR, weights=first)
    assert rn.count_as_int(state.stats).tolist() == [2 * int(first[0])] * 2
    state = update(state, other, weights=second)
    assert rn.count_as_int(state.stats).tolist() == [MOST] * 2
    mean, var = merged(1e-4, [(PAIR, first), (other, second)])
    np.testing.assert_allclose(state.stats.mean, mean, rtol=1e-6)
    np.testing.assert_allclose(state.stats.var, var, rtol=1e-6)
    # The full count stays full: entries merge beside 2^64 samples, the count never wraps.
    after = update(state, other)
    assert rn.count_as_int(after.stats).tolist() == [MOST] * 2
    np.testing.assert_allclose(after.stats.mean, mean, rtol=1e-6)


def test_weights_whose_float_total_overflows_keep_the_weighted_moments():
    brax = rn.normalize_observation("brax")
    heavy = np.array([3e38, 3e38], np.float32)
    for update in (brax.update, jax.jit(brax.update)):
        state = update(brax.init(jnp.zeros(2)), PAIR, weights=heavy)
        np.testing.assert_allclose(state.stats.mean, [2.0, 3.0], rtol=1e-6)  # not [0, 0]
        np.testing.assert_allclose(state.stats.var, [1.0, 1.0], rtol=1e-6)  # not [inf, inf]
        assert rn.count_as_int(state.stats).tolist() == [MOST] * 2
    # Per task: task 0's weights overflow, task 1's entry weighs 1.
    tasks = rn.normalize_observation("brax", statistics=rn.Statistics(num_tasks=2))
    obs = np.r_[PAIR, [[10.0, 20.0]]].astype(np.float32)
    state = jax.jit(lambda s, x, w, t: tasks.update(s, x, weights=w, task=t))(
        tasks.init(jnp.zeros(2)), obs, np.r_[heavy, 1.0].astype(np.float32), jnp.array([0, 0, 1])
    )
    np.testing.assert_allclose(state.stats.mean, [[2.0, 3.0], [10.0, 20.0]], rtol=1e-6)
    np.testing.assert_allclose(state.stats.var[0], [1.0, 1.0], rtol=1e-6)
    assert rn.count_as_int(state.stats)[:, 0].tolist() == [MOST, 1]
    # Per environment, over 2 steps: environment 0 weighs 3e38 each step, environment 1 one.
    envs = rn.normalize_observation("brax", statistics=rn.Statistics(per_env=True))
    steps = np.stack([PAIR, PAIR[::-1] * 2]).astype(np.float32)  # (2 steps, 2 envs, 2)
    weights = np.array([[3e38, 1.0], [3e38, 1.0]], np.float32)
    state = envs.update(envs.init(jnp.zeros(2), batch_shape=(2,)), steps, weights=weights)
    np.testing.assert_allclose(state.stats.mean, steps.mean(0), rtol=1e-6)
    np.testing.assert_allclose(state.stats.var, steps.var(0), rtol=1e-6)
    # Two participants of a named vmap, one entry of weight 3e38 each: their total overflows.
    shared = rn.normalize_observation("brax", axis_name="i")
    split = jax.vmap(
        lambda x, w: shared.update(brax.init(jnp.zeros(2)), x, weights=w), axis_name="i"
    )
    state = split(PAIR[:, None], heavy[:, None])
    np.testing.assert_allclose(state.stats.mean, [[2.0, 3.0]] * 2, rtol=1e-6)
    np.testing.assert_allclose(state.stats.var, [[1.0, 1.0]] * 2, rtol=1e-6)


def test_a_total_weight_below_one_that_rounds_to_a_sample_weighs_its_entries():
    # [0.3, 0.3] joins as one sample with the entries' weighted mean and variance (the
    # weighted sums were divided by 1, not by 0.6: mean 2.6 and variance 0.84 for [2, 4]).
    brax = rn.normalize_observation("brax")
    state = brax.update(brax.init(jnp.zeros(())), jnp.array([2.0, 4.0]), weights=[0.3, 0.3])
    assert float(state.stats.mean) == 3.0
    assert float(state.stats.var) == 1.0
    assert int(rn.count_as_int(state.stats)) == 1
