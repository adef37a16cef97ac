"""rewardnorm_jax.jaxmarl on real JaxMARL environments, against a per-agent float64 reference."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

jaxmarl = pytest.importorskip("jaxmarl", reason="the jaxmarl extra is not installed")

from jaxmarl.wrappers.baselines import JaxMARLWrapper, LogWrapper, MPELogWrapper  # noqa: E402

import rewardnorm_jax as rn  # noqa: E402  (after the skip)
from rewardnorm_jax import jaxmarl as rnm  # noqa: E402
from tests.observation_reference import GymnasiumReference  # noqa: E402
from tests.reference import normalize_stream  # noqa: E402

GAMMA = 0.99
NUM_ENVS, STEPS = 8, 60
# MPE ends at its 25-step limit, coin_game after num_inner_steps * num_outer_steps = 20 steps;
# coin_game's two players earn different rewards (1 for a coin, -2 when the other takes theirs).
ENVS = {"MPE_simple_spread_v3": {}, "coin_game": {"num_inner_steps": 10, "num_outer_steps": 2}}
LOGGERS = {"LogWrapper": (LogWrapper, 1), "MPELogWrapper": (MPELogWrapper, None)}


def random_actions(env, key):
    keys = jax.random.split(key, len(env.agents))
    return {
        agent: jax.random.randint(k, (NUM_ENVS,), 0, env.action_space(agent).n)
        for k, agent in zip(keys, env.agents, strict=True)
    }


def vmapped(wrapped, steps=STEPS, axis_name="envs", freeze_from=None):
    """IPPO's stack: ``jax.vmap(env.reset)`` / ``jax.vmap(env.step)`` inside a ``lax.scan``.

    From step ``freeze_from`` on, the statistics are frozen through the state. With
    ``axis_name=None`` the wrapper is stepped as given, with one key per environment.
    """
    mapped = axis_name is not None
    reset = jax.vmap(wrapped.reset, axis_name=axis_name) if mapped else wrapped.reset
    step = jax.vmap(wrapped.step, axis_name=axis_name) if mapped else wrapped.step

    @jax.jit
    def run(key):
        def body(state, xs):
            t, step_key = xs
            if freeze_from is not None:
                state = rnm.set_update_stats(state, t < freeze_from)
            actions = random_actions(wrapped, step_key)
            _, state, rewards, dones, infos = step(
                jax.random.split(step_key, NUM_ENVS), state, actions
            )
            stacked = jnp.stack([rewards[agent] for agent in wrapped.agents], axis=-1)
            return state, (stacked, dones["__all__"], infos)

        _, state = reset(jax.random.split(key, NUM_ENVS))
        return jax.lax.scan(body, state, (jnp.arange(steps), jax.random.split(key, steps)))

    return run(jax.random.PRNGKey(0))


@functools.cache
def rollout(name, components, dtype=None):
    """``NormalizeReward(LogWrapper(env))`` over 8 environments sharing one set of statistics."""
    env = LogWrapper(jaxmarl.make(name, **ENVS[name]))
    wrapped = rnm.NormalizeReward(
        env, GAMMA, axis_name="envs", dtype=dtype, statistics=rn.Statistics(components=components)
    )
    return jax.tree.map(np.asarray, vmapped(wrapped))


def reference(raw, done, components):
    """Gymnasium's recurrence in float64: one stream per agent, or one for the team."""
    steps, num_envs, num_agents = raw.shape
    ends = np.repeat(done[:, :, None], num_agents, axis=2)
    if components == 0:  # the team: every agent's return joins one set of statistics
        shape = (steps, num_envs * num_agents)
        out, _, rms = normalize_stream(
            raw.reshape(shape), ends.reshape(shape), np.zeros(shape), gamma=GAMMA
        )
        return out.reshape(raw.shape), [rms]
    streams = [
        normalize_stream(raw[..., a], ends[..., a], np.zeros_like(done), gamma=GAMMA)
        for a in range(num_agents)
    ]
    return np.stack([out for out, _, _ in streams], axis=-1), [rms for _, _, rms in streams]


@pytest.mark.parametrize("components", [0, 1], ids=["team", "per_agent"])
@pytest.mark.parametrize("name", list(ENVS))
def test_rewards_equal_a_float64_reference_per_agent_and_for_the_team(name, components):
    state, (reward, done, infos) = rollout(name, components)
    raw = infos["raw_reward"]
    assert raw.shape == reward.shape == (STEPS, NUM_ENVS, len(jaxmarl.make(name).agents))
    assert done.any()
    assert (raw != 0).any()
    expected, rms = reference(raw, done, components)
    np.testing.assert_allclose(reward, expected, rtol=2e-5, atol=1e-6)
    stats = rnm.get_transform_state(state).stats
    np.testing.assert_allclose(stats.var[0], [r.var for r in rms], rtol=2e-5)
    counts = rn.count_as_int(jax.tree.map(lambda x: x[0], stats))
    per_set = NUM_ENVS * STEPS * (raw.shape[-1] if components == 0 else 1)
    np.testing.assert_array_equal(counts, np.full(np.shape(counts), per_set))


@pytest.mark.parametrize("components", [0, 1], ids=["team", "per_agent"])
def test_float64_statistics_match_the_reference_to_1e_10(components):
    with jax.enable_x64(True):
        _, (reward, done, infos) = rollout("MPE_simple_spread_v3", components, jnp.float64)
    assert reward.dtype == np.float64
    expected, _ = reference(infos["raw_reward"], done, components)
    np.testing.assert_allclose(reward, expected, rtol=1e-10, atol=0)


def test_every_vmapped_environment_holds_the_same_shared_statistics():
    state, _ = rollout("MPE_simple_spread_v3", 0)
    stats = rnm.get_transform_state(state).stats
    for leaf in jax.tree.leaves(stats):
        np.testing.assert_array_equal(leaf, np.broadcast_to(leaf[:1], leaf.shape))
    assert rnm.get_transform_state(state).ret.shape == (NUM_ENVS, 3)


def first_two_ends(done):
    """The steps that end the first two episodes, which all environments end together."""
    ends = np.flatnonzero(done.all(axis=1))
    assert len(ends) >= 2
    assert not (done.any(axis=1) & ~done.all(axis=1)).any()
    return ends[0], ends[1]


@pytest.mark.parametrize("logger", list(LOGGERS))
def test_a_log_wrapper_inside_logs_returns_in_environment_units(logger):
    make, scale = LOGGERS[logger]
    env = jaxmarl.make("MPE_simple_spread_v3")
    wrapped = rnm.NormalizeReward(make(env), GAMMA, axis_name="envs")
    _, (_, done, infos) = jax.tree.map(np.asarray, vmapped(wrapped))
    raw, logged = infos["raw_reward"], infos["returned_episode_returns"]
    scale = env.num_agents if scale is None else scale  # MPELogWrapper logs A times the reward
    first, second = first_two_ends(done)
    np.testing.assert_allclose(logged[first], scale * raw[: first + 1].sum(axis=0), rtol=1e-5)
    episode = raw[first + 1 : second + 1].sum(axis=0)
    np.testing.assert_allclose(logged[second], scale * episode, rtol=1e-5)


def test_a_log_wrapper_outside_logs_normalized_returns_and_reaches_the_statistics():
    env = jaxmarl.make("MPE_simple_spread_v3")
    # JaxMARL types a wrapper's env as MultiAgentEnv; its wrappers stand in for one
    wrapped = LogWrapper(rnm.NormalizeReward(env, GAMMA, axis_name="envs"))  # type: ignore[arg-type]
    state, (reward, done, infos) = jax.tree.map(np.asarray, vmapped(wrapped, freeze_from=40))
    first, _ = first_two_ends(done)
    episode = reward[: first + 1].sum(axis=0)
    np.testing.assert_allclose(infos["returned_episode_returns"][first], episode, rtol=1e-5)
    np.testing.assert_array_equal(infos["raw_reward"].shape, reward.shape)
    counts = rn.count_as_int(jax.tree.map(lambda x: x[0], rnm.get_transform_state(state).stats))
    assert int(counts) == NUM_ENVS * 40 * env.num_agents  # frozen through LogEnvState from 40 on


def test_placement_is_said_or_refused():
    env = jaxmarl.make("MPE_simple_spread_v3")
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    with pytest.raises(ValueError, match=r"reset with the key of one environment"):
        jax.vmap(rnm.NormalizeReward(env).reset)(keys)
    unshared = rnm.RewardTransformWrapper(env, rn.normalize_reward(), axis_name="envs")
    with pytest.raises(ValueError, match=r"merges nothing across \['envs'\]"):
        jax.vmap(unshared.reset, axis_name="envs")(keys)
    with pytest.raises(ValueError, match=r"axis_name='envs'"):
        rnm.NormalizeReward(env, axis_name="envs").reset(keys[0])
    _, state = jax.vmap(
        rnm.NormalizeReward(env, per_env=True, statistics=rn.Statistics(components=1)).reset
    )(keys)
    assert state.transform_state.stats.mean.shape == (4, 3)  # one set per environment and agent


def test_rewards_of_other_dtypes_stack_to_the_statistics_dtype():
    env = jaxmarl.make("MPE_simple_tag_v3")  # integer rewards for adversaries, float for prey
    wrapped = rnm.NormalizeReward(env, per_env=True, statistics=rn.Statistics(components=1))
    _, state = wrapped.reset(jax.random.PRNGKey(0))
    actions = dict.fromkeys(env.agents, 0)
    _, state, rewards, _, infos = wrapped.step(jax.random.PRNGKey(1), state, actions)
    assert {r.dtype for r in rewards.values()} == {jnp.dtype(jnp.float32)}
    assert infos["raw_reward"].shape == (4,)
    assert rnm.get_transform_state(state).ret.shape == (4,)


class Batched(JaxMARLWrapper):
    """An environment whose reset and step take one key per environment (``jax.vmap``)."""

    def reset(self, keys):
        return jax.vmap(self._env.reset)(keys)

    def step(self, keys, state, actions):
        return jax.vmap(self._env.step)(keys, state, actions)


def test_around_a_batched_environment_one_set_equals_the_named_vmap():
    env = jaxmarl.make("MPE_simple_spread_v3")
    around = rnm.NormalizeReward(Batched(env), statistics=rn.Statistics(components=1))
    state, (reward, _, infos) = jax.tree.map(np.asarray, vmapped(around, steps=30, axis_name=None))
    assert rnm.get_transform_state(state).stats.mean.shape == (3,)  # one set, not one per env
    named = rnm.NormalizeReward(env, axis_name="envs", statistics=rn.Statistics(components=1))
    _, (expected, _, named_infos) = jax.tree.map(np.asarray, vmapped(named, steps=30))
    np.testing.assert_array_equal(infos["raw_reward"], named_infos["raw_reward"])
    np.testing.assert_allclose(reward, expected, rtol=1e-6)


def test_team_statistics_per_task_take_one_id_per_environment():
    # With team statistics the agent axis counts as environments to the transform; the
    # wrapper gives one id per environment, which every agent of it shares.
    env = jaxmarl.make("MPE_simple_spread_v3")
    parity = lambda state: jnp.asarray(state.step % 2, jnp.int32)  # noqa: E731
    wrapped = rnm.NormalizeReward(
        env, GAMMA, task_of=parity, axis_name="envs", statistics=rn.Statistics(num_tasks=2)
    )
    state, _ = vmapped(wrapped, steps=3)
    agents = len(env.agents)
    counts = rn.count_as_int(rnm.get_transform_state(state).stats)[0]  # copy of environment 0
    assert counts.tolist() == [2 * NUM_ENVS * agents, NUM_ENVS * agents]  # steps 0, 2 and 1
    # A keyed member of a chain, with statistics per task and agent, gets the same ids.
    transform = rn.chain(
        rn.normalize_reward(
            GAMMA, axis_name="envs", statistics=rn.Statistics(components=1, num_tasks=2)
        ),
        rn.clip_reward(-5.0, 5.0),
    )
    chained = rnm.RewardTransformWrapper(env, transform, axis_name="envs", task_of=parity)
    state, _ = vmapped(chained, steps=3)
    counts = rn.count_as_int(rnm.get_transform_state(state)[0].stats)[0]
    assert counts.tolist() == [[2 * NUM_ENVS] * agents, [NUM_ENVS] * agents]
    wrong = rnm.NormalizeReward(
        env,
        task_of=lambda s: jnp.zeros(agents, jnp.int32),
        axis_name="envs",
        statistics=rn.Statistics(num_tasks=2),
    )
    with pytest.raises(ValueError, match=r"task_of returned ids of shape \(3,\); expected \(\)"):
        vmapped(wrong, steps=1)


def test_with_stats_from_another_vmapped_batch_names_the_form_that_works():
    wrapped = rnm.NormalizeReward(jaxmarl.make("MPE_simple_spread_v3"), axis_name="envs")
    reset = jax.vmap(wrapped.reset, axis_name="envs")
    _, four = reset(jax.random.split(jax.random.PRNGKey(0), 4))
    _, eight = reset(jax.random.split(jax.random.PRNGKey(1), 8))
    stats_from = rnm.get_transform_state(eight)
    with pytest.raises(ValueError, match=r"jax.vmap\(with_stats_from, in_axes=\(0, None\)\)"):
        rnm.with_stats_from(four, stats_from)
    one = jax.tree.map(lambda x: x[0], stats_from)
    moved = jax.vmap(rnm.with_stats_from, in_axes=(0, None))(four, one)
    assert rnm.get_transform_state(moved).ret.shape == (4, len(wrapped.agents))


def test_normalize_observation_per_agent_across_the_named_axis():
    """Each agent's observation by statistics of its own, merged across the vmapped batch."""
    num_envs = 4
    base = jaxmarl.make("MPE_simple_tag_v3")  # adversaries and good agents see different features
    env = rnm.NormalizeObservation(base, axis_name="envs")
    keys = jax.random.split(jax.random.PRNGKey(0), num_envs)
    obs, state = jax.jit(jax.vmap(env.reset, axis_name="envs"))(keys)
    raw_obs, raw_state = jax.vmap(base.reset)(keys)
    step = jax.jit(jax.vmap(env.step, axis_name="envs"))
    references = {agent: GymnasiumReference(raw_obs[agent].shape[1:]) for agent in base.agents}
    for agent in base.agents:
        references[agent].step(np.asarray(raw_obs[agent]))
    for t in range(4):
        step_keys = jax.random.split(jax.random.PRNGKey(t + 1), num_envs)
        actions = {agent: jnp.full(num_envs, t % 5) for agent in base.agents}
        obs, state, *_ = step(step_keys, state, actions)
        raw_obs, raw_state, *_ = jax.vmap(base.step)(step_keys, raw_state, actions)
        for agent in base.agents:
            expected = references[agent].step(np.asarray(raw_obs[agent]))
            np.testing.assert_allclose(obs[agent], expected, rtol=1e-4, atol=1e-5)
    stats = rnm.get_observation_state(state).stats
    assert stats["adversary_0"].mean.shape[1:] != stats["agent_0"].mean.shape[1:]
    assert (rn.count_as_int(stats["agent_0"]) == 5 * num_envs).all()
    with pytest.raises(ValueError, match="no axis_name"):
        jax.vmap(rnm.NormalizeObservation(base).reset)(keys)
