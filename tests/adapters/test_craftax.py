"""Craftax (five-value gymnax-style step, ``info["discount"]``) through the gymnax adapter."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.wrappers.purerl import GymnaxWrapper

craftax_env = pytest.importorskip(
    "craftax.craftax_env", reason="the craftax extra is not installed"
)

import rewardnorm_jax as rn  # noqa: E402  (after the skip)
from rewardnorm_jax import gymnax as rgx  # noqa: E402
from tests.streams import jit_scan_steps  # noqa: E402

GAMMA = 0.99
NUM_ENVS, STEPS = 16, 24


class RecordRawReward(GymnaxWrapper):
    """Copies the raw reward into ``info`` (five values in, five out), as a logger would."""

    def step(self, key, state, action, params=None):
        obs, state, reward, done, info = self._env.step(key, state, action, params)
        return obs, state, reward, done, {**info, "raw_reward": reward}


@pytest.mark.slow
def test_craftax_classic_takes_the_gymnax_adapter_unchanged():
    """16 envs of Craftax-Classic-Symbolic-v1, episodes cut to 8 steps, rewards normalized."""
    env = craftax_env.make_craftax_env_from_name("Craftax-Classic-Symbolic-v1", auto_reset=True)
    params = env.default_params.replace(max_timesteps=8)
    wrapped = rgx.NormalizeReward(rgx.VecEnv(RecordRawReward(env)), GAMMA)
    assert wrapped.num_actions == 17  # attributes come from the Craftax environment

    @jax.jit
    def run(key):
        def body(state, step_key):
            action_key, env_key = jax.random.split(step_key)
            actions = jax.random.randint(action_key, (NUM_ENVS,), 0, 17)
            keys = jax.random.split(env_key, NUM_ENVS)
            _, state, reward, done, info = wrapped.step(keys, state, actions, params)
            return state, (reward, done, info["discount"], info["raw_reward"])

        _, state = wrapped.reset(jax.random.split(key, NUM_ENVS), params)
        return jax.lax.scan(body, state, jax.random.split(key, STEPS))

    state, (reward, done, discount, raw) = run(jax.random.PRNGKey(0))
    assert bool(done.any())
    assert bool((raw != 0).any())
    terminated = done & (discount == 0)  # Craftax reports discount 0 at every end
    truncated = done & ~terminated
    core = rn.normalize_reward(GAMMA)

    core_state, expected = jit_scan_steps(core, raw, terminated, truncated)
    np.testing.assert_array_equal(reward, expected)
    jax.tree.map(np.testing.assert_array_equal, rgx.get_transform_state(state), core_state)
    assert rn.count_as_int(core_state.stats) == NUM_ENVS * STEPS
    assert reward.dtype == jnp.float32
