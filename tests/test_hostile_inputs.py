"""Hostile rewards: extreme magnitudes, non-finite values, constant streams, odd dtypes.

Streams are drawn by hypothesis from ``floats(allow_nan=True,
allow_infinity=True, width=32)``, scaled to 1e-30 and 1e30, with alternating
signs or constant, and compared step by step with the float64 NumPy reference
(``tests/reference.py``) under the documented policy: non-finite rewards are
dropped from the return and the statistics and passed through. Float32
statistics cannot hold variances past 3.4e38: there the documented behaviour
is checked instead (variance +inf, normalized rewards 0, never NaN).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from jax.experimental import checkify

import rewardnorm_jax as rn

STEPS, ENVS = 16, 3
EPSILON = 1e-8
HOSTILE = st.floats(allow_nan=True, allow_infinity=True, width=32)


@functools.partial(jax.jit, static_argnames=("transform",))
def run_stream(transform, rewards):
    """Outputs and per-step statistics of a (T, N) stream, no episode ends."""

    def body(state, reward):
        out, state = transform.step(state, reward, False, False)
        stats = state.stats
        return state, (out, stats.mean, stats.mean_low, stats.m2, stats.var, stats.count_lo)

    _, ys = jax.lax.scan(body, transform.init(rewards.shape[1:]), rewards)
    return ys


@st.composite
def streams(draw):
    """(T, N) float32 rewards: raw hostile floats, or scaled patterns with hostile entries."""
    kind = draw(st.sampled_from(["raw", "alternating", "constant"]))
    scale = np.float32(draw(st.sampled_from([1e-30, 1.0, 1e30])))
    if kind == "raw":
        return draw(hnp.arrays(np.float32, (STEPS, ENVS), elements=HOSTILE))
    magnitude = draw(
        hnp.arrays(
            np.float32,
            (1, ENVS) if kind == "constant" else (STEPS, ENVS),
            elements=st.floats(0.0, 10.0, width=32),
        )
    )
    signs = np.where(np.arange(STEPS) % 2 == 0, 1.0, -1.0).astype(np.float32)[:, None]
    rewards = np.broadcast_to(magnitude * scale, (STEPS, ENVS)) * (
        signs if kind == "alternating" else 1
    )
    hostile = draw(hnp.arrays(np.float32, (STEPS, ENVS), elements=HOSTILE))
    replace = draw(hnp.arrays(bool, (STEPS, ENVS), elements=st.booleans()))
    replace &= draw(st.booleans())  # half of the streams keep no hostile entry
    return np.where(replace, hostile, rewards).astype(np.float32)


def reference_per_step(rewards, gamma):
    """Float64 outputs and (mean, var, m2, count) after every step."""
    outputs, returns, _ = reference.normalize_stream(
        rewards,
        np.zeros(rewards.shape, bool),
        np.zeros(rewards.shape, bool),
        gamma=gamma,
        epsilon=EPSILON,
    )
    rms, history = reference.RunningMeanStd(), []
    for ret, reward in zip(returns, rewards, strict=True):
        rms.update(ret[np.isfinite(reward)])
        history.append((rms.mean, rms.var, rms.var * rms.count, rms.count))
    return outputs, np.array(history)


@functools.cache
def normalizer(gamma, dtype):
    """One transform per configuration, so ``run_stream`` compiles once for each."""
    return rn.normalize_reward(gamma, EPSILON, dtype=dtype)


def check_against_reference(rewards, gamma, dtype):
    rewards = np.asarray(rewards)
    norm = normalizer(gamma, jnp.dtype(dtype))
    out, mean, mean_low, m2, var, count_lo = (
        np.asarray(a, np.float64) for a in run_stream(norm, jnp.asarray(rewards, dtype))
    )
    ref_out, ref = reference_per_step(rewards.astype(np.float64), gamma)
    ref_mean, ref_var, ref_m2, _ref_count = ref.T
    info = np.finfo(dtype)
    finite = np.isfinite(rewards)

    # Invariants, whatever the magnitudes: no NaN, non-finite rewards passed
    # through, the count exact, the variance never negative.
    assert not np.isnan(mean).any()
    assert not np.isnan(m2).any()
    assert not np.isnan(var).any()
    assert (var >= 0).all()
    assert not np.isnan(out[finite]).any()
    np.testing.assert_array_equal(out[~finite], rewards[~finite])
    np.testing.assert_array_equal(count_lo, np.cumsum(finite.sum(axis=1)))

    # Within range, the float64 reference. The returns and merges round at
    # each step: errors of ulps of the data's scale, sqrt(var + mean^2), for
    # each of STEPS steps (3000 examples showed at most 0.16 STEPS eps; the
    # outputs' relative error is amplified by scale^2 / var). Subnormal rewards
    # and outputs are flushed to 0 (XLA on CPU), hence the absolute floor.
    largest = float(info.max)
    in_range = np.maximum.accumulate(ref_m2) < largest / 1e3
    rtol = 2 * STEPS * float(info.eps)
    scale2 = ref_var + ref_mean**2
    for t in np.flatnonzero(in_range):
        assert abs(mean[t] + mean_low[t] - ref_mean[t]) <= rtol * np.sqrt(scale2[t]), t
        assert abs(var[t] - ref_var[t]) <= rtol * scale2[t], t
        divisor = np.sqrt(ref_var[t] + EPSILON)
        out_tol = rtol * np.abs(ref_out[t]) * scale2[t] / (ref_var[t] + EPSILON)
        np.testing.assert_allclose(
            out[t][finite[t]],
            ref_out[t][finite[t]],
            rtol=0,
            atol=float(info.tiny) * (1 + 1 / divisor) + out_tol[finite[t]].max(initial=0.0),
        )
    # Past the range, saturation: variance +inf and normalized rewards 0.
    for t in np.flatnonzero(ref_m2 > largest * 1e3):
        assert var[t] == np.inf, t
        np.testing.assert_array_equal(out[t][finite[t]], 0.0)
    return in_range


@settings(max_examples=150, deadline=None)
@given(rewards=streams(), gamma=st.sampled_from([0.0, 0.99]))
# Finite rewards whose return overflows float32 (to +inf at the last step):
# the infinite return still counts as a sample and saturates the variance.
@example(rewards=np.full((STEPS, ENVS), 2.2908122e37, np.float32), gamma=0.99)
def test_float32_streams_match_float64_reference_or_saturate(rewards, gamma):
    check_against_reference(rewards, gamma, jnp.float32)


@settings(max_examples=40, deadline=None)
@given(rewards=streams(), gamma=st.sampled_from([0.0, 0.99]))
def test_float64_statistics_hold_1e30_rewards(rewards, gamma):
    with jax.enable_x64(True):
        in_range = check_against_reference(rewards, gamma, jnp.float64)
    if np.isfinite(rewards).all() and np.abs(rewards).max() <= 1e31:
        assert in_range.all()  # squares of 1e30 fit float64


@pytest.mark.parametrize("scale", [1e-30, 1e30])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_alternating_extremes_are_exact_or_saturated(scale, dtype):
    rewards = (scale * np.where(np.arange(STEPS) % 2 == 0, 1.0, -1.0))[:, None] * np.ones(ENVS)
    with jax.enable_x64(dtype == "float64"):
        in_range = check_against_reference(rewards.astype(np.float32), 0.99, jnp.dtype(dtype))
    # 1e30 squared is past float32's range, not float64's; 1e-30 is fine in both.
    assert in_range.all() == (dtype == "float64" or scale == 1e-30)


@pytest.mark.parametrize("value", [0.0, 1.0, -1e-30, 1e10, 1e30, 3.4e38])
def test_constant_rewards_keep_a_finite_nonnegative_variance(value):
    """Zero variance in the data: the running variance decays to 0+, outputs stay finite."""
    norm = rn.normalize_reward(0.0, EPSILON)  # gamma 0: the returns are the constant itself
    rewards = jnp.full((2000, 8), value, jnp.float32)
    out, _mean, _mean_low, _m2, var, _ = run_stream(norm, rewards)
    out, var = np.asarray(out), np.asarray(var)
    assert np.isfinite(out).all()
    assert not np.isnan(var).any()
    assert (var >= 0).all()
    assert np.all(np.abs(out) <= abs(np.float32(value)) / np.sqrt(EPSILON) * (1 + 1e-6))
    ref = reference.RunningMeanStd()
    for _ in range(2000):
        ref.update(np.full(8, np.float32(value), np.float64))
    if ref.var * ref.count < np.finfo(np.float32).max:
        # The prior's share, 1e-4 (1 + c^2) / n, is all that is left of the variance.
        np.testing.assert_allclose(var[-1], ref.var, rtol=1e-5)
        np.testing.assert_allclose(ref.var, 1e-4 * (1 + np.float32(value) ** 2) / 16000, rtol=1e-3)
    else:
        assert var[-1] == np.inf
        assert (out[-1] == 0).all()


@pytest.mark.parametrize(
    "dtype", ["float16", "bfloat16", "float32", "int8", "int32", "uint8", "bool"]
)
def test_low_precision_and_integer_rewards_give_float32_statistics(dtype):
    values = np.array([[3, 1, 0], [2, 7, 1], [1, 1, 1], [5, 0, 2]])
    rewards = jnp.asarray(values.astype(dtype) if dtype != "bfloat16" else values, dtype)
    norm = rn.normalize_reward()
    out, state = norm.step(norm.init((3,)), rewards[0])
    assert out.dtype == jnp.float32
    assert {leaf.dtype for leaf in (state.stats.mean, state.stats.m2, state.ret)} == {
        jnp.dtype(jnp.float32)
    }
    exact = np.asarray(rewards, np.float64)
    out, *_ = run_stream(norm, rewards)
    ref_out, _ = reference_per_step(exact, 0.99)
    np.testing.assert_allclose(np.asarray(out), ref_out, rtol=1e-5)
    stats = rn.merge_stats(rn.init_stats(), rewards.reshape(-1))
    assert stats.mean.dtype == jnp.float32
    ref = reference.RunningMeanStd()
    ref.update(exact.reshape(-1))
    np.testing.assert_allclose(float(stats.var), ref.var, rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int64"])
def test_under_x64_statistics_default_to_float64(dtype):
    with jax.enable_x64(True):
        rewards = jnp.asarray(np.array([1, 2, 30]).astype(dtype))
        out, state = rn.normalize_reward().step(rn.normalize_reward().init((3,)), rewards)
        assert out.dtype == state.stats.mean.dtype == jnp.float64
        # An explicit float32 is honoured (never lower than float32).
        norm32 = rn.normalize_reward(dtype=jnp.float32)
        out, state = norm32.step(norm32.init((3,)), rewards)
        assert out.dtype == state.stats.mean.dtype == jnp.float32


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int32"])
def test_statistics_below_float32_are_refused(dtype):
    with pytest.raises(ValueError, match="not supported for statistics"):
        rn.normalize_reward(dtype=dtype)
    with pytest.raises(ValueError, match="not supported for statistics"):
        rn.init_stats(dtype=dtype)


# --- fail fast: check_finite_reward ---------------------------------------


def checked_stream(batch_shape=(4,)):
    transform = rn.chain(rn.check_finite_reward(), rn.normalize_reward())

    @jax.jit
    @checkify.checkify
    def run(rewards, active):
        def body(state, xs):
            reward, act = xs
            out, state = transform.step(state, reward, False, False, active=act)
            return state, out

        return jax.lax.scan(body, transform.init(batch_shape), (rewards, active))[1]

    return transform, run


def test_check_finite_reward_raises_inside_jit_with_step_and_environment():
    _, run = checked_stream()
    rewards = np.ones((10, 4), np.float32)
    rewards[6, 2] = np.nan
    rewards[6, 3] = -np.inf
    rewards[8, 0] = np.inf
    err, _ = run(jnp.asarray(rewards), jnp.ones((10, 4), bool))
    with pytest.raises(
        checkify.JaxRuntimeError,
        match=r"non-finite reward nan at step 6, environment 2 \(2 non-finite",
    ):
        err.throw()


def test_check_finite_reward_is_silent_and_transparent_on_finite_rewards():
    _, run = checked_stream()
    rewards = jax.random.normal(jax.random.key(0), (10, 4))
    err, out = run(rewards, jnp.ones((10, 4), bool))
    assert err.get() is None
    plain = run_stream(rn.normalize_reward(), rewards)[0]
    np.testing.assert_array_equal(out, plain)


def test_check_finite_reward_ignores_inactive_environments():
    _, run = checked_stream()
    rewards = np.ones((5, 4), np.float32)
    rewards[3, 1] = np.nan
    active = np.ones((5, 4), bool)
    active[3, 1] = False
    err, _ = run(jnp.asarray(rewards), jnp.asarray(active))
    assert err.get() is None


def test_check_finite_reward_multi_dimensional_and_unbatched():
    _, run = checked_stream((2, 3))
    rewards = np.ones((4, 2, 3), np.float32)
    rewards[2, 1, 2] = np.inf
    err, _ = run(jnp.asarray(rewards), jnp.ones((4, 2, 3), bool))
    assert "step 2, environment [1 2]" in err.get()

    transform = rn.check_finite_reward()
    with pytest.raises(checkify.JaxRuntimeError, match="non-finite reward nan at step 0 "):
        transform.step(transform.init(), jnp.float32(jnp.nan))  # eager: raises at once


def test_check_finite_reward_names_the_participant_under_vmap():
    """Per-environment vmap (the gymnax adapter's second mode): the participant is the env."""
    transform = rn.chain(
        rn.check_finite_reward(axis_name="envs"), rn.normalize_reward(axis_name="envs")
    )
    step = jax.jit(checkify.checkify(jax.vmap(transform.step, axis_name="envs")))
    state = jax.vmap(lambda _: transform.init())(jnp.arange(4))
    err, (_, state) = step(state, jnp.array([1.0, 2.0, 3.0, 4.0]))
    assert err.get() is None
    err, _ = step(state, jnp.array([1.0, 2.0, jnp.nan, 4.0]))
    assert err.get().startswith("non-finite reward nan at step 1, environment 2 (1 non-finite")

    batched = rn.check_finite_reward(axis_name="devices")  # each participant holds a batch
    step = jax.jit(checkify.checkify(jax.vmap(batched.step, axis_name="devices")))
    rewards = jnp.array([[1.0, 2.0, 3.0], [1.0, jnp.inf, 3.0]])
    err, _ = step(jax.vmap(lambda _: batched.init((3,)))(jnp.arange(2)), rewards)
    assert "at step 0, participant 1, environment 1 (1 non-finite" in err.get()


def test_check_finite_reward_cannot_be_jitted_without_checkify():
    transform = rn.chain(rn.check_finite_reward(), rn.normalize_reward())
    with pytest.raises(ValueError, match="checkify"):
        jax.jit(transform.step)(transform.init((2,)), jnp.ones(2))
