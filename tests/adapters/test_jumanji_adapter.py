"""rewardnorm_jax.jumanji on real Jumanji environments, against the core."""

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

jumanji = pytest.importorskip("jumanji", reason="the jumanji extra is not installed")

from jumanji.wrappers import (  # noqa: E402
    AutoResetWrapper,
    VmapAutoResetWrapper,
    VmapWrapper,
    Wrapper,
)

import rewardnorm_jax as rn  # noqa: E402  (after the skip)
from rewardnorm_jax import jumanji as rnj  # noqa: E402
from tests.observation_reference import GymnasiumReference  # noqa: E402
from tests.streams import jit_scan_steps  # noqa: E402

GAMMA = 0.99
NUM_ENVS, STEPS = 16, 60
GYMNASIUM = rn.normalize_reward(GAMMA)
# Snake ends by collisions and by its time limit, both with discount 0 (terminations);
# Minesweeper ends on a mine (discount 0) and rewards 1 per new safe square;
# LevelBasedForaging (rewards per agent) ends at its time limit with discount 1 (truncations).
ENVS = {
    "Snake-v1": ({"time_limit": 20}, "terminated"),
    "Minesweeper-v0": ({}, "rewarded"),
    "LevelBasedForaging-v0": ({"time_limit": 15}, "truncated"),
}


def random_actions(env, key):
    num_values = env.action_spec.num_values
    shape = (NUM_ENVS, *jnp.shape(num_values))
    return jax.random.randint(key, shape, 0, num_values).astype(env.action_spec.dtype)


@functools.cache
def rollout(name):
    """16 envs, 60 steps, random actions, ``NormalizeReward(VmapAutoResetWrapper(env))``.

    The statistics are frozen on steps 40-49 through the state.
    """
    base = jumanji.make(name, **ENVS[name][0])
    wrapped = rnj.NormalizeReward(VmapAutoResetWrapper(base), GAMMA)
    schedule = (jnp.arange(STEPS) < 40) | (jnp.arange(STEPS) >= 50)

    @jax.jit
    def run(key):
        def body(state, xs):
            step_key, flag = xs
            state = rnj.set_update_stats(state, flag)
            state, timestep = wrapped.step(state, random_actions(base, step_key))
            return state, (
                timestep.extras["raw_reward"],
                timestep.reward,
                timestep.step_type,
                timestep.discount,
            )

        state, _ = wrapped.reset(jax.random.split(key, NUM_ENVS))
        return jax.lax.scan(body, state, (jax.random.split(key, STEPS), schedule))

    return wrapped, schedule, run(jax.random.PRNGKey(0))


@pytest.mark.parametrize("name", list(ENVS))
def test_rewards_equal_the_core_fed_the_raw_rewards_and_flags(name):
    _, schedule, (state, (raw, reward, step_type, discount)) = rollout(name)
    last = (step_type == jumanji.types.StepType.LAST).reshape(
        step_type.shape + (1,) * (raw.ndim - 2)
    )
    terminated, truncated = last & (discount == 0), last & (discount > 0)
    shown = {"terminated": terminated, "truncated": truncated, "rewarded": raw != 0}
    assert bool(shown[ENVS[name][1]].any())
    core_state, expected = jit_scan_steps(GYMNASIUM, raw, terminated, truncated, schedule)
    assert reward.dtype == raw.dtype
    np.testing.assert_array_equal(reward, expected)
    learned = rnj.get_transform_state(state)
    samples = raw[0].size * int(schedule.sum())
    assert rn.count_as_int(learned.stats) == samples  # one set for the batch, frozen 10 steps
    jax.tree.map(np.testing.assert_array_equal, learned, core_state)


def test_evaluation_from_learned_and_checkpointed_statistics():
    wrapped, _, (state, _) = rollout("Snake-v1")
    learned = rnj.get_transform_state(state)
    restored = rn.load_state(learned, rn.save_state(learned, GYMNASIUM.config), GYMNASIUM.config)
    start, _ = jax.jit(wrapped.reset)(jax.random.split(jax.random.PRNGKey(1), NUM_ENVS))
    evaluation = rnj.set_update_stats(rnj.with_stats_from(start, restored), False)
    kept = rnj.get_transform_state(evaluation)
    np.testing.assert_array_equal(kept.ret, np.zeros(NUM_ENVS))
    jax.tree.map(np.testing.assert_array_equal, kept.stats, learned.stats)
    evaluation, timestep = jax.jit(wrapped.step)(evaluation, jnp.zeros(NUM_ENVS, jnp.int32))
    jax.tree.map(
        np.testing.assert_array_equal, rnj.get_transform_state(evaluation).stats, learned.stats
    )  # frozen: nothing learned
    np.testing.assert_array_equal(
        timestep.reward, wrapped.transform.apply(learned, timestep.extras["raw_reward"])
    )


def test_composes_with_auto_reset_wrappers_and_refuses_silent_per_env_statistics():
    snake = jumanji.make("Snake-v1")
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    # outside VmapWrapper(AutoResetWrapper(env)): one set for the batch
    batched = rnj.NormalizeReward(VmapWrapper(AutoResetWrapper(snake)))
    assert jax.eval_shape(batched.reset, keys)[0].transform_state.ret.shape == (3,)
    # inside Jumanji's unnamed vmap: an explicit choice, or an error
    silent = VmapAutoResetWrapper(rnj.NormalizeReward(snake))
    with pytest.raises(ValueError, match=r"axis_name.*per_env=True"):
        jax.eval_shape(silent.reset, keys)
    with pytest.raises(ValueError, match=r"NormalizeReward\(VmapAutoResetWrapper\(env\)\)"):
        jax.eval_shape(silent.reset, keys)  # the placement that fits Jumanji's auto-reset
    per_env = VmapWrapper(rnj.NormalizeReward(snake, per_env=True))
    stats = jax.eval_shape(lambda k: per_env.reset(k)[0].transform_state.stats, keys)
    assert {leaf.shape[0] for leaf in jax.tree.leaves(stats)} == {3}  # one set per environment
    # inside AutoResetWrapper it would restart with every episode: refused
    with pytest.raises(AttributeError, match="key"):
        jax.eval_shape(
            AutoResetWrapper(rnj.NormalizeReward(snake, per_env=True)).step,
            jax.eval_shape(rnj.NormalizeReward(snake, per_env=True).reset, keys[0])[0],
            jnp.int32(0),
        )
    with pytest.raises(ValueError, match="transform"):
        rnj.RewardTransformWrapper(snake, jnp.tanh)  # type: ignore[arg-type]  # on purpose


AGENT_SCALES = jnp.array([1.0, -2.0, 0.5, 3.0])  # four agents' rewards from one reward


class PerAgentRewards(Wrapper):
    """One reward per agent and one discount per step, as a custom multi-agent suite has."""

    def reset(self, key):
        state, timestep = self._env.reset(key)
        return state, dataclasses.replace(timestep, reward=timestep.reward * AGENT_SCALES)

    def step(self, state, action):
        state, timestep = self._env.step(state, action)
        return state, dataclasses.replace(timestep, reward=timestep.reward * AGENT_SCALES)


class IntegerRewards(Wrapper):
    """Rewards as int32, as some suites return them."""

    def reset(self, key):
        state, timestep = self._env.reset(key)
        return state, dataclasses.replace(timestep, reward=timestep.reward.astype(jnp.int32))

    def step(self, state, action):
        state, timestep = self._env.step(state, action)
        return state, dataclasses.replace(timestep, reward=timestep.reward.astype(jnp.int32))


def scan_from_reset(wrapped, base, num_envs, steps=STEPS):
    """Reset, then ``steps`` random steps in a ``lax.scan`` whose carry starts at the reset."""

    @jax.jit
    def run(key):
        def body(carry, step_key):
            state, _ = carry
            state, timestep = wrapped.step(state, random_actions(base, step_key)[:num_envs])
            out = (timestep.extras["raw_reward"], timestep.step_type, timestep.discount)
            return (state, timestep), (timestep.reward, *out)

        start = wrapped.reset(jax.random.split(key, num_envs))
        return jax.lax.scan(body, start, jax.random.split(key, steps))

    return run(jax.random.PRNGKey(3))


@pytest.mark.parametrize("num_envs", [4, 3])  # as many environments as agents, and fewer
def test_one_discount_per_step_ends_every_agent_reward_of_its_environment(num_envs):
    base = jumanji.make("Minesweeper-v0")
    wrapped = rnj.NormalizeReward(VmapAutoResetWrapper(PerAgentRewards(base)), GAMMA)
    (state, _), (reward, raw, step_type, discount) = scan_from_reset(wrapped, base, num_envs)
    assert raw.shape == (STEPS, num_envs, 4)
    assert discount.shape == (STEPS, num_envs)
    last = (step_type == jumanji.types.StepType.LAST) & (discount == 0)
    assert bool(last.any())  # episodes end on a mine
    terminated = jnp.broadcast_to(last[..., None], raw.shape)
    core_state, expected = jit_scan_steps(
        GYMNASIUM, raw, terminated, jnp.zeros_like(terminated), jnp.ones(STEPS, bool)
    )
    np.testing.assert_allclose(reward, expected, rtol=4 * float(np.finfo(np.float32).eps))
    np.testing.assert_allclose(
        rnj.get_transform_state(state).ret, core_state.ret, rtol=1e-5, atol=1e-6
    )


def test_integer_rewards_normalize_to_floats_from_the_reset_on():
    base = jumanji.make("Minesweeper-v0")
    wrapped = rnj.NormalizeReward(VmapAutoResetWrapper(IntegerRewards(base)), GAMMA)
    _start, timestep = wrapped.reset(jax.random.split(jax.random.PRNGKey(0), NUM_ENVS))
    assert timestep.reward.dtype == jnp.float32  # the scan's carry keeps its type
    assert timestep.extras["raw_reward"].dtype == jnp.int32
    (_state, _), (reward, raw, step_type, discount) = scan_from_reset(wrapped, base, NUM_ENVS)
    assert reward.dtype == jnp.float32
    assert raw.dtype == jnp.int32
    last = step_type == jumanji.types.StepType.LAST
    _, expected = jit_scan_steps(
        GYMNASIUM, raw, last & (discount == 0), last & (discount > 0), jnp.ones(STEPS, bool)
    )
    np.testing.assert_allclose(reward, expected, rtol=4 * float(np.finfo(np.float32).eps))
    assert not np.array_equal(reward, np.round(reward))  # not truncated to integers


def test_task_of_gives_one_id_per_environment_for_all_its_agents():
    base = jumanji.make("Minesweeper-v0")
    tasks = jnp.arange(4) % 2  # environments 0 and 2 run task 0, 1 and 3 task 1
    wrapped = rnj.NormalizeReward(
        VmapAutoResetWrapper(PerAgentRewards(base)),
        GAMMA,
        task_of=lambda s: tasks,
        statistics=rn.Statistics(num_tasks=2),
    )
    (state, _), (reward, raw, step_type, discount) = scan_from_reset(wrapped, base, 4, steps=10)
    counts = rn.count_as_int(rnj.get_transform_state(state).stats)
    assert counts.tolist() == [10 * 2 * 4, 10 * 2 * 4]  # steps x environments x agents
    last = (step_type == jumanji.types.StepType.LAST) & (discount == 0)
    core = rn.normalize_reward(GAMMA, statistics=rn.Statistics(num_tasks=2))
    core_state, expected = core.init((4, 4)), []
    for t in range(10):  # the core fed the raw rewards, the ends and the same ids
        out, core_state = core.step(core_state, raw[t], last[t], False, task=tasks)
        expected.append(out)
    np.testing.assert_allclose(reward, np.stack(expected), rtol=4 * float(np.finfo(np.float32).eps))
    one_for_all = rnj.NormalizeReward(
        VmapAutoResetWrapper(base),
        task_of=lambda s: jnp.int32(1),
        statistics=rn.Statistics(num_tasks=2),
    )
    with pytest.raises(ValueError, match=r"task_of returned ids of shape \(\); expected the"):
        scan_from_reset(one_for_all, base, 4, steps=1)


def test_normalize_observation_around_the_batch_integer_leaves_pass():
    """Snake's observation: a float grid normalized, the step count and action mask unchanged."""
    base = VmapAutoResetWrapper(jumanji.make("Snake-v1"))
    env = rnj.NormalizeReward(rnj.NormalizeObservation(base), 0.99)
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    state, timestep = jax.jit(env.reset)(keys)
    raw_state, raw = jax.jit(base.reset)(keys)
    actions = jnp.array([0, 1, 2, 3])
    step, raw_step = jax.jit(env.step), jax.jit(base.step)
    raws = [raw.observation.grid]
    for _ in range(5):
        state, timestep = step(state, actions)
        raw_state, raw = raw_step(raw_state, actions)
        raws.append(raw.observation.grid)
    np.testing.assert_array_equal(timestep.observation.action_mask, raw.observation.action_mask)
    np.testing.assert_array_equal(timestep.observation.step_count, raw.observation.step_count)
    reference = GymnasiumReference(raws[0].shape[1:])
    expected = [reference.step(np.asarray(grid)) for grid in raws]
    np.testing.assert_allclose(timestep.observation.grid, expected[-1], rtol=1e-5, atol=1e-5)
    stats = rnj.get_observation_state(state).stats
    assert (rn.count_as_int(stats.grid) == 24).all()
    assert int(rn.count_as_int(rnj.get_transform_state(state).stats)) == 20
    # Evaluation from the learned statistics, frozen.
    eval_state, _ = jax.jit(env.reset)(keys)
    eval_state = rnj.set_observation_state(eval_state, rnj.get_observation_state(state))
    eval_state = rnj.set_observation_update_stats(eval_state, False)
    eval_state, _ = step(eval_state, actions)
    jax.tree.map(
        np.testing.assert_array_equal,
        rnj.get_observation_state(eval_state),
        rnj.get_observation_state(state),
    )


@pytest.mark.parametrize(("own", "other"), [("shared", "per_env"), ("per_env", "shared")])
def test_observation_reset_refuses_statistics_of_another_placement(own, other):
    base = VmapAutoResetWrapper(jumanji.make("Snake-v1"))
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    placements: dict[str, dict[str, Any]] = {
        "shared": {},
        "per_env": {"statistics": rn.Statistics(per_env=True)},
    }
    wrapped, source = (rnj.NormalizeObservation(base, **placements[name]) for name in (own, other))
    state, _ = jax.eval_shape(source.reset, keys)
    with pytest.raises(ValueError, match=r"stats_from|state(.|\n)*(statistics=|num_tasks=)"):
        jax.eval_shape(wrapped.reset, keys, stats_from=rnj.get_observation_state(state))
