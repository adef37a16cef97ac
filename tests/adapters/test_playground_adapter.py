"""rewardnorm_jax.brax in Brax's PPO on MuJoCo Playground's CartpoleBalance (impl="jax")."""

import functools

import numpy as np
import pytest
from brax.training.agents.ppo import networks as ppo_networks
from brax.training.agents.ppo import train as ppo
from mujoco_playground import registry, wrapper

import rewardnorm_jax as rn
from rewardnorm_jax import brax as rnb
from tests import brax_recorder
from tests.streams import jit_scan_steps

EPISODE_LENGTH = 40
FLOAT32_ULP = float(np.finfo(np.float32).eps)


@pytest.mark.slow
def test_brax_ppo_trains_cartpole_balance_on_normalized_rewards_and_evaluates_raw():
    """Playground's own wrapping (``wrap_for_brax_training``) inside ``wrap_env_fn``.

    Every step the trainer took is recorded: the rewards it trained on equal
    the core fed the raw rewards and episode ends, and the statistics counted
    exactly the environment steps Brax reports.
    """
    env = registry.load("CartpoleBalance", config_overrides={"impl": "jax"})
    transform = rn.normalize_reward(0.99)
    records: list = []
    progress: list = []
    ppo.train(
        env,
        wrap_env_fn=brax_recorder.recording_wrap_env_fn(
            transform, records, wrap=wrapper.wrap_for_brax_training
        ),
        eval_env=rnb.RawRewardEvaluation(env),
        num_timesteps=1_600,
        num_evals=1,
        episode_length=EPISODE_LENGTH,
        num_envs=8,
        batch_size=8,
        num_minibatches=2,
        unroll_length=10,
        num_updates_per_batch=1,
        num_eval_envs=8,
        network_factory=functools.partial(
            ppo_networks.make_ppo_networks,
            policy_hidden_layer_sizes=(16,),
            value_hidden_layer_sizes=(16,),
        ),
        seed=0,
        progress_fn=lambda step, metrics: progress.append((step, metrics)),
    )
    steps = brax_recorder.stream(records)
    raw = steps["raw"]
    assert raw.shape == (200, 8)  # 10 training steps of 160 environment steps
    assert steps["truncated"].any()  # the 40-step limit, every 40 steps
    assert not steps["terminated"].any()  # the cart-pole balance task never terminates
    core_state, expected = jit_scan_steps(transform, raw, steps["terminated"], steps["truncated"])
    np.testing.assert_allclose(steps["reward"], expected, rtol=4 * FLOAT32_ULP, atol=0)
    (final,) = steps["final"]
    last_step, last = progress[-1]
    assert rn.count_as_int(final.stats) == raw.size == last_step  # Brax's own step count
    np.testing.assert_array_equal(final.ret, core_state.ret)
    np.testing.assert_allclose(final.stats.var, core_state.stats.var, rtol=4 * FLOAT32_ULP)
    # Evaluation saw no transform (no raw_reward metric) and raw rewards in [0, 1] per step.
    assert "eval/episode_raw_reward" not in last
    assert last["eval/avg_episode_length"] == EPISODE_LENGTH
    assert 0 < last["eval/episode_reward"] <= EPISODE_LENGTH
