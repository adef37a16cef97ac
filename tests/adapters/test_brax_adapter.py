"""rewardnorm_jax.brax on a real Brax environment, against the core, and in Brax's own SAC.

Brax's PPO through the adapter: tests/pages/test_brax_benchmark_smoke.py (it learns),
tests/adapters/test_playground_adapter.py and tests/adapters/test_brax_multidevice.py.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

brax_envs = pytest.importorskip("brax.envs", reason="the brax extra is not installed")

import rewardnorm_jax as rn  # noqa: E402  (after the skip)
from rewardnorm_jax import brax as rnb  # noqa: E402
from tests import brax_recorder  # noqa: E402
from tests.streams import jit_scan_steps  # noqa: E402

GAMMA = 0.99
NUM_ENVS, STEPS, EPISODE_LENGTH = 16, 60, 25
GYMNASIUM = rn.normalize_reward(GAMMA)


def pendulum(episode_length=EPISODE_LENGTH):
    """Brax's inverted pendulum (positional backend: quick to compile on a CPU), batched."""
    env = brax_envs.get_environment("inverted_pendulum", backend="positional")
    return brax_envs.training.wrap(env, episode_length=episode_length)


@functools.cache
def rollout():
    """16 envs, 60 steps, random actions, rewards normalized.

    Episodes end by falling (terminations) and by the 25-step limit (truncations).
    """
    wrapped = rnb.NormalizeReward(pendulum(), GAMMA)

    @jax.jit
    def run(key):
        def body(state, step_key):
            actions = jax.random.uniform(step_key, (NUM_ENVS, 1), minval=-1.0, maxval=1.0)
            state = wrapped.step(state, actions)
            raw = state.metrics["raw_reward"]
            return state, (raw, state.reward, state.done, state.info["truncation"])

        start = wrapped.reset(jax.random.split(key, NUM_ENVS))
        return jax.lax.scan(body, start, jax.random.split(key, STEPS))

    return wrapped, run(jax.random.PRNGKey(0))


FLOAT32_ULP = float(np.finfo(np.float32).eps)


def test_rewards_equal_the_core_fed_the_raw_rewards_and_flags():
    _, (state, (raw, reward, done, truncation)) = rollout()
    # the raw reward stays in the metrics: the pendulum pays 1 per step
    np.testing.assert_array_equal(raw, np.ones((STEPS, NUM_ENVS)))
    truncated = truncation > 0
    terminated = (done > 0) & ~truncated
    assert bool(terminated.any())
    assert bool(truncated.any())
    core_state, expected = jit_scan_steps(GYMNASIUM, raw, terminated, truncated)
    assert reward.dtype == raw.dtype == jnp.float32
    # The wrapper runs the core's step inside Brax's program, which XLA
    # compiles differently from the core's scan alone (which products it
    # fuses, which multiply-adds it contracts), so the batch sums round
    # differently: the statistics and rewards agree to a few float32 ulps.
    # The returns and the counts are exact; a wrong flag or reward would move
    # the rewards by far more.
    np.testing.assert_allclose(reward, expected, rtol=4 * FLOAT32_ULP, atol=0)
    learned = rnb.get_transform_state(state)
    assert rn.count_as_int(learned.stats) == NUM_ENVS * STEPS  # one set for the batch
    np.testing.assert_array_equal(learned.stats.count_words, core_state.stats.count_words)
    np.testing.assert_array_equal(learned.ret, core_state.ret)
    for quantity in ("mean", "var"):
        got, want = getattr(learned.stats, quantity), getattr(core_state.stats, quantity)
        np.testing.assert_allclose(got, want, rtol=4 * FLOAT32_ULP)


def test_frozen_evaluation_from_learned_and_checkpointed_statistics():
    wrapped, (state, _) = rollout()
    learned = rnb.get_transform_state(state)
    restored = rn.load_state(learned, rn.save_state(learned, GYMNASIUM.config), GYMNASIUM.config)
    keys = jax.random.split(jax.random.PRNGKey(1), 4)  # another batch size
    start = jax.jit(wrapped.reset)(keys)
    evaluation = rnb.set_update_stats(rnb.with_stats_from(start, restored), False)
    kept = rnb.get_transform_state(evaluation)
    np.testing.assert_array_equal(kept.ret, np.zeros(4))
    jax.tree.map(np.testing.assert_array_equal, kept.stats, learned.stats)
    step = jax.jit(wrapped.step)
    for _ in range(3):
        evaluation = step(evaluation, jnp.zeros((4, 1)))
    frozen = rnb.get_transform_state(evaluation).stats
    jax.tree.map(np.testing.assert_array_equal, frozen, learned.stats)  # nothing learned
    raw = evaluation.metrics["raw_reward"]
    expected = raw / np.sqrt(np.float32(learned.stats.var) + np.float32(1e-8))
    np.testing.assert_allclose(evaluation.reward, expected, rtol=1e-6)
    same = rnb.set_transform_state(state, jax.device_get(learned))
    jax.tree.map(np.testing.assert_array_equal, rnb.get_transform_state(same), learned)
    with pytest.raises(ValueError, match="transform_state"):
        rnb.set_transform_state(state, GYMNASIUM.init((3,)))
    with pytest.raises(ValueError, match="reward_transform_state"):
        rnb.get_transform_state(jax.eval_shape(pendulum().reset, keys))


def test_a_per_env_wrapper_under_brax_vmap_must_say_where_its_statistics_live():
    env = brax_envs.get_environment("inverted_pendulum", backend="positional")
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    inside = brax_envs.training.wrap(rnb.NormalizeReward(env), episode_length=10)
    with pytest.raises(ValueError, match=r"axis_name.*per_env=True"):
        jax.eval_shape(inside.reset, keys)
    per_env = brax_envs.training.wrap(rnb.NormalizeReward(env, per_env=True), episode_length=10)
    stats = jax.eval_shape(lambda k: rnb.get_transform_state(per_env.reset(k)).stats, keys)
    assert {leaf.shape[0] for leaf in jax.tree.leaves(stats)} == {3}  # one set per environment
    # clipping learns nothing: no choice to make
    clipped = brax_envs.training.wrap(rnb.RewardTransformWrapper(env, rn.clip_reward()), 10)
    assert jax.eval_shape(clipped.reset, keys).reward.shape == (3,)


def test_wrap_env_fn_puts_the_transform_outermost_and_leaves_evaluation_raw():
    env = brax_envs.get_environment("inverted_pendulum", backend="positional")
    fn = rnb.wrap_env_fn(GYMNASIUM)
    training = fn(env, episode_length=10, action_repeat=1, randomization_fn=None)
    assert isinstance(training, rnb.RewardTransformWrapper)
    assert isinstance(training.env, brax_envs.training.AutoResetWrapper)
    # reset as Brax's trainers do, a batch of 8 keys per device: one set per device's batch
    keys = jax.random.split(jax.random.PRNGKey(0), 8)[None]
    state = jax.eval_shape(jax.vmap(training.reset), keys)
    got = jax.tree.leaves(state.info["reward_transform_state"])
    want = jax.tree.leaves(GYMNASIUM.init((8,)))  # statistics (), returns (8,)
    assert [leaf.shape for leaf in got] == [(1, *jnp.shape(leaf)) for leaf in want]
    evaluation = fn(rnb.RawRewardEvaluation(env), episode_length=10, action_repeat=1)
    assert isinstance(evaluation, brax_envs.training.AutoResetWrapper)
    assert evaluation.unwrapped is env
    with pytest.raises(ValueError, match="transform"):
        rnb.wrap_env_fn(jnp.tanh)  # type: ignore[arg-type]  # the wrong type on purpose


class IntegerRewards(brax_envs.Wrapper):  # type: ignore[name-defined]  # brax is untyped
    """Rewards as int32, as some environments return them."""

    def reset(self, rng):
        state = self.env.reset(rng)
        return state.replace(reward=jnp.asarray(state.reward).astype(jnp.int32))

    def step(self, state, action):
        state = self.env.step(state, action)
        return state.replace(reward=jnp.asarray(state.reward).astype(jnp.int32))


def test_integer_rewards_normalize_to_floats_from_the_reset_on():
    inner = brax_envs.get_environment("inverted_pendulum", backend="positional")
    # inside Brax's EpisodeWrapper, whose scan carries the inner environment's reward type
    wrapped = rnb.NormalizeReward(brax_envs.training.wrap(IntegerRewards(inner), 25), GAMMA)

    @jax.jit
    def run(key):
        def body(state, step_key):
            actions = jax.random.uniform(step_key, (4, 1), minval=-1.0, maxval=1.0)
            state = wrapped.step(state, actions)  # the carry keeps the reset's types
            return state, (state.metrics["raw_reward"], state.reward, state.done)

        start = wrapped.reset(jax.random.split(key, 4))
        return start, jax.lax.scan(body, start, jax.random.split(key, 10))

    start, (_, (raw, reward, done)) = run(jax.random.PRNGKey(0))
    assert start.reward.dtype == reward.dtype == jnp.float32
    assert raw.dtype == jnp.int32
    _, expected = jit_scan_steps(GYMNASIUM, raw, done > 0, jnp.zeros_like(done, bool))
    np.testing.assert_allclose(reward, expected, rtol=4 * FLOAT32_ULP)
    assert not np.array_equal(reward, np.round(reward))  # not truncated to integers


def test_an_axis_name_no_map_binds_is_refused_at_the_reset():
    env = brax_envs.get_environment("inverted_pendulum", backend="positional")
    unnamed = brax_envs.training.wrap(rnb.NormalizeReward(env, axis_name="envs"), 10)
    with pytest.raises(ValueError, match=r"axis_name='envs'.*jax.vmap\(\.\.\., axis_name='envs'\)"):
        jax.eval_shape(unnamed.reset, jax.random.split(jax.random.PRNGKey(0), 3))


def test_a_wrapper_that_cannot_see_truncations_refuses_semantics_that_reset_at_them():
    env = brax_envs.get_environment("inverted_pendulum", backend="positional")
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    inside = rnb.NormalizeReward(env, per_env=True, semantics="purejaxrl")
    with pytest.raises(ValueError, match=r"sees no info\['truncation'\].*reset_before='done'"):
        jax.eval_shape(brax_envs.training.wrap(inside, episode_length=10).reset, keys)
    terminations_only = rnb.NormalizeReward(env, per_env=True)  # Gymnasium's semantics
    state = jax.eval_shape(brax_envs.training.wrap(terminations_only, 10).reset, keys)
    assert rnb.get_transform_state(state).ret.shape == (3,)


@pytest.mark.slow
def test_brax_sac_trains_on_normalized_rewards_and_evaluates_raw_returns():
    """Brax's own SAC through ``wrap_env_fn``: every step it stored was normalized as the core.

    SAC stores each step's transformed reward in its replay buffer as it
    collects (its prefill included): the recorded rewards equal the core fed
    the raw rewards and episode ends, and the statistics counted every step.
    """
    from brax.training.agents.sac import networks as sac_networks
    from brax.training.agents.sac import train as sac

    env = brax_envs.get_environment("inverted_pendulum", backend="positional")
    transform = rn.normalize_reward(GAMMA, semantics="purejaxrl")
    records: list = []
    progress: list = []
    sac.train(
        environment=env,
        wrap_env_fn=brax_recorder.recording_wrap_env_fn(transform, records),
        eval_env=rnb.RawRewardEvaluation(env),
        num_timesteps=640,
        num_evals=1,
        episode_length=EPISODE_LENGTH,
        num_envs=8,
        batch_size=32,
        min_replay_size=64,
        grad_updates_per_step=1,
        num_eval_envs=8,
        network_factory=functools.partial(sac_networks.make_sac_networks, hidden_layer_sizes=(16,)),
        seed=0,
        progress_fn=lambda step, metrics: progress.append((step, metrics)),
    )
    steps = brax_recorder.stream(records)
    raw = steps["raw"]
    assert raw.shape == (80, 8)  # 8 prefill steps, then 72 training steps, of 8 environments
    assert steps["terminated"].any()  # the pendulum falls
    assert steps["truncated"].any()  # and reaches the 25-step limit
    core_state, expected = jit_scan_steps(transform, raw, steps["terminated"], steps["truncated"])
    np.testing.assert_allclose(steps["reward"], expected, rtol=4 * FLOAT32_ULP, atol=0)
    (final,) = steps["final"]
    last_step, last = progress[-1]
    assert rn.count_as_int(final.stats) == raw.size == last_step  # Brax's own step count
    np.testing.assert_array_equal(final.ret, core_state.ret)
    np.testing.assert_allclose(final.stats.var, core_state.stats.var, rtol=4 * FLOAT32_ULP)
    # raw returns: the pendulum pays 1 per step while up, so return = episode length
    np.testing.assert_allclose(
        last["eval/episode_reward"], last["eval/avg_episode_length"], rtol=1e-5
    )
    assert "eval/episode_raw_reward" not in last  # evaluation saw no transform


def test_wrap_env_fn_passes_task_ids_to_a_keyed_chain():
    # Keyed statistics behind wrap_env_fn got no ids: every environment merged into task 0.
    transform = rn.chain(
        rn.normalize_reward(GAMMA, statistics=rn.Statistics(num_tasks=3)), rn.clip_reward(-5.0, 5.0)
    )
    with pytest.raises(ValueError, match="num_tasks and task_of go together"):
        rnb.wrap_env_fn(transform)
    task_of = lambda state: jnp.arange(4) % 3  # noqa: E731  (environment i runs task i % 3)
    fn = rnb.wrap_env_fn(transform, task_of=task_of)
    env = fn(brax_envs.get_environment("fast"))  # Brax's test environment: quick to compile

    @jax.jit
    def run(keys):
        state = env.reset(keys)
        step = lambda state, _: (env.step(state, jnp.zeros((4, 1))), None)  # noqa: E731
        return jax.lax.scan(step, state, None, length=5)[0]

    stats = rnb.get_transform_state(run(jax.random.split(jax.random.PRNGKey(0), 4)))[0].stats
    assert rn.count_as_int(stats).tolist() == [10, 5, 5]


def test_components_on_scalar_brax_rewards_is_refused():
    wrapped = rnb.NormalizeReward(pendulum(), statistics=rn.Statistics(components=1))
    with pytest.raises(ValueError, match=r"has components=1: .* one number per environment"):
        jax.eval_shape(wrapped.reset, jax.random.split(jax.random.PRNGKey(0), 4))
