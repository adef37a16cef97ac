"""normalize_reward: golden numbers, the three semantics, freeze, masks, transformations."""

import dataclasses
import functools

import chex
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import serialization
from hypothesis import given, settings
from hypothesis import strategies as st

import rewardnorm_jax as rn
from tests import reference
from tests.streams import scan_steps

SEMANTICS = ["gymnasium", "sb3", "purejaxrl", "gymnasium_same_step"]


def ret_of(state):
    """The tracked return of a normalizer's state."""
    return state.ret


@functools.partial(jax.jit, static_argnames=("transform",))
def run_stream(transform, rewards, terminated, truncated, update=None, active=None):
    """Runs a (T, N) stream through ``transform.step`` in one lax.scan."""
    state, (outputs, returns) = scan_steps(
        transform,
        rewards,
        terminated,
        truncated,
        True if update is None else update,
        active,
        record=lambda state: (
            jax.tree.leaves(state)[-1] if isinstance(state, tuple) else ret_of(state)
        ),
    )
    return outputs, returns, state


def mountain_car_rewards():
    """Raw rewards of SEMANTICS.md's golden run: MountainCarContinuous-v0, seed 123."""
    env = gym.make("MountainCarContinuous-v0")
    env.reset(seed=123)
    env.action_space.seed(123)
    rewards, terminated = [], []
    for _ in range(999):
        _, reward, term, trunc, _ = env.step(env.action_space.sample())
        rewards.append(reward)
        terminated.append(term)
        if term or trunc:
            break
    return np.array(rewards), np.array(terminated)


@pytest.fixture(scope="module")
def mountain_car():
    return mountain_car_rewards()


def test_golden_mountain_car_single_env_float64(mountain_car):
    rewards, terminated = mountain_car
    assert np.var(rewards) == pytest.approx(0.0008876301247721108, rel=1e-12)
    with jax.enable_x64(True):
        norm = rn.normalize_reward(gamma=0.99, epsilon=1e-8)
        step = jax.jit(norm.step)
        state, outputs = norm.init(), []
        for reward, term in zip(rewards, terminated, strict=True):
            out, state = step(state, reward, term, False)
            outputs.append(float(out))
    assert np.var(outputs) == pytest.approx(0.010162116476634746, rel=1e-12, abs=0)


def test_golden_mountain_car_single_env_float32_scan(mountain_car):
    rewards, terminated = mountain_car
    outputs, _, _state = run_stream(
        rn.normalize_reward(gamma=0.99, epsilon=1e-8),
        jnp.asarray(rewards[:, None], jnp.float32).reshape(-1),
        jnp.asarray(terminated),
        jnp.zeros(len(rewards), bool),
    )
    assert outputs.dtype == jnp.float32
    assert np.var(np.asarray(outputs, np.float64)) == pytest.approx(0.010162116476634746, rel=1e-5)


@pytest.mark.parametrize("jit", [False, True])
def test_gamma_half_tracked_returns(jit):
    norm = rn.normalize_reward(gamma=0.5)
    step = jax.jit(norm.step) if jit else norm.step
    state, returns = norm.init(), []
    for i, reward in enumerate([1.0, 2.0, 3.0, 1.0, 2.0, 3.0]):
        _, state = step(state, reward, i % 3 == 2, False)
        returns.append(float(state.ret))
    assert returns == [1.0, 2.5, 3.0, 2.5, 3.25, 3.0]


@pytest.mark.parametrize(
    ("semantics", "mean", "var"),
    [
        ("sb3", 5.687808, 6.212002),
        ("gymnasium_same_step", 5.687808, 6.212002),
        ("purejaxrl", 4.217785, None),
        ("gymnasium", 193.4269, None),
    ],
)
def test_sb3_test_stream_statistics(semantics, mean, var):
    rewards, terminated, truncated = reference.sb3_test_stream()
    _, _, state = run_stream(
        rn.normalize_reward(gamma=0.99, semantics=semantics),
        jnp.asarray(rewards, jnp.float32),
        jnp.asarray(terminated),
        jnp.asarray(truncated),
    )
    assert float(state.stats.mean) == pytest.approx(mean, rel=1e-6)
    if var is not None:
        assert float(state.stats.var) == pytest.approx(var, rel=1e-6)
    assert rn.count_as_int(state.stats) == 6002
    assert float(state.stats.total_weight) == pytest.approx(6002.0001, rel=1e-7)


def test_next_step_autoreset_masking_with_active():
    """Gymnasium's vector NEXT_STEP: autoreset steps (reward 0) are inactive."""
    pattern = np.array([[1.0, 3.0], [3.0, 4.0], [4.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    t = np.arange(3001)
    rewards = jnp.asarray(pattern[t % 5], jnp.float32)
    truncated = jnp.asarray(np.repeat((t % 5 == 3)[:, None], 2, axis=1))
    active = jnp.asarray(np.repeat((t % 5 != 4)[:, None], 2, axis=1))
    _, _, state = run_stream(
        rn.normalize_reward(), rewards, jnp.zeros_like(truncated), truncated, active=active
    )
    assert float(state.stats.mean) == pytest.approx(191.784, rel=1e-5)
    assert rn.count_as_int(state.stats) == 4802


def test_sb3_clips_at_ten_by_default_and_chain_reproduces_it():
    rewards, terminated, truncated = (jnp.asarray(a) for a in reference.sb3_test_stream(50))
    rewards = jnp.repeat(rewards[:, :1], 2, axis=1).astype(jnp.float32)  # identical envs: tiny var
    clipped, _, _ = run_stream(rn.normalize_reward(semantics="sb3"), rewards, terminated, truncated)
    assert float(jnp.max(clipped)) == 10.0
    chained, _, _ = run_stream(
        rn.chain(
            rn.normalize_reward(
                semantics=dataclasses.replace(rn.Semantics.preset("sb3"), clip=None)
            ),
            rn.clip_reward(-10.0, 10.0),
        ),
        rewards,
        terminated,
        truncated,
    )
    np.testing.assert_array_equal(clipped, chained)
    unclipped, _, _ = run_stream(
        rn.normalize_reward(semantics=dataclasses.replace(rn.Semantics.preset("sb3"), clip=None)),
        rewards,
        terminated,
        truncated,
    )
    assert float(jnp.max(unclipped)) > 10.0


def test_chain_feeds_transformed_rewards_into_statistics():
    rewards = jnp.asarray(np.random.default_rng(0).normal(0, 5, (40, 3)), jnp.float32)
    flags = jnp.zeros((40, 3), bool)
    _, _, (_, chained_state) = run_stream(
        rn.chain(rn.clip_reward(-1.0, 1.0), rn.normalize_reward()), rewards, flags, flags
    )
    _, _, direct_state = run_stream(
        rn.normalize_reward(), jnp.clip(rewards, -1.0, 1.0), flags, flags
    )
    np.testing.assert_array_equal(chained_state.stats.mean, direct_state.stats.mean)
    np.testing.assert_array_equal(chained_state.stats.m2, direct_state.stats.m2)


@functools.cache
def cached_normalizer(gamma, semantics):
    """One transform object per configuration, so jit reuses its compilation."""
    return rn.normalize_reward(gamma=gamma, semantics=semantics)


@settings(max_examples=25, deadline=None)
@given(
    semantics=st.sampled_from(SEMANTICS),
    num_envs=st.sampled_from([1, 3, 64]),
    seed=st.integers(0, 2**31 - 1),
    freeze=st.booleans(),
    masked=st.booleans(),
    gamma=st.sampled_from([0.0, 0.5, 0.99, 1.0]),
)
def test_matches_numpy_reference(semantics, num_envs, seed, freeze, masked, gamma):
    steps = 24
    rng = np.random.default_rng(seed)
    rewards = rng.normal(rng.uniform(-3, 3), rng.uniform(0.1, 5), (steps, num_envs))
    rewards[rng.random(rewards.shape) < 0.03] = np.nan
    terminated = rng.random((steps, num_envs)) < 0.1
    truncated = rng.random((steps, num_envs)) < 0.1
    update = rng.random(steps) < 0.7 if freeze else np.ones(steps, bool)
    active = rng.random((steps, num_envs)) < 0.8 if masked else np.ones((steps, num_envs), bool)
    expected, expected_returns, rms = reference.normalize_stream(
        rewards,
        terminated,
        truncated,
        gamma=gamma,
        semantics=semantics,
        update=update,
        active=active,
        clip=10.0 if semantics == "sb3" else None,
    )
    with jax.enable_x64(True):
        outputs, returns, state = run_stream(
            cached_normalizer(gamma, semantics),
            jnp.asarray(rewards),
            jnp.asarray(terminated),
            jnp.asarray(truncated),
            jnp.asarray(update),
            jnp.asarray(active),
        )
        np.testing.assert_allclose(outputs, expected, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(returns, expected_returns, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(float(state.stats.mean), rms.mean, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(float(state.stats.var), rms.var, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize(
    ("num_envs", "masked"),
    [
        (1024, True),  # sums by one product of the mask's weights with the terms
        (3000, True),  # two products (float64 weights of 3000 entries take 24 KiB)
        (4096, True),  # three products, the most entries summed by products
        (20000, True),  # one variadic reduction of the selected terms
        (2**16 + 8, True),
        (1024, False),  # unmasked: one product with unit weights
        (1600, False),  # unmasked: one variadic reduction
        (2048, False),
    ],
)
def test_wide_batches_match_numpy_reference(num_envs, masked):
    """Every way a batch of returns is summed gives the reference's numbers."""
    steps = 12
    rng = np.random.default_rng(num_envs)
    rewards = rng.normal(rng.uniform(-3, 3), 2.0, (steps, num_envs))
    terminated = rng.random((steps, num_envs)) < 0.1
    truncated = np.zeros_like(terminated)
    update = rng.random(steps) < 0.8 if masked else np.ones(steps, bool)
    active = np.ones_like(terminated)
    if masked:
        rewards[rng.random(rewards.shape) < 0.03] = np.nan
        active = rng.random(terminated.shape) < 0.8
    expected, expected_returns, rms = reference.normalize_stream(
        rewards, terminated, truncated, update=update, active=active
    )
    with jax.enable_x64(True):
        norm = rn.normalize_reward(finite_rewards=not masked)

        @jax.jit
        def run(rewards, terminated, update, active):
            active = active if masked else None
            return scan_steps(norm, rewards, terminated, False, update, active, record=ret_of)

        state, (outputs, returns) = run(
            jnp.asarray(rewards), jnp.asarray(terminated), jnp.asarray(update), jnp.asarray(active)
        )
        np.testing.assert_allclose(outputs, expected, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(returns, expected_returns, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(float(state.stats.mean), rms.mean, rtol=1e-10)
        np.testing.assert_allclose(float(state.stats.var), rms.var, rtol=1e-10)
        assert int(rn.count_as_int(state.stats)) == round(rms.count)


@pytest.mark.parametrize(
    "num_envs",
    [
        1024,  # one product
        3000,  # two products of under 16 KiB of float32 weights
        4096,  # two, the most entries summed by products
        20000,  # one variadic reduction
    ],
)
def test_float32_masked_batches_match_numpy_reference(num_envs):
    """The products of float32 weights, however split, give the float64 reference's numbers."""
    steps = 12
    rng = np.random.default_rng(num_envs)
    rewards = rng.normal(rng.uniform(-3, 3), 2.0, (steps, num_envs)).astype(np.float32)
    rewards[rng.random(rewards.shape) < 0.03] = np.nan
    terminated = rng.random((steps, num_envs)) < 0.1
    update = rng.random(steps) < 0.8
    active = rng.random(terminated.shape) < 0.8
    expected, _, rms = reference.normalize_stream(
        rewards, terminated, np.zeros_like(terminated), update=update, active=active
    )
    norm = rn.normalize_reward()

    run = jax.jit(lambda *stream: scan_steps(norm, *stream))
    state, outputs = run(
        jnp.asarray(rewards),
        jnp.asarray(terminated),
        False,
        jnp.asarray(update),
        jnp.asarray(active),
    )
    np.testing.assert_allclose(outputs, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(state.stats.mean), rms.mean, rtol=1e-5)
    np.testing.assert_allclose(float(state.stats.var), rms.var, rtol=1e-5)
    assert int(rn.count_as_int(state.stats)) == round(rms.count)


@pytest.mark.parametrize("num_envs", [64, 1024, 4096])
@pytest.mark.parametrize("masked", [False, True])
def test_float32_first_batch_far_from_the_prior_keeps_its_variance(num_envs, masked):
    """Returns of 1000 +- 1 from the first step on: no cancellation against the prior's mean 0.

    The sums are shifted by an entry of the batch, not by the running mean
    (which, still the prior's 0 at the first step, would lose most of the
    variance to rounding in float32).
    """
    steps = 20
    rng = np.random.default_rng(num_envs)
    rewards = (1e3 + rng.normal(0.0, 1.0, (steps, num_envs))).astype(np.float32)
    terminated = np.zeros((steps, num_envs), bool)
    active = rng.random((steps, num_envs)) < 0.8 if masked else np.ones_like(terminated)
    expected, _, rms = reference.normalize_stream(
        rewards, terminated, terminated, gamma=0.0, active=active
    )
    norm = rn.normalize_reward(0.0)

    run = jax.jit(lambda rewards, active: scan_steps(norm, rewards, active=active))
    state, outputs = run(jnp.asarray(rewards), jnp.asarray(active) if masked else None)
    np.testing.assert_allclose(float(state.stats.var), rms.var, rtol=1e-5)
    np.testing.assert_allclose(outputs, expected, rtol=1e-5)


@pytest.mark.parametrize("num_envs", [4, 3000])
@pytest.mark.parametrize("flag", ["frozen", "inactive"])
def test_an_unselected_return_past_the_range_changes_nothing(num_envs, flag):
    """A return whose square overflows, left out of the merge, leaves the statistics alone."""
    norm = rn.normalize_reward()
    rewards = jnp.arange(1.0, num_envs + 1.0)
    _, state = norm.step(norm.init(num_envs), rewards)
    state = state.replace(ret=state.ret.at[1].set(1e20))  # 1e20^2 overflows float32
    active = jnp.ones(num_envs, bool)
    if flag == "inactive":
        active = active.at[1].set(False)
    _, after = jax.jit(norm.step)(
        state, jnp.ones(num_envs), False, False, jnp.bool_(flag != "frozen"), active=active
    )
    if flag == "frozen":
        chex.assert_trees_all_equal(after.stats, state.stats)
    else:
        expected = rn.merge_stats(state.stats, after.ret, active)  # the generic merge selects
        np.testing.assert_allclose(after.stats.var, expected.var, rtol=1e-6)
        assert np.isfinite(float(after.stats.var))


def test_freeze_is_a_traced_flag_inside_jit():
    norm = rn.normalize_reward()
    step = jax.jit(norm.step)
    state = norm.init((2,))
    for _ in range(5):
        _, state = step(state, jnp.array([1.0, 2.0]), False, False, True)
    frozen_out, frozen = step(state, jnp.array([5.0, 5.0]), False, False, jnp.array(False))
    chex.assert_trees_all_equal(frozen.stats, state.stats)
    assert not np.array_equal(frozen.ret, state.ret)  # gymnasium: G keeps accumulating
    np.testing.assert_allclose(frozen_out, norm.apply(state, jnp.array([5.0, 5.0])), rtol=1e-6)
    sb3 = rn.normalize_reward(semantics="sb3")
    sb3_state = sb3.update(sb3.init((2,)), jnp.array([1.0, 2.0]))
    _, sb3_frozen = jax.jit(sb3.step)(sb3_state, jnp.array([5.0, 5.0]), False, False, False)
    np.testing.assert_array_equal(sb3_frozen.ret, sb3_state.ret)  # sb3: training=False stops G
    _, sb3_frozen_done = jax.jit(sb3.step)(
        sb3_state, jnp.array([5.0, 5.0]), jnp.array([True, False]), False, False
    )
    np.testing.assert_array_equal(
        sb3_frozen_done.ret, [0.0, sb3_state.ret[1]]
    )  # dones still zero G


def test_update_stats_must_be_one_scalar_flag():
    norm = rn.normalize_reward()
    with pytest.raises(ValueError, match=r"update_stats has shape \(4,\); it must be a scalar"):
        norm.step(norm.init((4,)), jnp.ones(4), False, False, jnp.ones(4, bool))


def test_numpy_scalar_hyperparameters_are_accepted():
    norm = rn.normalize_reward(gamma=np.float32(0.5), epsilon=np.float32(1e-8))
    _, state = norm.step(norm.init(), 1.0)
    _, state = norm.step(state, 2.0)
    assert float(state.ret) == 2.5
    clip = rn.clip_reward(np.float32(-1.0), np.float32(1.0))
    assert float(clip.apply(clip.init(), 3.0)) == 1.0
    with pytest.raises(ValueError, match="gamma should be in the interval"):
        rn.normalize_reward(gamma=True)


def test_concrete_array_hyperparameters_are_accepted_and_traced_ones_named():
    for gamma in (jnp.float32(0.5), np.array(0.5), jnp.array(0.5, jnp.bfloat16)):
        norm = rn.normalize_reward(
            gamma=gamma,
            epsilon=jnp.float32(1e-8),
            semantics=dataclasses.replace(
                rn.Semantics.preset("gymnasium"),
                clip=jnp.array(10.0),  # type: ignore[arg-type]  # a concrete 0-d array is a number
            ),
        )
        _, state = norm.step(norm.init(), 1.0)
        assert float(norm.step(state, 2.0)[1].ret) == 2.5
    with pytest.raises(ValueError, match="gamma should be in the interval"):
        rn.normalize_reward(gamma=jnp.array([0.5, 0.9]))
    with pytest.raises(ValueError, match="gamma should be in the interval"):
        rn.normalize_reward(gamma=jnp.array(True))
    with pytest.raises(
        TypeError, match=r"^gamma should be a concrete number, got the traced value .*: pass gamma "
    ):
        jax.jit(lambda g: rn.normalize_reward(gamma=g).init())(0.9)


def test_participants_that_freeze_withhold_their_samples_from_shared_statistics():
    """Under vmap with axis_name, per-participant flags never split the shared statistics."""
    gamma, flags = 0.9, jnp.array([True, False, True, False])
    rewards = jax.random.normal(jax.random.PRNGKey(3), (6, 4)) * 2.0 + 1.0
    norm = rn.normalize_reward(gamma, axis_name="envs")
    step = jax.vmap(norm.step, in_axes=(0, 0, None, None, 0), axis_name="envs")
    state = jax.vmap(lambda _: norm.init())(flags)
    expected_stats, returns = rn.init_stats(), jnp.zeros(4)
    for reward in rewards:
        _, state = step(state, reward, False, False, flags)
        returns = gamma * returns + reward  # gymnasium: a freeze does not stop the return
        expected_stats = rn.merge_stats(expected_stats, returns, flags)
    np.testing.assert_allclose(state.ret, returns, rtol=1e-6)
    for field in ("mean", "var", "total_weight"):
        values = np.asarray(getattr(state.stats, field))
        np.testing.assert_array_equal(values, values[0])  # identical on every participant
        np.testing.assert_allclose(values[0], getattr(expected_stats, field), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(state.stats.count_lo), 12)


def test_one_nan_in_a_million_steps_changes_nothing():
    steps = 1_000_000
    rewards = jax.random.normal(jax.random.key(0), (steps,)) + 1.0
    terminated = jnp.arange(steps) % 1000 == 999
    position = 500_123  # not an episode boundary
    poisoned = rewards.at[position].set(jnp.nan)
    clean = jnp.delete(rewards, position)
    clean_terminated = jnp.delete(terminated, position)
    no_flags = jnp.zeros(steps, bool)
    norm = rn.normalize_reward()
    out_poisoned, _, state_poisoned = run_stream(norm, poisoned, terminated, no_flags)
    _, _, state_clean = run_stream(norm, clean, clean_terminated, no_flags[1:])
    chex.assert_trees_all_equal(state_poisoned, state_clean)
    assert np.isnan(out_poisoned[position])
    assert np.isfinite(np.delete(np.asarray(out_poisoned), position)).all()


def test_vmap_over_independent_normalizers_equals_separate_runs():
    rng = np.random.default_rng(1)
    rewards = jnp.asarray(rng.normal(size=(4, 30, 5)), jnp.float32)
    terminated = jnp.asarray(rng.random((4, 30, 5)) < 0.1)
    truncated = jnp.zeros_like(terminated)
    norm = rn.normalize_reward()
    batched = jax.vmap(lambda r, te, tr: run_stream(norm, r, te, tr))(
        rewards, terminated, truncated
    )
    for i in range(4):
        single = run_stream(norm, rewards[i], terminated[i], truncated[i])
        np.testing.assert_allclose(batched[0][i], single[0], rtol=1e-6)
        np.testing.assert_allclose(batched[2].stats.mean[i], single[2].stats.mean, rtol=1e-6)


def test_eager_equals_jit_equals_scan():
    rng = np.random.default_rng(2)
    rewards = jnp.asarray(rng.normal(size=(10, 3)), jnp.float32)
    terminated = jnp.asarray(rng.random((10, 3)) < 0.2)
    truncated = jnp.asarray(rng.random((10, 3)) < 0.2)
    norm = rn.normalize_reward(semantics="purejaxrl")
    scanned, _, _ = run_stream(norm, rewards, terminated, truncated)
    eager_state = jit_state = norm.init((3,))
    jit_step = jax.jit(norm.step)
    for t in range(10):
        eager_out, eager_state = norm.step(eager_state, rewards[t], terminated[t], truncated[t])
        jit_out, jit_state = jit_step(jit_state, rewards[t], terminated[t], truncated[t])
        np.testing.assert_allclose(eager_out, scanned[t], rtol=1e-6)
        np.testing.assert_allclose(jit_out, scanned[t], rtol=1e-6)


def test_init_and_step_give_the_same_pytree_structure_and_dtypes():
    norm = rn.normalize_reward()
    state = norm.init((4,))
    _, stepped = norm.step(state, jnp.ones(4), False, False)
    chex.assert_trees_all_equal_shapes_and_dtypes(stepped, state)
    chosen = jax.lax.cond(True, lambda: state, lambda: stepped)
    chex.assert_trees_all_equal_shapes_and_dtypes(chosen, state)


def test_state_round_trips_through_flax_serialization_bit_exactly():
    norm = rn.chain(rn.normalize_reward(), rn.clip_reward(-5.0, 5.0))
    _, _, state = run_stream(
        norm,
        jnp.linspace(-3, 7, 60).reshape(20, 3),
        jnp.zeros((20, 3), bool),
        jnp.zeros((20, 3), bool),
    )
    restored = serialization.from_bytes(norm.init((3,)), serialization.to_bytes(state))
    chex.assert_trees_all_equal_shapes_and_dtypes(restored, state)
    chex.assert_trees_all_equal(restored, state)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gamma": 99}, r"gamma should be in the interval \[0, 1\], got gamma=99"),
        ({"gamma": -0.1}, "gamma should be in the interval"),
        ({"gamma": float("nan")}, "gamma should be in the interval"),
        ({"epsilon": 0.0}, "epsilon should be a positive number .*, got epsilon=0.0"),
        ({"epsilon": -1e-8}, "epsilon should be a positive number"),
        ({"g_max": -1.0}, "g_max should be a positive number"),
        ({"semantics": "rllib"}, "semantics='rllib' is not known"),
    ],
)
def test_invalid_hyperparameters_raise_at_construction(kwargs, message):
    with pytest.raises(ValueError, match=message):
        rn.normalize_reward(**kwargs)


def test_wrong_shapes_fail_at_trace_time():
    norm = rn.normalize_reward()
    state = norm.init((4,))
    with pytest.raises(ValueError, match=r"reward has shape \(3,\) but the state was initialised"):
        jax.jit(norm.step)(state, jnp.ones(3), False, False)
    with pytest.raises(ValueError, match="terminated has shape"):
        norm.step(state, jnp.ones(4), jnp.zeros(2, bool), False)
    with pytest.raises(ValueError, match="reward has shape"):
        norm.step(state, 1.0, False, False)


def test_stateless_transform_errors():
    with pytest.raises(ValueError, match="low should not exceed high"):
        rn.clip_reward(1.0, -1.0)
    with pytest.raises(ValueError, match="fn should be callable"):
        rn.transform_reward(3.0)  # type: ignore[arg-type]  # deliberately invalid
    with pytest.raises(ValueError, match="scale should be a finite number"):
        rn.scale_reward(float("inf"))
    with pytest.raises(
        ValueError, match="the state has NormalizeRewardState, this transform expects tuple of 2"
    ):
        rn.chain(rn.clip_reward(), rn.normalize_reward()).step(rn.normalize_reward().init(), 1.0)
