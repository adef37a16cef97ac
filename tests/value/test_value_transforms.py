"""Value transforms: symlog / symexp and signed hyperbolic / parabolic, against NumPy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rewardnorm_jax as rn

VALUES = np.array([-1e6, -1234.5, -3.0, -1.0, -1e-3, 0.0, 1e-7, 0.5, 1.0, 3.0, 99.0, 1e6])


# NumPy float64 references, written from the formulas (rlax's signed_* forms).
def np_symlog(x):
    return np.sign(x) * np.log1p(np.abs(x))


def np_symexp(x):
    return np.sign(x) * np.expm1(np.abs(x))


def np_signed_hyperbolic(x, eps=1e-3):
    return np.sign(x) * (np.sqrt(np.abs(x) + 1) - 1) + eps * x


def np_signed_parabolic_rlax(y, eps=1e-3):
    z = np.sqrt(1 + 4 * eps * (eps + 1 + np.abs(y))) / 2 / eps - 1 / 2 / eps
    return np.sign(y) * (np.square(z) - 1)


def eager(fn):
    return fn


MODES = pytest.mark.parametrize("mode", [eager, jax.jit], ids=["eager", "jit"])


@MODES
def test_symlog_symexp_match_numpy(mode):
    x = jnp.asarray(VALUES, jnp.float32)
    np.testing.assert_allclose(mode(rn.symlog)(x), np_symlog(VALUES), rtol=1e-6)
    small = np.array([-20.0, -1.0, 0.0, 0.3, 5.0, 20.0])
    np.testing.assert_allclose(
        mode(rn.symexp)(jnp.asarray(small, jnp.float32)), np_symexp(small), rtol=1e-6
    )


@MODES
@pytest.mark.parametrize("eps", [1e-3, 1e-2, 0.0])
def test_signed_hyperbolic_matches_numpy(mode, eps):
    fn = mode(lambda x: rn.signed_hyperbolic(x, eps))
    np.testing.assert_allclose(
        fn(jnp.asarray(VALUES, jnp.float32)),
        np_signed_hyperbolic(VALUES, eps),
        rtol=2e-6,
        atol=1e-7,
    )


@pytest.mark.parametrize("eps", [1e-3, 1e-2])
def test_signed_parabolic_equals_rlax_form_in_float64(eps):
    y = np_signed_hyperbolic(VALUES, eps)
    with jax.enable_x64(True):
        ours = np.asarray(rn.signed_parabolic(jnp.asarray(y, jnp.float64), eps))
    np.testing.assert_allclose(ours, np_signed_parabolic_rlax(y, eps), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ours, VALUES, rtol=1e-12, atol=1e-12)


@MODES
@pytest.mark.parametrize("eps", [1e-3, 0.0])
def test_round_trip_float32(mode, eps):
    x = jnp.asarray(VALUES, jnp.float32)
    back = mode(lambda v: rn.signed_parabolic(rn.signed_hyperbolic(v, eps), eps))(x)
    np.testing.assert_allclose(back, np.asarray(x, np.float64), rtol=3e-6, atol=1e-6)
    np.testing.assert_allclose(
        mode(lambda v: rn.symexp(rn.symlog(v)))(x[2:-2]), np.asarray(x[2:-2]), rtol=3e-6, atol=1e-6
    )


def test_inverse_without_cancellation_beats_rlax_form_in_float32():
    # The rlax form subtracts two numbers near 1 / (2 eps) = 500: in float32 it
    # loses digits for small |x|; ours keeps full relative precision.
    x = np.array([1e-3, 0.01, 0.1, 1.0], np.float64)
    y32 = np.asarray(rn.signed_hyperbolic(jnp.asarray(x, jnp.float32)))
    ours = np.asarray(rn.signed_parabolic(jnp.asarray(y32)), np.float64)
    theirs = np_signed_parabolic_rlax(y32.astype(np.float32), np.float32(1e-3)).astype(np.float64)
    ours_err = np.max(np.abs(ours - x) / x)
    theirs_err = np.max(np.abs(theirs - x) / x)
    assert ours_err < 1e-6
    assert theirs_err > 10 * ours_err


@settings(max_examples=60, deadline=None)
@given(st.floats(-1e7, 1e7, allow_nan=False), st.floats(0.0, 0.1))
def test_hyperbolic_inverse_property(x, eps):
    with jax.enable_x64(True):
        y = rn.signed_hyperbolic(jnp.float64(x), eps)
        back = float(rn.signed_parabolic(y, eps))
    assert back == pytest.approx(x, rel=1e-9, abs=1e-9)


def test_monotone_and_odd():
    x = np.linspace(-100.0, 100.0, 2001, dtype=np.float32)
    for fn in (rn.symlog, rn.signed_hyperbolic):
        y, y_neg = map(np.asarray, jax.jit(lambda v: (fn(v), fn(-v)))(x))  # noqa: B023
        assert np.all(np.diff(y) > 0)
        np.testing.assert_array_equal(y_neg, -y)


@MODES
def test_reward_transforms_are_stateless_and_chain(mode):
    rewards = jnp.array([-8.0, 0.0, 3.0, 99.0])
    t = rn.signed_hyperbolic_reward(eps=1e-3)
    state = t.init(rewards.shape)
    assert state == rn.EmptyState()
    out, new_state = mode(t.step)(state, rewards)
    np.testing.assert_allclose(out, np_signed_hyperbolic(np.asarray(rewards)), rtol=1e-6)
    assert new_state == state
    both = rn.chain(rn.symlog_reward(), rn.scale_reward(2.0))
    out, _ = mode(both.step)(both.init(rewards.shape), rewards)
    np.testing.assert_allclose(out, 2 * np_symlog(np.asarray(rewards)), rtol=1e-6)


def test_vmap_equals_loop():
    x = jnp.asarray(VALUES.reshape(3, 4), jnp.float32)
    batched = jax.vmap(rn.signed_parabolic)(jax.vmap(rn.signed_hyperbolic)(x))
    looped = jnp.stack([rn.signed_parabolic(rn.signed_hyperbolic(row)) for row in x])
    np.testing.assert_array_equal(batched, looped)


@pytest.mark.parametrize("eps", [-1e-3, float("nan"), float("inf"), "0.1"])
def test_bad_eps_raises(eps):
    with pytest.raises(ValueError, match="eps"):
        rn.signed_hyperbolic_reward(eps)
    with pytest.raises(ValueError, match="eps"):
        rn.signed_parabolic(1.0, eps)


@pytest.mark.parametrize("fn", [rn.symlog, rn.symexp, rn.signed_hyperbolic, rn.signed_parabolic])
def test_integer_and_bool_inputs_are_computed_in_float(fn):
    """Integer and boolean rewards (sparse 0/1 tasks) give the float values of the same numbers."""
    floats = fn(jnp.array([0.0, 1.0, 3.0, -2.0]))
    for values in (jnp.array([0, 1, 3, -2], jnp.int32), jnp.array([0, 1, 3, -2], jnp.int8)):
        out = fn(values)
        assert out.dtype == jnp.float32
        np.testing.assert_array_equal(out, floats)
    out = fn(jnp.array([False, True]))
    assert out.dtype == jnp.float32
    np.testing.assert_array_equal(out, floats[:2])
    assert fn(jnp.float16(3.0)).dtype == jnp.float16  # floating inputs keep their dtype
