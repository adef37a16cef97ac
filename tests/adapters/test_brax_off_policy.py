"""The off-policy recipe on Brax: statistics from collection, replay normalized when sampled.

A Brax environment collects through ``wrap_env_fn(normalize_reward(...,
g_max=...))`` into Brax SAC's own replay buffer, which keeps the raw rewards
(``state.metrics["raw_reward"]``); each sampled batch is normalized by
:func:`rewardnorm_jax.apply_sampled` with the statistics of that moment,
and goes into Brax SAC's critic loss.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from brax import envs as brax_envs
from brax.training import acting, replay_buffers
from brax.training.agents.sac import losses as sac_losses
from brax.training.agents.sac import networks as sac_networks
from brax.training.types import Transition

import rewardnorm_jax as rn
from rewardnorm_jax import brax as rnb
from tests.streams import jit_scan_steps

GAMMA = 0.97
G_MAX = 2.0  # small, so that the floor M / g_max is the divisor here (SimbaV2 and FastTD3: 10)
EPSILON = 1e-8
NUM_ENVS, STEPS, BATCH = 8, 40, 64


def sac_parts(env):
    """Brax SAC's networks, policy, critic loss and replay buffer, tiny."""
    networks = sac_networks.make_sac_networks(
        env.observation_size, env.action_size, hidden_layer_sizes=(16,)
    )
    key_policy, key_q = jax.random.split(jax.random.PRNGKey(0))
    params = {
        "policy": networks.policy_network.init(key_policy),
        "q": networks.q_network.init(key_q),
    }
    policy = sac_networks.make_inference_fn(networks)(((), params["policy"]))
    zeros_obs, zeros_action = jnp.zeros(env.observation_size), jnp.zeros(env.action_size)
    dummy = Transition(
        observation=zeros_obs,
        action=zeros_action,
        reward=0.0,
        discount=0.0,
        next_observation=zeros_obs,
        extras={"state_extras": {"truncation": 0.0}, "policy_extras": {}},
    )
    buffer = replay_buffers.UniformSamplingQueue(
        max_replay_size=NUM_ENVS * STEPS, dummy_data_sample=dummy, sample_batch_size=BATCH
    )

    def critic_loss(transitions, reward_scaling):
        _, loss, _ = sac_losses.make_losses(networks, reward_scaling, GAMMA, env.action_size)
        return loss(params["q"], params["policy"], (), params["q"], 1.0, transitions, key_q)

    return policy, buffer, critic_loss


@pytest.mark.slow
def test_replay_rewards_are_normalized_when_sampled_with_the_collection_statistics():
    norm = rn.normalize_reward(GAMMA, EPSILON, semantics="purejaxrl", g_max=G_MAX)
    pendulum = brax_envs.get_environment("inverted_pendulum", backend="positional")
    env = rnb.wrap_env_fn(norm)(pendulum, episode_length=25, action_repeat=1)
    policy, buffer, critic_loss = sac_parts(env)

    @jax.jit
    def collect(key):
        def body(carry, step_key):
            state, buffer_state = carry
            state, transition = acting.actor_step(
                env, state, policy, step_key, extra_fields=("truncation",)
            )
            raw = state.metrics["raw_reward"]
            buffer_state = buffer.insert(buffer_state, transition._replace(reward=raw))
            return (state, buffer_state), (raw, state.done, state.info["truncation"])

        reset_key, buffer_key, key = jax.random.split(key, 3)
        start = (env.reset(jax.random.split(reset_key, NUM_ENVS)), buffer.init(buffer_key))
        return jax.lax.scan(body, start, jax.random.split(key, STEPS))

    (state, buffer_state), (raw, done, truncation) = collect(jax.random.PRNGKey(1))
    learned = rnb.get_transform_state(state)

    # The statistics learned from the collection stream: every step, as the core.
    assert rn.count_as_int(learned.stats) == NUM_ENVS * STEPS
    assert bool((done > 0).any())  # episodes ended while collecting
    core, _ = jit_scan_steps(norm, raw, (done > 0) & (truncation == 0), truncation > 0)
    np.testing.assert_array_equal(learned.ret, core.ret)
    np.testing.assert_array_equal(learned.ret_abs_max, core.ret_abs_max)
    np.testing.assert_allclose(learned.stats.var, core.stats.var, rtol=1e-6)

    # A sample of another size than the collecting batch, normalized with those statistics.
    _, sample = buffer.sample(buffer_state)
    normalized = rn.apply_sampled(norm, learned, sample.reward)
    std = np.sqrt(np.float64(learned.stats.var) + EPSILON)
    floor = np.float64(learned.ret_abs_max) / G_MAX
    assert floor > std  # the g_max floor sets the divisor here
    np.testing.assert_allclose(normalized, np.asarray(sample.reward) / max(std, floor), rtol=1e-6)

    # In Brax SAC's critic loss, a normalized sample is the raw one with reward_scaling 1 / divisor.
    scaled = critic_loss(sample._replace(reward=normalized), 1.0)
    np.testing.assert_allclose(scaled, critic_loss(sample, 1 / max(std, floor)), rtol=1e-5)
    assert not np.isclose(scaled, critic_loss(sample, 1.0), rtol=1e-2)  # the scale matters
