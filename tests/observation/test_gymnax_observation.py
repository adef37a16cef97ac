"""rewardnorm_jax.gymnax.NormalizeObservation on a real gymnax environment."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

gymnax = pytest.importorskip("gymnax", reason="the gymnax extra is not installed")

from gymnax.wrappers.purerl import GymnaxWrapper  # noqa: E402

import rewardnorm_jax as rn  # noqa: E402  (after the skip)
import rewardnorm_jax.gymnax as rngym  # noqa: E402
from tests.observation_reference import GymnasiumReference, PureJaxRLReference  # noqa: E402

NUM_ENVS, STEPS = 16, 40


def pendulum():
    env, params = gymnax.make("Pendulum-v1")
    return env, params


def rollout(env, params, state, seed, steps=STEPS, update_stats=True):
    """Observations of ``steps`` steps of fixed random actions (the same for every wrapper)."""
    keys = jax.random.split(jax.random.key(seed), steps)
    actions = jax.random.uniform(
        jax.random.key(seed + 1), (steps, NUM_ENVS, 1), minval=-2, maxval=2
    )

    def body(state, inputs):
        key, action = inputs
        flag = () if update_stats is True else (update_stats,)  # VecEnv's step takes none
        result = env.step(jax.random.split(key, NUM_ENVS), state, action, params, *flag)
        return result[1], (result[0], result[2])

    return jax.jit(lambda s: jax.lax.scan(body, s, (keys, actions)))(state)


def raw_rollout(env, params, seed):
    keys = jax.random.split(jax.random.key(seed), STEPS)
    actions = jax.random.uniform(
        jax.random.key(seed + 1), (STEPS, NUM_ENVS, 1), minval=-2, maxval=2
    )

    def body(state, inputs):
        key, action = inputs
        obs, state, reward, *_ = env.step(jax.random.split(key, NUM_ENVS), state, action, params)
        return state, (obs, reward)

    obs, state = env.reset(jax.random.split(jax.random.key(seed - 1), NUM_ENVS), params)
    return obs, jax.jit(lambda s: jax.lax.scan(body, s, (keys, actions)))(state)[1]


def test_purejaxrl_preset_reproduces_normalize_vec_observation():
    base, params = pendulum()
    raw_reset, (raw_obs, _) = raw_rollout(rngym.VecEnv(base), params, seed=3)
    env = rngym.NormalizeObservation(rngym.VecEnv(base), "purejaxrl")
    obs, state = env.reset(jax.random.split(jax.random.key(2), NUM_ENVS), params)
    _, (got, _) = rollout(env, params, state, seed=3)
    reference = PureJaxRLReference()
    np.testing.assert_allclose(obs, reference.reset(raw_reset), rtol=1e-5, atol=1e-5)
    expected = np.stack([reference.step(batch) for batch in raw_obs])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_composes_with_the_reward_wrapper_and_both_states_are_found():
    base, params = pendulum()
    inner = rngym.NormalizeObservation(rngym.VecEnv(base), "purejaxrl")
    env = rngym.NormalizeReward(inner, 0.99, semantics="purejaxrl")
    _, state = env.reset(jax.random.split(jax.random.key(2), NUM_ENVS), params)
    state, (got, rewards) = rollout(env, params, state, seed=3)
    obs_state = rngym.get_observation_state(state)
    assert (rn.count_as_int(obs_state.stats) == (STEPS + 1) * NUM_ENVS).all()
    assert int(rn.count_as_int(rngym.get_transform_state(state).stats)) == STEPS * NUM_ENVS
    assert np.isfinite(got).all()
    assert np.isfinite(rewards).all()
    # A checkpoint of the observation statistics restores into the stack.
    data = rn.save_state(obs_state, inner.normalizer.config)
    restored = rn.load_state(obs_state, data, inner.normalizer.config)
    state = rngym.set_observation_state(state, restored)
    jax.tree.map(np.testing.assert_array_equal, rngym.get_observation_state(state), obs_state)


def test_evaluation_from_learned_statistics_frozen():
    base, params = pendulum()
    env = rngym.NormalizeObservation(rngym.VecEnv(base))
    _, state = env.reset(jax.random.split(jax.random.key(0), NUM_ENVS), params)
    state, _ = rollout(env, params, state, seed=5)
    learned = rngym.get_observation_state(state)
    keys = jax.random.split(jax.random.key(9), NUM_ENVS)
    obs, eval_state = env.reset(keys, params, stats_from=learned, update_stats=False)
    raw, _ = rngym.VecEnv(base).reset(keys, params)
    np.testing.assert_allclose(obs, env.normalizer.apply(learned, raw), rtol=1e-6)
    eval_state, _ = rollout(env, params, eval_state, seed=7)
    jax.tree.map(np.testing.assert_array_equal, rngym.get_observation_state(eval_state), learned)
    # Frozen by the step's flag instead, from a learning state.
    frozen, _ = rollout(env, params, state, seed=7, update_stats=False)
    jax.tree.map(np.testing.assert_array_equal, rngym.get_observation_state(frozen), learned)
    thawed = rngym.set_observation_update_stats(eval_state, True)
    thawed, _ = rollout(env, params, thawed, seed=7)
    assert (rn.count_as_int(rngym.get_observation_state(thawed).stats) > NUM_ENVS * STEPS).all()


def test_per_environment_wrappers_share_statistics_across_a_named_vmap():
    base, params = pendulum()
    shared = rngym.VecEnv(rngym.NormalizeObservation(base, axis_name="envs"), axis_name="envs")
    batch = rngym.NormalizeObservation(rngym.VecEnv(base))
    keys = jax.random.split(jax.random.key(4), NUM_ENVS)
    obs_a, state_a = shared.reset(keys, params)
    obs_b, state_b = batch.reset(keys, params)
    np.testing.assert_allclose(obs_a, obs_b, rtol=1e-5, atol=1e-6)
    _, (got_a, _) = rollout(shared, params, state_a, seed=11)
    _, (got_b, _) = rollout(batch, params, state_b, seed=11)
    np.testing.assert_allclose(got_a, got_b, rtol=1e-4, atol=1e-5)


def test_gymnasium_preset_on_a_pytree_observation():
    """A dict observation (as FlattenObservationWrapper's inverse): each leaf its own stats."""
    base, params = pendulum()

    class DictObservation(GymnaxWrapper):
        def reset(self, key, params=None):
            obs, state = self._env.reset(key, params)
            return {"angle": obs[..., :2], "velocity": obs[..., 2]}, state

        def step(self, key, state, action, params=None):
            obs, *rest = self._env.step(key, state, action, params)
            return ({"angle": obs[..., :2], "velocity": obs[..., 2]}, *rest)

    env = rngym.NormalizeObservation(rngym.VecEnv(DictObservation(base)))
    keys = jax.random.split(jax.random.key(6), NUM_ENVS)
    obs, state = env.reset(keys, params)
    raw, _ = rngym.VecEnv(base).reset(keys, params)
    np.testing.assert_allclose(obs["velocity"], GymnasiumReference(()).step(raw[:, 2]), rtol=1e-5)
    assert state.obs_state.stats["angle"].mean.shape == (2,)


def test_errors_name_the_problem():
    base, params = pendulum()
    env = rngym.NormalizeObservation(rngym.VecEnv(base))
    with pytest.raises(ValueError, match="preset"):
        rngym.NormalizeObservation(base, "rllib")
    with pytest.raises(ValueError, match="update_stats has shape"):
        env.reset(jax.random.split(jax.random.key(0), NUM_ENVS), params, update_stats=jnp.ones(2))
    with pytest.raises(ValueError, match="no observation statistics"):
        rngym.get_observation_state(
            env.reset(jax.random.split(jax.random.key(0), 2), params)[1].env_state
        )
