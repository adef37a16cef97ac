"""rewardnorm_jax.gymnax against the core, a PureJaxRL-style reference and gymnax's wrappers."""

import dataclasses
import functools
import itertools
from typing import Any

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import serialization
from gymnax.wrappers.compat import LegacyStepAPIWrapper
from gymnax.wrappers.purerl import FlattenObservationWrapper, GymnaxWrapper, LogWrapper

import rewardnorm_jax as rn
from benchmarks.stream import inline_init, inline_step
from rewardnorm_jax import gymnax as rgx
from tests.streams import jit_scan_steps

NUM_ENVS = 1024
FLOAT32_ULP = float(np.finfo(np.float32).eps)
STEPS = 200
GAMMA = 0.99


# --- a PureJaxRL-style reference ----------------------------------------------------------


@jax.jit
def purejaxrl_normalize_vec_reward(rewards, terminated, truncated):
    """PureJaxRL's ``NormalizeVecReward`` on a (T, N) float32 stream, step by step.

    The arithmetic is ``benchmarks/stream.py``'s ``inline_step`` (the benchmarks'
    competitor, written as PureJaxRL writes it): ``G = G * gamma * (1 - done) + r``
    with ``done = terminated | truncated``, one float32 RunningMeanStd over the
    batch, the reward divided by ``sqrt(var + 1e-8)`` after the update.

    Returns:
      ``((mean, var, count, return), normalized rewards)``.
    """

    def body(state, xs):
        reward, state = inline_step(state, *xs)
        return state, reward

    return jax.lax.scan(body, inline_init(rewards.shape[1]), (rewards, terminated | truncated))


# --- rollouts ----------------------------------------------------------------------------


def random_actions(env, params, key, num_envs):
    """Actions drawn from the key alone, so every wrapper stack sees the same trajectory."""
    space = env.action_space(params)
    return jax.vmap(space.sample)(jax.random.split(key, num_envs))


@functools.partial(jax.jit, static_argnames=("stacks", "action_env"))
def lockstep(stacks, action_env, params, key, updates):
    """Batched wrapper stacks side by side in one ``lax.scan``: same keys, same actions.

    ``stacks`` is a tuple of ``(reset, step)`` pairs, ``reset(keys, params)`` and
    ``step(keys, state, actions, params, flag)``; ``updates`` holds one (T,)
    freeze schedule per stack. One compilation serves every stack.
    """
    reset_key, run_key = jax.random.split(key)
    reset_keys = jax.random.split(reset_key, NUM_ENVS)
    states = tuple(reset(reset_keys, params)[1] for reset, _ in stacks)

    def body(states, xs):
        step_key, flags = xs
        action_key, env_key = jax.random.split(step_key)
        actions = random_actions(action_env, params, action_key, NUM_ENVS)
        env_keys = jax.random.split(env_key, NUM_ENVS)
        results = [
            step(env_keys, state, actions, params, flag)
            for (_, step), state, flag in zip(stacks, states, flags, strict=True)
        ]
        new_states = tuple(result[1] for result in results)
        outputs = tuple((obs, reward, term, trunc) for obs, _, reward, term, trunc, _ in results)
        return new_states, outputs

    return jax.lax.scan(body, states, (jax.random.split(run_key, STEPS), updates))


def plain(env):
    """``(reset, step)`` of a batched env whose ``step`` takes no freeze flag."""
    return env.reset, lambda k, s, a, p, flag: env.step(k, s, a, p)


def batched_frozen_through_state(env):
    """``(reset, step)`` of ``VecEnv(env)``, the freeze flag set in the state through the stack."""
    env = rgx.VecEnv(env)
    return env.reset, lambda k, s, a, p, flag: env.step(k, rgx.set_update_stats(s, flag), a, p)


def per_env(env, axis_name="envs"):
    """Mode (b): a per-env wrapper under ``jax.vmap(..., axis_name=...)``, flag unmapped."""
    reset = jax.vmap(env.reset, in_axes=(0, None), axis_name=axis_name)
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None, None), axis_name=axis_name)
    return reset, step


PUREJAXRL = rn.normalize_reward(GAMMA, semantics="purejaxrl")
GYMNASIUM = rn.normalize_reward(GAMMA)


ENVS = ["CartPole-v1", "Pendulum-v1"]
ALWAYS = jnp.ones(STEPS, bool)
FREEZE_10_IN_50 = (jnp.arange(STEPS) % 50) < 40


@functools.cache
def vmapped_rollouts(name):
    """1024 envs through several wrapper stacks in lockstep, 200 steps.

    ``bare``: the raw environment. ``a``: NormalizeReward around the batched
    env. ``b``: per-env NormalizeReward with ``axis_name="envs"`` under
    ``jax.vmap``. For Pendulum also ``outside`` / ``inside``: per-env
    NormalizeReward outside or inside LogWrapper + FlattenObservationWrapper,
    frozen 10 steps in 50 through the state.
    Returns ``{label: (wrapper, final_state, (obs, reward, terminated, truncated))}``
    and ``params``.
    """
    env, params = gymnax.make(name)
    mode_a = rgx.NormalizeReward(rgx.VecEnv(env), GAMMA, semantics="purejaxrl")
    mode_b = rgx.NormalizeReward(env, GAMMA, semantics="purejaxrl", axis_name="envs")
    stacks = {
        "bare": (rgx.VecEnv(env), plain, ALWAYS),
        "a": (mode_a, lambda e: (e.reset, e.step), ALWAYS),
        "b": (mode_b, per_env, ALWAYS),
    }
    if name == "Pendulum-v1":
        outside = rgx.NormalizeReward(
            LogWrapper(FlattenObservationWrapper(env)), GAMMA, per_env=True
        )
        inside = FlattenObservationWrapper(
            LogWrapper(rgx.NormalizeReward(env, GAMMA, per_env=True))
        )
        stacks["outside"] = (outside, batched_frozen_through_state, FREEZE_10_IN_50)
        stacks["inside"] = (inside, batched_frozen_through_state, FREEZE_10_IN_50)
    labels = list(stacks)
    states, outputs = lockstep(
        tuple(stacks[k][1](stacks[k][0]) for k in labels),
        env,
        params,
        jax.random.key(7),
        tuple(stacks[k][2] for k in labels),
    )
    runs = {
        k: (stacks[k][0], state, out) for k, state, out in zip(labels, states, outputs, strict=True)
    }
    return runs, params


# --- vmapped CartPole / Pendulum against the core and the reference --------------------------


@pytest.mark.parametrize("name", ENVS)
def test_batched_wrapper_equals_core_fed_the_raw_stream(name):
    runs, _ = vmapped_rollouts(name)
    _, _, (obs, raw, terminated, truncated) = runs["bare"]
    _, state, (a_obs, a_reward, a_term, a_trunc) = runs["a"]
    assert raw.shape == a_reward.shape == (STEPS, NUM_ENVS)
    # the environment is untouched: same observations and flags
    np.testing.assert_array_equal(a_obs, obs)
    np.testing.assert_array_equal(a_term, terminated)
    np.testing.assert_array_equal(a_trunc, truncated)
    assert bool(jnp.any(terminated | truncated))  # episodes end inside the window
    core_state, expected = jit_scan_steps(PUREJAXRL, raw, terminated, truncated, ALWAYS)
    np.testing.assert_allclose(a_reward, expected, rtol=1e-6, atol=0)
    assert rn.count_as_int(state.transform_state.stats) == STEPS * NUM_ENVS
    # The statistics and returns; the rounding-error words (mean_low, m2_low)
    # follow the order XLA sums in, which differs between the two programs.
    got_stats, want_stats = state.transform_state.stats, core_state.stats
    np.testing.assert_array_equal(got_stats.count_words, want_stats.count_words)
    for quantity in ("mean", "var"):
        np.testing.assert_allclose(
            getattr(got_stats, quantity), getattr(want_stats, quantity), rtol=1e-6
        )
    np.testing.assert_allclose(state.transform_state.ret, core_state.ret, rtol=1e-6)


@pytest.mark.parametrize("name", ENVS)
def test_per_env_wrapper_with_axis_name_shares_statistics(name):
    runs, _ = vmapped_rollouts(name)
    _, a_state, (_, a_reward, _, _) = runs["a"]
    _, b_state, (b_obs, b_reward, _, _) = runs["b"]
    np.testing.assert_array_equal(b_obs, runs["bare"][2][0])
    np.testing.assert_allclose(b_reward, a_reward, rtol=1e-5)
    stats = b_state.transform_state.stats
    for leaf in jax.tree.leaves(stats):
        assert leaf.shape[0] == NUM_ENVS  # every copy holds the same statistics
        np.testing.assert_array_equal(leaf, np.broadcast_to(leaf[0], leaf.shape))
    assert rn.count_as_int(stats)[0] == STEPS * NUM_ENVS
    np.testing.assert_allclose(b_state.transform_state.ret, a_state.transform_state.ret, rtol=1e-5)


@pytest.mark.parametrize("name", ENVS)
@pytest.mark.parametrize("mode", ["a", "b"])
def test_both_modes_match_purejaxrl_style_reference(name, mode):
    runs, _ = vmapped_rollouts(name)
    _, _, (_, raw, terminated, truncated) = runs["bare"]
    _, state, (_, reward, _, _) = runs[mode]
    (mean, var, count, return_val), expected = purejaxrl_normalize_vec_reward(
        raw, terminated, truncated
    )
    assert reward.dtype == expected.dtype == jnp.float32
    np.testing.assert_allclose(reward, expected, rtol=1e-5)
    stats = jax.tree.map(lambda x: x.reshape(-1, x.shape[-1])[0], state.transform_state.stats)
    np.testing.assert_allclose(stats.mean, mean, rtol=1e-5)
    np.testing.assert_allclose(stats.var, var, rtol=1e-5)
    np.testing.assert_allclose(stats.total_weight, count, rtol=1e-7)
    np.testing.assert_allclose(state.transform_state.ret, return_val, rtol=1e-5)


# --- pytree conventions ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "batched"),
    [
        (
            lambda env: rgx.RewardTransformWrapper(
                env,
                rn.chain(rn.normalize_reward(semantics="sb3"), rn.clip_reward(-5.0, 5.0)),
                per_env=True,
            ),
            False,
        ),
        (lambda env: rgx.NormalizeReward(rgx.VecEnv(env)), True),
    ],
    ids=["chain", "batched"],
)
def test_reset_and_step_give_identical_pytrees_under_lax_cond(make, batched):
    env, params = gymnax.make("CartPole-v1")
    env = make(env)
    key = jax.random.split(jax.random.key(0), 3) if batched else jax.random.key(0)
    action = jnp.zeros(3, jnp.int32) if batched else jnp.int32(0)

    def reset_or_step(pick_reset):
        _, state = env.reset(key, params)
        new_state = jax.lax.cond(  # raises at trace time unless both branches agree exactly
            pick_reset,
            lambda: env.reset(key, params)[1],
            lambda: env.step(key, state, action, params)[1],
        )
        return state, new_state

    state, new_state = jax.eval_shape(reset_or_step, True)
    assert isinstance(state, rgx.RewardWrapperState)
    assert jax.tree.structure(new_state) == jax.tree.structure(state)  # type: ignore[operator, unused-ignore]  # jax's PyTreeDef is opaque to mypy
    assert jax.tree.leaves(new_state) == jax.tree.leaves(state)  # shapes and dtypes


def test_attribute_proxying_and_gymnax_base_class():
    env, params = gymnax.make("CartPole-v1")
    wrapped = rgx.NormalizeReward(FlattenObservationWrapper(env), gamma=0.9)
    assert isinstance(wrapped, GymnaxWrapper)
    assert wrapped.num_actions == env.num_actions == 2
    assert wrapped.name == env.name
    assert wrapped.default_params == env.default_params
    assert wrapped.observation_space(params).shape == (4,)
    assert (wrapped.gamma, wrapped.epsilon) == (0.9, 1e-8)
    assert isinstance(wrapped.transform, rn.RewardTransform)


# --- composition with gymnax's own wrappers -------------------------------------------------


@pytest.mark.parametrize("order", ["outside", "inside"])
def test_composes_with_log_and_flatten_wrappers_in_either_order(order):
    """Per-env NormalizeReward outside or inside LogWrapper + FlattenObservationWrapper.

    With ``per_env=True`` each environment keeps its own statistics; the freeze
    schedule reaches the wrapper through the state, whatever wraps it.
    """
    runs, params = vmapped_rollouts("Pendulum-v1")
    _, _, (raw_obs, raw, terminated, truncated) = runs["bare"]
    stack, state, (obs, reward, _, _) = runs[order]
    assert stack.observation_space(params).shape == (3,)
    np.testing.assert_array_equal(obs, raw_obs)
    expected = jax.vmap(  # one core per environment, same freeze schedule
        lambda r, te, tr: jit_scan_steps(
            GYMNASIUM, r[:, None], te[:, None], tr[:, None], FREEZE_10_IN_50
        )[1][:, 0],
        in_axes=1,
        out_axes=1,
    )(raw, terminated, truncated)
    np.testing.assert_allclose(reward, expected, rtol=1e-6)
    transform_state = rgx.get_transform_state(state)
    assert isinstance(transform_state, rn.NormalizeRewardState)
    learned_steps = int(FREEZE_10_IN_50.sum())
    assert rn.count_as_int(transform_state.stats).tolist() == [learned_steps] * NUM_ENVS
    # LogWrapper sums the rewards it sees: raw under the normalizer, normalized around it
    log_state = state.env_state if order == "outside" else state
    seen = raw if order == "outside" else reward
    done = terminated | truncated
    assert not bool(done[:-1].any())
    assert bool(done[-1].all())
    np.testing.assert_allclose(log_state.returned_episode_returns, seen.sum(0), rtol=1e-4)
    # reading and writing the transform state through the stack
    restored = rgx.set_transform_state(state, jax.device_get(transform_state))
    assert type(restored) is type(state)
    jax.tree.map(np.testing.assert_array_equal, rgx.get_transform_state(restored), transform_state)
    fresh = jax.vmap(lambda _: GYMNASIUM.init())(jnp.arange(NUM_ENVS))
    reset_stats = rgx.get_transform_state(rgx.set_transform_state(state, fresh)).stats
    assert rn.count_as_int(reset_stats).tolist() == [0] * NUM_ENVS


# --- statistics survive evaluation ---------------------------------------------------------

EVAL_ENVS, EVAL_STEPS = 16, 40
EVAL_SCHEDULE = jnp.arange(EVAL_STEPS) >= 20  # frozen evaluation, then learning again


@functools.partial(jax.jit, static_argnames=("stacks",))
def evaluate(stacks, params, keys, stats_from):
    """Resets each stack with ``stats_from`` and runs CartPole with action 1 in lockstep."""
    starts = tuple(
        reset(keys, params, kept)[1] for (reset, _), kept in zip(stacks, stats_from, strict=True)
    )
    actions = jnp.ones(keys.shape[0], jnp.int32)

    def body(states, flag):
        results = [
            step(keys, state, actions, params, flag)
            for (_, step), state in zip(stacks, states, strict=True)
        ]
        return tuple(r[1] for r in results), tuple((r[2], r[3], r[4]) for r in results)

    return starts, jax.lax.scan(body, starts, EVAL_SCHEDULE)


@functools.cache
def evaluations():
    """Both modes evaluated on 16 envs from the statistics learned by 1024 (and restored)."""
    runs, params = vmapped_rollouts("CartPole-v1")
    mode_a, mode_b = runs["a"][0], runs["b"][0]
    stacks = (
        (mode_a.reset, mode_a.step),  # the flag goes straight to step
        (
            jax.vmap(mode_b.reset, in_axes=(0, None, None), axis_name="envs"),
            jax.vmap(mode_b.step, in_axes=(0, 0, 0, None, None), axis_name="envs"),
        ),
    )
    learned_a = rgx.get_transform_state(runs["a"][1])
    learned_b = jax.tree.map(lambda x: x[0], rgx.get_transform_state(runs["b"][1]))  # copy 0
    stats_from = (learned_a, learned_b)
    keys = jax.random.split(jax.random.key(12), EVAL_ENVS)
    # statistics checkpointed to bytes and restored
    restored = serialization.from_bytes(stats_from, serialization.to_bytes(stats_from))
    run = evaluate(stacks, params, keys, stats_from)
    return run, evaluate(stacks, params, keys, restored), stats_from


@pytest.mark.parametrize("mode", ["a", "b"])
def test_reset_keeps_stats_and_evaluation_freezes_them(mode):
    """Evaluate 16 envs with the statistics learned by 1024, frozen then learning again."""
    runs, _ = vmapped_rollouts("CartPole-v1")
    np.testing.assert_array_equal(runs["bare"][2][1], 1.0)  # CartPole's raw reward is always 1
    (starts, (finals, outputs)), (_, (_, restored_outputs)), stats_from = evaluations()
    index = "ab".index(mode)
    start, final = starts[index], finals[index]
    reward, terminated, truncated = outputs[index]
    learned_stats = jax.tree.map(lambda x: x.reshape(-1, x.shape[-1])[0], stats_from[index].stats)
    kept = start.transform_state
    for got, want in zip(jax.tree.leaves(kept.stats), jax.tree.leaves(learned_stats), strict=True):
        np.testing.assert_array_equal(got, np.broadcast_to(want, got.shape))  # stats kept
    np.testing.assert_array_equal(kept.ret, np.zeros(EVAL_ENVS))  # new episodes, new returns
    assert bool(jnp.all(start.update_stats))
    # frozen: rewards scaled by the learned statistics, which do not move
    frozen = int((~EVAL_SCHEDULE).sum())
    scale = 1.0 / np.sqrt(float(learned_stats.var) + 1e-8)
    np.testing.assert_allclose(reward[:frozen], np.full((frozen, EVAL_ENVS), scale), rtol=1e-6)
    count = rn.count_as_int(final.transform_state.stats).reshape(-1)
    assert set(count.tolist()) == {STEPS * NUM_ENVS + int(EVAL_SCHEDULE.sum()) * EVAL_ENVS}
    # the whole run equals the core fed the same stream with the same schedule
    core_start = rn.NormalizeRewardState(stats=learned_stats, ret=jnp.zeros(EVAL_ENVS))
    _, expected = jit_scan_steps(
        PUREJAXRL,
        jnp.ones((EVAL_STEPS, EVAL_ENVS)),
        terminated,
        truncated,
        EVAL_SCHEDULE,
        state=core_start,
    )
    np.testing.assert_allclose(reward, expected, rtol=1e-6)
    # restored from a byte checkpoint: the same evaluation
    np.testing.assert_array_equal(restored_outputs[index][0], reward)


def test_stats_from_keeps_everything_but_the_returns():
    """A chain with a running max |G| and moving percentiles, resumed on fewer envs."""
    env, params = gymnax.make("CartPole-v1")
    transform = rn.chain(rn.normalize_reward(g_max=5.0), rn.percentile_scale_reward())
    rewards = jax.random.normal(jax.random.key(4), (6, 8))
    flags = jnp.zeros((6, 8), bool)
    learned, _ = jit_scan_steps(transform, rewards, flags, flags, jnp.ones(6, bool))
    wrapped = rgx.RewardTransformWrapper(rgx.VecEnv(env), transform)
    _, state = wrapped.reset(jax.random.split(jax.random.key(5), 3), params, learned)
    kept = state.transform_state
    for sub_state in kept:
        np.testing.assert_array_equal(sub_state.ret, np.zeros(3))
    for sub_kept, sub_learned in zip(kept, learned, strict=True):
        assert float(jnp.abs(sub_learned.ret).max()) > 0
        restarted = sub_kept.replace(ret=sub_learned.ret)
        jax.tree.map(np.testing.assert_array_equal, restarted, sub_learned)
    assert float(kept[0].ret_abs_max) > 0
    assert rn.count_as_int(kept[0].stats) == 48


def test_normalize_reward_passes_options_to_the_core():
    env, params = gymnax.make("CartPole-v1")
    wrapped = rgx.NormalizeReward(
        rgx.VecEnv(env),
        semantics=dataclasses.replace(rn.Semantics.preset("gymnasium"), clip=3.0),
        statistics=rn.Statistics(per_env=True),
    )
    _, state = jax.eval_shape(wrapped.reset, jax.random.split(jax.random.key(0), 5), params)
    assert state.transform_state.stats.moments.shape[:-1] == (5,)  # one set per environment
    with pytest.raises(TypeError, match="no_such_option"):
        rgx.NormalizeReward(env, no_such_option=1)  # type: ignore[call-arg]  # on purpose


# --- invalid arguments -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda env: rgx.NormalizeReward(env, gamma=99), "gamma"),
        (lambda env: rgx.NormalizeReward(env, epsilon=0.0), "epsilon"),
        (lambda env: rgx.NormalizeReward(env, semantics="brax"), "semantics"),
        (
            lambda env: rgx.NormalizeReward(
                env, semantics=dataclasses.replace(rn.Semantics.preset("gymnasium"), clip=-1.0)
            ),
            "clip",
        ),
        (lambda env: rgx.NormalizeReward(env, dtype=jnp.float16), "dtype"),
        (lambda env: rgx.ClipReward(env, 1.0, -1.0), "low"),
        (lambda env: rgx.TransformReward(env, 3.0), "fn"),  # type: ignore[arg-type]  # deliberately invalid
        (lambda env: rgx.RewardTransformWrapper(env, jnp.tanh), "transform"),  # type: ignore[arg-type]  # deliberately invalid
    ],
)
def test_invalid_arguments_raise_value_error(build, message):
    env, _ = gymnax.make("CartPole-v1")
    with pytest.raises(ValueError, match=message):
        build(env)


def test_invalid_calls_raise_value_error_at_trace_time():
    env, params = gymnax.make("CartPole-v1")
    wrapped = rgx.NormalizeReward(rgx.VecEnv(env))
    keys = jax.random.split(jax.random.key(0), 4)
    actions = jnp.zeros(4, jnp.int32)
    _, state = jax.eval_shape(wrapped.reset, keys, params)
    with pytest.raises(ValueError, match="update_stats"):
        jax.eval_shape(wrapped.step, keys, state, actions, params, jnp.ones(4, bool))
    with pytest.raises(ValueError, match="stats_from"):
        jax.eval_shape(wrapped.reset, keys, params, rn.clip_reward().init())
    other_shape = GYMNASIUM.init().replace(stats=rn.init_stats((4,)))
    with pytest.raises(ValueError, match="stats_from"):
        jax.eval_shape(wrapped.reset, keys, params, other_shape)
    with pytest.raises(ValueError, match="batch_shape"):  # a transform state of another batch
        jax.eval_shape(
            wrapped.step, keys, state.replace(transform_state=GYMNASIUM.init((3,))), actions, params
        )
    with pytest.raises(ValueError, match="transform_state"):
        rgx.set_transform_state(state, GYMNASIUM.init((5,)))
    with pytest.raises(ValueError, match="RewardWrapperState"):
        rgx.get_transform_state(jax.eval_shape(env.reset, jax.random.key(0), params)[1])


# --- the five-value step: LegacyStepAPIWrapper and a PureJaxRL-style stack -----------------


class PureJaxRLLogWrapper(GymnaxWrapper):
    """PureJaxRL's five-value ``LogWrapper`` (``purejaxrl/wrappers.py``), as it is written there."""

    def reset(self, key, params=None):
        obs, env_state = self._env.reset(key, params)
        return obs, (env_state, 0.0, 0, 0.0, 0)

    def step(self, key, state, action, params=None):
        env_state, episode_return, episode_length, returned_return, returned_length = state
        obs, env_state, reward, done, info = self._env.step(key, env_state, action, params)
        new_return, new_length = episode_return + reward, episode_length + 1
        state = (
            env_state,
            new_return * (1 - done),
            new_length * (1 - done),
            returned_return * (1 - done) + new_return * done,
            returned_length * (1 - done) + new_length * done,
        )
        info["returned_episode_returns"] = state[3]
        info["returned_episode"] = done
        return obs, state, reward, done, info


class PureJaxRLVecEnv(GymnaxWrapper):
    """PureJaxRL's ``VecEnv``: an unnamed ``jax.vmap`` of ``reset`` and ``step``."""

    def __init__(self, env):
        super().__init__(env)
        self.reset = jax.vmap(self._env.reset, in_axes=(0, None))
        self.step = jax.vmap(self._env.step, in_axes=(0, 0, 0, None))


FIVE_ENVS = 64


@functools.cache
def five_value_rollouts(name):
    """64 envs, 200 steps: six-value and five-value stacks side by side, same keys and actions.

    ``six``: ``NormalizeReward(VecEnv(env))``. ``five``: the same wrapper around
    PureJaxRL's stack ``VecEnv(LogWrapper(LegacyStepAPIWrapper(env)))``, with
    Gymnasium semantics (terminations only) and PureJaxRL semantics.
    """
    env, params = gymnax.make(name)
    pure_stack = PureJaxRLVecEnv(PureJaxRLLogWrapper(LegacyStepAPIWrapper(env)))
    stacks: tuple[Any, ...] = (
        rgx.VecEnv(env),
        rgx.NormalizeReward(rgx.VecEnv(env), GAMMA),
        rgx.NormalizeReward(pure_stack, GAMMA),
        rgx.NormalizeReward(pure_stack, GAMMA, semantics="purejaxrl"),
    )

    @jax.jit
    def run(key):
        reset_keys = jax.random.split(key, FIVE_ENVS)
        states = tuple(stack.reset(reset_keys, params)[1] for stack in stacks)

        def body(states, step_key):
            action_key, env_key = jax.random.split(step_key)
            actions = random_actions(env, params, action_key, FIVE_ENVS)
            env_keys = jax.random.split(env_key, FIVE_ENVS)
            results = [
                s.step(env_keys, st, actions, params) for s, st in zip(stacks, states, strict=True)
            ]
            return tuple(r[1] for r in results), tuple(r[2:-1] for r in results)

        return jax.lax.scan(body, states, jax.random.split(key, STEPS))

    return run(jax.random.key(3))


@pytest.mark.parametrize("name", ENVS)
def test_five_value_step_equals_the_six_value_step_and_the_core(name):
    states, (bare, six, five, five_purejaxrl) = five_value_rollouts(name)
    raw, terminated, truncated = bare
    assert len(five) == len(five_purejaxrl) == 2  # (reward, done): the contract it received
    np.testing.assert_array_equal(five[1], terminated | truncated)
    assert bool(terminated.any() if name == "CartPole-v1" else truncated.any())
    # terminations from info["discount"] == 0, truncations from the other ends
    # The wrappers run inside one program and the core's scan in another, which
    # XLA compiles differently (which products it fuses, which multiply-adds it
    # contracts): the batch sums round differently, so the rewards agree to a
    # few float32 ulps; a wrong flag or reward would move them by far more.
    np.testing.assert_array_equal(five[0], six[0])
    _, gymnasium_rewards = jit_scan_steps(GYMNASIUM, raw, terminated, truncated, ALWAYS)
    np.testing.assert_allclose(six[0], gymnasium_rewards, rtol=4 * FLOAT32_ULP, atol=0)
    _, purejaxrl_rewards = jit_scan_steps(PUREJAXRL, raw, terminated, truncated, ALWAYS)
    np.testing.assert_allclose(five_purejaxrl[0], purejaxrl_rewards, rtol=4 * FLOAT32_ULP, atol=0)
    _, reference = purejaxrl_normalize_vec_reward(raw, terminated, truncated)
    np.testing.assert_allclose(five_purejaxrl[0], reference, rtol=1e-5)
    # PureJaxRL's LogWrapper, inside the normalizer, logs raw returns
    log_state = states[3].env_state
    done = np.asarray(terminated | truncated)
    last = [int(np.nonzero(done[:, i])[0].max()) for i in range(FIVE_ENVS) if done[:, i].any()]
    assert last
    returns = np.asarray(log_state[3])
    for i, t in zip(np.nonzero(done.any(0))[0], last, strict=True):
        start = int(np.nonzero(done[:t, i])[0].max()) + 1 if done[:t, i].any() else 0
        np.testing.assert_allclose(returns[i], raw[start : t + 1, i].sum(), rtol=1e-5)


def test_five_value_step_without_discount_counts_every_end_as_termination():
    class NoDiscount(GymnaxWrapper):
        def step(self, key, state, action, params=None):
            obs, state, reward, done, _ = self._env.step(key, state, action, params)
            return obs, state, reward, done, {}

    env, params = gymnax.make("Pendulum-v1")
    key = jax.random.key(0)
    returns = []
    for inner in (LegacyStepAPIWrapper(env), NoDiscount(LegacyStepAPIWrapper(env))):
        wrapped = rgx.NormalizeReward(inner, GAMMA, per_env=True)
        state = wrapped.reset(key, params)[1]
        state = state.replace(env_state=state.env_state.replace(time=198))  # 2 steps left
        ret = []
        for _ in range(2):
            state = wrapped.step(key, state, jnp.zeros(1), params)[1]
            ret.append(float(state.transform_state.ret))
        returns.append(ret)
    (ret_1, truncated_ret_2), (_, terminated_ret_2) = returns
    # the end at step 200 (discount 1) is a truncation: the return goes on; without a
    # discount in info it is a termination: the return restarts with its reward
    np.testing.assert_allclose(truncated_ret_2, GAMMA * ret_1 + terminated_ret_2, rtol=1e-6)
    assert abs(ret_1) > 1.0


def test_a_step_of_another_length_raises():
    class FourValues(GymnaxWrapper):
        def step(self, key, state, action, params=None):
            return self._env.step(key, state, action, params)[:4]

    env, params = gymnax.make("CartPole-v1")
    wrapped = rgx.NormalizeReward(rgx.VecEnv(FourValues(env)))
    keys = jax.random.split(jax.random.key(0), 2)
    _, state = jax.eval_shape(wrapped.reset, keys, params)
    with pytest.raises(ValueError, match="returned 4 values"):
        jax.eval_shape(wrapped.step, keys, state, jnp.zeros(2, jnp.int32), params)


# --- per-environment statistics are an explicit choice ----------------------------------------


def test_a_per_env_wrapper_under_an_unnamed_vmap_must_say_where_its_statistics_live():
    """PureJaxRL's placement (inside its VecEnv): an error, unless named or per_env=True."""
    env, params = gymnax.make("CartPole-v1")
    keys = jax.random.split(jax.random.key(0), 4)
    legacy = LegacyStepAPIWrapper(env)
    silent = PureJaxRLVecEnv(PureJaxRLLogWrapper(rgx.NormalizeReward(legacy)))
    with pytest.raises(ValueError, match=r"axis_name.*per_env=True"):
        jax.eval_shape(silent.reset, keys, params)
    chained = rn.chain(rn.normalize_reward(), rn.clip_reward())
    with pytest.raises(ValueError, match="RewardTransformWrapper"):
        jax.eval_shape(rgx.VecEnv(rgx.RewardTransformWrapper(env, chained)).reset, keys, params)
    # stateless transforms have nothing to split
    clipped = rgx.VecEnv(rgx.ClipReward(env))
    assert jax.eval_shape(clipped.reset, keys, params)[1].update_stats.shape == (4,)
    # explicit: one set per environment, or one set merged across a named axis
    per_env = PureJaxRLVecEnv(PureJaxRLLogWrapper(rgx.NormalizeReward(legacy, per_env=True)))
    _, state = per_env.reset(keys, params)
    actions = jnp.zeros(4, jnp.int32)
    _, state, *_ = per_env.step(keys, state, actions, params)
    assert rn.count_as_int(state[0].transform_state.stats).tolist() == [1, 1, 1, 1]
    named = rgx.VecEnv(rgx.NormalizeReward(legacy, axis_name="envs"), axis_name="envs")
    _, state = named.reset(keys, params)
    _, state, *_ = named.step(keys, state, actions, params)
    assert rn.count_as_int(state.transform_state.stats).tolist() == [4, 4, 4, 4]
    assert (
        rgx.NormalizeReward(env, statistics=rn.Statistics(per_env=True)).reset(keys[0], params)[1]
        is not None
    )


def test_step_refuses_a_string_flag_and_a_batched_state_takes_one_per_environment():
    env, params = gymnax.make("CartPole-v1")
    wrapped = rgx.NormalizeReward(rgx.VecEnv(env))
    keys = jax.random.split(jax.random.key(0), 4)
    _, state = wrapped.reset(keys, params)
    with pytest.raises(TypeError, match=r"update_stats should be a boolean flag.*'False'"):
        wrapped.step(keys, state, jnp.zeros(4, jnp.int32), params, "False")  # type: ignore[arg-type]  # on purpose
    # a state batched by an outer vmap takes one flag per environment
    per_env = rgx.VecEnv(rgx.NormalizeReward(env, per_env=True))
    _, batched = per_env.reset(keys, params)
    flags = jnp.array([True, False, True, False])
    np.testing.assert_array_equal(rgx.set_update_stats(batched, flags).update_stats, flags)


def test_an_axis_name_no_map_binds_is_refused_at_the_reset():
    env, params = gymnax.make("CartPole-v1")
    unnamed = rgx.VecEnv(rgx.NormalizeReward(env, axis_name="envs"))  # VecEnv names no axis
    keys = jax.random.split(jax.random.key(0), 4)
    with pytest.raises(ValueError, match=r"axis_name='envs'.*jax.vmap\(\.\.\., axis_name='envs'\)"):
        unnamed.reset(keys, params)
    named = rgx.VecEnv(rgx.NormalizeReward(env, axis_name="envs"), axis_name="envs")
    _, state = named.reset(keys, params)
    assert state.transform_state.ret.shape == (4,)


def test_a_wrapper_axis_name_needs_a_transform_that_merges_across_it():
    env, params = gymnax.make("CartPole-v1")
    keys = jax.random.split(jax.random.key(0), 4)
    unshared = rgx.RewardTransformWrapper(env, rn.normalize_reward(), axis_name="envs")
    with pytest.raises(ValueError, match=r"merges nothing across \['envs'\]"):
        rgx.VecEnv(unshared, axis_name="envs").reset(keys, params)
    shared = rn.chain(rn.normalize_reward(axis_name="envs"), rn.clip_reward(-10.0, 10.0))
    wrapped = rgx.VecEnv(
        rgx.RewardTransformWrapper(env, shared, axis_name="envs"), axis_name="envs"
    )
    _, state = wrapped.reset(keys, params)
    _, state, *_ = wrapped.step(keys, state, jnp.zeros(4, jnp.int32), params)
    assert rn.count_as_int(state.transform_state[0].stats).tolist() == [4] * 4  # one set


class PerAgentRewards(GymnaxWrapper):
    """A five-value step with three rewards and discounts per environment, one done."""

    def reset(self, key, params=None):
        return self._env.reset(key, params)

    def step(self, key, state, action, params=None):
        obs, state, reward, done, info = self._env.step(key, state, action, params)
        agents = jnp.ones(3)
        discount = info["discount"][..., None] * agents
        return obs, state, reward[..., None] * agents, done, {**info, "discount": discount}


def test_per_agent_rewards_of_a_five_value_step_get_an_error_naming_the_reward_shape():
    env, params = gymnax.make("CartPole-v1")
    wrapped = rgx.NormalizeReward(PerAgentRewards(rgx.VecEnv(LegacyStepAPIWrapper(env))))
    keys = jax.random.split(jax.random.key(0), 4)  # 4 environments, 3 agents
    _, state = wrapped.reset(keys, params)
    with pytest.raises(ValueError, match=r"reward has shape \(4, 3\).*batch_shape=\(4,\)"):
        wrapped.step(keys, state, jnp.zeros(4, jnp.int32), params)


def test_vec_env_refuses_a_single_key_by_name():
    env, params = gymnax.make("CartPole-v1")
    vec = rgx.VecEnv(env)
    for key in (jax.random.key(0), jax.random.PRNGKey(0)):  # typed and raw
        with pytest.raises(ValueError, match=r"VecEnv.reset takes one key per environment"):
            vec.reset(key, params)
    _, states = vec.reset(jax.random.split(jax.random.key(0), 2), params)
    with pytest.raises(ValueError, match=r"VecEnv.step takes one key per environment"):
        vec.step(jax.random.key(1), states, jnp.zeros(2, jnp.int32), params)


OBSERVATION_PLACEMENTS: dict[
    str, dict[str, Any]
] = {  # NormalizeObservation around a batch of 4 environments
    "shared": {},
    "per_env": {"statistics": rn.Statistics(per_env=True)},
    "tasks": {
        "statistics": rn.Statistics(num_tasks=3),
        "task_of": lambda env_state: jnp.arange(4) % 3,
    },
}


@pytest.mark.parametrize(("own", "other"), list(itertools.permutations(OBSERVATION_PLACEMENTS, 2)))
def test_observation_reset_refuses_statistics_of_another_placement(own, other):
    env, params = gymnax.make("Pendulum-v1")
    keys = jax.random.split(jax.random.key(0), 4)
    wrapped, source = (
        rgx.NormalizeObservation(rgx.VecEnv(env), **OBSERVATION_PLACEMENTS[placement])
        for placement in (own, other)
    )
    _, state = jax.eval_shape(source.reset, keys, params)
    with pytest.raises(ValueError, match=r"stats_from|state(.|\n)*(statistics=|num_tasks=)"):
        jax.eval_shape(wrapped.reset, keys, params, state.obs_state)
