"""Group-relative advantages against float64 NumPy references of each trainer's code.

``tests/group_reference.py`` transcribes TRL's, verl's, Tunix's and OpenRLHF's
formulas; the library's own ``"exact"`` convention is written out below. A
convention is its trainer's formula in exact arithmetic, so where the float64
reference leaves a rounding residue in a constant group, the expected value is
the exact one, 0. Inputs are float32 values; the references evaluate those
same values in float64.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import checkify

import rewardnorm_jax as rn
from tests import group_reference as reference

SUPPORTED = {
    "exact": (
        "grpo",
        "dr_grpo",
        "batch_std",
        "rloo",
        "rloo_vectorized",
        "opo",
        "reinforce_pp_baseline",
        "gdpo",
        "gpg",
    ),
    "trl": ("grpo", "dr_grpo", "batch_std", "rloo", "gdpo"),
    "verl": (
        "grpo",
        "dr_grpo",
        "rloo",
        "rloo_vectorized",
        "opo",
        "reinforce_pp_baseline",
        "gdpo",
        "gpg",
    ),
    "tunix": ("grpo", "dr_grpo", "rloo"),
    "openrlhf": ("grpo", "dr_grpo", "rloo", "reinforce_pp_baseline"),
}
PAIRS = [(est, conv) for conv, estimators in SUPPORTED.items() for est in estimators]
REFUSES_SINGLETONS = ("tunix", "openrlhf")
WEIGHTS = (1.0, 0.5)


def exact(rewards, ids, num_groups, *, estimator, lengths=None, weights=None):
    """The library's convention: no epsilon, NaN left out and passed through, singletons 0."""
    if estimator == "gdpo":
        weights = np.ones(rewards.shape[1]) if weights is None else np.asarray(weights)
        scores = np.stack(
            [exact(rewards[:, k], ids, num_groups, estimator="grpo") for k in range(len(weights))],
            axis=1,
        )
        total = scores @ weights
        return _standardized(total, np.isfinite(total))
    out = np.full(rewards.shape, np.nan)
    valid = np.isfinite(rewards)
    batch_std = np.std(rewards[valid], ddof=1) if valid.sum() > 1 else np.nan
    # GPG's alpha: the valid answers over the valid nonzero ones (at least 1)
    alpha = valid.sum() / max(np.count_nonzero(rewards[valid]), 1)
    for g in range(num_groups):
        members = (ids == g) & valid
        r = rewards[members]
        if r.size == 0:
            continue
        if estimator == "opo":
            length = lengths[members]
            deviation = r - (length * r).sum() / length.sum()
        else:
            deviation = r - r.mean()
        if r.size == 1 or np.all(r == r[0]):
            out[members] = 0.0
        elif estimator == "grpo":
            out[members] = deviation / np.std(r, ddof=1)
        elif estimator == "batch_std":
            out[members] = deviation / batch_std
        elif estimator in ("rloo", "rloo_vectorized"):
            out[members] = deviation * r.size / (r.size - 1)
        elif estimator == "gpg":
            out[members] = alpha * deviation
        else:
            out[members] = deviation
    return out


def _standardized(values, valid):
    out = np.full(values.shape, np.nan)
    v = values[valid]
    out[valid] = 0.0 if v.size < 2 or np.all(v == v[0]) else (v - v.mean()) / np.std(v, ddof=1)
    return out


def expected(rewards, ids, num_groups, estimator, convention, lengths=None, weights=None):
    """The float64 reference of ``convention``, constant groups at their exact value."""
    rewards64 = np.asarray(rewards, np.float64)
    kwargs = {"lengths": lengths, "weights": weights}
    if convention == "exact":
        return exact(rewards64, ids, num_groups, estimator=estimator, **kwargs)
    name = "drgrpo" if estimator == "dr_grpo" else estimator
    if convention == "tunix":  # the estimator functions, which the library's convention follows
        out = reference.tunix(rewards64, ids, num_groups, name)
    else:
        out = reference.advantages(
            rewards64, ids, num_groups, estimator=name, convention=convention, **kwargs
        )
    if estimator not in ("gdpo", "batch_std"):  # their batch step has no constant groups here
        for g in range(num_groups):
            r = rewards64[ids == g]
            if r.size > 1 and np.all(r == r[0]):  # also: no NaN in the group
                out[ids == g] = 0.0
    return out


def make_rewards(rng, num_prompts, group_size, *, nan=False, functions=0):
    """Float32 rewards in contiguous groups: random, 0/1, constant and near-constant groups."""
    kinds = rng.integers(0, 5, num_prompts)
    base = rng.choice(np.array([0.7, 1000 / 7, 3.0, -250.3, 1e4], np.float32), num_prompts)
    noise = rng.standard_normal((num_prompts, group_size))
    spread = np.select([kinds == 0, kinds == 1, kinds == 2], [1.0, 1e-5 * np.abs(base), 0.0], 1.0)
    rewards = base[:, None] + spread[:, None] * noise
    rewards = np.where((kinds == 3)[:, None], rng.integers(0, 2, rewards.shape), rewards)
    rewards = np.where((kinds == 4)[:, None], rng.standard_normal(rewards.shape), rewards)
    rewards = rewards.astype(np.float32).ravel()
    if functions:
        rewards = np.stack([rewards, rng.permutation(rewards)], axis=1)
    if nan:
        rows = rng.random(rewards.shape[0]) < 0.05
        rewards[rows] = np.nan
    return rewards


def ragged_ids(rng, num_answers, num_groups):
    """Ids in any order, some unused, groups of uneven sizes (some of one answer)."""
    used = rng.choice(num_groups, size=max(1, num_groups // 2), replace=False)
    return rng.choice(used, size=num_answers).astype(np.int32)


def assert_close(got, want, tolerance):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    both = ~np.isnan(want)
    error = np.abs(got[both] - want[both]) / (np.abs(want[both]) + 1)
    assert error.size == 0 or error.max() <= tolerance, error.max()


def lengths_for(rng, num_answers):
    return rng.integers(1, 200, num_answers).astype(np.float32)


def check_contiguous(estimator, convention, group_size):
    rng = np.random.default_rng(group_size)
    rewards = make_rewards(rng, 64, group_size, functions=2 if estimator == "gdpo" else 0)
    lengths = lengths_for(rng, len(rewards)) if estimator == "opo" else None
    weights = WEIGHTS if estimator == "gdpo" else None
    estimate = rn.group_advantages(
        estimator, convention=convention, group_size=group_size, reward_weights=weights
    )
    out = jax.jit(estimate.apply)(rewards, lengths=lengths)
    ids = np.arange(len(rewards)) // group_size
    want = expected(rewards, ids, 64, estimator, convention, lengths, weights)
    assert out.advantages.dtype == jnp.float32
    assert_close(out.advantages, want, 1e-5)


@pytest.mark.parametrize(("estimator", "convention"), PAIRS)
def test_contiguous_groups_match_the_reference_in_float32(estimator, convention):
    check_contiguous(estimator, convention, 16)


# The layout's code is the same for every convention: every group size for the
# conventions whose groups of one differ (0, the reward, refused).
@pytest.mark.parametrize("estimator", ["grpo", "rloo"])
@pytest.mark.parametrize("convention", ["exact", "verl", "openrlhf"])
@pytest.mark.parametrize("group_size", [1, 2, 7, 64])
def test_every_group_size_matches_the_reference(estimator, convention, group_size):
    if group_size == 1 and convention in REFUSES_SINGLETONS:
        with pytest.raises(ValueError, match=r"group_size should be an integer >= 2"):
            rn.group_advantages(estimator, convention=convention, group_size=1)
        return
    check_contiguous(estimator, convention, group_size)


@pytest.mark.parametrize(("estimator", "convention"), PAIRS)
def test_ragged_ids_with_nan_rewards_match_the_reference(estimator, convention):
    rng = np.random.default_rng(7)
    rewards = make_rewards(rng, 40, 8, nan=True, functions=2 if estimator == "gdpo" else 0)
    ids = ragged_ids(rng, len(rewards), 60)
    lengths = lengths_for(rng, len(rewards)) if estimator == "opo" else None
    weights = WEIGHTS if estimator == "gdpo" else None
    estimate = rn.group_advantages(
        estimator, convention=convention, num_groups=60, reward_weights=weights
    )
    out = jax.jit(estimate.apply)(rewards, group_ids=ids, lengths=lengths)
    if convention in REFUSES_SINGLETONS:  # the trainer refuses them; the library gives NaN
        counts = np.bincount(ids, minlength=60)[ids]
        assert np.isnan(np.asarray(out.advantages)[counts == 1]).all()
        keep = counts > 1
        ids = np.where(keep, ids, -1)
        rewards, out_advantages = rewards[keep], np.asarray(out.advantages)[keep]
        ids = ids[keep]
    else:
        out_advantages = out.advantages
    want = expected(rewards, ids, 60, estimator, convention, lengths, weights)
    assert_close(out_advantages, want, 1e-5)


@pytest.mark.parametrize(("estimator", "convention"), PAIRS)
def test_float64_matches_the_reference_at_1e_10(estimator, convention):
    rng = np.random.default_rng(3)
    with jax.enable_x64(True):
        rewards = make_rewards(rng, 30, 5, nan=True, functions=2 if estimator == "gdpo" else 0)
        rewards = rewards.astype(np.float64)
        lengths = lengths_for(rng, len(rewards)) if estimator == "opo" else None
        weights = WEIGHTS if estimator == "gdpo" else None
        estimate = rn.group_advantages(
            estimator, convention=convention, group_size=5, reward_weights=weights
        )
        out = jax.jit(estimate.apply)(rewards, lengths=lengths)
        assert out.advantages.dtype == jnp.float64
    ids = np.arange(len(rewards)) // 5
    assert_close(
        out.advantages, expected(rewards, ids, 30, estimator, convention, lengths, weights), 1e-10
    )


@pytest.mark.parametrize("convention", list(SUPPORTED))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_constant_groups_give_exactly_zero(convention, dtype):
    values = [0.7, 1000 / 7, 1e4 / 3, -3.3, 0.1, 1e-30, 3e38]
    with jax.enable_x64(dtype == "float64"):
        rewards = np.repeat(np.array(values, dtype), 7)  # a constant group of 7 per value
        for estimator in SUPPORTED[convention]:
            if estimator in ("opo", "gdpo"):
                continue  # below
            estimate = rn.group_advantages(estimator, convention=convention, group_size=7)
            out = jax.jit(estimate.apply)(rewards)
            assert np.all(np.asarray(out.advantages) == 0), (estimator, out.advantages)
            assert np.all(np.asarray(out.zero_variance))
        if "opo" in SUPPORTED[convention]:
            opo = rn.group_advantages("opo", convention=convention, group_size=7)
            out = jax.jit(opo.apply)(rewards, lengths=np.arange(1.0, rewards.size + 1))
            assert np.all(np.asarray(out.advantages) == 0)


def test_upstream_formula_leaves_a_residue_where_the_library_gives_zero():
    """Seven float32 rewards of 1000/7: the plain formula's residue, next to the library's 0."""
    rewards = jnp.full(7, 1000 / 7, jnp.float32)
    plain = (rewards - rewards.mean()) / (jnp.std(rewards, ddof=1) + 1e-6)
    assert np.abs(np.asarray(plain)).max() > 0.1
    out = jax.jit(rn.group_advantages("grpo", convention="verl", group_size=7).apply)(rewards)
    np.testing.assert_array_equal(out.advantages, 0.0)


def test_near_constant_groups_are_computed_well():
    rng = np.random.default_rng(0)
    base = np.float32(1000 / 7)
    rewards = (base * (1 + 1e-5 * rng.standard_normal((512, 16)))).astype(np.float32).ravel()
    out = jax.jit(rn.group_advantages("grpo", group_size=16).apply)(rewards)
    ids = np.arange(rewards.size) // 16
    assert_close(
        out.advantages, exact(rewards.astype(np.float64), ids, 512, estimator="grpo"), 1e-5
    )
    assert not np.asarray(out.zero_variance).any()


@pytest.mark.parametrize("group_size", [16, 64])
@pytest.mark.parametrize("layout", ["contiguous", "ragged"])
def test_one_outlier_and_one_odd_value_out_stay_within_1e_5(group_size, layout):
    """The spreads where a shifted one-pass sum loses most: G - 1 equal values and one other."""
    rng = np.random.default_rng(group_size)
    base = np.float32(1000 / 7)
    rewards = np.full((256, group_size), base, np.float32)
    rewards[:128, 0] = base * (1 + 1e-5 * rng.standard_normal(128)).astype(np.float32)
    rewards[128:, 1:] = (base * (1 + 1e-3 * rng.standard_normal((128, 1)))).astype(np.float32)
    rewards = rewards.ravel()
    ids = np.arange(rewards.size) // group_size
    if layout == "contiguous":
        out = jax.jit(rn.group_advantages("grpo", group_size=group_size).apply)(rewards)
    else:
        ragged = rn.group_advantages("grpo", num_groups=256)
        out = jax.jit(ragged.apply)(rewards, group_ids=ids)
    want = exact(rewards.astype(np.float64), ids, 256, estimator="grpo")
    assert_close(out.advantages, want, 1e-5)


def test_zero_variance_marks_the_groups_without_spread():
    rewards = np.array(
        [1, 1, 1, 1, 0, 1, 0, 1, 2, np.nan, 2, 2, 5, np.nan, np.nan, np.nan], np.float32
    )
    out = jax.jit(rn.group_advantages("grpo", group_size=4).apply)(rewards)
    np.testing.assert_array_equal(out.zero_variance, [True] * 4 + [False] * 4 + [True] * 8)
    np.testing.assert_array_equal(np.isnan(out.advantages), np.isnan(rewards))


def test_large_batch_and_vmap_match_one_call_at_a_time():
    rng = np.random.default_rng(1)
    rewards = make_rewards(rng, 4096, 16)  # B = 65,536
    estimate = rn.group_advantages("grpo", convention="trl", group_size=16)
    out = jax.jit(estimate.apply)(rewards)
    ids = np.arange(rewards.size) // 16
    assert_close(out.advantages, expected(rewards, ids, 4096, "grpo", "trl"), 1e-5)
    batches = rewards.reshape(4, -1)
    stacked = jax.jit(jax.vmap(estimate.apply))(batches)
    for k in range(4):
        assert_close(stacked.advantages[k], out.advantages[k * 16384 : (k + 1) * 16384], 1e-6)


def test_ragged_equals_contiguous_for_contiguous_ids():
    rng = np.random.default_rng(2)
    rewards = make_rewards(rng, 32, 8, nan=True)
    ids = np.arange(rewards.size) // 8
    order = rng.permutation(rewards.size)
    for convention in SUPPORTED:
        contiguous = rn.group_advantages("grpo", convention=convention, group_size=8)
        ragged = rn.group_advantages("grpo", convention=convention, num_groups=32)
        want = jax.jit(contiguous.apply)(rewards).advantages
        got = jax.jit(ragged.apply)(rewards[order], group_ids=ids[order]).advantages
        assert_close(np.asarray(got), np.asarray(want)[order], 1e-6)


def test_axis_name_under_vmap_equals_the_gathered_batch():
    """Vmap with an axis name stands in for devices: batch statistics and split groups."""
    rng = np.random.default_rng(4)
    rewards = make_rewards(rng, 16, 8)
    ids = ragged_ids(rng, rewards.size, 20)
    parts = 4
    for estimator in ("batch_std", "grpo", "gpg"):  # gpg: alpha over the whole batch
        whole = jax.jit(rn.group_advantages(estimator, group_size=8).apply)(rewards)
        split = rn.group_advantages(estimator, group_size=8, axis_name="d")
        got = jax.jit(jax.vmap(split.apply, axis_name="d"))(rewards.reshape(parts, -1))
        assert_close(np.asarray(got.advantages).ravel(), whole.advantages, 1e-6)
    whole = jax.jit(rn.group_advantages("grpo", num_groups=20).apply)(rewards, group_ids=ids)
    spanning = rn.group_advantages("grpo", num_groups=20, axis_name="d", groups_span_devices=True)
    got = jax.jit(jax.vmap(lambda r, i: spanning.apply(r, group_ids=i), axis_name="d"))(
        rewards.reshape(parts, -1), ids.reshape(parts, -1)
    )
    assert_close(np.asarray(got.advantages).ravel(), whole.advantages, 1e-6)
    np.testing.assert_array_equal(np.asarray(got.zero_variance).ravel(), whole.zero_variance)


def test_integer_and_boolean_rewards_are_taken_as_floats():
    correct = np.array([1, 0, 0, 1, 1, 1, 1, 1])
    estimate = rn.group_advantages("grpo", group_size=4)
    apply = jax.jit(estimate.apply)
    want = apply(correct.astype(np.float32)).advantages
    for rewards in (correct, correct.astype(bool), correct.astype(np.uint8)):
        out = apply(rewards)
        assert jnp.issubdtype(out.advantages.dtype, jnp.floating)
        np.testing.assert_allclose(out.advantages, want)


@pytest.mark.parametrize("convention", ["exact", "trl"])
def test_rloo_standardized_over_the_batch_matches_trl(convention):
    rng = np.random.default_rng(5)
    rewards = make_rewards(rng, 32, 4, nan=True)
    rewards[:3] = np.nan  # a group with one scorable answer: left out of the batch statistics
    estimate = rn.group_advantages(
        "rloo", convention=convention, group_size=4, standardize_batch=True
    )
    out = jax.jit(estimate.apply)(rewards)
    ids = np.arange(rewards.size) // 4
    if convention == "trl":
        want = reference.trl(rewards.astype(np.float64), ids, 32, "rloo", normalize_advantages=True)
    else:
        before = exact(rewards.astype(np.float64), ids, 32, estimator="rloo")
        before[3] = np.nan
        want = _standardized(before, np.isfinite(before))
        want[3] = 0.0
    assert_close(out.advantages, want, 1e-5)


def test_opo_weights_by_length():
    rewards = np.array([1, 0, 0, 0, 1, 0, 2, 2], np.float32)
    lengths = np.array([3, 1, 1, 1, 0, 0, 0, 0], np.float32)
    out = jax.jit(rn.group_advantages("opo", group_size=4).apply)(rewards, lengths=lengths)
    # the second group has total length 0: no baseline
    np.testing.assert_allclose(out.advantages, [0.5, -0.5, -0.5, -0.5] + [np.nan] * 4)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"estimator": "ppo", "group_size": 4}, r"estimator should be one of 'grpo'"),
        ({"convention": "nemo", "group_size": 4}, r"convention should be one of 'exact'"),
        ({"estimator": "opo", "convention": "trl", "group_size": 4}, r"has no estimator 'opo'"),
        ({}, r"exactly one of group_size"),
        ({"group_size": 4, "num_groups": 3}, r"exactly one of group_size"),
        ({"group_size": 0}, r"group_size should be an integer >= 1"),
        ({"convention": "openrlhf", "group_size": 1}, r"group_size should be an integer >= 2"),
        ({"num_groups": 4, "axis_name": "d"}, r"groups_span_devices=True"),
        ({"group_size": 4, "groups_span_devices": True}, r"groups_span_devices=True is for"),
        ({"group_size": 4, "reward_weights": (1.0,)}, r"reward_weights is for estimator='gdpo'"),
        ({"group_size": 4, "f_norm": 2.0}, r"f_norm is for estimator='gpg'"),
        ({"estimator": "gpg", "group_size": 4, "f_norm": 0}, r"f_norm should be a finite number"),
        ({"estimator": "gpg", "group_size": 4, "f_norm": "2"}, r"f_norm should be a finite"),
        (
            {"estimator": "rloo_vectorized", "convention": "trl", "group_size": 4},
            r"has no estimator 'rloo_vectorized'",
        ),
        ({"estimator": "gpg", "convention": "tunix", "group_size": 4}, r"has no estimator 'gpg'"),
        ({"estimator": "gdpo", "group_size": 4, "reward_weights": ()}, r"non-empty sequence"),
        (
            {"convention": "verl", "group_size": 4, "standardize_batch": True},
            r"standardize_batch=True \(TRL RLOO's normalize_advantages\) is for",
        ),
    ],
)
def test_options_are_checked(options, message):
    options = dict(options)
    estimator = options.pop("estimator", "grpo")
    with pytest.raises(ValueError, match=message):
        rn.group_advantages(estimator, **options)


@pytest.mark.parametrize("span", ["yes", 1])
def test_a_span_that_is_not_a_bool_is_a_type_error_with_or_without_an_axis(span):
    for axis_name in (None, "d"):
        with pytest.raises(TypeError, match=rf"groups_span_devices should be a bool.*{span!r}"):
            rn.group_advantages("grpo", num_groups=4, groups_span_devices=span, axis_name=axis_name)


def test_verl_rloo_keeps_a_singletons_reward_and_rloo_vectorized_gives_it_zero():
    # verl-project/verl#7793: the loop and the vectorized RLOO disagree on groups of one.
    rewards = np.array([1.0, 0.0, 1.0, 3.0, 0.5], np.float32)
    ids = np.array([0, 0, 0, 1, 2])
    loop, vectorized, exact = (
        rn.group_advantages(estimator, convention=convention, num_groups=3)
        .apply(rewards, group_ids=ids)
        .advantages.tolist()
        for estimator, convention in (
            ("rloo", "verl"),
            ("rloo_vectorized", "verl"),
            ("rloo_vectorized", "exact"),
        )
    )
    np.testing.assert_allclose(loop, [0.5, -1.0, 0.5, 3.0, 0.5], rtol=1e-6)
    np.testing.assert_allclose(vectorized, [0.5, -1.0, 0.5, 0.0, 0.0], rtol=1e-6)
    assert exact == vectorized


def test_gpg_scales_by_the_batch_over_its_nonzero_rewards():
    # 6 answers, 2 nonzero rewards and a NaN: verl counts the NaN as nonzero (alpha 6 / 3)
    # and spreads it over its group; the library's convention leaves it out (alpha 5 / 2).
    rewards = np.array([1.0, 0.0, 0.0, 2.0, np.nan, 0.0], np.float32)
    ids = np.array([0, 0, 1, 1, 2, 2])
    verl = rn.group_advantages("gpg", convention="verl", num_groups=3, f_norm=2.0)
    np.testing.assert_allclose(
        verl.apply(rewards, group_ids=ids).advantages,
        np.array([0.5, -0.5, -1.0, 1.0, np.nan, np.nan]) * 6 / 3 / 2,
    )
    exact = rn.group_advantages("gpg", num_groups=3)
    np.testing.assert_allclose(
        exact.apply(rewards, group_ids=ids).advantages,
        np.array([0.5, -0.5, -1.0, 1.0, np.nan, 0.0]) * 5 / 2,
    )
    # f_norm applies after alpha, and must fit the rewards' dtype.
    tiny = rn.group_advantages("gpg", group_size=3, f_norm=1e-30)
    got = tiny.apply(np.array([0, 1, 2], np.float32)).advantages  # alpha 3 / 2
    np.testing.assert_allclose(got, [-1.5e30, 0, 1.5e30], rtol=1e-6)
    for small in (1e-50, 1e-45):  # 1e-45 rounds to a subnormal, which XLA may flush to 0
        with pytest.raises(ValueError, match=rf"normal in float32.*got f_norm={small}"):
            rn.group_advantages("gpg", group_size=3, f_norm=small).apply(np.zeros(3, np.float32))
    # verl's group of one keeps alpha r / f_norm; all-zero rewards give alpha B / 1.
    singles = rn.group_advantages("gpg", convention="verl", num_groups=4)
    got = singles.apply(np.array([2.0, 0.0, 0.0, 0.0]), group_ids=np.arange(4)).advantages
    np.testing.assert_allclose(got, [8.0, 0.0, 0.0, 0.0])


def test_inputs_are_checked():
    contiguous = rn.group_advantages("grpo", group_size=4)
    with pytest.raises(ValueError, match=r"6 answers, not a multiple of group_size=4"):
        contiguous.apply(np.zeros(6))
    with pytest.raises(ValueError, match=r"group_ids was given"):
        contiguous.apply(np.zeros(8), group_ids=np.zeros(8, int))
    with pytest.raises(TypeError, match=r"rewards should hold real numbers"):
        contiguous.apply(np.zeros(8, complex))
    with pytest.raises(ValueError, match=r"rewards has shape \(2, 4\)"):
        contiguous.apply(np.zeros((2, 4)))
    ragged = rn.group_advantages("grpo", num_groups=3)
    with pytest.raises(ValueError, match=r"group_ids is missing"):
        ragged.apply(np.zeros(4))
    with pytest.raises(
        ValueError, match=r"group ids should be in \[0, 3\) \(num_groups=3\), got \[3\]"
    ):
        ragged.apply(np.zeros(4), group_ids=np.array([0, 1, 2, 3]))
    with pytest.raises(ValueError, match=r"group_ids has shape \(3,\); expected \(4,\)"):
        ragged.apply(np.zeros(4), group_ids=np.array([0, 1, 2]))
    with pytest.raises(TypeError, match=r"group_ids should be integer ids"):
        ragged.apply(np.zeros(4), group_ids=np.zeros(4))
    opo = rn.group_advantages("opo", group_size=2)
    with pytest.raises(ValueError, match=r"lengths has shape \(3,\); expected \(4,\)"):
        opo.apply(np.zeros(4), lengths=np.ones(3))
    with pytest.raises(ValueError, match=r"lengths is missing"):
        opo.apply(np.zeros(4))
    with pytest.raises(ValueError, match=r"lengths holds -1.0; expected finite lengths >= 0"):
        opo.apply(np.zeros(4), lengths=np.array([1.0, -1.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match=r"lengths was given"):
        contiguous.apply(np.zeros(4), lengths=np.ones(4))
    gdpo = rn.group_advantages("gdpo", group_size=2, reward_weights=(1.0, 2.0, 3.0))
    with pytest.raises(ValueError, match=r"2 reward functions .* reward_weights has 3"):
        gdpo.apply(np.zeros((4, 2)))


def test_wide_integers_out_of_range_values_and_traced_lengths_give_no_wrong_number():
    grpo = rn.group_advantages("grpo", group_size=2)
    out = grpo.apply(np.array([3_000_000_000, 0]))  # int64, beyond int32
    np.testing.assert_allclose(out.advantages, [2**-0.5, -(2**-0.5)], rtol=1e-6)
    for spread in ([1e20, -1e20, 1e20, -1e20], [1e-30, 2e-30, 0, 3e-30]):
        # Spreads whose squares float32 cannot hold: the moments are taken at a power-of-two scale.
        rewards = np.array(spread, np.float32)
        contiguous = jax.jit(rn.group_advantages("grpo", group_size=4).apply)(rewards)
        ragged = jax.jit(rn.group_advantages("grpo", num_groups=1).apply)(
            rewards, group_ids=np.zeros(4, np.int32)
        )
        want = expected(rewards, np.zeros(4, int), 1, "grpo", "exact")
        np.testing.assert_allclose(contiguous.advantages, want, rtol=1e-6)
        np.testing.assert_allclose(ragged.advantages, want, rtol=1e-6)
    opo = jax.jit(rn.group_advantages("opo", group_size=4).apply)
    out = opo(np.array([1, 2, 3, 4], np.float32), lengths=jnp.array([-1.0, 1, 1, 1]))
    assert np.isnan(np.asarray(out.advantages)).all()
    with pytest.raises(ValueError, match=r"lengths holds inf; expected finite lengths >= 0"):
        rn.group_advantages("opo", group_size=2).apply(np.zeros(2), lengths=[1e300, 1.0])
    with pytest.raises(ValueError, match=r"needs at least one reward function"):
        rn.group_advantages("gdpo", group_size=2).apply(np.zeros((4, 0)))
    with pytest.raises(ValueError, match=r"reward_weights=1e\+308 rounds to inf in float32"):
        rn.group_advantages("gdpo", group_size=2, reward_weights=[1e308, 1.0]).apply(
            np.zeros((4, 2))
        )
    # Weights whose weighted sum passes the dtype: standardized over the batch, as their
    # proportions say (weights (1, 1) scaled).
    scores = np.array([[1, 0], [0, 0], [1, 1], [0, 1]], np.float32)
    for weights in (np.array([1.0, 0.5]), jnp.array([1.0, 0.5])):  # a concrete array: a tuple
        gdpo = rn.group_advantages("gdpo", group_size=2, reward_weights=weights)
        assert gdpo.config.reward_weights == (1.0, 0.5)
    traced = jax.jit(lambda w: rn.group_advantages("gdpo", group_size=2, reward_weights=w))
    with pytest.raises(TypeError, match=r"reward_weights should be a concrete sequence of"):
        traced(np.array([1.0, 0.5]))
    huge = rn.group_advantages("gdpo", group_size=2, reward_weights=(3e38, 3e38)).apply(scores)
    ones = rn.group_advantages("gdpo", group_size=2, reward_weights=(1.0, 1.0)).apply(scores)
    assert np.isfinite(huge.advantages).all()
    np.testing.assert_allclose(huge.advantages, ones.advantages, rtol=1e-6)


NEAR_THE_LIMITS = (
    [-1e38, 1e38, 1e38, 1e38, 1e38, 0, 0, 0, 0, 1],
    [3e38, -3e38, 1.5e38, 0, 3e-38, -2e-38, 2e-38, 0, 3e38, 3e38],
)


@pytest.mark.parametrize("ragged", [False, True], ids=["contiguous", "ragged"])
@pytest.mark.parametrize("rewards", NEAR_THE_LIMITS, ids=["1e38", "3e38"])
def test_advantages_near_the_float32_limits_are_right_where_they_fit(rewards, ragged):
    """Every advantage that float32 holds is computed; one beyond it is NaN, never inf."""
    rewards = np.array(rewards, np.float32)
    ids = np.arange(10) // 5
    lengths = np.array([2e38, 1, 3e38, 1, 1, 1, 2, 1, 1, 1], np.float32)
    for convention, estimators in SUPPORTED.items():
        for estimator in estimators:
            if estimator == "gdpo":
                continue
            kwargs = {"lengths": lengths} if estimator == "opo" else {}
            groups: dict[str, Any] = {"num_groups": 2} if ragged else {"group_size": 5}
            est = rn.group_advantages(estimator, convention=convention, **groups)
            ids_arg = {"group_ids": ids} if ragged else {}
            out = np.asarray(est.apply(rewards, **ids_arg, **kwargs).advantages)
            want = expected(rewards, ids, 2, estimator, convention, lengths=lengths.astype(float))
            fits = np.abs(want) <= np.finfo(np.float32).max
            # atol: XLA flushes results below float32's smallest normal number to 0.
            tiny = 2 * float(np.finfo(np.float32).tiny)
            np.testing.assert_allclose(
                out[fits], want[fits], rtol=2e-6, atol=tiny, err_msg=f"{estimator} {convention}"
            )
            assert np.isnan(out[~fits]).all(), (estimator, convention, out)


def test_opo_lengths_whose_sum_overflows_weigh_as_they_are():
    lengths = np.array([2e38, 2e38, 1, 1], np.float32)
    rewards = np.array([0, 1, 0, 0], np.float32)
    contiguous = rn.group_advantages("opo", group_size=4).apply(rewards, lengths=lengths)
    ragged = rn.group_advantages("opo", num_groups=1).apply(
        rewards, group_ids=np.zeros(4, np.int32), lengths=lengths
    )
    np.testing.assert_allclose(contiguous.advantages, [-0.5, 0.5, -0.5, -0.5], rtol=1e-6)
    np.testing.assert_allclose(ragged.advantages, [-0.5, 0.5, -0.5, -0.5], rtol=1e-6)


def test_traced_ids_out_of_range_are_a_checkify_error():
    ragged = rn.group_advantages("grpo", num_groups=3)
    checked = checkify.checkify(jax.jit(lambda r, i: ragged.apply(r, group_ids=i)))
    error, out = checked(jnp.zeros(4), jnp.array([0, 1, 2, 5]))
    with pytest.raises(checkify.JaxRuntimeError, match=r"group ids should be in \[0, 3\)"):
        error.throw()
    assert np.isnan(out.advantages[3])


# Normalization levels, the trainers that expose them, MaxRL and NeMo RL's leave-one-out std.

from tests import normalization_reference as knobs  # noqa: E402

LEVEL_REWARDS = np.array(
    [1, 0, 0, 0, 0.3, 0.3, 0.3, 0.3, 0.5, 2.25, -1.5, 0.75, 3.0, 1.0, 1.0, 0.0], np.float32
)


def _levels_close(got, want, dtype):
    tolerance = {"float32": 1e-5, "float64": 1e-10}[dtype]
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tolerance, atol=tolerance)


AREAL_SETTINGS = [  # (mean_level, mean_leave1out, std_level, std_unbiased)
    ("group", False, "group", True),
    ("group", True, "group", True),
    ("group", False, "batch", True),
    ("group", False, "group", False),
    ("none", False, "batch", True),
    ("batch", False, "group", True),
    ("batch", True, "batch", False),
    ("group", True, "none", True),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_areal_normconfig_settings_match_areal(dtype):
    with jax.enable_x64(dtype == "float64"):
        rewards = LEVEL_REWARDS.astype(dtype)
        for size, settings in ((4, AREAL_SETTINGS), (1, AREAL_SETTINGS[1::2])):
            for mean, loo, std, unbiased in settings:
                estimator = rn.group_advantages(
                    mean=mean,
                    std=std,
                    leave_one_out=loo,
                    ddof=int(unbiased),
                    convention="areal",
                    group_size=size,
                )
                want = knobs.areal(rewards, size, mean, std, leave_one_out=loo, unbiased=unbiased)
                if mean == "group" and size > 1:  # a constant group: exactly 0, as AReaL's is
                    want[4:8] = 0.0
                _levels_close(jax.jit(estimator.apply)(rewards).advantages, want, dtype)


ROLL_SETTINGS = [
    ("group", "group"),
    ("group", "batch"),
    ("batch", "batch"),
    ("batch", "none"),
    ("none", "batch"),
    ("group", "none"),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_roll_reward_norm_settings_match_roll(dtype):
    with jax.enable_x64(dtype == "float64"):
        rewards = LEVEL_REWARDS.astype(dtype)
        for mean, std in ROLL_SETTINGS:
            estimator = rn.group_advantages(mean=mean, std=std, convention="roll", group_size=4)
            want = knobs.roll(rewards, 4, mean, std)
            if mean == "group":
                want[4:8] = 0.0
            _levels_close(jax.jit(estimator.apply)(rewards).advantages, want, dtype)
        lone = rn.group_advantages(mean="group", std="group", convention="roll", group_size=1)
        assert np.isnan(lone.apply(rewards).advantages).all()  # torch.std of one value
        constant = np.full(8, 1000 / 7, dtype)  # float32 residues: the formula's exact 0
        for convention in ("roll", "exact"):
            estimator = rn.group_advantages(
                mean="batch", std="batch", convention=convention, group_size=4
            )
            np.testing.assert_array_equal(jax.jit(estimator.apply)(constant).advantages, 0)


def _stream(rng, batches=3, size=4):
    """Batches of contiguous groups of ``size``, each group of one domain, domains ragged."""
    out = []
    for _ in range(batches):
        groups = 4
        domains = np.repeat(rng.integers(0, 3, groups), size).astype(np.int32)
        rewards = rng.normal(0.5 + domains, 1.0 + domains).astype(np.float32)
        out.append((rewards, domains))
    return out


def _stateful(estimator):
    """The ``step`` (jitted) and ``init`` of an estimator with running statistics."""
    assert estimator.step is not None
    assert estimator.init is not None
    return jax.jit(estimator.step), estimator.init


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_running_statistics_per_domain_match_rolls_pipeline_over_a_stream(dtype):
    stream = _stream(np.random.default_rng(0))
    with jax.enable_x64(dtype == "float64"):
        for mean, std, domains in [
            ("running", "running", 3),
            ("group", "running", 3),
            ("running", "running", None),
        ]:
            estimator = rn.group_advantages(
                mean=mean, std=std, convention="roll", group_size=4, num_domains=domains
            )
            step, init = _stateful(estimator)
            batches = [r.astype(dtype) for r, _ in stream]
            ids = [d if domains else np.zeros_like(d) for _, d in stream]
            want = knobs.roll_stream(batches, ids, 4, mean, std, domains or 1)
            state = init()
            for rewards, d, expected in zip(batches, ids, want, strict=True):
                named = {"domains": d} if domains else {}
                out, state = step(state, rewards, **named)
                _levels_close(out.advantages, expected, dtype)
            restored = rn.load_state(init(), rn.save_state(state, estimator.config))
            np.testing.assert_array_equal(restored.stats.moments, state.stats.moments)


def test_a_domains_first_single_reward_gets_rolls_advantage_0():
    # ROLL's prior (count 1e-24, variance 1) makes one reward's unbiased std inf, not 0 / 0.
    rewards, domains = np.array([1.0, 2, 3, 4], np.float32), np.array([0, 0, 1, 0])
    want = knobs.roll_stream([rewards], [domains], 1, "running", "running", 2)[0]
    assert want[2] == 0
    roll = rn.group_advantages(
        mean="running", std="running", convention="roll", group_size=1, num_domains=2
    )
    step, init = _stateful(roll)
    _levels_close(step(init(), rewards, domains=domains)[0].advantages, want, "float32")
    exact = rn.group_advantages(mean="running", std="running", group_size=1, num_domains=2)
    step, init = _stateful(exact)
    assert np.isnan(step(init(), rewards, domains=domains)[0].advantages[2])


def test_a_batch_level_per_domain_is_one_running_estimator_per_domain():
    rewards = np.array([1.0, 0, 5, 7, 1, 1, 6, 9], np.float32)
    domains = np.array([0, 0, 1, 1, 0, 0, 1, 1])
    for mean, std in [("batch", "running"), ("running", "batch")]:
        want = knobs.roll_stream([rewards], [domains], 2, mean, std, 2)[0]
        got = np.zeros_like(want)
        for d in (0, 1):
            part = domains == d
            alone = rn.group_advantages(mean=mean, std=std, convention="roll", group_size=2)
            step, init = _stateful(alone)
            got[part] = step(init(), rewards[part])[0].advantages
        _levels_close(got, want, "float32")


def test_running_statistics_merge_across_devices_as_one_batch():
    rewards, domains = _stream(np.random.default_rng(1), batches=1)[0]
    estimator = rn.group_advantages(
        mean="running", std="running", convention="roll", group_size=4, num_domains=3, axis_name="d"
    )
    alone = rn.group_advantages(
        mean="running", std="running", convention="roll", group_size=4, num_domains=3
    )
    step, init = _stateful(estimator)
    state = init()
    out, merged = jax.vmap(lambda r, d: step(state, r, domains=d), axis_name="d")(
        rewards.reshape(4, 4), domains.reshape(4, 4)
    )
    alone_step, alone_init = _stateful(alone)
    want, whole = alone_step(alone_init(), rewards, domains=domains)
    np.testing.assert_allclose(out.advantages.reshape(-1), want.advantages, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(merged.stats.mean[0], whole.stats.mean, rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_maxrl_matches_skyrl(dtype):
    ids = np.array([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 4])
    with jax.enable_x64(dtype == "float64"):
        rewards = np.array([1, 0, 0, 0, 1, 1, 0, 1, 0, 0, 0.5, 1], dtype)
        skyrl = rn.group_advantages("maxrl", convention="skyrl", num_groups=5)
        got = jax.jit(skyrl.apply)(rewards, group_ids=ids).advantages
        _levels_close(got, knobs.skyrl_maxrl(rewards, ids), dtype)


def test_maxrl_under_exact_is_nan_for_a_mean_of_zero():
    exact = rn.group_advantages("maxrl", group_size=4)
    got = exact.apply(np.array([1, 0, 0, 0, 1, -1, 1, -1], np.float32)).advantages
    np.testing.assert_allclose(got[:4], [3, -1, -1, -1], rtol=1e-6)
    assert np.isnan(got[4:]).all()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_rloo_std_matches_nemo_rl_with_its_zero_std_skip_and_floor(dtype):
    rng = np.random.default_rng(2)
    dyadic = rng.choice([0.0, 0.25, 1.0], 24).astype(np.float32)
    dyadic[:4] = [1, 0, 0, 0]
    normal = rng.normal(size=24).astype(np.float32)
    prompts = np.arange(24) // 4
    with jax.enable_x64(dtype == "float64"):
        for rewards in (dyadic.astype(dtype), normal.astype(dtype)):
            for floor in (0.0, 0.3):
                nemo = rn.group_advantages(
                    "rloo_std", convention="nemo_rl", group_size=4, std_floor=floor
                )
                want = knobs.nemo_rloo_std(rewards, prompts, floor=floor)
                _levels_close(jax.jit(nemo.apply)(rewards).advantages, want, dtype)
    got = rn.group_advantages("rloo_std", convention="nemo_rl", group_size=4).apply(dyadic)
    np.testing.assert_allclose(got.advantages[:4], [1, -0.5773497, -0.5773497, -0.5773497], 1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_rloo_std_keeps_the_spread_of_near_equal_others_beside_a_far_answer(dtype):
    groups = [[1000, 0, 0, 1e-3], [5, 1, 1.0001, 1], [100, 3, 3.1, 2.9, 3.05], [1, 0, 0, 0.001]]
    if dtype == "float64":
        groups.append([1e8, 0, 0, 1e-3])
    rtol = 1e-5 if dtype == "float32" else 1e-10
    with jax.enable_x64(dtype == "float64"):
        for group in groups:
            rewards = np.array(group, dtype)
            estimator = rn.group_advantages("rloo_std", group_size=len(group))
            got = jax.jit(estimator.apply)(rewards).advantages
            want = knobs.leave_one_out_std(rewards, len(group))
            np.testing.assert_allclose(got, want, rtol=rtol, err_msg=str(group))


def test_gpg_alpha_is_verls_float32_reciprocal_times_the_batch():
    for answers in (6, 10, 14, 26):
        apply = jax.jit(rn.group_advantages("gpg", convention="verl", group_size=2).apply)
        for nonzero in range(1, answers // 2 + 1):
            rewards = np.zeros(answers, np.float32)
            rewards[0] = 2.0  # the group [2, 0]: deviations of exactly +-1
            rewards[2 : 2 * nonzero : 2] = 1.0  # groups [1, 0]
            alpha = apply(rewards).advantages[0]
            assert alpha == knobs.verl_gpg_alpha(answers, nonzero), (answers, nonzero)
    assert float(knobs.verl_gpg_alpha(14, 6)) == 2.3333334922790527


def test_the_named_estimators_are_presets_of_the_levels():
    rewards = LEVEL_REWARDS
    presets: list[tuple[str, dict[str, Any]]] = [
        ("grpo", {"mean": "group", "std": "group"}),
        ("dr_grpo", {"mean": "group", "std": "none"}),
        ("batch_std", {"mean": "group", "std": "batch"}),
        ("rloo", {"mean": "group", "std": "none", "leave_one_out": True}),
    ]
    for estimator, levels in presets:
        for convention in ("exact", "roll") if estimator != "rloo" else ("exact",):
            named = rn.group_advantages(estimator, convention=convention, group_size=4)
            knob = rn.group_advantages(convention=convention, group_size=4, **levels)
            np.testing.assert_array_equal(
                named.apply(rewards).advantages, knob.apply(rewards).advantages
            )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mean": "domain", "std": "none"}, r"mean should be one of 'group'"),
        ({"mean": "group"}, r"takes both levels"),
        ({"estimator": "grpo", "std": "batch"}, r"estimator='normalized''s options"),
        ({"mean": "none", "std": "group", "leave_one_out": True}, r"leave_one_out=True leaves"),
        ({"mean": "group", "std": "group", "ddof": 2}, r"ddof should be 0 or 1, got ddof=2"),
        ({"estimator": "grpo", "epsilon": -1.0}, r"epsilon should be a finite number >= 0"),
        ({"estimator": "grpo", "epsilon_at": "var"}, r"epsilon_at should be one of 'std'"),
        ({"estimator": "grpo", "num_domains": 2}, r"num_domains=2 keys running statistics"),
        (
            {"mean": "batch", "std": "running", "num_domains": 2},
            r"mean='batch' and std='running' with num_domains=2: a batch level",
        ),
        (
            {"mean": "running", "std": "batch", "num_domains": 2},
            r"mean='running' and std='batch' with num_domains=2: a batch level",
        ),
        ({"estimator": "maxrl", "convention": "verl"}, r"has no estimator 'maxrl'"),
        ({"estimator": "rloo_std", "convention": "verl"}, r"has no estimator 'rloo_std'"),
        ({"mean": "group", "std": "group", "convention": "verl"}, r"has no estimator 'normalized'"),
        ({"estimator": "grpo", "std_floor": 1e-3}, r"std_floor is for estimator='rloo_std'"),
        ({"estimator": "maxrl", "convention": "areal"}, r"has no estimator 'maxrl'"),
    ],
)
def test_level_options_are_checked(options, message):
    with pytest.raises(ValueError, match=message):
        rn.group_advantages(group_size=4, **options)


def test_a_gdpo_config_saves_its_own_metadata():
    config = rn.group_advantages("gdpo", group_size=2, reward_weights=(1.0, 0.5)).config
    data = rn.save_state({"x": jnp.zeros(2)}, config)
    rn.load_state({"x": jnp.zeros(2)}, data, config)
    other = rn.group_advantages("gdpo", group_size=2, reward_weights=(1.0, 0.25)).config
    with pytest.raises(ValueError, match="reward_weights/1"):
        rn.load_state({"x": jnp.zeros(2)}, data, other)


def test_an_epsilon_under_the_square_root():
    rewards = LEVEL_REWARDS[8:12].astype(np.float64)
    est = rn.group_advantages(
        mean="group", std="group", epsilon=0.5, epsilon_at="variance", group_size=4
    )
    want = (rewards - rewards.mean()) / np.sqrt(rewards.var(ddof=1) + 0.5)
    np.testing.assert_allclose(est.apply(rewards.astype(np.float32)).advantages, want, rtol=1e-6)
