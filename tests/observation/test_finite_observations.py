"""``normalize_observation(..., finite_observations=True)``: the promise of finite observations.

The option drops the non-finite mask, its count and the shift search from the
merge. On finite observations it computes what the default computes, so its
error against a float64 NumPy reference stays within the default's bound, the
one :doc:`/observations` states (:math:`10^{-4}` standard deviations).
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rewardnorm_jax as rn
from tests.observation_reference import BraxReference, GymnasiumReference

NUM_ENVS, STEPS = 32, 40
# Features of scales 1e-3..1e2 and offsets up to 1e3 (spread 0.1 at mean 1e3: where a
# one-word float32 mean would be off by 3e-4 standard deviations).
SCALE = np.array([0.5, 3.0, 100.0, 1e-3, 1.0, 0.1])
OFFSET = np.array([0.0, 5.0, -50.0, 1.0, 0.0, 1e3])
DIM = SCALE.size
STATED_ERROR = 1e-4  # in standard deviations: the bound docs/observations.md states


def observations(seed=0, steps=STEPS, num_envs=NUM_ENVS):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((steps, num_envs, DIM)) * SCALE + OFFSET).astype(np.float32)


def run(norm, batches, jit=True, **step_options):
    state = norm.init(jnp.zeros(DIM))
    step = jax.jit(norm.step) if jit else norm.step
    outputs = []
    for batch in batches:
        out, state = step(state, batch, **step_options)
        outputs.append(np.asarray(out, np.float64))
    return np.stack(outputs), state


def run_from(state, step, batches):
    """The outputs of ``step`` over ``batches`` from ``state``."""
    outputs = []
    for batch in batches:
        out, state = step(state, batch)
        outputs.append(np.asarray(out))
    return np.stack(outputs)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("preset", ["gymnasium", "brax"])
def test_error_within_the_stated_bound_of_a_float64_reference(preset, jit):
    batches = observations(seed=1)
    outputs, state = run(rn.normalize_observation(preset, finite_observations=True), batches, jit)
    reference: BraxReference | GymnasiumReference
    if preset == "brax":  # normalize with the statistics from before the update
        reference = brax = BraxReference(DIM)
        expected = []
        for batch in batches:
            expected.append(brax.normalize(batch))
            brax.update(batch)
    else:
        reference = gymnasium = GymnasiumReference(DIM)
        expected = [gymnasium.step(batch) for batch in batches]
    error = np.abs(outputs - np.stack(expected)).max()  # the outputs are in std units
    assert error < STATED_ERROR, error
    assert (rn.count_as_int(state.stats) == STEPS * NUM_ENVS).all()
    mean = np.asarray(state.stats.mean, np.float64) + np.asarray(state.stats.mean_low, np.float64)
    assert (np.abs(mean - reference.mean) / SCALE < 1e-6).all()  # in standard deviations


@pytest.mark.parametrize("num_envs", [1, 64, 2048])
@pytest.mark.parametrize("preset", ["gymnasium", "brax"])
def test_finite_observations_compute_what_the_default_computes(preset, num_envs):
    batches = observations(seed=2, steps=6, num_envs=num_envs)
    default, default_state = run(rn.normalize_observation(preset), batches)
    finite, finite_state = run(rn.normalize_observation(preset, finite_observations=True), batches)
    np.testing.assert_allclose(finite, default, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(finite_state.stats.count_words, default_state.stats.count_words)
    np.testing.assert_allclose(finite_state.stats.moments, default_state.stats.moments, rtol=1e-6)


def test_active_weights_tasks_and_per_env_statistics_still_select():
    batches = observations(seed=3, steps=4, num_envs=8)
    active = np.arange(8) % 3 != 0
    weights = np.linspace(0.0, 2.0, 8).astype(np.float32)
    task = np.arange(8) % 2
    cases: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({}, {"active": active}),
        ({}, {"weights": weights}),
        ({"statistics": rn.Statistics(num_tasks=2)}, {"task": task}),
    ]
    for options, step_options in cases:
        default, _ = run(rn.normalize_observation("brax", **options), batches, **step_options)
        finite, _ = run(
            rn.normalize_observation("brax", finite_observations=True, **options),
            batches,
            **step_options,
        )
        np.testing.assert_allclose(finite, default, rtol=1e-6, atol=1e-6, err_msg=str(options))
    per_env = rn.Statistics(per_env=True)
    outputs = {}
    for finite_observations in (False, True):
        norm = rn.normalize_observation(
            "gymnasium", statistics=per_env, finite_observations=finite_observations
        )
        state = norm.init(jnp.zeros(DIM), batch_shape=(8,))
        outputs[finite_observations] = run_from(state, jax.jit(norm.step), batches)
    np.testing.assert_allclose(outputs[True], outputs[False], rtol=1e-6, atol=1e-6)


def test_a_non_finite_entry_saturates_only_its_feature():
    """The promise broken: its feature's variance becomes +inf, the others are unaffected."""
    batches = observations(seed=4, steps=3, num_envs=8)
    batches[1, 2, 0] = np.nan
    norm = rn.normalize_observation("gymnasium", finite_observations=True)
    _, state = run(norm, batches)
    assert np.isinf(state.stats.var[0])
    assert np.isfinite(state.stats.mean[0])  # the mean keeps its value
    assert np.isfinite(state.stats.var[1:]).all()
    default_state = run(rn.normalize_observation("gymnasium"), batches)[1]
    np.testing.assert_allclose(state.stats.var[1:], default_state.stats.var[1:], rtol=1e-6)


def test_the_option_is_checked_and_checkpointed():
    bad: tuple[Any, ...] = ("yes", 1, None)
    for value in bad:
        with pytest.raises(TypeError, match=rf"finite_observations.*{value!r}"):
            rn.normalize_observation(finite_observations=value)
    norm = rn.normalize_observation("sb3", finite_observations=True)
    assert norm.config.finite_observations is True
    assert norm.config.metadata()["finite_observations"] is True
    state = norm.step(norm.init(jnp.zeros(DIM)), observations(steps=1)[0])[1]
    data = rn.save_state(state, norm.config)
    restored = rn.load_state(norm.init(jnp.zeros(DIM)), data, norm.config)
    jax.tree.map(np.testing.assert_array_equal, restored, state)
    with pytest.raises(ValueError, match="finite_observations"):
        rn.load_state(state, data, rn.normalize_observation("sb3").config)


@pytest.mark.parametrize("finite_observations", [False, True])
@pytest.mark.parametrize("preset", ["gymnasium", "brax"])
def test_wide_observations_normalize_as_the_fused_form_does(
    preset, finite_observations, monkeypatch
):
    """From 32 features the mean's words and the divisor are computed apart: same numbers."""
    from rewardnorm_jax._src.observation import normalizer

    wide = 40
    rng = np.random.default_rng(5)
    batches = (rng.standard_normal((4, 16, wide)) * 3.0 + 100.0).astype(np.float32)
    norm = rn.normalize_observation(preset, finite_observations=finite_observations)

    def scan(batches):
        def body(state, batch):
            out, state = norm.step(state, batch)
            return state, (out, norm.denormalize(state, out))

        return jax.lax.scan(body, norm.init(jnp.zeros(wide)), batches)

    apart = jax.jit(scan)(batches)
    monkeypatch.setattr(normalizer, "_ONCE_FROM", 10**9)
    fused = jax.jit(scan)(batches)  # traced anew: the words fused into the loop
    jax.tree.map(np.testing.assert_array_equal, apart, fused)
    monkeypatch.undo()
    state = apart[0]
    gradient = jax.grad(lambda x: norm.apply(state, x).sum())(jnp.asarray(batches[0]))
    assert np.isfinite(gradient).all()
    exported = jax.export.export(jax.jit(norm.apply))(
        state, jax.ShapeDtypeStruct(jax.export.symbolic_shape(f"b, {wide}"), jnp.float32)
    )
    np.testing.assert_array_equal(exported.call(state, batches[1]), norm.apply(state, batches[1]))
