"""PopArt: statistics against rlax and a float64 reference, preserved outputs, the contract."""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax
from flax import nnx
from flax.core import FrozenDict

import rewardnorm_jax as rn


def random_batches(seed, updates, batch, num_tasks):
    """Targets of task-dependent scales, and each one's task."""
    rng = np.random.default_rng(seed)
    tasks = rng.integers(0, num_tasks, (updates, batch))
    scales = 10.0 ** np.linspace(-1, 2, num_tasks)
    targets = rng.normal(1.0, 1.0, (updates, batch)) * scales[tasks] + scales[tasks]
    return targets.astype(np.float32), tasks


def reference(targets, tasks, num_tasks, step_size, scale_lb, scale_ub):
    """The PopArt recurrence of rlax in float64 NumPy: (shift, second moment, scale) at the end."""
    shift, second = np.zeros(num_tasks), np.ones(num_tasks)
    for x, k in zip(np.asarray(targets, np.float64), tasks, strict=True):
        shift_update = np.zeros(num_tasks)
        second_update = np.zeros(num_tasks)
        np.add.at(shift_update, k, step_size * (x - shift[k]))
        np.add.at(second_update, k, step_size * (x * x - second[k]))
        shift, second = shift + shift_update, second + second_update
    scale = np.sqrt(np.clip(second - shift**2, scale_lb**2, scale_ub**2))
    return shift, second, scale


def relative_error(found, expected):
    found, expected = np.asarray(found, np.float64), np.asarray(expected, np.float64)
    return np.max(np.abs(found - expected) / np.maximum(np.abs(expected), 1.0))


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_statistics_and_rescaled_parameters_match_rlax(jit):
    """Each update from the same parameters: ours and rlax's rescaled layers agree to 1e-6.

    The statistics are compared as they run; the parameters from the same
    layer each update, since rescaling them 60 times compounds each side's own
    float32 rounding.
    """
    num_tasks, step_size, bounds = 4, 1e-2, (1e-4, 1e4)
    pa = rn.popart(step_size, scale_lb=bounds[0], scale_ub=bounds[1], num_tasks=num_tasks)
    rlax_init, rlax_update = rlax.popart(num_tasks, step_size, *bounds)
    step = jax.jit(pa.step) if jit else pa.step
    rng = np.random.default_rng(1)
    ours = {"kernel": jnp.asarray(rng.normal(size=(8, num_tasks)), jnp.float32)}
    ours["bias"] = jnp.asarray(rng.normal(size=num_tasks), jnp.float32)
    state, rlax_state = pa.init(), rlax_init()
    targets, tasks = random_batches(0, 60, 32, num_tasks)
    for x, k in zip(targets, tasks, strict=True):
        theirs, rlax_state = rlax_update(
            {"w": ours["kernel"], "b": ours["bias"]}, rlax_state, jnp.asarray(x), jnp.asarray(k)
        )
        ours, state = step(ours, state, x, k)
        assert relative_error(state.shift, rlax_state.shift) <= 1e-6
        assert relative_error(state.second_moment, rlax_state.second_moment) <= 1e-6
        assert relative_error(state.scale, rlax_state.scale) <= 1e-6
        assert relative_error(ours["kernel"], theirs["w"]) <= 1e-6
        assert relative_error(ours["bias"], theirs["b"]) <= 1e-6
    assert np.all(rn.count_as_int(state.stats) == np.bincount(tasks.ravel(), minlength=num_tasks))


def test_one_shared_scale_matches_rlax_example_form():
    r"""As rlax's example: one output's statistics for every action value, a scalar target.

    Targets of mean 1e4 and spread 3e3: rlax's float32 scale, the square root
    of :math:`\nu - \mu^2` with :math:`\nu \approx 10^8`, carries errors of
    about 1e-6 itself, so ours (float32) is held to rlax's run in float64.
    """
    pa = rn.popart(3e-3, scale_lb=1e-5, scale_ub=1e5)
    layer = {"kernel": jnp.ones((5, 3)), "bias": jnp.arange(3.0)}
    state, step = pa.init(), jax.jit(pa.step)
    targets = np.random.default_rng(2).normal(1e4, 3e3, 200).astype(np.float32)
    for target in targets:
        layer, state = step(layer, state, target)
    with jax.enable_x64(True):
        rlax_init, rlax_update = rlax.popart(1, 3e-3, 1e-5, 1e5)
        rlax_update = jax.jit(rlax_update)
        theirs = {"w": jnp.ones((5, 3), jnp.float64), "b": jnp.arange(3.0, dtype=jnp.float64)}
        rlax_state = rlax_init()
        for target in targets.astype(np.float64):
            theirs, rlax_state = rlax_update(theirs, rlax_state, jnp.asarray(target), jnp.array(0))
    assert relative_error(state.shift, rlax_state.shift[0]) <= 1e-6
    assert relative_error(state.scale, rlax_state.scale[0]) <= 1e-6
    assert relative_error(layer["kernel"], theirs["w"]) <= 1e-6
    assert relative_error(layer["bias"], theirs["b"]) <= 1e-6


def test_float64_statistics_follow_the_recurrence_to_1e_10():
    num_tasks, step_size, bounds = 3, 5e-3, (1e-3, 1e3)
    targets, tasks = random_batches(3, 100, 64, num_tasks)
    with jax.enable_x64(True):
        pa = rn.popart(step_size, scale_lb=bounds[0], scale_ub=bounds[1], num_tasks=num_tasks)
        state = pa.init()
        update = jax.jit(pa.update)
        for x, k in zip(targets, tasks, strict=True):
            state = update(state, x.astype(np.float64), k)
        shift, second, scale = reference(targets, tasks, num_tasks, step_size, *bounds)
        assert relative_error(state.shift, shift) <= 1e-10
        assert relative_error(state.second_moment, second) <= 1e-10
        assert relative_error(state.scale, scale) <= 1e-10


def test_cumulative_statistics_are_the_mean_and_variance_of_every_target():
    targets, tasks = random_batches(4, 20, 50, 2)
    pa = rn.popart(None, num_tasks=2)
    state = pa.init()
    for x, k in zip(targets, tasks, strict=True):
        state = pa.update(state, x, k)
    for task in range(2):
        values = targets[tasks == task].astype(np.float64)
        total = len(values) + rn.PRIOR_COUNT  # the prior: mean 0, variance 1, weight 1e-4
        mean = values.sum() / total
        var = (np.sum((values - mean) ** 2) + rn.PRIOR_COUNT * (1 + mean**2)) / total
        assert relative_error(state.shift[task], mean) <= 1e-6
        assert relative_error(state.scale[task] ** 2, var) <= 1e-6
    assert rn.count_as_int(state.stats).sum() == targets.size


def test_a_mean_large_against_the_spread_keeps_the_scale():
    """Mean 1e4, spread 1, the prior faded: M keeps the scale where nu - mu^2 loses it.

    Each float32 running mean rounds to about 5e-4 at 1e4, which bounds the
    scale's error near 1e-4; the second moment minus the squared mean, rlax's
    formula, cancels every digit of a variance 1e8 times smaller than nu.
    """
    step_size, updates = 0.05, 1000  # the prior's weight (1 - 0.05)^1000 ~ 5e-23
    rng = np.random.default_rng(5)
    targets = np.float32(1e4) + rng.normal(0, 1, (updates, 1)).astype(np.float32)
    pa = rn.popart(step_size)
    state, update = pa.init(), jax.jit(pa.update)
    shift, second = np.float32(0.0), np.float32(1.0)
    for x in targets:
        state = update(state, x)
        shift += np.float32(step_size) * (x[0] - shift)  # rlax's recurrence in float32
        second += np.float32(step_size) * (x[0] * x[0] - second)
    _, _, expected = reference(targets, np.zeros(targets.shape, int), 1, step_size, 1e-5, 1e5)
    assert relative_error(state.scale, expected[0]) <= 2e-4
    naive = np.sqrt(np.maximum(second - shift * shift, np.float32(1e-10)))
    assert relative_error(naive, expected[0]) >= 0.5


class ValueHead(nn.Module):
    outputs: int
    param_dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, h):
        hidden = nn.tanh(nn.Dense(16, param_dtype=self.param_dtype, dtype=self.param_dtype)(h))
        return nn.Dense(
            self.outputs, name="value", param_dtype=self.param_dtype, dtype=self.param_dtype
        )(hidden)


def preserved_output_errors(dtype):
    """Largest errors of a linen head's outputs over 30 updates, as (normalized, unnormalized).

    Normalized: the head's new output against the old unnormalized value
    renormalized by the new statistics (in float64), relative to its size
    (at least 1), in the units the head emits. Unnormalized: the value before
    and after, relative to its size (at least 1).
    """
    num_tasks, outputs = 3, jnp.arange(3)
    pa = rn.popart(1e-2, num_tasks=num_tasks, dtype=dtype)
    model = ValueHead(num_tasks, param_dtype=dtype)
    h = jax.random.normal(jax.random.PRNGKey(0), (10, 4), dtype)
    params = model.init(jax.random.PRNGKey(1), h)
    state, step = pa.init(), jax.jit(pa.step)
    targets, tasks = random_batches(6, 30, 20, num_tasks)
    normalized_error = unnormalized_error = 0.0
    for x, k in zip(targets, tasks, strict=True):
        old_output = jnp.asarray(model.apply(params, h))
        before = pa.unnormalize(state, old_output, outputs)
        head, new_state = step(params["params"]["value"], state, x.astype(dtype), k)
        assert not np.allclose(new_state.shift, state.shift)  # the statistics moved
        params = {"params": {**params["params"], "value": head}}
        new_output = jnp.asarray(model.apply(params, h))
        after = pa.unnormalize(new_state, new_output, outputs)
        value = np.asarray(old_output, np.float64) * np.asarray(state.scale, np.float64)
        value += np.asarray(state.shift, np.float64)
        renormalized = (value - np.asarray(new_state.shift, np.float64)) / np.asarray(
            new_state.scale, np.float64
        )
        normalized_error = max(normalized_error, relative_error(new_output, renormalized))
        unnormalized_error = max(unnormalized_error, relative_error(after, before))
        state = new_state
    return normalized_error, unnormalized_error


def test_linen_dense_outputs_are_preserved():
    normalized_error, _ = preserved_output_errors(jnp.float32)
    assert normalized_error <= 1e-6  # float32 rounding of the head's own matmul
    with jax.enable_x64(True):
        normalized_error, unnormalized_error = preserved_output_errors(jnp.float64)
    assert normalized_error <= 1e-12
    assert unnormalized_error <= 1e-12


def test_frozen_dict_and_nnx_state_keep_their_types_and_outputs():
    pa = rn.popart(0.05)
    old = pa.init()
    new = pa.update(old, jnp.array([30.0, -4.0, 12.0]))
    linear = nnx.Linear(4, 2, rngs=nnx.Rngs(0))
    h = jnp.linspace(-1.0, 1.0, 12).reshape(3, 4)
    before = pa.unnormalize(old, linear(h))
    layer = nnx.state(linear, nnx.Param)
    nnx.update(linear, rn.preserve_outputs(layer, old, new))
    assert relative_error(pa.unnormalize(new, linear(h)), before) <= 1e-6

    frozen: FrozenDict = FrozenDict({"kernel": jnp.ones((4, 2)), "bias": jnp.ones(2)})
    rescaled = rn.preserve_outputs(frozen, old, new)
    assert isinstance(rescaled, FrozenDict)
    np.testing.assert_allclose(rescaled["kernel"], old.scale / new.scale, rtol=1e-6)


def test_normalize_and_unnormalize_are_inverse_per_task():
    pa = rn.popart(0.01, num_tasks=2)
    state = pa.update(pa.init(), jnp.array([1.0, 2.0, 300.0, 500.0]), jnp.array([0, 0, 1, 1]))
    values, tasks = jnp.array([5.0, 5.0]), jnp.array([0, 1])
    normalized = pa.normalize(state, values, tasks)
    np.testing.assert_allclose(pa.unnormalize(state, normalized, tasks), values, rtol=1e-6)
    expected = (values - state.shift[tasks]) / state.scale[tasks]
    np.testing.assert_allclose(normalized, expected, rtol=1e-6)


def test_freezing_leaves_state_and_layer_bit_for_bit():
    pa = rn.popart(0.1)
    state = pa.update(pa.init(), jnp.array([3.0, 4.0]))
    layer = {"kernel": jnp.full((2, 1), 0.3), "bias": jnp.full((1,), 0.7)}
    for flag in (False, jnp.bool_(False)):
        step = jax.jit(pa.step)
        new_layer, frozen = step(layer, state, jnp.array([100.0, 200.0]), update_stats=flag)
        assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.all(a == b)), frozen, state))
        np.testing.assert_array_equal(new_layer["kernel"], layer["kernel"])
        np.testing.assert_array_equal(new_layer["bias"], layer["bias"])
    masked = pa.update(state, jnp.array([3.0, 1e9]), mask=jnp.array([True, False]))
    np.testing.assert_allclose(masked.shift, pa.update(state, jnp.array([3.0])).shift)


def test_merge_across_a_named_vmap_axis_equals_one_batch():
    pa_shared = rn.popart(1e-3, num_tasks=3, axis_name="shards")
    pa_alone = rn.popart(1e-3, num_tasks=3)
    targets, tasks = random_batches(7, 1, 64, 3)
    targets, tasks = jnp.asarray(targets[0]), jnp.asarray(tasks[0])
    states = jax.vmap(lambda x, k: pa_shared.update(pa_shared.init(), x, k), axis_name="shards")(
        targets.reshape(4, 16), tasks.reshape(4, 16)
    )
    alone = pa_alone.update(pa_alone.init(), targets, tasks)
    for shard in range(4):
        np.testing.assert_allclose(states.shift[shard], alone.shift, rtol=1e-6)
        np.testing.assert_allclose(states.scale[shard], alone.scale, rtol=1e-6)


def test_under_scan_the_state_keeps_its_layout():
    pa = rn.popart(1e-2)
    targets = jnp.asarray(np.random.default_rng(8).normal(5.0, 2.0, (50, 8)), jnp.float32)

    def body(state, x):
        return pa.update(state, x), None

    scanned, _ = jax.lax.scan(body, pa.init(), targets)
    looped, update = pa.init(), jax.jit(pa.update)
    for x in targets:
        looped = update(looped, x)
    np.testing.assert_allclose(scanned.shift, looped.shift, rtol=1e-6)


def test_out_of_range_task_under_jit_joins_nothing_and_normalizes_to_nan():
    pa = rn.popart(0.1, num_tasks=2)
    state = jax.jit(pa.update)(pa.init(), jnp.array([5.0, 7.0]), jnp.array([0, 9]))
    assert rn.count_as_int(state.stats).tolist() == [1, 0]
    np.testing.assert_allclose(state.shift, [0.5, 0.0], rtol=1e-6)
    normalized = jax.jit(pa.normalize)(state, jnp.array([1.0, 1.0]), jnp.array([1, -3]))
    assert np.isfinite(normalized[0])
    assert np.isnan(normalized[1])


def test_checkpoint_round_trip_and_refusal_by_name():
    pa = rn.popart(0.01, num_tasks=2)
    state = pa.update(pa.init(), jnp.array([3.0, 9.0, 27.0]), jnp.array([0, 1, 1]))
    data = rn.save_state(state, pa.config)
    restored = rn.load_state(pa.init(), data, pa.config)
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.all(a == b)), restored, state))
    other = rn.popart(0.02, num_tasks=2)
    with pytest.raises(ValueError, match=r"static field 'stats/step_size': checkpoint has 0\.01"):
        rn.load_state(other.init(), data, other.config)
    crafted = rn.load_state  # a state whose second moment went negative is no reachable state
    bad = state.replace(stats=state.stats.replace(moments=state.stats.moments.at[0, 2].set(-1.0)))
    with pytest.raises(ValueError, match=r"state.stats.m2 holds -1.0"):
        crafted(pa.init(), rn.save_state(bad, pa.config), pa.config)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"step_size": 0.0}, "step_size should be"),
        ({"step_size": 1.5}, r"step_size should be in the interval \(0, 1\]"),
        ({"step_size": "0.1"}, "step_size"),
        ({"scale_lb": 0.0}, "scale_lb"),
        ({"scale_lb": 2.0, "scale_ub": 1.0}, r"scale_ub should be >= scale_lb, got scale_lb=2.0"),
        ({"num_tasks": 0}, "num_tasks"),
    ],
)
def test_bad_hyperparameters_name_the_parameter(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        rn.popart(**{"step_size": 0.1, **kwargs})


def test_bad_inputs_name_what_is_wrong():
    keyed, shared = rn.popart(0.01, num_tasks=2), rn.popart(0.01)
    with pytest.raises(ValueError, match=r"needs each target's task"):
        keyed.update(keyed.init(), jnp.ones(3))
    with pytest.raises(ValueError, match=r"num_tasks=None"):
        shared.update(shared.init(), jnp.ones(3), jnp.zeros(3, int))
    with pytest.raises(TypeError, match=r"task should be integer ids in \[0, 2\), one per target"):
        keyed.update(keyed.init(), jnp.ones(3), jnp.zeros(3))
    with pytest.raises(ValueError, match=r"task has shape \(2,\); expected \(3,\)"):
        keyed.update(keyed.init(), jnp.ones(3), jnp.zeros(2, int))
    with pytest.raises(ValueError, match=r"task ids should be in \[0, 2\).*\[5\]"):
        keyed.update(keyed.init(), jnp.ones(3), jnp.array([0, 5, 1]))
    with pytest.raises(TypeError, match="targets"):
        shared.update(shared.init(), jnp.ones(3, jnp.complex64))
    with pytest.raises(ValueError, match=r"mask has shape \(2,\)"):
        shared.update(shared.init(), jnp.ones(3), mask=jnp.ones(2, bool))
    with pytest.raises(ValueError, match=r"share 1.28 > 1 .* step_size <= 1/128"):
        shared.update(shared.init(), jnp.ones(128))
    with pytest.raises(
        ValueError, match=r"step_size=0.02(.|\n)*stats/step_size: the state has 0.01"
    ):
        rn.popart(0.02).update(shared.init(), jnp.ones(3))
    with pytest.raises(ValueError, match=r"does not match this transform, popart\("):
        shared.update(keyed.init(), jnp.ones(3))
    with pytest.raises(ValueError, match=r"mapping with 'kernel' and 'bias'.*\['kernel'\]"):
        rn.preserve_outputs({"kernel": jnp.ones((2, 1))}, shared.init(), shared.init())


def test_old_checkpoints_without_step_size_load_as_before():
    """States saved before fixed-step statistics have no static step_size: it means None."""
    from flax import serialization

    norm = rn.normalize_reward()
    state = norm.update(norm.init((2,)), jnp.array([1.0, 2.0]))
    envelope = serialization.msgpack_restore(rn.save_state(state, norm.config))
    record = serialization.msgpack_restore(envelope["body"])
    assert record["static"].pop("stats/step_size") is None
    body = serialization.msgpack_serialize(record)
    import zlib

    old = serialization.msgpack_serialize({**envelope, "body": body, "crc32": zlib.crc32(body)})
    restored = rn.load_state(norm.init((2,)), old, norm.config)
    np.testing.assert_array_equal(restored.stats.moments, state.stats.moments)


def test_non_finite_targets_are_left_out():
    pa = rn.popart(0.1)
    state = pa.update(pa.init(), jnp.array([1.0, jnp.nan, 3.0, jnp.inf, -jnp.inf]))
    expected = pa.update(pa.init(), jnp.array([1.0, 3.0]))
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.all(a == b)), state, expected))
    assert rn.count_as_int(state.stats) == 2


def test_saturated_statistics_stay_finite_in_the_scale():
    """Targets past the fixed-step range saturate M at +inf: the scale is scale_ub, not NaN."""
    pa = rn.popart(0.01, scale_ub=1e30)
    spread = np.random.default_rng(9).normal(0.0, 3e18, 100).astype(np.float32)
    state = pa.update(pa.update(pa.init(), spread), spread)
    assert float(state.scale) == np.float32(1e30)
    assert np.isfinite(float(state.shift))


def test_bounds_hold_where_their_squares_leave_the_dtype():
    tiny, huge = rn.popart(1.0, scale_lb=1e-20), rn.popart(0.5, scale_ub=1e30)
    assert float(tiny.update(tiny.init(), jnp.array([7.0])).scale) == np.float32(1e-20)
    wide = huge.update(huge.init(), jnp.array([-1e18, 1e18]) * 0.5)
    np.testing.assert_allclose(wide.scale, 5e17, rtol=1e-6)


def test_a_float32_step_size_of_one_third_fits_three_targets():
    pa = rn.popart(np.float32(1 / 3))
    state = pa.update(pa.init(), jnp.array([3.0, 6.0, 9.0]))
    np.testing.assert_allclose(state.shift, 6.0, rtol=1e-6)


def test_layers_that_do_not_fit_the_statistics_are_refused():
    pa = rn.popart(0.1, num_tasks=3)
    old = pa.init()
    new = pa.update(old, jnp.arange(3.0), jnp.arange(3))
    with pytest.raises(ValueError, match=r"kernel \(4, 1\) and bias \(1,\); with num_tasks=3"):
        rn.preserve_outputs({"kernel": jnp.ones((4, 1)), "bias": jnp.zeros(1)}, old, new)
    layer = {"kernel": jnp.ones((4, 3), jnp.int32), "bias": jnp.ones(3, jnp.int32)}
    with pytest.raises(TypeError, match=r"layer\['kernel'\] has dtype int32"):
        rn.preserve_outputs(layer, old, new)


def test_no_gradient_reaches_the_statistics_through_normalize():
    pa = rn.popart(0.1)
    state = pa.update(pa.init(), jnp.array([5.0, 9.0]))

    def loss(state, prediction):
        return jnp.sum(jnp.square(prediction - pa.normalize(state, jnp.array([7.0]))))

    grad = jax.grad(loss, argnums=(0, 1), allow_int=True)
    state_grad, prediction_grad = grad(state, jnp.array([0.5]))
    assert float(jnp.max(jnp.abs(state_grad.stats.moments))) == 0.0
    assert float(prediction_grad[0]) != 0.0


def test_preserve_outputs_names_a_layer_it_cannot_rescale():
    pa = rn.popart(0.1)
    state = pa.init()
    nested = {"kernel": {"a": jnp.ones((2, 1)), "b": jnp.ones((2, 1))}, "bias": jnp.zeros(1)}
    with pytest.raises(ValueError, match=r"layer\['kernel'\] should be one array.*2 arrays"):
        rn.preserve_outputs(nested, state, state)
    layer = {"kernel": jnp.ones((2, 1)), "bias": jnp.zeros(1)}
    not_a_state: Any = {}  # what a caller passes by mistake
    with pytest.raises(TypeError, match="new should be a PopArtState, got dict"):
        rn.preserve_outputs(layer, state, not_a_state)
