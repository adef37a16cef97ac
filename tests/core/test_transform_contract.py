"""The contract every transform keeps: its own states only, any batch shape, dtype-aware checks.

Every factory of the core is listed in ``TRANSFORMS``; each test runs over all
of them, eagerly and under ``jax.jit`` (``chex.variants``). The transforms that
keep statistics where ``statistics=`` says are crossed with every placement
(``PLACEABLE``); ``KNOBS`` declares each transform's numeric hyperparameters,
options near the dtype's limits and flags, which the axes vary.
"""

import dataclasses
import functools
import itertools
from collections.abc import Callable
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import checkify

import rewardnorm_jax as rn
from rewardnorm_jax._src.core import base, state_fields
from tests.axes import HUGE, TINY, as_float32, assert_float64, outcome, refused_by_name
from tests.streams import jit_scan_steps

NORMALIZERS = {
    f"normalize_reward(decay={decay}, shared={shared}, g_max={g_max})": (
        lambda decay=decay, shared=shared, g_max=g_max: rn.normalize_reward(
            g_max=g_max, statistics=rn.Statistics(per_env=not shared, decay=decay)
        )
    )
    for decay, shared, g_max in itertools.product([None, 0.9, 0.5], [True, False], [None, 10.0])
}
TRANSFORMS = {
    **NORMALIZERS,
    "percentile_scale_reward": lambda: rn.percentile_scale_reward(rate=0.5),
    "center_reward": rn.center_reward,
    "check_finite_reward": rn.check_finite_reward,
    "clip_reward": lambda: rn.clip_reward(-1.0, 1.0),
    "scale_reward": lambda: rn.scale_reward(0.5),
    "transform_reward": lambda: rn.transform_reward(jnp.tanh),
    "symlog_reward": rn.symlog_reward,
    "signed_hyperbolic_reward": rn.signed_hyperbolic_reward,
    "chain": lambda: rn.chain(
        rn.check_finite_reward(),
        rn.normalize_reward(statistics=rn.Statistics(decay=0.9)),
        rn.clip_reward(-2.0, 2.0),
    ),
}
# Transforms whose state declares per-environment fields: rewards must have their shape.
BATCHED = [name for name, make in TRANSFORMS.items() if state_fields.batch_shape(make().init(4))]


def layout(tree):
    """Structure, shapes and dtypes, as a comparable value."""
    return jax.tree.structure(tree), [(x.shape, x.dtype) for x in jax.tree.leaves(tree)]


def floats(tree):
    return [x for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.floating)]


def checked(fn):
    """``fn`` under checkify, raising its error (check_finite_reward stages a check)."""

    def run(*args, **kwargs):
        err, out = checkify.checkify(fn)(*args, **kwargs)
        err.throw()
        return out

    return run


VARIANTS: dict[str, Callable[[Callable], Callable]] = {"eager": lambda fn: fn, "jit": jax.jit}


def call(variant, fn, *args):
    """``fn(*args)`` eagerly or under jit, its checkify error raised."""
    err, out = VARIANTS[variant](checkify.checkify(fn))(*args)
    err.throw()
    return out


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_empty_batches_pass_through_and_keep_the_state_layout(name, variant):
    transform = TRANSFORMS[name]()
    for batch_shape in [(0,), (0, 3)]:
        state = transform.init(batch_shape)
        reward = jnp.zeros(batch_shape)
        out, new_state = call(variant, transform.step, state, reward, True, False)
        assert out.shape == batch_shape
        assert layout(new_state) == layout(state)
        assert call(variant, transform.apply, state, reward).shape == batch_shape
        assert layout(call(variant, transform.update, state, reward)) == layout(state)
        # An empty batch leaves the statistics as they are (the step counter
        # of check_finite_reward still counts the step).
        chex.assert_trees_all_equal(floats(new_state), floats(state))


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_one_rule_for_batch_shape(name):
    transform = TRANSFORMS[name]()
    chex.assert_trees_all_equal_shapes_and_dtypes(transform.init(4), transform.init((4,)))
    chex.assert_trees_all_equal_shapes_and_dtypes(transform.init(np.int64(3)), transform.init([3]))
    for bad in [-1, (2, -1)]:
        with pytest.raises(ValueError, match=r"batch_shape should hold sizes >= 0, got"):
            transform.init(bad)  # type: ignore[arg-type]  # deliberately invalid
    for bad in [None, 2.0, "4", (2, None), True, (2.0,)]:
        with pytest.raises(TypeError, match=r"batch_shape should be an int or a tuple of ints"):
            transform.init(bad)  # type: ignore[arg-type]  # deliberately invalid


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", BATCHED)
def test_rewards_of_another_shape_are_refused_by_every_function(name, variant):
    transform = TRANSFORMS[name]()
    state = transform.init((4,))
    for reward in [jnp.ones((4, 1)), jnp.ones(3), jnp.ones(())]:
        for fn in (transform.apply, transform.step, transform.update):
            with pytest.raises(ValueError, match=r"reward has shape"):
                call(variant, fn, state, reward)


def test_normalize_with_a_per_environment_state_refuses_a_column_of_rewards():
    norm = rn.normalize_reward(statistics=rn.Statistics(per_env=True))
    state = norm.update(norm.init((4,)), jnp.arange(4.0))
    with pytest.raises(ValueError, match=r"reward has shape \(4, 1\) but the state was initial"):
        norm.apply(state, jnp.arange(4.0)[:, None])
    # The right shape gives one reward per environment, each scaled by its own statistics.
    expected = np.arange(4.0) / np.sqrt(np.asarray(state.stats.var) + 1e-8)
    np.testing.assert_allclose(norm.apply(state, jnp.arange(4.0)), expected, rtol=1e-6)


def run(transform, state, batch_shape, steps=3):
    rewards = jnp.arange(steps * int(np.prod(batch_shape)), dtype=jnp.float32)
    for reward in rewards.reshape(steps, *batch_shape):
        _, state = checked(transform.step)(state, reward)
    return state


@pytest.mark.parametrize(
    ("built_by", "used_by"), list(itertools.product(sorted(TRANSFORMS), repeat=2))
)
def test_a_state_of_another_configuration_is_refused_by_name(built_by, used_by):
    """Every pair: a state runs only in a transform whose init makes its exact layout."""
    state = TRANSFORMS[built_by]().init((4,))
    transform = TRANSFORMS[used_by]()
    if layout(state) == layout(transform.init((4,))):
        reference = run(transform, transform.init((4,)), (4,))
        chex.assert_trees_all_equal(run(transform, state, (4,)), reference)
        return
    for fn in (transform.apply, transform.step, transform.update):
        with pytest.raises(ValueError, match=r"does not match this"):
            checked(fn)(state, jnp.ones(4))


def test_mismatch_messages_name_the_hyperparameter():
    with pytest.raises(
        ValueError,
        match=r"statistics=Statistics\(per_env=False, components=0, num_tasks=None, "
        r"decay=None\)(.|\n)*stats/decay: the state has 0.9, this transform expects None",
    ):
        rn.normalize_reward().step(
            rn.normalize_reward(statistics=rn.Statistics(decay=0.9)).init(), 1.0
        )
    with pytest.raises(
        ValueError,
        match=r"g_max=10.0(.|\n)*ret_abs_max: the state has None, this transform expects "
        r"float32\[\]",
    ):
        rn.normalize_reward(g_max=10).step(rn.normalize_reward().init(), 1.0)
    with pytest.raises(
        ValueError,
        match=r"stats/moments: the state has float32\[4, 4\], this transform expects float32\[4\]",
    ):
        rn.normalize_reward().step(
            rn.normalize_reward(statistics=rn.Statistics(per_env=True)).init(4), jnp.ones(4)
        )
    with pytest.raises(
        ValueError, match=r"state: the state has NormalizeRewardState, this transform expects"
    ):
        rn.percentile_scale_reward().apply(rn.normalize_reward().init(), 1.0)
    chained = rn.chain(rn.clip_reward(), rn.normalize_reward())
    with pytest.raises(ValueError, match=r"1/stats/decay: the state has 0.5, this transform"):
        chained.step(
            (rn.EmptyState(), rn.normalize_reward(statistics=rn.Statistics(decay=0.5)).init()), 1.0
        )
    with jax.enable_x64(True):
        wide = rn.normalize_reward(dtype=jnp.float64).init()
    with pytest.raises(ValueError, match=r"stats/moments: the state has float64\[4\], this"):
        rn.normalize_reward(dtype=jnp.float32).update(wide, 1.0)


def test_init_stats_takes_the_same_shapes():
    chex.assert_trees_all_equal_shapes_and_dtypes(rn.init_stats(3), rn.init_stats((3,)))
    with pytest.raises(ValueError, match=r"shape should hold sizes >= 0, got shape=-2"):
        rn.init_stats(-2)
    with pytest.raises(TypeError, match=r"shape should be an int or a tuple of ints"):
        rn.init_stats(None)  # type: ignore[arg-type]  # deliberately invalid


@pytest.mark.parametrize(
    ("factory", "kwargs", "name"),
    [
        (
            rn.normalize_reward,
            {"epsilon": 1e-50, "statistics": rn.Statistics(decay=0.0)},
            "epsilon",
        ),
        (
            rn.normalize_reward,
            {"epsilon": 1e-40, "statistics": rn.Statistics(decay=0.5)},
            "epsilon",
        ),
        (rn.normalize_reward, {"epsilon": 1e39}, "epsilon"),
        (rn.normalize_reward, {"g_max": 1e-45}, "g_max"),
        (rn.normalize_reward, {"g_max": 1e39}, "g_max"),
        (rn.normalize_reward, {"semantics": rn.Semantics("s", "never", "never", 1e-50)}, "clip"),
        (rn.normalize_reward, {"statistics": rn.Statistics(decay=1.0 - 1e-9)}, "decay"),
        (rn.percentile_scale_reward, {"rate": 1e-40}, "rate"),
        (rn.percentile_scale_reward, {"limit": 1e-46}, "limit"),
        (rn.percentile_scale_reward, {"limit": 1e39}, "limit"),
    ],
)
def test_hyperparameters_must_be_normal_numbers_of_the_statistics_dtype(factory, kwargs, name):
    with pytest.raises(ValueError, match=rf"{name} should be .* float32.*got {name}="):
        factory(**kwargs)


def variance(state):
    """The running variance of a normalizer's state."""
    return state.stats.var


def test_the_epsilon_bound_holds_at_the_smallest_accepted_epsilon():
    """|r~| <= |r| / sqrt(eps) for a constant stream whose variance decays to 0."""
    tiny = float(jnp.finfo(jnp.float32).tiny)
    norm = rn.normalize_reward(gamma=0.0, epsilon=tiny, statistics=rn.Statistics(decay=0.5))
    _, (out, var) = jit_scan_steps(norm, jnp.ones(1000), record=variance)
    assert float(var[-1]) == 0.0  # the variance really reached 0: only epsilon is left
    bound = np.float32(1.0) / np.sqrt(np.float32(tiny))
    assert np.all(np.isfinite(out))
    assert np.all(np.abs(np.asarray(out)) <= bound)
    np.testing.assert_allclose(out[-1], bound, rtol=1e-6)


def test_float64_statistics_accept_what_float32_cannot_hold():
    with jax.enable_x64(True):
        norm = rn.normalize_reward(
            epsilon=1e-50, dtype=jnp.float64, statistics=rn.Statistics(decay=0.0)
        )
        out, state = norm.step(norm.init(), 1.0)
    # decay 0 forgets the prior: one sample, variance 0, so the divisor is sqrt(1e-50).
    assert float(state.stats.var) == 0.0
    np.testing.assert_allclose(out, 1e25, rtol=1e-12)


def test_factors_that_do_not_fit_the_reward_dtype_are_refused_when_traced():
    big = rn.scale_reward(1e300)  # inf in float32, fine in float64
    with pytest.raises(ValueError, match=r"scale=1e\+300 rounds to inf in float32"):
        jax.jit(big.step)(big.init(), jnp.ones(2))
    with pytest.raises(ValueError, match=r"scale=1e-300 rounds to 0.0 in float32"):
        rn.scale_reward(1e-300).apply(rn.EmptyState(), jnp.ones(2))
    with jax.enable_x64(True):
        np.testing.assert_array_equal(big.apply(big.init(), jnp.ones(2, jnp.float64)), 1e300)
    zero = rn.scale_reward(0.0)
    np.testing.assert_array_equal(zero.apply(zero.init(), jnp.ones(2)), 0.0)
    with pytest.raises(ValueError, match=r"eps=100000.0 rounds to inf in float16"):
        rn.signed_hyperbolic(jnp.ones(2, jnp.float16), 1e5)
    with pytest.raises(ValueError, match=r"eps=100000.0 rounds to inf in float16"):
        rn.signed_parabolic(jnp.ones(2, jnp.float16), 1e5)


def test_functions_that_are_not_elementwise_are_refused():
    total = rn.transform_reward(jnp.sum)
    with pytest.raises(ValueError, match=r"turns shape \(3,\) into \(\)"):
        total.step(total.init(3), jnp.ones(3))
    outer = rn.transform_reward(lambda r: r[:, None] * r)
    with pytest.raises(ValueError, match=r"turns shape \(3,\) into \(3, 3\)"):
        jax.jit(outer.apply)(outer.init(3), jnp.ones(3))


def test_statistics_functions_name_a_wrong_state():
    with pytest.raises(TypeError, match=r"stats should be a RunningStats .* got PercentileState"):
        rn.merge_stats(rn.init_percentiles(), jnp.ones(3))  # type: ignore[arg-type]  # deliberately the wrong state
    with pytest.raises(TypeError, match=r"stats should be a RunningStats .* got tuple"):
        rn.count_as_int((1, 2))  # type: ignore[arg-type]  # deliberately the wrong state
    with pytest.raises(ValueError, match="state should be a PercentileState"):
        rn.update_percentiles(rn.init_stats(), jnp.ones(3))  # type: ignore[arg-type]  # deliberately the wrong state
    with pytest.raises(ValueError, match="state should be a PercentileState"):
        rn.percentile_scale(rn.init_stats())  # type: ignore[arg-type]  # deliberately the wrong state


def test_flags_and_semantics_are_type_checked():
    with pytest.raises(TypeError, match="per_env should be a bool, got per_env='no'"):
        rn.Statistics(per_env="no")  # type: ignore[arg-type]  # deliberately not a bool
    assert rn.Statistics(per_env=np.bool_(True)).per_env is True  # type: ignore[arg-type]  # a NumPy bool
    with pytest.raises(ValueError, match="clip should be a positive number or None, got clip=-1"):
        rn.Semantics("mine", "never", "never", clip=-1.0)
    with pytest.raises(TypeError, match="freeze_stops_return should be a bool"):
        rn.Semantics("mine", "never", "never", freeze_stops_return="yes")  # type: ignore[arg-type]  # deliberately not a bool


# Every family built on a configuration: the reward transforms, and PopArt (value targets).
CONFIGURED = {
    **TRANSFORMS,
    "popart": lambda: rn.popart(0.01),
    "popart per task": lambda: rn.popart(None, num_tasks=3),
}

REGISTRY = CONFIGURED
# The entries that stand for the rest at the oldest supported versions (conftest.py): shared
# and per-environment normalizers, the other statistics, a chain and PopArt.
REPRESENTATIVES = (
    "normalize_reward(decay=None, shared=True, g_max=None)",
    "normalize_reward(decay=0.9, shared=False, g_max=10.0)",
    "center_reward",
    "chain",
    "popart per task",
)


@pytest.mark.parametrize("name", sorted(CONFIGURED))
def test_every_configuration_is_frozen_and_describes_itself(name):
    built: Any = CONFIGURED[name]()  # a RewardTransform or a PopArt
    config = built.config
    assert isinstance(config, base.Config)
    hash(config)  # a transform stays a static argument of jax.jit
    for field in dataclasses.fields(config)[:1]:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(config, field.name, None)
    assert str(config).startswith(f"{config.name}(")
    metadata = config.metadata()
    assert metadata["transform"] == config.name
    assert all(isinstance(v, (bool, int, float, str, type(None))) for v in metadata.values())
    state = built.init() if isinstance(built, rn.PopArt) else built.init((3,))
    state_fields.check_values(state)  # the initial state holds valid values
    restored = rn.load_state(state, rn.save_state(state, config), config)
    chex.assert_trees_all_equal(restored, state)


@functools.partial(jax.tree_util.register_dataclass, data_fields=["total"], meta_fields=[])
@dataclasses.dataclass
class SumState:
    """A state written by hand, registered with JAX rather than flax."""

    total: jax.Array


def test_a_chain_runs_members_written_by_hand():
    def step(
        state,
        reward,
        terminated=False,
        truncated=False,
        update_stats=True,
        *,
        active=None,
        task=None,
    ):
        new = SumState(state.total + reward)
        return jnp.asarray(reward) - new.total, new

    member = rn.RewardTransform(
        lambda batch_shape=(): SumState(jnp.zeros(batch_shape)),
        lambda state, reward, *args, **kwargs: step(state, reward)[1],
        lambda state, reward, *, task=None: jnp.asarray(reward) - state.total,
        step,
        rn.clip_reward().config,
    )
    chained = rn.chain(rn.clip_reward(-5.0, 5.0), member)
    reward, state = chained.step(chained.init((2,)), jnp.array([1.0, 2.0]))
    assert reward.tolist() == [0.0, 0.0]
    assert state[1].total.tolist() == [1.0, 2.0]


def test_a_keyed_chain_takes_ids_of_its_keyed_members_environments():
    keyed = rn.normalize_reward(statistics=rn.Statistics(num_tasks=2))
    chained = rn.chain(keyed, rn.normalize_reward(statistics=rn.Statistics(components=1)))
    ids = jnp.array([[0, 1], [1, 1], [0, 0]])  # one per reward: the keyed member has no components
    _, alone = keyed.step(keyed.init((3, 2)), jnp.ones((3, 2)), task=ids)
    reward, state = chained.step(chained.init((3, 2)), jnp.ones((3, 2)), task=ids)
    chex.assert_trees_all_equal(state[0], alone)
    assert reward.shape == (3, 2)


# Every transform that keeps statistics where ``statistics=`` says: built for each placement.
PLACEMENTS = {
    "shared": rn.Statistics(),
    "per_env": rn.Statistics(per_env=True),
    "tasks": rn.Statistics(num_tasks=3),
}
PLACEABLE = {
    "normalize_reward(decay=None, shared=True, g_max=None)": lambda statistics: rn.normalize_reward(
        statistics=statistics
    ),
    "normalize_reward(decay=0.9, shared=False, g_max=10.0)": lambda statistics: rn.normalize_reward(
        g_max=10.0, statistics=dataclasses.replace(statistics, decay=0.9)
    ),
    "center_reward": lambda statistics: rn.center_reward(statistics=statistics),
    "chain": lambda statistics: rn.chain(
        rn.check_finite_reward(),
        rn.normalize_reward(statistics=dataclasses.replace(statistics, decay=0.9)),
        rn.clip_reward(-2.0, 2.0),
    ),
}
PLACED = [
    (name, own, other, function)
    for name in sorted(PLACEABLE)
    for own, other in itertools.permutations(PLACEMENTS, 2)
    for function in ("step", "update", "apply")
]


@pytest.mark.parametrize(("name", "own", "other", "function"), PLACED)
def test_a_state_of_another_placement_is_refused_naming_the_state(name, own, other, function):
    """Shared, per-environment and per-task states, each refused by the others' functions."""
    transform = PLACEABLE[name](PLACEMENTS[own])
    state = PLACEABLE[name](PLACEMENTS[other]).init((4,))
    task = {"task": jnp.array([0, 1, 2, 0])} if own == "tasks" else {}
    with pytest.raises(ValueError, match=r"state(.|\n)*statistics="):
        checked(getattr(transform, function))(state, jnp.ones(4), **task)


@dataclasses.dataclass(frozen=True)
class Knobs:
    """A configured transform's hyperparameters, as the axes vary them.

    ``build(**options)`` gives the transform with ``options`` in place of its own;
    ``hyperparameters`` are its numeric ones (name: a valid value), ``near_limits``
    option sets near the dtype's limits, ``flags`` its boolean options.
    """

    build: Any
    hyperparameters: dict[str, Any]
    near_limits: tuple[dict[str, Any], ...] = ()
    flags: tuple[str, ...] = ()


def configured(factory, **own):
    return lambda **options: factory(**{**own, **options})


REWARD_NEAR = ({"gamma": TINY}, {"epsilon": TINY}, {"epsilon": HUGE})
KNOBS = {
    "normalize_reward(decay=None, shared=True, g_max=None)": Knobs(
        rn.normalize_reward, {"gamma": 0.99, "epsilon": 1e-8}, REWARD_NEAR, ("finite_rewards",)
    ),
    "normalize_reward(decay=0.9, shared=False, g_max=10.0)": Knobs(
        configured(
            rn.normalize_reward, g_max=10.0, statistics=rn.Statistics(per_env=True, decay=0.9)
        ),
        {"gamma": 0.99, "epsilon": 1e-8, "g_max": 10.0},
        (*REWARD_NEAR, {"g_max": TINY}, {"g_max": HUGE}),
        ("finite_rewards",),
    ),
    "percentile_scale_reward": Knobs(
        configured(rn.percentile_scale_reward, rate=0.5),
        {"gamma": 0.99, "rate": 0.5, "low": 5.0, "high": 95.0, "limit": 1.0},
        (
            {"gamma": TINY},
            {"rate": TINY},
            {"low": 0.0, "high": 100.0},
            {"low": TINY, "high": 100.0 - 1e-5},
            {"limit": TINY},
            {"limit": HUGE},
        ),
    ),
    "clip_reward": Knobs(
        configured(rn.clip_reward, low=-1.0, high=1.0),
        {"low": -1.0, "high": 1.0},
        ({"low": -HUGE, "high": HUGE}, {"low": -TINY, "high": TINY}),
    ),
    "scale_reward": Knobs(
        configured(rn.scale_reward, scale=0.5), {"scale": 0.5}, ({"scale": HUGE}, {"scale": TINY})
    ),
    "signed_hyperbolic_reward": Knobs(
        rn.signed_hyperbolic_reward, {"eps": 1e-3}, ({"eps": TINY}, {"eps": HUGE})
    ),
    "popart per task": Knobs(
        configured(rn.popart, step_size=None, num_tasks=3),
        {"scale_lb": 1e-5, "scale_ub": 1e5},
        ({"scale_lb": TINY}, {"scale_ub": HUGE}),
    ),
}
REWARDS = np.array([[1.0, -2.0, 30.0, 0.5], [4.0, 0.0, -1.0, 2.0], [3.0, 5.0, -7.0, 1.0]])


def stream(transform, dtype):
    """The outputs of three steps over 4 environments (PopArt: its normalized targets)."""
    if isinstance(transform, rn.PopArt):
        state, task = transform.init(), jnp.array([0, 1, 2, 0])
        outs = []
        for targets in REWARDS.astype(dtype):
            state = transform.update(state, targets, task)
            outs.append(transform.normalize(state, targets, task))
        return outs
    state, outs = transform.init((4,)), []
    for rewards in REWARDS.astype(dtype):
        out, state = transform.step(state, rewards)
        outs.append(out)
    return outs


def jitted_stream(transform, dtype):
    """``stream`` under jit: the transform's options are the program's constants."""
    return jax.jit(lambda: stream(transform, dtype))()


@pytest.mark.parametrize(
    ("name", "options"),
    [(name, options) for name in sorted(KNOBS) for options in KNOBS[name].near_limits],
    ids=str,
)
def test_options_near_the_dtype_limits_give_the_float64_numbers_or_an_error_naming_them(
    name, options
):
    """Float32 against the same options in float64 (x64), each stream one program."""
    knobs, options = KNOBS[name], as_float32(options)
    out, error = outcome(lambda: jitted_stream(knobs.build(**options), np.float32))
    if error is not None:
        assert refused_by_name(error, options), error
        return
    with jax.enable_x64(True):
        want = jitted_stream(knobs.build(**options), np.float64)
    assert_float64(out, want, rtol=1e-4)


@pytest.mark.parametrize(
    ("name", "hyperparameter"),
    [(name, key) for name in sorted(KNOBS) for key in KNOBS[name].hyperparameters],
)
def test_a_traced_hyperparameter_works_or_is_refused_by_name(name, hyperparameter):
    knobs = KNOBS[name]
    valid = knobs.hyperparameters[hyperparameter]

    def outputs(value):
        return stream(knobs.build(**{hyperparameter: value}), np.float32)

    got, error = outcome(jax.jit(outputs), jnp.asarray(valid))
    if error is not None:
        assert refused_by_name(error, [hyperparameter]), error
        return
    chex.assert_trees_all_close(got, outputs(valid), rtol=1e-6)


@pytest.mark.parametrize("value", ["no", 1], ids=["str", "int"])
@pytest.mark.parametrize(
    ("name", "flag"), [(name, flag) for name in sorted(KNOBS) for flag in KNOBS[name].flags]
)
def test_a_flag_that_is_not_a_bool_is_a_type_error_naming_it(name, flag, value):
    with pytest.raises(TypeError, match=rf"\b{flag}\b"):
        KNOBS[name].build(**{flag: value})
