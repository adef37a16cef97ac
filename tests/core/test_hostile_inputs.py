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
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from jax.experimental import checkify

import rewardnorm_jax as rn
from tests import reference
from tests.core.test_transform_contract import TRANSFORMS as EVERY_TRANSFORM
from tests.streams import scan_steps

STEPS, ENVS = 16, 3
EPSILON = 1e-8
HOSTILE = st.floats(allow_nan=True, allow_infinity=True, width=32)


@functools.partial(jax.jit, static_argnames=("transform",))
def run_stream(transform, rewards):
    """Outputs and per-step statistics of a (T, N) stream, no episode ends."""

    def record(state):
        stats = state.stats
        return stats.mean, stats.mean_low, stats.m2, stats.var, stats.count_lo

    _, (out, recorded) = scan_steps(transform, rewards, record=record)
    return (out, *recorded)


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
        return scan_steps(transform, rewards, active=active)[1]

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


# --- inputs that are no rewards or flags --------------------------------------

NOT_FLAGS = ["False", b"0", np.array(["False", "True"]), np.complex64(0), np.timedelta64(0, "s")]


def step_with(transform, flag, value):
    """``transform.step`` on a batch of 4 ones with one flag set to ``value``."""
    flags = {"terminated": False, "truncated": False, "update_stats": True, "active": None}
    flags[flag] = value
    active = flags.pop("active")
    return transform.step(transform.init((4,)), jnp.ones(4), *flags.values(), active=active)


@pytest.mark.parametrize("flag", ["terminated", "truncated", "update_stats", "active"])
@pytest.mark.parametrize("name", sorted(EVERY_TRANSFORM))
def test_a_string_flag_is_refused_by_every_transform(name, flag):
    """jnp.asarray("False", bool) is True: a string flag would silently be set."""
    transform = EVERY_TRANSFORM[name]()
    with pytest.raises(TypeError, match=rf"{flag} should be a boolean flag: .* Got {flag}='False'"):
        step_with(transform, flag, "False")
    if flag != "update_stats":
        kwargs: dict[str, Any] = {flag: "False"}
        with pytest.raises(TypeError, match=rf"{flag} should be a boolean flag"):
            transform.update(transform.init((4,)), jnp.ones(4), **kwargs)


@pytest.mark.parametrize("value", NOT_FLAGS, ids=repr)
@pytest.mark.parametrize("flag", ["terminated", "truncated", "update_stats", "active"])
def test_flags_that_are_no_real_numbers_are_refused(flag, value):
    norm = rn.normalize_reward()
    with pytest.raises(TypeError, match=rf"{flag} should be a boolean flag: .* Got {flag}="):
        step_with(norm, flag, value)
    traced = jax.jit(lambda v: step_with(norm, flag, v))
    with pytest.raises(TypeError, match=rf"Got {flag}=a traced complex64\[\] array"):
        traced(jnp.complex64(0))  # a traced flag is checked by its dtype
    with pytest.raises(TypeError, match=r"terminated should be .* Got terminated=None \("):
        norm.step(norm.init(), 1.0, None)  # type: ignore[arg-type]  # deliberately not a flag


def test_the_string_false_neither_updates_nor_resets():
    norm = rn.normalize_reward()
    state = norm.step(norm.init(), 1.0)[1]
    with pytest.raises(TypeError, match=r"update_stats should be .* Got update_stats='False' \("):
        norm.step(state, 1.0, False, False, "False")  # type: ignore[arg-type]  # deliberately not a flag
    with pytest.raises(TypeError, match=r"terminated should be .* Got terminated='False' \("):
        norm.step(state, 1.0, "False", False)  # type: ignore[arg-type]  # deliberately not a flag
    chained = rn.chain(rn.clip_reward(), norm)
    with pytest.raises(
        TypeError, match=r"^truncated should be a boolean flag"
    ):  # no member at fault
        chained.step(chained.init(), 1.0, False, "no")  # type: ignore[arg-type]  # deliberately not a flag


@pytest.mark.parametrize("semantics", ["gymnasium", "sb3", "purejaxrl", "gymnasium_same_step"])
def test_numeric_flags_count_nonzero_as_true_eagerly_traced_and_as_numpy(semantics):
    """Environments return done as float (Brax) or int32 arrays: they stay flags."""
    norm = rn.normalize_reward(semantics=semantics)
    rewards = jax.random.normal(jax.random.key(1), (6, 4))
    done = np.arange(24).reshape(6, 4) % 5 == 3
    active = np.arange(24).reshape(6, 4) % 7 != 2

    def run(step, cast, update_stats):
        state, outs = norm.init((4,)), []
        for t in range(6):
            out, state = step(
                state,
                rewards[t],
                cast(done[t]),
                cast(done[t] & (t % 2 == 0)),
                update_stats,
                active=cast(active[t]),
            )
            outs.append(out)
        return jnp.stack(outs), state

    for step in (norm.step, jax.jit(norm.step)):  # each against bool flags, bit for bit
        expected = run(step, jnp.asarray, True)
        # Each kind of flag, and each kind of update_stats (their cases do not interact).
        for cast in (lambda x: x.astype(np.float32), lambda x: x.astype(np.int32), np.asarray):
            chex.assert_trees_all_equal(run(step, cast, True), expected)
        for update_stats in (1, 1.0, np.True_, jnp.asarray(True)):
            chex.assert_trees_all_equal(run(step, jnp.asarray, update_stats), expected)
        frozen = run(step, jnp.asarray, jnp.asarray(False))
        chex.assert_trees_all_equal(run(step, jnp.asarray, np.float32(0)), frozen)


@pytest.mark.parametrize("name", sorted(EVERY_TRANSFORM))
def test_complex_rewards_are_refused_by_every_transform(name):
    """A cast to the statistics dtype would silently drop the imaginary part."""
    transform = EVERY_TRANSFORM[name]()
    state = transform.init((4,))
    reward = jnp.array([1.0, 2j, 3.0, 4.0])
    message = (
        r"reward should hold real numbers .* got reward=a complex64\[4\] array \(pass jnp.real"
    )
    for fn in (transform.step, transform.update, transform.apply):
        with pytest.raises(TypeError, match=message):
            fn(state, reward)
    with pytest.raises(TypeError, match=r"got reward=a traced complex64\[4\] array"):
        jax.jit(checkify.checkify(transform.step))(state, reward)
    with pytest.raises(TypeError, match=r"got reward=\(1\+2j\) \(of type complex"):
        transform.step(transform.init(), 1 + 2j)


@pytest.mark.parametrize(
    "call",
    [
        lambda x: rn.symlog(x),
        lambda x: rn.symexp(x),
        lambda x: rn.signed_hyperbolic(x),
        lambda x: rn.signed_parabolic(x),
        lambda x: rn.merge_stats(rn.init_stats(), x),
        lambda x: rn.update_percentiles(rn.init_percentiles(), x),
    ],
    ids=["symlog", "symexp", "signed_hyperbolic", "signed_parabolic", "merge_stats", "percentiles"],
)
def test_complex_and_non_numeric_values_are_refused_by_the_functions(call):
    for value in (jnp.array([1.0 + 1j, 2.0]), np.complex128(3.0), "1.0", None):
        with pytest.raises(TypeError, match=r"should hold real numbers \(a bool, integer or float"):
            call(value)
    with pytest.raises(TypeError, match=r"should hold real numbers"):
        jax.jit(call)(jnp.array([1.0 + 1j, 2.0]))


def test_masks_of_strings_are_refused_and_numeric_masks_select():
    for call in (
        lambda m: rn.merge_stats(rn.init_stats(), jnp.ones(()), mask=m),
        lambda m: rn.update_percentiles(rn.init_percentiles(), jnp.ones(()), mask=m),
    ):
        with pytest.raises(TypeError, match=r"mask should be a boolean flag: .* Got mask='False'"):
            call("False")
    weights = rn.merge_stats(rn.init_stats(), jnp.arange(3.0), mask=jnp.array([1.0, 0.0, 1.0]))
    chex.assert_trees_all_equal(
        weights, rn.merge_stats(rn.init_stats(), jnp.arange(3.0), mask=jnp.array([1, 0, 1], bool))
    )


@pytest.mark.parametrize(
    "reward", [np.timedelta64(1, "s"), np.datetime64(1, "s"), jax.random.key(0)]
)
def test_durations_dates_and_keys_are_no_rewards(reward):
    norm = rn.normalize_reward()
    with pytest.raises(TypeError, match="reward should hold real numbers"):
        norm.step(norm.init(), reward)
    with pytest.raises(TypeError, match="terminated should be a boolean flag"):
        norm.step(norm.init(), 1.0, reward)


UNBOUND = {
    "normalize_reward": lambda: rn.normalize_reward(axis_name="envs").step(
        rn.normalize_reward().init(), 1.0
    ),
    "normalize_reward g_max": lambda: rn.normalize_reward(axis_name="envs", g_max=10.0).step(
        rn.normalize_reward(g_max=10.0).init(), 1.0
    ),
    "percentile_scale_reward": lambda: rn.percentile_scale_reward(axis_name="envs").step(
        rn.percentile_scale_reward().init(), 1.0
    ),
    "check_finite_reward": lambda: rn.check_finite_reward(axis_name="envs").step(
        rn.check_finite_reward().init(), 1.0
    ),
    "merge_stats": lambda: rn.merge_stats(rn.init_stats(), jnp.ones(3), axis_name="envs"),
    "update_percentiles": lambda: rn.update_percentiles(
        rn.init_percentiles(), jnp.ones(3), axis_name="envs"
    ),
}


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("name", sorted(UNBOUND))
def test_an_axis_name_no_map_binds_is_named_at_trace_time(name, jit):
    call = jax.jit(UNBOUND[name]) if jit else UNBOUND[name]
    with pytest.raises(
        ValueError,
        match=r"axis_name='envs': no map binds the axis 'envs' here.*"
        r"jax\.vmap\(\.\.\., axis_name='envs'\), jax\.pmap\(\.\.\., axis_name='envs'\) "
        r"or shard_map over a mesh with an axis 'envs'",
    ):
        call()


def test_the_unbound_name_of_a_tuple_is_the_one_named():
    norm = rn.normalize_reward(axis_name=("envs", "devices"))
    states = jax.vmap(lambda _: norm.init())(jnp.arange(2))
    with pytest.raises(
        ValueError, match=r"axis_name=\('envs', 'devices'\): .* axis 'devices' here"
    ):
        jax.vmap(norm.step, axis_name="envs")(states, jnp.ones(2))
    bound = jax.vmap(jax.vmap(norm.step, axis_name="envs"), axis_name="devices")
    out, _ = bound(jax.vmap(lambda _: states)(jnp.arange(3)), jnp.ones((3, 2)))
    np.testing.assert_allclose(
        out, rn.normalize_reward().step(rn.normalize_reward().init(6), jnp.ones(6))[0].reshape(3, 2)
    )


def test_axis_names_that_are_integers_or_unhashable_are_refused():
    for factory in (rn.normalize_reward, rn.percentile_scale_reward, rn.check_finite_reward):
        with pytest.raises(TypeError, match=r"axis_name=0 \(JAX's collectives read an integer"):
            factory(axis_name=0)
        with pytest.raises(TypeError, match=r"axis_name should be None, the name of a mapped"):
            factory(axis_name={"envs"})
    with pytest.raises(TypeError, match=r"axis_name=\('envs', 1\)"):
        rn.merge_stats(rn.init_stats(), jnp.ones(3), axis_name=("envs", 1))
    # A list of names is a tuple of names.
    norm = rn.normalize_reward(axis_name=["envs"])
    out, _ = jax.vmap(norm.step, axis_name="envs")(
        jax.vmap(lambda _: norm.init())(jnp.arange(2)), jnp.ones(2)
    )
    np.testing.assert_allclose(
        out, rn.normalize_reward().step(rn.normalize_reward().init(2), jnp.ones(2))[0]
    )


def test_boolean_hyperparameters_take_bools_only():
    refused: list[Any] = ["no", "False", 1, None, np.array([True])]
    accepted: list[tuple[Any, bool]] = [
        (np.False_, False),
        (jnp.asarray(True), True),
        (np.array(False), False),
    ]
    for value in refused:
        with pytest.raises(TypeError, match=r"per_env should be a bool, got per_env="):
            rn.Statistics(per_env=value)
        with pytest.raises(
            TypeError, match=r"finite_rewards should be a bool, got finite_rewards="
        ):
            rn.normalize_reward(finite_rewards=value)
    for value, expected in accepted:
        assert rn.Statistics(per_env=value).per_env is expected
        config: Any = rn.normalize_reward(finite_rewards=value).config
        assert config.finite_rewards is expected
    numpy_true: Any = np.True_
    semantics = rn.Semantics("mine", "never", "done", freeze_stops_return=numpy_true)
    assert semantics.freeze_stops_return is True
    with pytest.raises(
        TypeError, match="freeze_stops_return should be a bool, got freeze_stops_return='no'"
    ):
        rn.Semantics("mine", "never", "done", freeze_stops_return="no")  # type: ignore[arg-type]  # deliberately not a bool


def test_a_semantics_or_dtype_that_is_no_name_is_named():
    semantics: list[Any] = [["gymnasium"], None, 3]
    for value in semantics:
        with pytest.raises(ValueError, match=r"semantics=.* is not known; pick one of"):
            rn.normalize_reward(semantics=value)
    for value in ("floaty", "foo", object()):
        with pytest.raises(
            TypeError, match=r"dtype should be float32, float64 or None .* got dtype="
        ):
            rn.normalize_reward(dtype=value)
        with pytest.raises(TypeError, match=r"dtype should be float32, float64 or None"):
            rn.init_percentiles(value)


def test_count_as_int_under_jit_says_where_to_call_it():
    with pytest.raises(
        TypeError, match=r"count_as_int reads the count on the host: call it outside jit"
    ):
        jax.jit(rn.count_as_int)(rn.init_stats())


@pytest.mark.parametrize(
    ("name", "value"),
    [("clip", np.float16(0.0)), ("g_max", np.float16(0.0)), ("epsilon", np.float16(1e-8))],
)
def test_a_float16_hyperparameter_is_checked_at_its_value(name, value):
    """float16(1e-8) is 0: compared in float16, float32's tiny rounded to 0 and let it pass."""

    def build():
        if name == "clip":  # the clip is the semantics'
            return rn.normalize_reward(semantics=rn.Semantics("s", "never", "never", clip=value))
        return rn.normalize_reward(**{name: value})

    with pytest.raises(ValueError, match=f"{name} should be a positive number"):
        build()
