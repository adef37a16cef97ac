"""Masked whitening, the KL estimate in the reward and the overlong penalty against references.

``tests/token_reference.py`` transcribes verl's, Tunix's and OpenRLHF's code in
float64 NumPy, poisoning included; the library's ``"exact"`` conventions are
written out below. Inputs are float32 values; the references evaluate those
same values in float64.
"""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rewardnorm_jax as rn
from tests import token_reference as reference

WHITENING = ("exact", "verl", "tunix", "openrlhf")
TOLERANCE = 2e-6  # float32 against float64, relative to |reference| + 1


def assert_close(got, want, tolerance=TOLERANCE):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    error = np.abs(got[finite] - want[finite]) / (np.abs(want[finite]) + 1)
    assert error.max(initial=0) <= tolerance, error.max()


def tokens(seed=0, rows=8, length=40, *, scale=3.0, offset=2.0):
    """Float32 token values and a response mask with ragged lengths and a hole in one row."""
    rng = np.random.default_rng(seed)
    values = (rng.standard_normal((rows, length)) * scale + offset).astype(np.float32)
    mask = np.arange(length) < rng.integers(2, length + 1, (rows, 1))
    mask[0, 5:9] = False  # a hole inside a response (a tool call's tokens)
    return values, mask


def exact_whiten(values, mask, shift_mean=True):
    """The library's convention: frequency weights, ddof 1, no epsilon; 0 if constant or W <= 1."""
    weights = np.broadcast_to(np.asarray(mask, np.float64), values.shape)
    kept = weights != 0
    x, w = values[kept].astype(np.float64), weights[kept]
    total = w.sum()
    mean = (w * x).sum() / total if total else 0.0
    out = np.zeros(values.shape)
    if total <= 1 or np.all(x == x[0]):
        out[kept] = 0.0
    else:
        out[kept] = (x - mean) / np.sqrt((w * (x - mean) ** 2).sum() / (total - 1))
    if not shift_mean:
        out[kept] += mean
    return out


def whiten_reference(convention, values, mask, shift_mean=True):
    """The trainer's output at masked-in positions, 0 elsewhere (the trainers mask after)."""
    if convention == "exact":
        return exact_whiten(values, mask, shift_mean)
    if convention == "verl":
        out = reference.verl_masked_whiten(values, mask, shift_mean)
    elif convention == "tunix":
        out = reference.tunix_masked_whiten(values, mask)
    else:
        out = reference.openrlhf_whiten(values, mask)
    return np.where(mask != 0, out, 0.0)


@pytest.mark.parametrize("convention", WHITENING)
def test_whitening_matches_each_trainer(convention):
    for seed in range(3):
        values, mask = tokens(seed)
        got = rn.masked_whiten(values, mask, convention=convention)
        assert got.dtype == jnp.float32
        assert_close(got, whiten_reference(convention, values, mask))


@pytest.mark.parametrize("convention", ["exact", "verl"])
def test_shift_mean_false_adds_the_mean_back(convention):
    values, mask = tokens(1)
    got = rn.masked_whiten(values, mask, convention=convention, shift_mean=False)
    assert_close(got, whiten_reference(convention, values, mask, shift_mean=False))


@pytest.mark.parametrize("convention", WHITENING)
def test_values_at_masked_out_positions_never_reach_the_output(convention):
    values, mask = tokens(2)
    clean = rn.masked_whiten(values, mask, convention=convention)
    poisoned = values.copy()
    holes = np.flatnonzero(~mask)
    poisoned.flat[holes[::3]] = np.nan
    poisoned.flat[holes[1::3]] = np.inf
    poisoned.flat[holes[2::3]] = -3e38
    got = rn.masked_whiten(poisoned, mask, convention=convention)
    np.testing.assert_array_equal(got, clean)
    assert np.isfinite(got).all()
    assert np.all(np.asarray(got)[~mask] == 0)


def test_the_trainers_own_code_is_poisoned_by_masked_out_values():
    # What the library's conventions do not reproduce: Tunix and OpenRLHF multiply the
    # values by the mask, so one NaN at a padded position makes every output NaN; verl's
    # where() keeps its statistics, but the outputs at the padded positions are NaN.
    values, mask = tokens(3)
    values[~mask] = np.nan
    assert np.isnan(reference.tunix_masked_whiten(values, mask)).all()
    assert np.isnan(reference.openrlhf_whiten(values, mask)).all()
    verl = reference.verl_masked_whiten(values, mask)
    assert np.isfinite(verl[mask]).all()
    assert np.isnan(verl[~mask]).all()


def test_a_nan_at_a_masked_in_position_is_dropped_or_spreads_by_convention():
    values, mask = tokens(4)
    values[2, 0] = np.nan
    exact = np.asarray(rn.masked_whiten(values, mask))
    assert np.isnan(exact[2, 0])
    assert np.isnan(exact).sum() == 1
    kept = mask.copy()
    kept[2, 0] = False
    np.testing.assert_array_equal(
        np.delete(exact.ravel(), 2 * 40),
        np.delete(np.asarray(rn.masked_whiten(values, kept)).ravel(), 2 * 40),
    )
    for convention in ("verl", "tunix", "openrlhf"):
        got = np.asarray(rn.masked_whiten(values, mask, convention=convention))
        assert np.isnan(got[mask]).all(), convention
        assert np.all(got[~mask] == 0), convention


@pytest.mark.parametrize("convention", ["exact", "openrlhf"])
@pytest.mark.parametrize("constant", [0.1, 1000 / 7, -3.3e-5])
def test_a_constant_batch_gives_exactly_zero(convention, constant):
    values, mask = tokens(5)
    values[:] = np.float32(constant)
    values[~mask] = 7.0  # masked out: not part of the batch
    np.testing.assert_array_equal(rn.masked_whiten(values, mask, convention=convention), 0.0)
    shifted = rn.masked_whiten(values, mask, convention=convention, shift_mean=False)
    np.testing.assert_array_equal(shifted, np.where(mask, np.float32(constant), 0))


@pytest.mark.parametrize("convention", ["verl", "tunix"])
@pytest.mark.parametrize("constant", [0.1, 1000 / 7, -3.3e-5])
def test_a_constant_batch_keeps_the_count_epsilons_offset(convention, constant):
    # Their mean divides by W + 1e-8: c 1e-8 / (W + 1e-8) below the values, which
    # rsqrt(v + 1e-8) scales to about 1e-4 c / W, in float32 as in float64.
    values, mask = tokens(5)
    values[:] = np.float32(constant)
    values[~mask] = 7.0
    got = np.asarray(rn.masked_whiten(values, mask, convention=convention))
    want = whiten_reference(convention, values, mask)
    assert_close(got, want)
    expected = 1e-4 * np.float64(np.float32(constant)) / mask.sum()
    np.testing.assert_allclose(got[mask], expected, rtol=1e-3)


def test_one_token_and_no_token():
    values = np.array([[3.0, 4.0], [5.0, 6.0]], np.float32)
    one = np.array([[False, True], [False, False]])
    for convention, want in (
        ("exact", 0.0),
        ("openrlhf", 0.0),
        ("verl", np.nan),
        ("tunix", np.nan),
    ):
        got = np.asarray(rn.masked_whiten(values, one, convention=convention))
        np.testing.assert_array_equal(got, np.where(one, want, 0.0))
        none = rn.masked_whiten(values, np.zeros((2, 2), bool), convention=convention)
        np.testing.assert_array_equal(none, 0.0)


def test_float64_matches_the_references_at_1e_12():
    with jax.enable_x64(True):
        values, mask = tokens(6)
        values = values.astype(np.float64) + np.random.default_rng(0).random(values.shape) * 1e-3
        for convention in WHITENING:
            got = rn.masked_whiten(values, mask, convention=convention)
            assert got.dtype == jnp.float64
            assert_close(got, whiten_reference(convention, values, mask), 1e-12)


def weighted_tokens(seed, dtype):
    """Token values and weights in [0, 3), a third of them 0, summing well above 1."""
    rng = np.random.default_rng(seed)
    values = (rng.standard_normal((8, 40)) * 3 + 2).astype(dtype)
    weights = (rng.random(values.shape) * 3 * (rng.random(values.shape) < 0.67)).astype(dtype)
    values[weights == 0] = rng.choice([np.nan, np.inf, 1e30], (weights == 0).sum())
    return values, weights


@pytest.mark.parametrize(
    ("convention", "shift_mean"),
    # OpenRLHF and Tunix have no shift_mean option (verl's and the library's).
    [(convention, True) for convention in WHITENING] + [("exact", False), ("verl", False)],
)
def test_weighted_masks_match_each_trainer_in_float32_and_float64(convention, shift_mean):
    # The trainers multiply by the mask: a float mask weighs each token, here concrete and
    # traced alike.
    whiten = partial(rn.masked_whiten, convention=convention, shift_mean=shift_mean)
    for dtype, tolerance in ((np.float32, 1e-5), (np.float64, 1e-10)):
        with jax.enable_x64(dtype == np.float64):
            values, weights = weighted_tokens(21, dtype)
            want = (
                exact_whiten(values, weights, shift_mean)
                if convention == "exact"
                else whiten_reference(
                    convention, np.where(weights != 0, values, 0), weights, shift_mean
                )
            )
            assert_close(whiten(values, weights), want, tolerance)
            assert_close(jax.jit(whiten)(values, weights), want, tolerance)


@pytest.mark.parametrize("convention", WHITENING)
def test_weights_whose_total_passes_the_dtype_whiten_as_their_proportions_say(convention):
    # Every weight 3e38 passes the check; their float32 total does not fit. With W ~ 1e39
    # the ddof and count epsilon vanish beside W: the population variance, in every convention
    # (up to the 1e-8 that verl and Tunix add to it).
    values = np.array([[1.0, 2.0, 3.0, 4.0]], np.float32)
    heavy = np.full(values.shape, 3e38, np.float32)
    want = whiten_reference(convention, values, heavy.astype(np.float64))
    assert_close(want, [[-1.3416407865, -0.4472135955, 0.4472135955, 1.3416407865]], 1e-8)
    assert_close(rn.masked_whiten(values, heavy, convention=convention), want)
    assert_close(jax.jit(partial(rn.masked_whiten, convention=convention))(values, heavy), want)
    # Weights in [0, 3) times 2^125: a float32 total of about 1e40, the references in float64.
    values, weights = weighted_tokens(22, np.float32)
    weights = weights * np.float32(2.0**125)
    assert np.isinf(weights.sum(dtype=np.float32))
    want = (
        exact_whiten(values, weights)
        if convention == "exact"
        else whiten_reference(convention, np.where(weights != 0, values, 0), weights)
    )
    assert_close(rn.masked_whiten(values, weights, convention=convention), want, 1e-5)


def test_a_weight_of_one_or_less_is_nan_where_the_trainers_divide_by_zero_or_less():
    # verl's and Tunix's unbiased variance multiplies by W / (W - 1): W = 1 divides by 0
    # (verl raises), W < 1 makes it negative. The library's convention gives 0 there.
    values = np.array([[1.0, 2.0, 4.0, 8.0]], np.float32)
    for rows in ([[0.25, 0.25, 0.25, 0.25]], [[0.1, 0.2, 0.0, 0.3]], [[0.0, 1.0, 0.0, 0.0]]):
        weights = np.array(rows, np.float32)
        for convention, want in (("exact", 0.0), ("verl", np.nan), ("tunix", np.nan)):
            got = np.asarray(rn.masked_whiten(values, weights, convention=convention))
            np.testing.assert_array_equal(got, np.where(weights != 0, want, 0.0))
        finite = rn.masked_whiten(values, weights, convention="openrlhf")  # ddof 0: finite
        assert_close(finite, whiten_reference("openrlhf", values, weights))


def test_a_large_value_of_tiny_weight_costs_no_precision():
    # The statistics are shifted by a value of the largest weight, not by the largest value.
    values = np.array([[1e4, 0.01, -0.02, 0.005, 0.013, -0.007]], np.float32)
    weights = np.array([[1e-30, 1, 1, 1, 1, 1]], np.float32)
    for convention in WHITENING:
        want = (
            exact_whiten(values, weights)
            if convention == "exact"
            else whiten_reference(convention, values, weights)
        )
        assert_close(rn.masked_whiten(values, weights, convention=convention), want, 1e-5)


def test_traced_weights_out_of_range_give_nan_not_a_wrong_number():
    values, mask = tokens(12)
    weights = mask.astype(np.float32)
    weights[2, 1] = -1.0
    got = jax.jit(rn.masked_whiten)(values, weights)
    assert np.isnan(np.asarray(got)[weights != 0]).all()


def test_near_constant_values_far_from_zero_keep_float32_accuracy():
    # Spread 1e-5 of the mean: a float32 sum of squares about the mean loses every digit.
    rng = np.random.default_rng(7)
    values = (1e4 + rng.standard_normal((16, 64)) * 0.1).astype(np.float32)
    mask = np.ones(values.shape, bool)
    assert_close(rn.masked_whiten(values, mask), exact_whiten(values, mask), 2e-5)


def test_sequence_scores_spread_over_their_tokens():
    # One score per sequence, (B, 1), whitened over every response token of the batch.
    values, mask = tokens(8)
    scores = values[:, :1]
    got = rn.masked_whiten(scores, mask)
    assert_close(got, exact_whiten(np.broadcast_to(scores, mask.shape), mask))


def test_verl_reinforce_pp_baseline_with_a_weighted_mask():
    # verl whitens score * mask and multiplies by the mask: with weights, so does the caller.
    rng = np.random.default_rng(19)
    mask = rng.random((12, 30)) * 2 * (np.arange(30) < rng.integers(3, 31, (12, 1)))
    ids = rng.integers(0, 5, 12)
    scores = rng.integers(0, 2, 12).astype(np.float64)
    with jax.enable_x64(True):
        baseline = rn.group_advantages("reinforce_pp_baseline", convention="verl", num_groups=5)
        advantages = np.asarray(baseline.apply(scores, group_ids=ids).advantages)
        tokens = advantages[:, None] * mask
        got = rn.masked_whiten(tokens, mask, convention="verl") * mask
        assert_close(got, reference.verl_reinforce_pp_baseline(scores, ids, mask), 1e-10)


def test_reinforce_pp_baseline_and_gdpo_complete_on_the_whitening():
    # verl's two estimators that whiten over tokens after the group step: the group step of
    # group_advantages, then masked_whiten of each answer's advantage over its tokens.
    rng = np.random.default_rng(9)
    _values, mask = tokens(9, rows=12)
    ids = rng.integers(0, 5, 12)
    scores = rng.integers(0, 2, 12).astype(np.float32)  # includes a group of one, most likely
    baseline = rn.group_advantages("reinforce_pp_baseline", convention="verl", num_groups=5)
    advantages = baseline.apply(scores, group_ids=ids).advantages
    got = rn.masked_whiten(advantages[:, None], mask, convention="verl")
    assert_close(got, reference.verl_reinforce_pp_baseline(scores, ids, mask))
    rewards = rng.random((12, 2)).astype(np.float32)
    gdpo = rn.group_advantages("gdpo", convention="verl", num_groups=5, reward_weights=(1.0, 0.5))
    advantages = gdpo.apply(rewards, group_ids=ids).advantages
    got = rn.masked_whiten(advantages[:, None], mask, convention="verl")
    assert_close(got, reference.verl_gdpo(rewards, ids, mask, (1.0, 0.5)), 1e-5)


def test_whitening_under_jit_vmap_and_an_axis_name():
    values, mask = tokens(10)
    want = rn.masked_whiten(values, mask)
    np.testing.assert_allclose(jax.jit(rn.masked_whiten)(values, mask), want, rtol=1e-6)
    # The rows as a mapped axis with its name: the statistics of all of them, as one call.
    per_row = jax.vmap(lambda v, m: rn.masked_whiten(v, m, axis_name="rows"), axis_name="rows")
    np.testing.assert_allclose(per_row(values, mask), want, rtol=1e-5, atol=1e-6)
    # Without the name, each row is its own batch.
    rows = jax.vmap(rn.masked_whiten)(values, mask)
    np.testing.assert_allclose(rows[3], rn.masked_whiten(values[3], mask[3]), rtol=1e-6)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda v, m: rn.masked_whiten(v, m, convention="trl"), "convention should be one of"),
        (
            lambda v, m: rn.masked_whiten(v, m, shift_mean="no"),  # type: ignore[arg-type]
            "shift_mean should be a bool",
        ),
        (lambda v, m: rn.masked_whiten(v, m - 0.5), "mask holds -0.5; expected bools, 0/1"),
        (lambda v, m: rn.masked_whiten(v, m * np.nan), "mask holds nan; expected bools, 0/1"),
        (
            lambda v, m: rn.masked_whiten(v, m.astype(np.float64) * 1e39),
            r"mask holds inf; .*float32",
        ),
        (lambda v, m: rn.masked_whiten(v[:, :3], m), r"values has shape \(8, 3\)"),
        (lambda v, m: rn.masked_whiten(v, True), "mask is a scalar"),
        (lambda v, m: rn.masked_whiten(v, m, axis_name=0), "axis_name should be None"),
    ],
)
def test_whitening_options_and_inputs_are_checked(call, message):
    values, mask = tokens(11)
    with pytest.raises((ValueError, TypeError), match=message):
        call(values, mask.astype(np.float32))


def test_complex_values_are_refused():
    with pytest.raises(TypeError, match="values should hold real numbers"):
        rn.masked_whiten(np.ones((2, 2), np.complex64), np.ones((2, 2), bool))


# The KL estimate ------------------------------------------------------------------------

KL = {
    "exact": ("k1", "abs", "k2", "k3"),
    "verl": ("k1", "abs", "k2", "k3"),
    "openrlhf": ("k1", "k2", "k3"),
    "tunix": ("k1", "k2", "k3"),
}


def log_probs(seed=0, shape=(6, 50)):
    """Float32 log-probabilities: near the reference, far from it, and past every clamp."""
    rng = np.random.default_rng(seed)
    ref = -rng.exponential(2.0, shape).astype(np.float32)
    ratio = rng.choice([1e-5, 1e-3, 0.3, 3.0, 15.0, 30.0], shape) * rng.choice([-1, 1], shape)
    logp = (ref + ratio).astype(np.float32)
    return logp, ref


def kl_reference(convention, estimator, logp, ref, clip=None):
    if convention == "verl":
        return reference.verl_kl(logp, ref, estimator)
    if convention == "openrlhf":
        return reference.openrlhf_kl(logp, ref, estimator)
    if convention == "tunix":
        return reference.tunix_kl(logp, ref, estimator, clip)
    ratio = logp.astype(np.float64) - ref.astype(np.float64)
    exact = {
        "k1": ratio,
        "abs": np.abs(ratio),
        "k2": ratio**2 / 2,
        "k3": np.vectorize(reference.exact_k3)(ratio),
    }[estimator]
    return exact if clip is None else np.clip(exact, -clip, clip)


@pytest.mark.parametrize(
    ("convention", "estimator"), [(c, e) for c, names in KL.items() for e in names]
)
def test_kl_estimates_match_each_trainer(convention, estimator):
    logp, ref = log_probs()
    got = rn.kl_estimate(logp, ref, estimator=estimator, convention=convention)
    want = kl_reference(convention, estimator, logp, ref)
    if convention != "exact" and estimator == "k3":
        # The references' float64 exp(-d) - 1 + d keeps about 1e-16 absolute near 0.
        want = np.where(np.abs(want) < 1e-8, kl_reference("exact", "k3", logp, ref), want)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


def test_the_clamps_bind_where_the_trainers_have_them():
    logp = np.array([-100.0, -1.0, -1.0], np.float32)
    ref = np.array([-1.0, -30.0, -1.0], np.float32)
    exact = rn.kl_estimate(logp, ref, estimator="k3")
    verl = rn.kl_estimate(logp, ref, estimator="k3", convention="verl")
    openrlhf = rn.kl_estimate(logp, ref, estimator="k1", convention="openrlhf")
    assert np.isinf(exact[0])
    assert exact[1] == pytest.approx(28.0)
    np.testing.assert_array_equal(verl, [10.0, 10.0, 0.0])  # exp(20) - 21 and 28, clamped
    np.testing.assert_array_equal(openrlhf, [-10.0, 10.0, 0.0])
    tunix = rn.kl_estimate(logp, ref, estimator="k3", convention="tunix", clip=5.0)
    np.testing.assert_array_equal(tunix, [5.0, 5.0, 0.0])  # Tunix's clamp_value


def test_k3_is_accurate_where_the_trainers_float32_formula_is_not():
    ref = np.full(4, -1.0, np.float32)
    logp = ref + np.array([1e-3, -1e-3, 1e-4, 3e-5], np.float32)
    ratio = logp.astype(np.float64) - ref
    want = np.vectorize(reference.exact_k3)(ratio)
    d = (ref - logp).astype(np.float32)
    upstream = np.exp(d) - d - 1  # Tunix's, and verl's between its clamps, in float32
    assert np.abs(upstream / want - 1).max() > 0.04
    np.testing.assert_allclose(rn.kl_estimate(logp, ref, estimator="k3"), want, rtol=1e-6)


def test_masked_out_positions_give_zero_values_and_zero_gradients():
    logp = jnp.array([-1.0, -0.5, -jnp.inf, jnp.nan])
    ref = jnp.array([-1.5, -0.5, -2.0, -jnp.inf])
    mask = jnp.array([True, True, False, False])
    for estimator in ("k1", "abs", "k2", "k3", "k3+"):
        value = rn.kl_estimate(logp, ref, mask, estimator=estimator)
        assert np.all(value[2:] == 0), estimator
        assert np.isfinite(value).all(), estimator
        grad = jax.grad(lambda lp, e=estimator: rn.kl_estimate(lp, ref, mask, estimator=e).sum())
        g = grad(logp)
        assert np.isfinite(g).all(), estimator
        assert np.all(g[2:] == 0), estimator


@pytest.mark.parametrize("estimator", ["k1+", "abs+", "k3+"])
def test_straight_through_keeps_the_value_and_takes_the_gradient_of_k2(estimator):
    logp, ref = log_probs(1, (20,))
    logp = jnp.asarray(np.clip(logp, ref - 2, ref + 2))
    plain = estimator.rstrip("+")
    for convention in ("exact", "verl"):
        value = rn.kl_estimate(logp, ref, estimator=estimator, convention=convention)
        np.testing.assert_array_equal(
            value, rn.kl_estimate(logp, ref, estimator=plain, convention=convention)
        )

        def total(lp, name, c=convention):
            return rn.kl_estimate(lp, ref, estimator=name, convention=c).sum()

        np.testing.assert_allclose(
            jax.grad(total)(logp, estimator), logp - ref, rtol=1e-6, atol=1e-7
        )


def test_kl_penalized_rewards_match_verl_and_are_not_poisoned():
    rng = np.random.default_rng(3)
    logp, ref = log_probs(3)
    mask = np.arange(50) < rng.integers(1, 51, (6, 1))
    scores = np.zeros((6, 50), np.float32)
    scores[np.arange(6), mask.sum(1) - 1] = rng.random(6)  # the score at the last token
    for estimator in ("k1", "k2", "k3"):
        want = reference.verl_kl_in_reward(scores, logp, ref, mask, 0.05, estimator)
        got = rn.kl_penalized_rewards(
            scores, logp, ref, mask, beta=0.05, estimator=estimator, convention="verl"
        )
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    padded = logp.copy()
    padded[~mask] = -np.inf  # padding: verl's kld * mask is NaN there
    assert np.isnan(reference.verl_kl_in_reward(scores, padded, ref, mask, 0.05, "k1")[~mask]).all()
    got = rn.kl_penalized_rewards(scores, padded, ref, mask, beta=0.05, convention="verl")
    np.testing.assert_array_equal(np.asarray(got)[~mask], scores[~mask])


def test_a_traced_beta_out_of_range_gives_nan():
    logp, ref = log_probs()
    penalized = jax.jit(lambda b: rn.kl_penalized_rewards(logp, logp, ref, beta=b))
    assert np.isnan(np.asarray(penalized(-0.1))).all()
    assert np.isfinite(np.asarray(penalized(0.1))).all()


def test_weighted_masks_weigh_the_estimate_or_openrlhfs_log_ratio():
    # verl multiplies the estimate by the mask (kld * response_mask), OpenRLHF the log
    # ratio before its estimator (compute_approx_kl); a traced mask is taken alike.
    rng = np.random.default_rng(4)
    logp, ref = log_probs(4)
    weights = (rng.random(logp.shape) * 2 * (rng.random(logp.shape) < 0.7)).astype(np.float32)
    scores = rng.random(logp.shape).astype(np.float32)
    for estimator in ("k1", "k2", "k3"):
        verl = reference.verl_kl(logp, ref, estimator) * weights
        openrlhf = reference.openrlhf_kl(logp, ref, estimator, weights)
        for convention, want in (("verl", verl), ("openrlhf", openrlhf)):
            estimate = partial(rn.kl_estimate, estimator=estimator, convention=convention)
            for got in (estimate(logp, ref, weights), jax.jit(estimate)(logp, ref, weights)):
                np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)
            with jax.enable_x64(True):  # float64: the trainers' arithmetic to 1e-10
                wide = [x.astype(np.float64) for x in (logp, ref, weights)]
                np.testing.assert_allclose(estimate(*wide), want, rtol=1e-10, atol=1e-15)
        want = reference.verl_kl_in_reward(scores, logp, ref, weights, 0.05, estimator)
        got = rn.kl_penalized_rewards(
            scores, logp, ref, weights, beta=0.05, estimator=estimator, convention="verl"
        )
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda lp, r: rn.kl_estimate(lp, r, estimator="k4"), "estimator should be one of"),
        (lambda lp, r: rn.kl_estimate(lp, r, -1.0 * (r < 0)), "mask holds -1.0; expected bools"),
        (
            lambda lp, r: rn.kl_estimate(lp, r, estimator="abs", convention="openrlhf"),
            "convention='exact' has them all",
        ),
        (lambda lp, r: rn.kl_estimate(lp, r, convention="trl"), "convention should be one of"),
        (lambda lp, r: rn.kl_estimate(lp, r, clip=0), "clip should be None or a number > 0"),
        (lambda lp, r: rn.kl_estimate(lp, r[:2]), r"ref_log_probs has shape \(2, 50\)"),
        (lambda lp, r: rn.kl_estimate(lp, r, r[:1] < 0), r"mask has shape \(1, 50\)"),
        (lambda lp, r: rn.kl_penalized_rewards(lp, lp, r, beta=-1), "beta should be"),
        (lambda lp, r: rn.kl_penalized_rewards(lp[:, :2], lp, r, beta=1), "rewards has shape"),
    ],
)
def test_kl_options_and_inputs_are_checked(call, message):
    logp, ref = log_probs()
    with pytest.raises(ValueError, match=message):
        call(logp, ref)


# The overlong penalty -------------------------------------------------------------------


@pytest.mark.parametrize("convention", ["exact", "openrlhf", "verl", "tunix"])
@pytest.mark.parametrize(("max_length", "buffer", "factor"), [(1000, 100, 1.0), (512, 512, 0.5)])
def test_overlong_penalty_matches_each_trainer(convention, max_length, buffer, factor):
    lengths = np.arange(0, 2 * max_length + 1, 7)
    capped = convention in ("exact", "openrlhf")
    fn = reference.openrlhf_overlong if capped else reference.dapo_overlong
    want = [fn(length, max_length, buffer, factor) for length in lengths]
    got = rn.overlong_penalty(
        lengths,
        max_length=max_length,
        buffer_length=buffer,
        penalty_factor=factor,
        convention=convention,
    )
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert np.all(np.signbit(np.asarray(got)) == (np.asarray(want) < 0))  # no -0.0


def test_overlong_penalty_under_jit_takes_lengths_from_a_mask():
    mask = np.arange(10) < np.array([[3], [9], [10]])
    fn = jax.jit(lambda m: rn.overlong_penalty(m.sum(-1), max_length=10, buffer_length=4))
    np.testing.assert_allclose(fn(mask), [0.0, -0.75, -1.0])
    traced = jax.jit(lambda n: rn.overlong_penalty(n, max_length=10, buffer_length=4))
    assert np.isnan(traced(jnp.array([-1.0]))).all()  # a traced length out of range
    huge = np.float32(3e38).item()  # a buffer whose float32 reciprocal is subnormal
    for convention in ("exact", "verl"):
        near = rn.overlong_penalty(
            np.array([huge / 4, huge], np.float32),
            max_length=huge,
            buffer_length=huge,
            convention=convention,
        )
        np.testing.assert_allclose(near, [-0.25, -1.0], rtol=1e-6)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_length": 0, "buffer_length": 1}, "max_length should be a finite number > 0"),
        ({"max_length": 10, "buffer_length": 11}, r"buffer_length should be .* in \(0, max_"),
        ({"max_length": 10, "buffer_length": 0}, "buffer_length should be"),
        ({"max_length": 10, "buffer_length": 2, "penalty_factor": -1}, "penalty_factor"),
        ({"max_length": "10", "buffer_length": 2}, "max_length should be"),
        ({"max_length": 10, "buffer_length": 2, "convention": "trl"}, "convention should be"),
    ],
)
def test_overlong_options_are_checked(options, message):
    with pytest.raises(ValueError, match=message):
        rn.overlong_penalty([5], **options)


def test_overlong_lengths_are_checked():
    for bad in ([-1], [np.nan], [np.inf]):
        with pytest.raises(ValueError, match=r"lengths holds .*; expected finite lengths >= 0"):
            rn.overlong_penalty(bad, max_length=10, buffer_length=2)


# Edges: exact straight-through values, clamps without NaN gradients, dtypes, ranks ---------


def test_straight_through_values_equal_the_estimate_exactly_at_any_log_ratio():
    logp = np.array([12345.67, 123456.7, -1e4, 7.3, 30.0], np.float32)
    ref = np.array([0.0, 0.0, -1.0, 0.0, 0.0], np.float32)
    for estimator, convention in (("k3+", "verl"), ("k1+", "exact"), ("abs+", "exact")):
        plain = rn.kl_estimate(logp, ref, estimator=estimator[:-1], convention=convention)
        through = rn.kl_estimate(logp, ref, estimator=estimator, convention=convention)
        np.testing.assert_array_equal(through, plain)
    one, minus_inf = np.zeros(1, np.float32), np.full(1, -np.inf, np.float32)
    infinite = rn.kl_estimate(one, minus_inf, estimator="k1+")
    np.testing.assert_array_equal(infinite, [np.inf])


@pytest.mark.parametrize(("convention", "clip"), [("openrlhf", None), ("exact", 10.0)])
def test_a_clamped_k3_has_zero_gradient_where_it_is_clamped(convention, clip):
    # exp(-log ratio) overflows float32 below -88.7: the clamp is flat there, its gradient 0.
    logp = jnp.array([-89.0, -100.0, -0.5], jnp.float32)

    def total(lp):
        return rn.kl_estimate(lp, jnp.zeros(3), estimator="k3", convention=convention, clip=clip)

    np.testing.assert_array_equal(total(logp)[:2], [10.0, 10.0])
    grad = jax.grad(lambda lp: total(lp).sum())(logp)
    np.testing.assert_allclose(grad, [0.0, 0.0, 1 - np.exp(0.5)], rtol=1e-6)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16, np.int32])
def test_kl_of_narrow_and_integer_inputs_is_computed_in_float32(dtype):
    logp = np.array([-1.0, -3.0, -2.0]).astype(dtype)
    ref = np.array([-2.0, -1.0, -2.0]).astype(dtype)
    got = rn.kl_estimate(logp, ref, estimator="k3")
    assert got.dtype == jnp.float32
    ratio = np.asarray(logp, np.float64) - np.asarray(ref, np.float64)
    np.testing.assert_allclose(got, np.expm1(-ratio) + ratio, rtol=1e-6)


def test_kl_in_float64_matches_the_references_at_1e_14():
    # k3's references (exp(d) - d - 1) keep about 1e-16 absolute near 0, so k3 is compared
    # with its series, under each convention's clamps.
    exact_k3 = np.vectorize(reference.exact_k3)
    with jax.enable_x64(True):
        logp, ref = log_probs(5)
        logp, ref = logp.astype(np.float64), ref.astype(np.float64)
        ratio = logp - ref
        k3 = {
            "exact": exact_k3(ratio),
            "verl": np.clip(exact_k3(np.clip(ratio, -20, 20)), -10, 10),
            "openrlhf": np.clip(exact_k3(ratio), -10, 10),
            "tunix": exact_k3(ratio),
        }
        for convention, names in KL.items():
            for estimator in names:
                got = rn.kl_estimate(logp, ref, estimator=estimator, convention=convention)
                assert got.dtype == jnp.float64
                want = k3[convention] if estimator == "k3" else None
                if want is None:
                    want = kl_reference(convention, estimator, logp, ref)
                np.testing.assert_allclose(got, want, rtol=1e-14, atol=0)


def test_a_traced_beta_is_taken_and_a_traced_clip_is_refused_by_name():
    logp, ref = log_probs(6)
    rewards = np.zeros_like(logp)
    penalized = jax.jit(lambda b: rn.kl_penalized_rewards(rewards, logp, ref, beta=b))(0.5)
    np.testing.assert_allclose(penalized, -0.5 * (logp.astype(np.float64) - ref), rtol=1e-6)
    with pytest.raises(TypeError, match="clip should be a concrete number"):
        jax.jit(lambda c: rn.kl_estimate(logp, ref, clip=c))(1.0)
    with pytest.raises(ValueError, match=r"beta=1e\+300 rounds to inf in float32"):
        rn.kl_penalized_rewards(rewards, logp, ref, beta=1e300)
    for beta in (np.full(3, 0.5), np.full(logp.shape, 0.5)):  # a concrete one and a traced one
        with pytest.raises(ValueError, match=r"beta should be"):
            rn.kl_penalized_rewards(rewards, logp, ref, beta=beta)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"beta should be a scalar .* shape \(\d+,( \d+)?\)"):
            jax.jit(lambda b: rn.kl_penalized_rewards(rewards, logp, ref, beta=b))(beta)


def test_a_penalty_factor_beyond_the_dtype_is_refused_by_name():
    with pytest.raises(ValueError, match=r"penalty_factor=1e\+39 rounds to inf in float32"):
        rn.overlong_penalty([10, 1100], max_length=1000, buffer_length=100, penalty_factor=1e39)
    tiny = rn.overlong_penalty([10, 1000], max_length=1000, buffer_length=100, penalty_factor=1e-50)
    assert tiny.tolist() == [0.0, 0.0]  # below float32's range: no penalty, never NaN


def test_values_with_fewer_axes_than_the_mask_are_refused():
    # (B,) against (B, T) with B == T would broadcast along the tokens.
    values, mask = np.arange(4.0), np.ones((4, 4), bool)
    with pytest.raises(ValueError, match=r"values has shape \(4,\), .* with as many axes"):
        rn.masked_whiten(values, mask)
    with pytest.raises(ValueError, match=r"rewards has shape \(4,\), .* with as many axes"):
        rn.kl_penalized_rewards(values, mask * -1.0, mask * -1.0, beta=0.1)


def test_a_variance_below_float32_range_meets_the_guard_or_gives_nan():
    values, mask = np.array([[0, 0, 0, 1e-20]], np.float32), np.ones((1, 4), bool)
    verl = np.asarray(rn.masked_whiten(values, mask, convention="verl"), np.float64)
    # verl's formula: deviations times rsqrt(0 + 1e-8), about 1e-16.
    np.testing.assert_allclose(verl, [[-2.5e-17, -2.5e-17, -2.5e-17, 7.5e-17]], rtol=1e-5)
    assert np.isnan(rn.masked_whiten(values, mask)).all()  # documented: no guard, no range


def test_whitened_values_are_targets_without_gradient():
    values, mask = tokens(12)
    grad = jax.grad(lambda v: rn.masked_whiten(v, mask).sum())(values)
    np.testing.assert_array_equal(grad, 0.0)
    estimator = rn.group_advantages("grpo", group_size=4)
    grad = jax.grad(lambda r: estimator.apply(r).advantages.sum())(jnp.arange(8.0))
    np.testing.assert_array_equal(grad, 0.0)


def test_overlong_options_that_configure_the_computation_are_static_and_normal():
    with pytest.raises(TypeError, match="max_length should be a concrete number"):
        jax.jit(lambda m: rn.overlong_penalty([3], max_length=m, buffer_length=1))(5.0)
    with pytest.raises(ValueError, match="buffer_length should be a positive number that is"):
        rn.overlong_penalty([10], max_length=10, buffer_length=1e-40)
    with pytest.raises(ValueError, match="convention should be one of"):
        rn.overlong_penalty(
            [10],
            max_length=10,
            buffer_length=1,
            convention=np.array(["exact"]),  # type: ignore[arg-type]
        )
